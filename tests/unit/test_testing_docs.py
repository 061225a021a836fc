"""docs/testing.md's example test is what a user copies: it must import, run and pass as written."""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"
TEST_NAME = "test_keep_paid_loads_paid_orders_and_dead_letters_the_rest"


@pytest.fixture
def example() -> str:
    (code,) = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    return code


@pytest.fixture
def as_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """Write code to an importable module (the transform is found by its import path, as in a DAG)."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def load(name: str, code: str) -> ModuleType:
        (tmp_path / f"{name}.py").write_text(code)
        module = importlib.import_module(name)
        monkeypatch.setitem(sys.modules, name, module)  # gone again after the test
        return module

    yield load


def test_the_example_in_docs_testing_passes_as_written(example: str, as_module) -> None:  # type: ignore[no-untyped-def]
    module = as_module("orders_example_test", example)
    assert [name for name in dir(module) if name.startswith("test_")] == [TEST_NAME]
    getattr(module, TEST_NAME)()


def test_the_example_fails_when_the_transform_does(example: str, as_module) -> None:  # type: ignore[no-untyped-def]
    """The example asserts something: with a transform that keeps every order, it fails."""
    broken = example.replace('if order["status"] != "paid":', "if False:")
    assert broken != example
    module = as_module("orders_broken_test", broken)
    with pytest.raises(AssertionError):
        getattr(module, TEST_NAME)()
