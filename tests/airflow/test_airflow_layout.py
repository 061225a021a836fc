"""The rules of the Airflow-facing layer, checked without the local stack:

- every trigger serializes to JSON-able kwargs and a classpath that rebuilds it unchanged (what a
  triggerer does after a restart), and rebuilds its hook in the worker thread from the conn id;
- every hook's constructor takes only connection ids and client settings (what to act on is an
  argument of its methods);
- hooks import no trigger, operator or sensor, and operators import no trigger or sensor;
- the pipeline arguments keep their names, defaults and templating on every class that takes them.

Runs under Airflow 3.x (``.venv``) and 2.11 (``.venv-af2``).
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import inspect
import json
import pkgutil
import threading
from pathlib import Path
from typing import Any

import pytest

import airflow_provider_kinesis_doris

pytestmark = pytest.mark.airflow

PACKAGE = airflow_provider_kinesis_doris.__name__
PACKAGE_DIR = Path(airflow_provider_kinesis_doris.__file__).parent


def _import_string(path: str) -> Any:
    try:
        from airflow.sdk.module_loading import import_string
    except ImportError:  # Airflow 2.11
        from airflow.utils.module_loading import import_string  # type: ignore[no-redef]
    return import_string(path)


def _modules(subpackage: str) -> list[str]:
    """The modules of ``subpackage``, found without importing them: nothing may import Airflow
    while tests are collected (before the ``airflow_db`` fixture has migrated the metadata DB)."""
    found = pkgutil.iter_modules([str(PACKAGE_DIR / subpackage)], f"{PACKAGE}.{subpackage}.")
    return sorted(info.name for info in found)


def _classes_defined_in(module_name: str, base: type) -> list[type]:
    """Every subclass of ``base`` defined (not just imported) in the module."""
    module = importlib.import_module(module_name)
    return [
        value
        for value in vars(module).values()
        if isinstance(value, type) and issubclass(value, base) and value.__module__ == module_name
    ]


def _all_classes(subpackage: str, base: type) -> list[type]:
    return [cls for module in _modules(subpackage) for cls in _classes_defined_in(module, base)]


# --- triggers: serialize → rebuild → serialize ----------------------------------------------------

# Constructor arguments of every trigger in triggers/; a new trigger without an entry fails below.
TRIGGER_EXAMPLES: dict[str, dict[str, Any]] = {
    "KinesisReshardTrigger": {
        "stream_name": "orders",
        "checkpoint_table": "kd_checkpoints",
        "pipeline_id": "orders.shop.orders",
        "aws_conn_id": "aws_orders",
        "poll_interval": 12.5,
        "region_name": "eu-west-2",
        "verify": "/etc/ssl/corporate-ca.pem",
        "botocore_config": {"retries": {"mode": "adaptive"}},
    },
}


def _triggers() -> list[type]:
    from airflow.triggers.base import BaseTrigger

    return _all_classes("triggers", BaseTrigger)


def test_every_trigger_has_an_example() -> None:
    assert {cls.__name__ for cls in _triggers()} == set(TRIGGER_EXAMPLES)


@pytest.mark.parametrize("name", sorted(TRIGGER_EXAMPLES))
def test_a_trigger_survives_a_serialization_round_trip(name: str) -> None:
    [trigger_class] = [cls for cls in _triggers() if cls.__name__ == name]
    trigger = trigger_class(**TRIGGER_EXAMPLES[name])
    classpath, kwargs = trigger.serialize()

    assert _import_string(classpath) is trigger_class
    assert classpath == f"{trigger_class.__module__}.{trigger_class.__qualname__}"
    assert json.loads(json.dumps(kwargs)) == kwargs  # the triggerer stores them as JSON
    rebuilt = _import_string(classpath)(**kwargs)
    assert rebuilt.serialize() == (classpath, kwargs)
    assert kwargs == TRIGGER_EXAMPLES[name]  # nothing lost, nothing added


def test_the_reshard_trigger_builds_its_hook_in_the_worker_thread_from_the_conn_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow_provider_kinesis_doris.hooks.kinesis_pipeline import KinesisPipelineHook
    from airflow_provider_kinesis_doris.triggers.kinesis_reshard import KinesisReshardTrigger

    looks: list[tuple[str | None, tuple[str, ...], int]] = []
    built_in: list[int] = []
    build = KinesisPipelineHook.__init__

    def recording_init(hook: KinesisPipelineHook, *args: Any, **kwargs: Any) -> None:
        built_in.append(threading.get_ident())
        build(hook, *args, **kwargs)

    class Reshard:
        is_reshard = True

        def to_dict(self) -> dict[str, Any]:
            return {"closed": ["shardId-000000000000"]}

    def check_topology(hook: KinesisPipelineHook, *args: str) -> Any:
        looks.append((hook.aws_conn_id, args, threading.get_ident()))
        return None if len(looks) == 1 else Reshard()  # the first look stores the topology

    monkeypatch.setattr(KinesisPipelineHook, "check_topology", check_topology)
    monkeypatch.setattr(KinesisPipelineHook, "__init__", recording_init)
    classpath, kwargs = KinesisReshardTrigger("orders", "kd_checkpoints", "orders.p", "aws_orders", 0.01).serialize()
    trigger = _import_string(classpath)(**kwargs)

    async def first_event() -> tuple[dict[str, Any], int]:
        events = trigger.run()
        try:
            return (await asyncio.wait_for(events.__anext__(), 10)).payload, threading.get_ident()
        finally:
            await events.aclose()

    payload, loop_thread = asyncio.run(first_event())

    assert payload == {"status": "success", "change": {"closed": ["shardId-000000000000"]}}
    look = ("aws_orders", ("orders", "kd_checkpoints", "orders.p"))
    assert [(conn_id, args) for conn_id, args, _ in looks] == [look, look]
    assert all(thread != loop_thread for _, _, thread in looks)
    assert len(built_in) == 2 and loop_thread not in built_in  # one hook per look, none in the event loop


# --- hooks: constructors take connection ids and client settings only ------------------------------

CLIENT_SETTINGS = frozenset({"region_name", "verify", "config", "client_type", "resource_type", "logger_name"})


def constructor_problems(hook_class: type) -> list[str]:
    """Parameters of the constructors of ``hook_class`` (and of its bases in this package) that
    are neither a connection id (``*_conn_id``), a client setting, nor ``*args``/``**kwargs``."""
    problems = []
    for klass in hook_class.__mro__:
        ours = klass is hook_class or klass.__module__.startswith(PACKAGE)
        if not ours or "__init__" not in vars(klass):
            continue
        for name, parameter in list(inspect.signature(klass.__init__).parameters.items())[1:]:
            variadic = parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
            if not (variadic or name.endswith("_conn_id") or name in CLIENT_SETTINGS):
                problems.append(f"{klass.__name__}.__init__ takes {name!r}")
    return problems


@pytest.mark.parametrize("module_name", _modules("hooks"))
def test_a_hook_constructor_takes_only_connection_ids_and_client_settings(module_name: str) -> None:
    from airflow.providers.common.compat.sdk import BaseHook

    hooks = _classes_defined_in(module_name, BaseHook)
    assert hooks, f"{module_name} defines no hook"
    assert [problem for hook in hooks for problem in constructor_problems(hook)] == []


def test_the_hooks_are_found() -> None:
    from airflow.providers.common.compat.sdk import BaseHook

    # DynamoDBClientHook: the checkpoint table's client, built by KinesisPipelineHook on its connection.
    assert {cls.__name__ for cls in _all_classes("hooks", BaseHook)} == {"DorisHook", "DynamoDBClientHook", "KinesisPipelineHook"}


def test_the_constructor_check_catches_a_hook_that_takes_what_to_act_on() -> None:
    from airflow.providers.common.compat.sdk import BaseHook

    class TableHook(BaseHook):
        def __init__(self, aws_conn_id: str = "aws_default", table: str = "", region_name: str | None = None) -> None:
            super().__init__()

    class PassesItOn(TableHook):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)

    class Clean(BaseHook):
        def __init__(self, doris_conn_id: str = "d", *args: Any, verify: bool = True, **kwargs: Any) -> None:
            super().__init__(**kwargs)

    for fake in (TableHook, PassesItOn, Clean):
        fake.__module__ = f"{PACKAGE}.hooks.fake"

    assert constructor_problems(TableHook) == ["TableHook.__init__ takes 'table'"]
    assert constructor_problems(PassesItOn) == ["TableHook.__init__ takes 'table'"]  # found through **kwargs
    assert constructor_problems(Clean) == []


# --- import direction ------------------------------------------------------------------------------

# What each layer may not import: hooks are used by triggers, operators and sensors, never the
# other way round; operators reach the AWS side through the hook, not through the trigger module.
FORBIDDEN_IMPORTS = {
    "hooks": ("triggers", "operators", "sensors"),
    "operators": ("triggers", "sensors"),
}


def imported_modules(path: Path, package: str) -> set[str]:
    """Every module ``path`` (a module of ``package``) imports, anywhere in the file, with
    relative imports resolved; ``from a import b`` counts as ``a`` and ``a.b``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            found |= {source, *(f"{source}.{alias.name}" for alias in node.names)}
    return found


def import_violations(directory: Path, package: str, forbidden: tuple[str, ...]) -> list[str]:
    """``file: imported module`` for each import of ``<root>.<forbidden>`` by a module in ``directory``
    (the package ``package``, whose parent is ``<root>``)."""
    root = package.rpartition(".")[0]
    banned = tuple(f"{root}.{name}" for name in forbidden)
    violations = []
    for path in sorted(directory.glob("*.py")):
        for imported in sorted(imported_modules(path, package)):
            if any(imported == ban or imported.startswith(f"{ban}.") for ban in banned):
                violations.append(f"{path.name}: {imported}")
    return violations


@pytest.mark.parametrize(("layer", "forbidden"), sorted(FORBIDDEN_IMPORTS.items()))
def test_a_layer_imports_no_layer_above_it(layer: str, forbidden: tuple[str, ...]) -> None:
    assert import_violations(PACKAGE_DIR / layer, f"{PACKAGE}.{layer}", forbidden) == []


def test_the_import_check_catches_every_form_of_import(tmp_path: Path) -> None:
    hooks = tmp_path / "pkg" / "hooks"
    hooks.mkdir(parents=True)
    (hooks / "__init__.py").write_text("")
    (hooks / "clean.py").write_text("import json\nfrom pkg.core.errors import E\nfrom . import clean\n")
    (hooks / "absolute.py").write_text("from pkg.triggers.kinesis_reshard import KinesisReshardTrigger\n")
    (hooks / "plain.py").write_text("import pkg.operators.rebalance\n")
    (hooks / "relative.py").write_text("from ..sensors import kinesis_reshard\n")
    (hooks / "package.py").write_text("from pkg import operators\n")
    (hooks / "hidden.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sensors.x import S\n"
        "def later():\n    from ..triggers import t\n"
    )

    assert import_violations(hooks, "pkg.hooks", ("triggers", "operators", "sensors")) == [
        "absolute.py: pkg.triggers.kinesis_reshard",
        "absolute.py: pkg.triggers.kinesis_reshard.KinesisReshardTrigger",
        "hidden.py: pkg.sensors.x",
        "hidden.py: pkg.sensors.x.S",
        "hidden.py: pkg.triggers",
        "hidden.py: pkg.triggers.t",
        "package.py: pkg.operators",
        "plain.py: pkg.operators.rebalance",
        "relative.py: pkg.sensors",
        "relative.py: pkg.sensors.kinesis_reshard",
    ]


# --- the pipeline arguments --------------------------------------------------------------------------

PIPELINE_ARGUMENTS = (
    "stream_name", "checkpoint_table", "pipeline_id", "doris_table", "aws_conn_id", "region_name", "verify",
    "botocore_config",
)  # fmt: skip


def _pipeline_classes() -> dict[str, type]:
    from airflow_provider_kinesis_doris.operators.audit import KinesisDorisAuditOperator
    from airflow_provider_kinesis_doris.operators.kinesis_to_doris import KinesisToDorisOperator
    from airflow_provider_kinesis_doris.operators.rebalance import KinesisShardRebalanceOperator
    from airflow_provider_kinesis_doris.sensors.kinesis_reshard import KinesisReshardSensor

    classes = (KinesisToDorisOperator, KinesisDorisAuditOperator, KinesisShardRebalanceOperator, KinesisReshardSensor)
    return {cls.__name__: cls for cls in classes}


def _parameters(cls: type) -> dict[str, inspect.Parameter]:
    """The keyword arguments the class's ``__init__`` chain declares, a subclass's first (as
    Airflow reads them: each class's own signature)."""
    parameters: dict[str, inspect.Parameter] = {}
    for klass in cls.__mro__:
        if "__init__" in vars(klass) and klass.__module__.startswith(PACKAGE):
            for name, parameter in inspect.signature(klass.__init__).parameters.items():
                if parameter.kind is parameter.KEYWORD_ONLY:
                    parameters.setdefault(name, parameter)
    return parameters


@pytest.mark.parametrize(
    "name", ["KinesisToDorisOperator", "KinesisDorisAuditOperator", "KinesisShardRebalanceOperator", "KinesisReshardSensor"]
)
def test_the_pipeline_arguments_keep_their_names_defaults_and_templating(name: str) -> None:
    from airflow_provider_kinesis_doris.core.errors import ConfigurationError
    from airflow_provider_kinesis_doris.operators.pipeline_arguments import KinesisPipelineBaseOperator

    cls = _pipeline_classes()[name]
    parameters = _parameters(cls)
    empty = inspect.Parameter.empty
    defaults = {argument: parameters[argument].default for argument in PIPELINE_ARGUMENTS}
    table_required = name in ("KinesisToDorisOperator", "KinesisDorisAuditOperator")
    assert defaults == {
        "stream_name": empty,
        "checkpoint_table": empty,
        "pipeline_id": None,
        "doris_table": empty if table_required else None,
        "aws_conn_id": "aws_default",
        "region_name": None,
        "verify": None,
        "botocore_config": None,
    }
    assert issubclass(cls, KinesisPipelineBaseOperator)
    # The subclass declares none of them but a required doris_table: they come through **kwargs.
    own = inspect.signature(cls.__init__).parameters
    assert set(own) & set(PIPELINE_ARGUMENTS) == ({"doris_table"} if table_required else set())
    assert set(PIPELINE_ARGUMENTS) <= set(cls.template_fields)

    required = {"doris_table": "shop.orders"} if table_required else {"partitions": 2} if "Rebalance" in name else {}
    task = cls(task_id="t", stream_name="orders", checkpoint_table="kd", **required)
    assert (task.stream_name, task.checkpoint_table, task.pipeline_id, task.aws_conn_id) == (
        "orders", "kd", None, "aws_default",
    )  # fmt: skip
    if table_required:
        assert task.resolved_pipeline_id == "orders.shop.orders"
    else:
        with pytest.raises(ConfigurationError, match="Give pipeline_id or doris_table for stream 'orders'"):
            task.resolved_pipeline_id  # noqa: B018
    if "Rebalance" in name:  # a ConfigurationError like every other argument's (it was a bare ValueError)
        with pytest.raises(ConfigurationError, match="partitions must be a whole number of at least 1, got 0"):
            cls(task_id="v", stream_name="orders", checkpoint_table="kd", partitions=0)
    named = cls(task_id="u", stream_name="orders", checkpoint_table="kd", pipeline_id="p", aws_conn_id="a", **required)
    assert (named.resolved_pipeline_id, named.aws_hook.aws_conn_id) == ("p", "a")
