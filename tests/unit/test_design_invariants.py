"""Every invariant of the contract (shared/DESIGN.md, restated in docs/design.md, the design of
record) is stated in docs/design.md with the tests that would fail if it broke, and those test
files exist."""

from __future__ import annotations

import re

import pytest

from tests.conftest import REPO_ROOT

DESIGN = (REPO_ROOT / "docs" / "design.md").read_text()
CONTRACT = REPO_ROOT.parent / "shared" / "DESIGN.md"


def _invariants(text: str) -> list[str]:
    return re.findall(r"\*\*(I\d+) ", text)


def test_every_invariant_names_test_files_that_exist() -> None:
    stated = _invariants(DESIGN)
    assert stated == [f"I{n}" for n in range(1, 14)], stated
    for invariant, body in zip(stated, re.split(r"\*\*I\d+ ", DESIGN)[1:]):
        paragraph = body.split("\n\n")[0]
        tests = re.findall(r"`([a-z_/]+\.py)`", paragraph.split("Tests:", 1)[-1]) if "Tests:" in paragraph else []
        assert tests, f"{invariant} names no test"
        missing = [path for path in tests if not (REPO_ROOT / "tests" / path).is_file()]
        assert not missing, f"{invariant} names tests that do not exist: {missing}"


def test_the_contract_has_no_invariant_the_design_of_record_lacks() -> None:
    if not CONTRACT.is_file():
        pytest.skip("no shared/DESIGN.md beside this clone")
    assert set(_invariants(CONTRACT.read_text())) <= set(_invariants(DESIGN))
