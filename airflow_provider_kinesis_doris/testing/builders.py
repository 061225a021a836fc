"""Builders for tests of a pipeline, ours and a user's: a pipeline config with every setting a
test does not care about filled in (in memory or on a local stack), a runner that loads in the
calling thread against fakes, a Kinesis record, and the wait for a stream an emulator is still
creating.

Every value a builder picks is visible in its docstring, so a test that asserts on one (a shard
id, an arrival time) can pass it explicitly instead of relying on the default.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from airflow_provider_kinesis_doris.core.doris.connection import DorisConnectionConfig
from airflow_provider_kinesis_doris.core.doris.options import StreamLoadOptions
from airflow_provider_kinesis_doris.core.load import LoadClients, load_ranges
from airflow_provider_kinesis_doris.core.load_job import LoadJob
from airflow_provider_kinesis_doris.core.settings import AwsSettings, Credentials, PipelineConfig
from airflow_provider_kinesis_doris.core.mapping import RecordMapping
from airflow_provider_kinesis_doris.core.model import KinesisRecord, Position
from airflow_provider_kinesis_doris.core.pipeline import IntervalResult, run_interval
from airflow_provider_kinesis_doris.core.report import RangeReport

STREAM = "events"
"""The stream :func:`pipeline_config` reads unless told otherwise."""


def pipeline_config(**changes: Any) -> PipelineConfig:
    """Pipeline ``p`` reading stream ``events`` into ``db.t`` (dead letters ``db.t_dl``), through
    a Doris FE at ``fe`` and AWS's defaults, JSON lines, no metadata columns, 2 rows a chunk;
    ``changes`` replace any field (``PipelineConfig`` checks the result as it always does)."""
    base = PipelineConfig(
        pipeline_id="p", stream_name=STREAM, checkpoint_table="cp", doris_database="db", doris_table="t",
        dead_letter_table="t_dl", doris=DorisConnectionConfig(host="fe"), aws=AwsSettings(),
        load_options=StreamLoadOptions.json_lines(), mapping=RecordMapping(), chunk_max_rows=2,
    )  # fmt: skip
    return replace(base, **changes)


def local_pipeline_config(
    stream: str,
    database: str,
    table: str,
    *,
    doris_port: int,
    doris_user: str,
    kinesis_endpoint: str,
    dynamodb_endpoint: str,
    **changes: Any,
) -> PipelineConfig:
    """:func:`pipeline_config` against a local stack (the Doris stand-in or a Doris at
    ``127.0.0.1:doris_port``, Kinesis and DynamoDB emulators in ``us-east-1``): pipeline
    ``{stream}.{database}.{table}`` into ``database.table``, dead letters in
    ``{table}_dead_letter``; ``changes`` replace any field."""
    local = {
        "pipeline_id": f"{stream}.{database}.{table}", "stream_name": stream, "doris_database": database,
        "doris_table": table, "dead_letter_table": f"{table}_dead_letter",
        "doris": DorisConnectionConfig(host="127.0.0.1", port=doris_port, user=doris_user),
        "aws": AwsSettings("us-east-1", kinesis_endpoint, dynamodb_endpoint),
    }  # fmt: skip
    return pipeline_config(**{**local, **changes})


def load_in_thread(
    kinesis: Any, store: Any, doris: Any, clock_ms: Callable[[], int] | None = None
) -> Callable[[LoadJob, Credentials], list[RangeReport]]:
    """A runner for ``run_interval`` that loads the job's ranges in the calling thread with the
    given clients (fakes or emulator clients), on ``kinesis.now_ms`` (a ``FakeKinesis``'s clock)
    unless ``clock_ms`` is given."""

    def run(job: LoadJob, credentials: Credentials) -> list[RangeReport]:
        clients = LoadClients(job=job, kinesis=kinesis, store=store, doris=doris,
                              clock_ms=clock_ms or (lambda: kinesis.now_ms))  # fmt: skip
        return list(load_ranges(clients))

    return run


def run_in_memory(
    config: PipelineConfig, start_ms: int, end_ms: int, *, kinesis: Any, store: Any, doris: Any, **options: Any
) -> IntervalResult:
    """``run_interval`` of ``[start_ms, end_ms)`` against fakes (a ``FakeKinesis``, a
    ``memory_store``, a ``MemoryDoris``), loading in this thread on the fake's clock;
    ``options`` go to ``run_interval`` (``catch_up``, ...)."""
    return run_interval(
        config, start_ms, end_ms, kinesis=kinesis, store=store, credentials=Credentials(),
        runner=load_in_thread(kinesis, store, doris), clock=lambda: kinesis.now_ms, doris=doris, **options,
    )  # fmt: skip


def kinesis_record(
    data: bytes,
    sequence: int = 100,
    sub: int = 0,
    *,
    shard_id: str = "shardId-000000000001",
    arrival_ms: int = 1_700_000_000_123,
    partition_key: str = "pk",
) -> KinesisRecord:
    """A de-aggregated record of ``shard_id`` at ``(sequence, sub)`` holding ``data``."""
    return KinesisRecord(shard_id, Position(sequence, sub), arrival_ms, partition_key, data)


def wait_stream_active(kinesis: Any, stream: str, timeout_seconds: float = 30) -> None:
    """Wait until ``stream`` is ACTIVE (emulators create streams asynchronously, as AWS does)."""
    delay = 0.05
    kinesis.get_waiter("stream_exists").wait(
        StreamName=stream, WaiterConfig={"Delay": delay, "MaxAttempts": int(timeout_seconds / delay)}
    )
