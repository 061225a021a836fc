"""The provider registers with Airflow, validates against Airflow's own schema, and every class
and module it lists imports (the idea of Airflow's run_provider_yaml_files_check)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import jsonschema
import pytest

import airflow_provider_kinesis_doris
from airflow_provider_kinesis_doris.get_provider_info import get_provider_info

pytestmark = pytest.mark.airflow

PACKAGE_DIR = Path(airflow_provider_kinesis_doris.__file__).parent
LISTED_KINDS = ("hooks", "operators", "sensors", "triggers")


def _airflow_schema(name: str) -> dict:
    import airflow

    return json.loads((Path(airflow.__file__).parent / name).read_text())


def test_entry_point_returns_the_provider_info() -> None:
    (entry_point,) = [ep for ep in entry_points(group="apache_airflow_provider") if ep.value.startswith("airflow_provider_kinesis_doris")]
    assert entry_point.load()() == get_provider_info()


def test_provider_info_validates_against_airflow_runtime_schema() -> None:
    info = get_provider_info()
    jsonschema.validate(info, _airflow_schema("provider_info.schema.json"))
    assert info["versions"] == [airflow_provider_kinesis_doris.__version__]


def test_connection_form_metadata_validates_against_provider_yaml_schema() -> None:
    """Airflow 3.2+ builds the form from conn-fields; 2.x has no such schema entry and ignores them."""
    schema = _airflow_schema("provider.yaml.schema.json")
    item_schema = schema["properties"]["connection-types"]["items"]
    if "conn-fields" not in item_schema["properties"]:
        # Only Airflow < 3.2 lacks the YAML form; it reads DorisHook.get_connection_form_widgets.
        from packaging.version import Version

        import airflow

        assert Version(airflow.__version__) < Version("3.2")
        return
    for connection_type in get_provider_info()["connection-types"]:
        jsonschema.validate(connection_type, item_schema)


def _kind_base(kind: str) -> type:
    from airflow.providers.common.compat.sdk import BaseHook, BaseOperator, BaseSensorOperator
    from airflow.triggers.base import BaseTrigger

    return {"hooks": BaseHook, "operators": BaseOperator, "sensors": BaseSensorOperator, "triggers": BaseTrigger}[kind]


def _defines_a(module_name: str, base: type) -> bool:
    """Whether the module defines (not just imports) a subclass of ``base``."""
    module = importlib.import_module(module_name)
    return any(
        isinstance(value, type) and issubclass(value, base) and value.__module__ == module_name
        for value in vars(module).values()
    )


@pytest.mark.parametrize("kind", LISTED_KINDS)
def test_every_listed_module_imports_and_every_module_is_listed(kind: str) -> None:
    """Every module of ``kind``/ that defines a hook (operator, ...) is listed, and only those:
    helpers such as ``operators/pipeline_arguments.py`` are not operators."""
    listed = {module for entry in get_provider_info()[kind] for module in entry["python-modules"]}
    on_disk = {
        f"airflow_provider_kinesis_doris.{kind}.{path.stem}"
        for path in (PACKAGE_DIR / kind).glob("*.py")
        if path.stem != "__init__"
    }
    assert listed <= on_disk
    assert listed == {module for module in on_disk if _defines_a(module, _kind_base(kind))}


def test_every_extra_link_imports_and_every_link_is_listed() -> None:
    from airflow.providers.common.compat.sdk import BaseOperatorLink

    listed = set(get_provider_info()["extra-links"])
    for class_path in listed:
        module_name, _, class_name = class_path.rpartition(".")
        assert issubclass(getattr(importlib.import_module(module_name), class_name), BaseOperatorLink)
    on_disk = set()
    for path in (PACKAGE_DIR / "links").glob("*.py"):
        module = importlib.import_module(f"airflow_provider_kinesis_doris.links.{path.stem}")
        on_disk |= {
            f"{module.__name__}.{name}"
            for name, value in vars(module).items()
            if isinstance(value, type) and issubclass(value, BaseOperatorLink) and value.__module__ == module.__name__
        }
    assert listed == on_disk


def test_connection_types_name_importable_hooks_of_that_type() -> None:
    for connection_type in get_provider_info()["connection-types"]:
        module_name, _, class_name = connection_type["hook-class-name"].rpartition(".")
        hook_class = getattr(importlib.import_module(module_name), class_name)
        assert hook_class.conn_type == connection_type["connection-type"]
        assert hook_class.hook_name == connection_type["hook-name"]


def test_airflow_lists_the_provider_and_its_connection_type() -> None:
    def airflow_cli(*args: str) -> str:
        result = subprocess.run(
            [sys.executable, "-m", "airflow", *args, "--output", "json"], capture_output=True, text=True, timeout=180
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    providers = json.loads(airflow_cli("providers", "list"))
    assert {p["package_name"]: p["version"] for p in providers}["airflow-provider-kinesis-doris"] == (
        airflow_provider_kinesis_doris.__version__
    )
    hooks = json.loads(airflow_cli("providers", "hooks"))
    assert any(h.get("connection_type") == "doris" for h in hooks)
