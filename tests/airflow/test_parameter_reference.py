"""docs/parameters.md's tables list exactly the operator's parameters and each settings object's
fields, in their order, with the defaults the code has: a parameter added, renamed or removed in
the code without the reference fails here."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from airflow_provider_kinesis_doris.config import GROUPS, group_field_names

pytestmark = pytest.mark.airflow

REFERENCE = (Path(__file__).resolve().parents[2] / "docs" / "parameters.md").read_text()


def _tables() -> dict[str, list[str]]:
    """Each table's heading (``The operator`` or the class name) and the names in its first column."""
    tables: dict[str, list[str]] = {}
    for heading, body in re.findall(r"^## (.+?)\n(.*?)(?=\n## |\Z)", REFERENCE, re.S | re.M):
        kind = re.findall(r"`(\w+)`", heading)
        tables[kind[-1] if kind else heading.strip()] = re.findall(r"^\| `(\w+)` \|", body, re.M)
    return tables


def test_the_operator_table_lists_the_signature_in_order() -> None:
    from airflow_provider_kinesis_doris.operators.kinesis_to_doris import KinesisToDorisOperator
    from airflow_provider_kinesis_doris.operators.pipeline_arguments import KinesisPipelineBaseOperator

    # The pipeline's arguments (taken through **kwargs), then the loader's own.
    shared, own = ([name for name in inspect.signature(cls.__init__).parameters if name not in ("self", "kwargs")]
                   for cls in (KinesisPipelineBaseOperator, KinesisToDorisOperator))  # fmt: skip
    parameters = [*shared, *(name for name in own if name not in shared)]

    assert _tables()["The operator"] == parameters


def test_each_group_table_lists_its_class_fields_in_order() -> None:
    tables = _tables()
    classes = [kind for kinds in GROUPS.values() for kind in kinds]

    assert set(tables) - {"The operator"} == {kind.__name__ for kind in classes}
    for kind in classes:
        assert tables[kind.__name__] == list(group_field_names(kind)), kind.__name__


def test_each_group_parameter_names_its_classes() -> None:
    operator_rows = dict(re.findall(r"^\| `(\w+)` \| ([^|]+) \|", REFERENCE.split("## `runner`", 1)[0], re.M))
    for parameter, kinds in GROUPS.items():
        assert operator_rows[parameter].strip() == f"`{kinds[0].__name__}()`", parameter
