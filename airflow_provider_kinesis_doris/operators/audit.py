"""Operator that audits a pipeline's span of intervals: the checkpoint table against Doris
(``core.audit``), failing the task on any difference."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import suppress
from functools import partial
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow.providers.amazon.aws.utils.mixins import aws_template_fields
from airflow.providers.common.compat.sdk import AirflowException

from airflow_provider_kinesis_doris.config import Check
from airflow_provider_kinesis_doris.core.audit import AuditTarget
from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.core.doris.identifiers import check_name, split_table_name
from airflow_provider_kinesis_doris.core.kinesis.reader import positions_between
from airflow_provider_kinesis_doris.core.value_checks import check_flag, check_optional_text, check_text
from airflow_provider_kinesis_doris.hooks.doris import DorisHook
from airflow_provider_kinesis_doris.operators.dag_runs import epoch_ms
from airflow_provider_kinesis_doris.operators.pipeline_arguments import (
    PIPELINE_TEMPLATE_FIELDS,
    TABLE_REQUIRED_CHECKS,
    KinesisPipelineBaseOperator,
)

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context


def since_datetime(name: str, value: datetime | str | None) -> datetime | None:
    """``value`` as a datetime: itself, or its ISO 8601 text; None stays None.

    :raises ConfigurationError: neither a datetime nor ISO 8601 text.
    """
    if value is None or isinstance(value, datetime):
        return value
    if isinstance(value, str):
        with suppress(ValueError):
            return datetime.fromisoformat(value)
    raise ConfigurationError(
        f"{name} must be None, a datetime or ISO 8601 text (e.g. '2026-01-01T00:00:00+00:00'), got {value!r}"
    )


AUDIT_ARGUMENT_CHECKS: Mapping[str, Check] = {
    "dead_letter_table": check_optional_text,
    "audit_dead_letters": check_flag,
    "one_row_per_record": check_flag,
    "since": since_datetime,
    "doris_conn_id": check_text,
}
"""The audit's own arguments, checked as the pipeline's are."""


class KinesisDorisAuditOperator(KinesisPipelineBaseOperator):
    """Check that every record of a span of intervals is in Doris once: per shard and interval, the
    rows and dead letters the checkpoint table says were loaded against those Doris holds; rows
    loaded twice; time no interval was planned for; shards stuck (``core.audit``, which says what it
    needs and costs). Where a shard's counts differ, each missing record is named by its position
    (read again from Kinesis) and each extra one by its row's. Run it downstream of the loader.

    Logs the per-shard table, pushes the summary (``AuditReport.summary()``) as the XCom
    ``audit`` (and returns it), and fails the task when anything differs.

    :param stream_name: the Kinesis stream. (templated)
    :param checkpoint_table: DynamoDB table of the loader's checkpoints. (templated)
    :param doris_table: the loader's ``database.table``; it must carry ``_kinesis_shard``,
        ``_kinesis_sequence`` and ``_kinesis_arrival`` (the loader's ``metadata_columns``). (templated)
    :param dead_letter_table: the loader's dead-letter table (default ``<table>_dead_letter``);
        None with ``audit_dead_letters=False``. (templated)
    :param audit_dead_letters: compare dead letters too.
    :param one_row_per_record: False for decoders that make several rows of a record (no
        duplicate check on the table, the counts still see them).
    :param since: the span's start (a datetime or ISO 8601 text, templated); default the run's
        data interval start, or the first interval the run's loader caught up before it. The span
        ends at the run's data interval end; it starts no earlier than the pipeline's first
        interval.
    :param pipeline_id: the loader's pipeline id; default ``<stream_name>.<doris_table>``. (templated)
    :param doris_conn_id: ``doris`` connection; its ``query_port`` (MySQL protocol) runs the SQL. (templated)
    :param aws_conn_id: Airflow AWS connection (Kinesis, and DynamoDB via ``service_config``). (templated)
    :param region_name: AWS region; the connection's by default. (templated)
    :param verify: whether to verify TLS certificates, or a CA bundle path; the connection's by
        default. (templated)
    :param botocore_config: ``botocore.config.Config`` arguments, instead of the connection's
        ``config_kwargs``. (templated)
    """

    template_fields: Sequence[str] = aws_template_fields(
        *PIPELINE_TEMPLATE_FIELDS, "dead_letter_table", "since", "doris_conn_id"
    )
    pipeline_argument_checks = TABLE_REQUIRED_CHECKS
    ui_color = "#d8f0d2"

    def __init__(
        self,
        *,
        doris_table: str,
        dead_letter_table: str | None = None,
        audit_dead_letters: bool = True,
        one_row_per_record: bool = True,
        since: datetime | str | None = None,
        doris_conn_id: str = DorisHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(doris_table=doris_table, **kwargs)
        self.dead_letter_table = dead_letter_table
        self.audit_dead_letters = audit_dead_letters
        self.one_row_per_record = one_row_per_record
        self.since = since
        self.doris_conn_id = doris_conn_id
        self.check_arguments(AUDIT_ARGUMENT_CHECKS)

    def execute(self, context: Context) -> dict[str, Any]:
        start, end = self._span(context)
        pipeline_id = self.resolved_pipeline_id
        store = self.aws_hook.checkpoint_store(self.checkpoint_table, pipeline_id)
        # The intervals the run's loader caught up (loaded before its own) are the run's too.
        start = min([start, *(low for low, _ in store.ranges.adopted_by(self._interval_start(context)))])
        read_positions = partial(positions_between, self.aws_hook.kinesis, self.stream_name)
        report = DorisHook(doris_conn_id=self.doris_conn_id).audit(store, self._target(), start, end, read_positions)
        summary = report.summary()
        self.log.info("Audit of pipeline %s, %s:\n%s", pipeline_id, summary["span"], report.table())
        context["ti"].xcom_push(key="audit", value=summary)
        differences = report.differences()
        if differences:
            raise AirflowException(
                f"Audit of pipeline {pipeline_id}, {summary['span']}: {len(differences)} difference(s) between the "
                "checkpoint table and Doris:\n" + "\n".join(differences[:20]) + ("\n..." if len(differences) > 20 else "")
            )
        self.log.info("Audit of pipeline %s: every record of %s is in Doris once", pipeline_id, summary["span"])
        return summary

    def _target(self) -> AuditTarget:
        database, table = split_table_name(str(self.doris_table))
        dead_letter_table = None
        if self.audit_dead_letters:
            dead_letter_table = check_name(self.dead_letter_table or f"{table}_dead_letter", "dead_letter_table")
        return AuditTarget(
            check_name(database, "doris_table's database"), check_name(table, "doris_table's table"), self.stream_name,
            dead_letter_table, self.one_row_per_record,
        )  # fmt: skip

    @staticmethod
    def _interval_start(context: Context) -> int:
        return epoch_ms(context["data_interval_start"])

    def _span(self, context: Context) -> tuple[int, int]:
        start, end = context.get("data_interval_start"), context.get("data_interval_end")
        if start is None or end is None:
            raise AirflowException("The audit needs a run with a data interval (its span ends at the interval's end)")
        if self.since is not None:
            start = since_datetime("since", self.since)
        return epoch_ms(start), epoch_ms(end)
