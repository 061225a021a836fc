"""The preflight of ``KinesisToDorisOperator``: both halves (Doris, AWS) of the deployment check
for a pipeline's settings, and the digest of the settings that passed, kept in the checkpoint
table so a pipeline is checked again only when they change."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from airflow.providers.common.compat.sdk import AirflowException
from botocore.exceptions import ClientError

from airflow_provider_kinesis_doris.core.aws_preflight import AwsPreflightSettings, aws_preflight, preflight_digest
from airflow_provider_kinesis_doris.core.doris.preflight import DorisPreflightSettings, PreflightReport
from airflow_provider_kinesis_doris.core.errors import aws_error_code
from airflow_provider_kinesis_doris.core.fields import sampled_fields_item

if TYPE_CHECKING:
    from airflow_provider_kinesis_doris.config import ReadConfig, StateConfig
    from airflow_provider_kinesis_doris.core.pipeline import PipelineConfig
    from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
    from airflow_provider_kinesis_doris.hooks.doris import DorisHook
    from airflow_provider_kinesis_doris.hooks.kinesis_pipeline import KinesisPipelineHook


def run_preflight(
    doris_hook: DorisHook, aws_hook: KinesisPipelineHook, store: CheckpointStore, config: PipelineConfig,
    read: ReadConfig, state: StateConfig, log: logging.Logger,
) -> list[str]:  # fmt: skip
    """Check the Doris and AWS deployment against the pipeline's settings before its first load
    and whenever they change (the checkpoint table keeps the digest of those that passed): what
    breaks exactly-once fails the task before anything is planned, the rest is logged and
    returned (the task's XCom ``preflight``: a label window nobody could read among them)."""
    doris, aws = preflight_settings(config, read, state)
    digest = unchecked_digest(store, doris, aws)
    if digest is None:
        return []
    report = preflight_report(doris_hook, aws_hook, doris, aws)
    for item in report.warnings:
        log.warning("Preflight: %s", item.line())
    if report.fatal:
        wrong = "\n".join(item.line() for item in report.fatal)
        raise AirflowException(
            f"The Doris or AWS deployment breaks what exactly-once assumes; nothing was planned or loaded. "
            f"{report.text().splitlines()[0]}:\n{wrong}"
        )
    log.info("%s; settings %s recorded as checked", report.text().splitlines()[0], digest[:12])
    store.preflight.record_passed_preflight(digest)
    return [item.line() for item in report.warnings]


def deployment_report(
    doris_hook: DorisHook, aws_hook: KinesisPipelineHook, config: PipelineConfig, read: ReadConfig, state: StateConfig
) -> PreflightReport:
    """Both halves of the preflight for ``config``, whether or not its settings passed before, and
    the stream's recent records against the table's columns (``core.fields``): what the run would
    report as unmatched fields, said before anything loads. Only the check command samples
    records; a run compares what it loads."""
    report = preflight_report(doris_hook, aws_hook, *preflight_settings(config, read, state))
    fields = sampled_fields_item(aws_hook.kinesis, config, now_ms=int(time.time() * 1000))
    return replace(report, items=(*report.items, fields))


def preflight_settings(
    config: PipelineConfig, read: ReadConfig, state: StateConfig
) -> tuple[DorisPreflightSettings, AwsPreflightSettings]:
    """What each half checks of ``config``, as ``read`` and ``state`` run the pipeline: the
    stream consumer's name when it reads with enhanced fan-out, how many loads run at once."""
    max_concurrent_loads = config.parallelism or state.driver_concurrency
    doris = DorisPreflightSettings.from_pipeline(
        config, max_concurrent_loads=max_concurrent_loads, require_label_window=state.require_label_window_check
    )
    aws = AwsPreflightSettings(
        stream_name=config.stream_name, checkpoint_table=config.checkpoint_table, pipeline_id=config.pipeline_id,
        label_keep_seconds=config.doris.label_keep_seconds,
        efo_consumer=read.consumer_name(config.pipeline_id) if read.mode == "efo" else None,
        creates_checkpoint_table=state.create_checkpoint_table,
    )  # fmt: skip
    return doris, aws


def preflight_report(
    doris_hook: DorisHook, aws_hook: KinesisPipelineHook, doris: DorisPreflightSettings, aws: AwsPreflightSettings
) -> PreflightReport:
    """Both halves' items in one report."""
    doris_report = doris_hook.preflight(doris)
    aws_report = aws_preflight(aws_hook.kinesis, aws_hook.dynamodb, aws)
    return PreflightReport((*doris_report.items, *aws_report.items), name="Doris and AWS")


def unchecked_digest(store: CheckpointStore, doris: DorisPreflightSettings, aws: AwsPreflightSettings) -> str | None:
    """The digest of the settings, to record once they pass; None when they passed before."""
    digest = preflight_digest(doris, aws)
    return None if _passed_preflight_digest(store) == digest else digest


def _passed_preflight_digest(store: CheckpointStore) -> str | None:
    """None also when the checkpoint table does not exist or has another key (GetItem's
    ValidationException): the preflight then runs and names the table and the fixes, instead of
    a bare error on GetItem."""
    try:
        return store.preflight.passed_preflight_digest()
    except ClientError as exc:
        if aws_error_code(exc) not in ("ResourceNotFoundException", "ValidationException"):
            raise
        return None
