"""The import rules of docs/design.md, checked by importing every module with the forbidden
packages made unimportable: ``core/`` runs on Spark executors (no Airflow, no PySpark there),
``spark/`` runs on executors too (no Airflow); and, read from the sources, the layers that keep
apart: ``core/kinesis`` and ``core/doris`` do not import each other, and nothing in the wheel
imports the development stack."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

_CHECKER = textwrap.dedent(
    """
    import importlib, pkgutil, sys

    package, blocked = sys.argv[1], set(sys.argv[2].split(","))

    class ForbiddenImport:
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in blocked:
                raise ImportError(f"{name} may not be imported by {package}")
            return None

    sys.meta_path.insert(0, ForbiddenImport())
    root = importlib.import_module(package)
    for module in pkgutil.walk_packages(root.__path__, package + "."):
        importlib.import_module(module.name)
    print("imported", package)
    """
)


def import_without(package: str, blocked: list[str], extra_path: Path | None = None) -> subprocess.CompletedProcess[str]:
    env_path = [str(extra_path)] if extra_path else []
    return subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path[:0] = {env_path!r}\n{_CHECKER}", package, ",".join(blocked)],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("package", "blocked"),
    [
        ("airflow_provider_kinesis_doris.core", ["airflow", "pyspark"]),
        ("airflow_provider_kinesis_doris.spark", ["airflow"]),
    ],
)
def test_package_imports_without_forbidden_dependencies(package: str, blocked: list[str]) -> None:
    result = import_without(package, blocked)
    assert result.returncode == 0, result.stderr
    assert f"imported {package}" in result.stdout


def test_checker_catches_a_forbidden_import(tmp_path: Path) -> None:
    """The rule test is only worth something if a forbidden import makes it fail."""
    offender = tmp_path / "offending_core"
    offender.mkdir()
    (offender / "__init__.py").write_text("")
    (offender / "clean.py").write_text("import json\n")
    (offender / "leaky.py").write_text("def f():\n    pass\nfrom airflow.models import Variable\n")

    result = import_without("offending_core", ["airflow", "pyspark"], extra_path=tmp_path)

    assert result.returncode != 0
    assert "airflow may not be imported by offending_core" in result.stderr


PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "airflow_provider_kinesis_doris"


def imports_of(source: str) -> set[str]:
    """Every module a Python source imports (absolute names), wherever the import statement is."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def offending_imports(folder: Path, forbidden: str) -> list[str]:
    """``file: module`` for each import under ``folder`` of ``forbidden`` or anything inside it."""
    return sorted(
        f"{path.relative_to(folder.parent)}: {name}"
        for path in folder.rglob("*.py")
        for name in imports_of(path.read_text())
        if name == forbidden or name.startswith(forbidden + ".")
    )


@pytest.mark.parametrize(
    ("folder", "forbidden"),
    [
        ("core/kinesis", "airflow_provider_kinesis_doris.core.doris"),
        ("core/doris", "airflow_provider_kinesis_doris.core.kinesis"),
        (".", "kinesis_doris_devstack"),
    ],
    ids=["kinesis-does-not-import-doris", "doris-does-not-import-kinesis", "the-wheel-does-not-import-the-devstack"],
)
def test_layers_keep_apart(folder: str, forbidden: str) -> None:
    assert offending_imports(PACKAGE_ROOT / folder, forbidden) == []


def test_the_layer_checker_sees_imports_anywhere_in_a_module(tmp_path: Path) -> None:
    leaky = tmp_path / "kinesis"
    leaky.mkdir()
    (leaky / "ok.py").write_text("import json\nfrom airflow_provider_kinesis_doris.core.model import Position\n")
    (leaky / "bad.py").write_text("def f():\n    from airflow_provider_kinesis_doris.core.doris.labels import chunk_label\n")

    assert offending_imports(leaky, "airflow_provider_kinesis_doris.core.doris") == [
        "kinesis/bad.py: airflow_provider_kinesis_doris.core.doris.labels",
        "kinesis/bad.py: airflow_provider_kinesis_doris.core.doris.labels.chunk_label",
    ]
