"""Every module of ``core/`` and ``spark/`` has a test that imports it, or a line in
docs/testing.md ("Modules without a test of their own") naming the test that covers it; a line
there for a module that has since got its own test is stale and fails too."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "airflow_provider_kinesis_doris"
TESTING_DOC = REPO / "docs" / "testing.md"
NOTE_TITLE = "## Modules without a test of their own"


def modules_under_test_rule() -> set[str]:
    """``core/...`` and ``spark/...`` modules, relative to the package, without ``__init__.py``."""
    return {
        path.relative_to(PACKAGE).as_posix()
        for folder in ("core", "spark")
        for path in (PACKAGE / folder).rglob("*.py")
        if path.name != "__init__.py" and "__pycache__" not in path.parts
    }


def imported_by_tests() -> set[str]:
    """Modules some test imports by name (``from airflow_provider_kinesis_doris.x.y import``)."""
    pattern = re.compile(r"^\s*(?:from|import) airflow_provider_kinesis_doris\.([\w.]+)", flags=re.MULTILINE)
    imported: set[str] = set()
    for test_file in (REPO / "tests").rglob("*.py"):
        imported |= {name.replace(".", "/") + ".py" for name in pattern.findall(test_file.read_text())}
    return imported


def noted_in_testing_doc(text: str) -> set[str]:
    """The modules named in the first column of the note's table."""
    note = text[text.index(NOTE_TITLE):]
    rows = [line for line in note.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([^`]+\.py)`", row.split("|")[1])}


def test_every_core_and_spark_module_has_a_test_or_a_note() -> None:
    covered = imported_by_tests() | noted_in_testing_doc(TESTING_DOC.read_text())
    assert sorted(modules_under_test_rule() - covered) == []


def test_the_note_names_only_modules_that_exist_and_have_no_test_of_their_own() -> None:
    noted = noted_in_testing_doc(TESTING_DOC.read_text())
    assert sorted(name for name in noted if not (PACKAGE / name).exists()) == []
    assert sorted(noted & imported_by_tests()) == []


def test_a_module_neither_imported_nor_noted_is_found() -> None:
    """The check can fail: without the note's row for ``core/stores/preflight.py`` it is reported."""
    text = TESTING_DOC.read_text()
    without_row = "\n".join(line for line in text.splitlines() if not line.startswith("| `core/stores/preflight.py`"))
    covered = imported_by_tests() | noted_in_testing_doc(without_row)
    assert sorted(modules_under_test_rule() - covered) == ["core/stores/preflight.py"]
