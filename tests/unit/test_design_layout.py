"""docs/design.md's "Package layout" tables name every module of the package, and only modules
that exist: a module added, moved or removed without its row fails here."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "airflow_provider_kinesis_doris"
DESIGN = REPO / "docs" / "design.md"


def layout_section() -> str:
    text = DESIGN.read_text()
    start = text.index("## Package layout")
    return text[start : text.index("\n## ", start + 1)]


def named_in_first_column(section: str) -> set[str]:
    """What the tables' first cells name: module paths (``core/plan.py``) or packages (``spark/``)."""
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([^`]+)`", row.split("|")[1])}


def package_modules() -> set[str]:
    """Every module of the wheel but the packages' ``__init__.py``, relative to the package."""
    return {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if path.name != "__init__.py" and "__pycache__" not in path.parts
    }


def is_named(module: str, named: set[str]) -> bool:
    """Named itself, or through a package row (``spark/``); ``core/`` has no package row, so each
    of its modules needs its own."""
    return module in named or any(name.endswith("/") and module.startswith(name) for name in named)


def test_every_module_of_the_package_has_a_row() -> None:
    named = named_in_first_column(layout_section())
    assert sorted(module for module in package_modules() if not is_named(module, named)) == []


def test_every_row_names_a_module_or_package_that_exists() -> None:
    named = named_in_first_column(layout_section())
    assert sorted(name for name in named if not (PACKAGE / name).exists()) == []


def test_a_module_without_a_row_is_found() -> None:
    """The check can fail: take one core module's row away and it is reported."""
    section = layout_section()
    without_plan = "\n".join(line for line in section.splitlines() if not line.startswith("| `core/plan.py`"))
    named = named_in_first_column(without_plan)
    assert [module for module in package_modules() if not is_named(module, named)] == ["core/plan.py"]
