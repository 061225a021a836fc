"""Which check each of ``KinesisToDorisOperator``'s arguments gets, and when.

Literal arguments are checked when the operator is built (at DAG parse time), templated ones once
they are rendered (the operator's ``render_template_fields``); both raise :class:`ConfigurationError`
naming the argument, and each value is checked once. The grouped settings
(``airflow_provider_kinesis_doris.config``) check their own fields when built, and their templated
fields once rendered. Checks that need more than the value (``DESC``) stay where their inputs are
known.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from airflow_provider_kinesis_doris.config import GROUPS, check_group, check_rendered_group
from airflow_provider_kinesis_doris.core.settings import check_executor_credentials
from airflow_provider_kinesis_doris.core.value_checks import (
    check_flag,
    check_optional_mapping,
    check_optional_text,
    check_text,
    check_verify,
)

Check = Callable[[str, Any], object]

PARSE_TIME_CHECKS: Mapping[str, Check] = {
    "aws_conn_id": check_optional_text,
    "region_name": check_optional_text,
    "verify": check_verify,
    "botocore_config": check_optional_mapping,
    "executor_credentials": check_executor_credentials,
    "doris_conn_id": check_text,
    **{name: check_group for name in GROUPS},
    "deferrable": check_flag,
}
"""The arguments whose values are final when the DAG file is parsed, and the groups (whose
templated fields are rendered later, and checked then)."""

RENDERED_CHECKS: Mapping[str, Check] = {
    "stream_name": check_text,
    "checkpoint_table": check_text,
    "pipeline_id": check_optional_text,
    "doris_table": check_text,
    **{name: check_rendered_group for name in GROUPS},
}
"""The templated arguments (of the operator's ``template_fields``) whose rendered values can be
wrong: empty names, or values Jinja rendered to another type (``render_template_as_native_obj``)."""


def check_arguments(checks: Mapping[str, Check], arguments: Mapping[str, Any]) -> None:
    """Run each argument's check on its value in ``arguments``.

    :raises ConfigurationError: the first argument whose value its check refuses.
    """
    for name, check in checks.items():
        check(name, arguments[name])
