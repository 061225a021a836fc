"""Fixtures shared by the integration tests of the pipeline on the real local stack."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator
from typing import Any

import botocore.client
import pytest

from airflow_provider_kinesis_doris.core.stores.dynamodb import dynamo_store
from airflow_provider_kinesis_doris.core.settings import Credentials
from airflow_provider_kinesis_doris.core.load import run_here
from airflow_provider_kinesis_doris.core.pipeline import PipelineConfig, run_interval
from airflow_provider_kinesis_doris.core.doris.connection import RetryPolicy
from airflow_provider_kinesis_doris.core.mapping import RecordMapping, dead_letter_ddl
from airflow_provider_kinesis_doris.testing.builders import local_pipeline_config
from kinesis_doris_devstack.scenario import create_stream, events_table_ddl
from tests.conftest import DORIS_PASSWORD, DORIS_USER

DB = "pipeline_it"
_names = itertools.count()


@pytest.fixture
def world(kinesis_client, dynamodb_client, kinesis_mock_endpoint, dynamodb_endpoint, doris_server):  # type: ignore[no-untyped-def]
    """A fresh stream (2 shards), checkpoint table, Doris table and pipeline config."""
    n = next(_names)
    stream, table = f"pipeline-it-{n}", f"events_{n}"
    create_stream(kinesis_client, stream, 2)
    doris_server.execute_sql("", f"CREATE DATABASE IF NOT EXISTS {DB}")
    doris_server.execute_sql(DB, events_table_ddl(table))
    doris_server.execute_sql(DB, dead_letter_ddl(DB, f"{table}_dead_letter"))
    config = local_pipeline_config(
        stream, DB, table, doris_port=doris_server.fe_port, doris_user=DORIS_USER,
        kinesis_endpoint=kinesis_mock_endpoint, dynamodb_endpoint=dynamodb_endpoint,
        checkpoint_table="checkpoints_it",
        mapping=RecordMapping(metadata_columns=("_kinesis_shard", "_kinesis_sequence"), required_fields=("event_id",)),
        chunk_max_rows=7,
        retry_policy=RetryPolicy(max_attempts=3, initial_backoff_seconds=0.2, max_backoff_seconds=1, running_wait_seconds=20),
    )
    store = dynamo_store(dynamodb_client, config.checkpoint_table, config.pipeline_id)
    store.items.create_table_if_missing()

    def run(start: int, end: int, cfg: PipelineConfig = config, runner=run_here, **options):  # type: ignore[no-untyped-def]
        return run_interval(
            cfg, start, end, kinesis=kinesis_client, store=store,
            credentials=Credentials(doris_password=DORIS_PASSWORD), runner=runner, **options,
        )  # fmt: skip

    def rows() -> list[tuple]:
        return doris_server.execute_sql(DB, f"SELECT event_id, _kinesis_shard, _kinesis_sequence FROM {table} ORDER BY event_id")

    def dead() -> list[tuple]:
        return doris_server.execute_sql(DB, f"SELECT reason, payload_base64 FROM {table}_dead_letter")

    return {"stream": stream, "config": config, "store": store, "run": run, "rows": rows, "dead": dead, "table": table}


@pytest.fixture
def dynamodb_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """The keys every GetItem of this process asks for (every client, every thread)."""
    keys: Counter[str] = Counter()
    original = botocore.client.BaseClient._make_api_call

    def counted(client: Any, operation: str, params: dict[str, Any]) -> Any:
        if operation == "GetItem":
            keys[params["Key"]["sk"]["S"]] += 1
        return original(client, operation, params)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", counted)
    yield keys
