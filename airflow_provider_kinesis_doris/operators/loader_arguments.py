"""Which check each of ``KinesisToDorisOperator``'s arguments gets, and when.

Literal arguments are checked when the operator is built (at DAG parse time), templated ones once
they are rendered (the operator's ``render_template_fields``); both raise :class:`ConfigurationError` naming the argument. Checks that need
more than the value (a name Doris could not have, contradicting load options, ``DESC``) stay where
their inputs are known.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from airflow_provider_kinesis_doris.core.plan import InitialPosition
from airflow_provider_kinesis_doris.core.value_checks import (
    check_choice,
    check_duration,
    check_flag,
    check_optional_mapping,
    check_optional_text,
    check_optional_whole_number,
    check_ratio,
    check_text,
    check_texts,
    check_verify,
    check_whole_number,
)

Check = Callable[[str, Any], object]

PARSE_TIME_CHECKS: Mapping[str, Check] = {
    "aws_conn_id": check_optional_text,
    "region_name": check_optional_text,
    "verify": check_verify,
    "botocore_config": check_optional_mapping,
    "executor_credentials": check_text,
    "doris_conn_id": check_text,
    "initial_position": partial(check_choice, choices=[position.value for position in InitialPosition]),
    "seal_grace": check_duration,
    "chunk_max_rows": partial(check_whole_number, minimum=1),
    "chunk_max_bytes": partial(check_whole_number, minimum=1),
    "max_bad_record_ratio": check_ratio,
    "metadata_columns": check_texts,
    "required_fields": check_texts,
    "transform": check_optional_text,
    "unique_key_sequence": check_flag,
    "dead_letter_table_properties": partial(check_optional_mapping, text_values=True),
    "relaxed_order": check_flag,
    "waiting_warn_after": check_duration,
    "read_mode": partial(check_choice, choices=["polling", "efo"]),
    "use_spark": partial(check_choice, choices=[True, False, "auto"]),
    "in_process_max_records": partial(check_whole_number, minimum=0),
    "spark_conn_id": check_optional_text,
    "spark_connect_conn_id": check_optional_text,
    "spark_python": check_optional_text,
    "parallelism": partial(check_optional_whole_number, minimum=1),
    "driver_concurrency": partial(check_whole_number, minimum=1),
    "prune_state": check_flag,
    "create_checkpoint_table": check_flag,
    "load_skipped_intervals": check_flag,
    "max_skipped_intervals": partial(check_whole_number, minimum=1),
    "deferrable": check_flag,
    # Templated inside: the containers are literal, their string values are rendered.
    "load_options": check_optional_mapping,
    "load_headers": check_optional_mapping,
    "spark_conf": check_optional_mapping,
}
"""The arguments whose values (or, for the templated mappings, shapes) are final when the DAG file
is parsed."""

RENDERED_CHECKS: Mapping[str, Check] = {
    "stream_name": check_text,
    "checkpoint_table": check_text,
    "pipeline_id": check_optional_text,
    "doris_table": check_text,
    "dead_letter_table": check_optional_text,
    "efo_consumer_name": check_optional_text,
    "load_headers": partial(check_optional_mapping, text_values=True),
    "spark_master": check_text,
}
"""The templated arguments (of the operator's ``template_fields``) whose rendered values can be
wrong: empty names, or values Jinja rendered to another type (``render_template_as_native_obj``)."""


def check_arguments(checks: Mapping[str, Check], arguments: Mapping[str, Any]) -> None:
    """Run each argument's check on its value in ``arguments``.

    :raises ConfigurationError: the first argument whose value its check refuses.
    """
    for name, check in checks.items():
        check(name, arguments[name])
