"""``decoder="gzip+json"`` through the real pipeline (kinesis-mock, moto DynamoDB, the Doris
stand-in): CloudWatch Logs subscription records become one row per log event, exactly once
across a replay; a control message is counted as skipped, a malformed record is a dead letter,
and a log event Doris refuses dead-letters its whole record (issue 19, item 5)."""

from __future__ import annotations

import base64
import gzip
import json
from dataclasses import replace
from typing import Any

import pytest

from airflow_provider_kinesis_doris.core.doris.options import StreamLoadOptions
from airflow_provider_kinesis_doris.core.mapping import RecordMapping, dead_letter_ddl
from airflow_provider_kinesis_doris.core.load import run_here
from kinesis_doris_devstack.scenario import now_ms, put_records, sealed_end, wait_past
from tests.integration.conftest import DB

pytestmark = pytest.mark.integration

LOGS_DDL = """CREATE TABLE {table} (
    log_group VARCHAR(512), log_stream VARCHAR(512), owner VARCHAR(12), id VARCHAR(64) NOT NULL,
    timestamp BIGINT, message STRING, _kinesis_shard VARCHAR(64), _kinesis_sequence VARCHAR(80)
) DUPLICATE KEY(log_group, log_stream, owner, id) DISTRIBUTED BY HASH(id) BUCKETS 1
PROPERTIES ("replication_num" = "1")"""


def envelope(kind: str, group: int, events: list[dict[str, Any]]) -> bytes:
    return gzip.compress(json.dumps({
        "messageType": kind, "owner": "123456789012", "logGroup": f"/aws/lambda/fn-{group}",
        "logStream": "2026/01/01/[$LATEST]0f", "subscriptionFilters": ["to-kinesis"], "logEvents": events,
    }).encode())  # fmt: skip


def log_events(group: int, count: int) -> list[dict[str, Any]]:
    return [{"id": f"{group:04d}{i:04d}", "timestamp": 1_700_000_000_000 + i, "message": f"line {i} of {group}"} for i in range(count)]


def spark_runner(job, credentials):  # type: ignore[no-untyped-def]
    from airflow_provider_kinesis_doris.spark.runner import SparkSettings, run_spark_job

    return run_spark_job(job, credentials, SparkSettings(master="local[1]"))


@pytest.mark.parametrize("first_runner", [run_here, pytest.param(spark_runner, marks=pytest.mark.spark)], ids=["in-task", "spark"])
def test_cloudwatch_records_load_one_row_per_log_event_exactly_once_across_a_replay(world, kinesis_client, doris_server, first_runner) -> None:  # type: ignore[no-untyped-def]
    """The first run with either runner (the decoder travels in the job to Spark executors), the
    replay in the task's process with other chunk limits."""
    table = f"{world['table']}_logs"
    doris_server.execute_sql(DB, LOGS_DDL.format(table=table))
    doris_server.execute_sql(DB, dead_letter_ddl(DB, f"{table}_dl"))
    config = replace(
        world["config"], doris_table=table, dead_letter_table=f"{table}_dl", decoder="gzip+json",
        mapping=RecordMapping(metadata_columns=("_kinesis_shard", "_kinesis_sequence")),
        load_options=StreamLoadOptions.json_lines(strict_mode=True),  # as the operator sends by default
        chunk_max_rows=3,  # records per chunk: several chunks per shard
    )  # fmt: skip
    counts = {group: 1 + group % 4 for group in range(12)}
    payloads = [(f"k{group}", envelope("DATA_MESSAGE", group, log_events(group, count))) for group, count in counts.items()]
    payloads.insert(3, ("k-control", envelope("CONTROL_MESSAGE", 0, [{"id": "", "timestamp": 0, "message": "CWL CONTROL MESSAGE"}])))
    payloads.insert(7, ("k-broken", b"\x1f\x8b not really gzip"))
    bad_event = log_events(99, 3)
    bad_event[1]["timestamp"] = "not a number"  # Doris refuses this line (strict mode)
    payloads.append(("k99", envelope("DATA_MESSAGE", 99, bad_event)))
    start = now_ms()
    wait_past(start)
    end = sealed_end(kinesis_client, world["stream"], put_records(kinesis_client, world["stream"], payloads))

    first = world["run"](start, end, cfg=config, runner=first_runner).summary()

    def loaded() -> list[tuple[Any, ...]]:
        return [tuple(row) for row in doris_server.execute_sql(DB, f"SELECT log_group, id, message FROM {table} ORDER BY id")]

    expected = sorted(
        (f"/aws/lambda/fn-{group}", event["id"], event["message"]) for group, count in counts.items() for event in log_events(group, count)
    )
    assert sorted(loaded(), key=lambda row: row[1]) == sorted(expected, key=lambda row: row[1])
    assert first["records"] == len(payloads) == 15
    assert first["skipped"] == 1 and first["loaded"] == sum(counts.values()) == 30
    dead = doris_server.execute_sql(DB, f"SELECT reason, payload_base64 FROM {table}_dl ORDER BY reason")
    reasons = [reason for reason, _ in dead]
    assert len(reasons) == 2 and first["dead_lettered"] == 2
    assert reasons[1].startswith("payload is not gzip"), reasons
    # The refused event's record is dead whole: none of its three events is in the table.
    refused_payload = base64.b64decode(next(payload for reason, payload in dead if reason == reasons[0]))
    assert json.loads(gzip.decompress(refused_payload))["logGroup"] == "/aws/lambda/fn-99"
    assert not any(row[0] == "/aws/lambda/fn-99" for row in loaded())

    replay = world["run"](start, end, cfg=replace(config, chunk_max_rows=5)).summary()

    assert replay["loaded"] == 0 and replay["dead_lettered"] == 0
    assert replay["already_loaded"] == {"rows": 30, "dead_letters": 2} and replay["skipped"] == 1
    assert len(loaded()) == 30 and len(set(loaded())) == 30
    assert len(doris_server.execute_sql(DB, f"SELECT reason FROM {table}_dl")) == 2
