"""DESIGN.md's two import rules, checked by importing every module with the forbidden
packages made unimportable: ``core/`` runs on Spark executors (no Airflow, no PySpark there),
``spark/`` runs on executors too (no Airflow)."""

from __future__ import annotations

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
