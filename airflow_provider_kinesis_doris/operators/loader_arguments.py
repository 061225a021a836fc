"""The checks of ``KinesisToDorisOperator``'s own arguments, beside the pipeline's
(``pipeline_arguments``).

An argument is checked once: a literal when the operator is built (at DAG parse time), a template
once rendered (the operator's ``render_template_fields``); each check raises
:class:`ConfigurationError` naming the argument. The grouped settings
(``airflow_provider_kinesis_doris.config``) check their own fields when built, and their templated
fields once rendered. Checks that need more than the value (``DESC``) stay where their inputs are
known.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_kinesis_doris.config import (
    Check,
    check_group,
    check_groups_together,
    check_rendered_group,
)
from airflow_provider_kinesis_doris.core.settings import check_executor_credentials
from airflow_provider_kinesis_doris.core.value_checks import check_flag, check_text

LOADER_ARGUMENT_CHECKS: Mapping[str, Check] = {
    "executor_credentials": check_executor_credentials,
    "doris_conn_id": check_text,
    "deferrable": check_flag,
}
"""The loader's own arguments besides the groups, checked as the pipeline's are."""


def check_groups(groups: Mapping[str, Any], *, rendered: bool) -> None:
    """Check that each group is of a class its parameter takes and that ``mapping`` and ``load``
    agree; once ``rendered``, also each group's templated fields (Jinja's native rendering could
    even replace a group).

    :raises ConfigurationError: naming the first bad group or field.
    """
    check = check_rendered_group if rendered else check_group
    for name, value in groups.items():
        check(name, value)
    check_groups_together(groups["mapping"], groups["load"], rendered=rendered)
