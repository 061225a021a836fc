"""What the regression tests over the in-memory fakes share: a pipeline's settings and the
in-process runner of the run-orders machine (one lane, the fake's clock)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from airflow_provider_kinesis_doris.core.chunks import ChunkLimits
from airflow_provider_kinesis_doris.core.doris.connection import DorisConnectionConfig
from airflow_provider_kinesis_doris.core.doris.options import StreamLoadOptions
from airflow_provider_kinesis_doris.core.load import LoadClients
from airflow_provider_kinesis_doris.testing.faults import load_run
from airflow_provider_kinesis_doris.core.report import RangeReport
from airflow_provider_kinesis_doris.core.load_job import AwsSettings, Credentials, LoadJob, PipelineConfig
from airflow_provider_kinesis_doris.core.mapping import RecordMapping
from airflow_provider_kinesis_doris.testing.fake_kinesis import FakeKinesis

STREAM = "events"
SHARD = "shardId-000000000000"
T0 = 1_700_000_000_000
IV = 60_000

Runner = Callable[[LoadJob, Credentials], list[RangeReport]]


def memory_config(**changes: Any) -> PipelineConfig:
    """Pipeline ``p`` on stream ``events`` into ``db.t`` (dead letters ``t_dl``), 2 rows a chunk."""
    base = PipelineConfig(
        pipeline_id="p", stream_name=STREAM, checkpoint_table="cp", doris_database="db", doris_table="t",
        dead_letter_table="t_dl", doris=DorisConnectionConfig(host="fe"), aws=AwsSettings(),
        load_options=StreamLoadOptions.json_lines(), mapping=RecordMapping(), chunk_limits=ChunkLimits(max_rows=2),
    )  # fmt: skip
    return replace(base, **changes)


def in_process(kinesis: FakeKinesis, store: Any, doris: Any, clock_ms: Callable[[], int] | None = None) -> Runner:
    """The job's ranges loaded in this thread, on the fake's clock unless ``clock_ms`` is given."""

    def run(job: LoadJob, credentials: Credentials) -> list[RangeReport]:
        clients = LoadClients(job=job, kinesis=kinesis, store=store, doris=doris,
                              clock_ms=clock_ms or (lambda: kinesis.now_ms))  # fmt: skip
        return load_run(clients)

    return run
