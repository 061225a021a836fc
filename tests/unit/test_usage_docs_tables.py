"""docs/usage.md tells users what to create and what they will find: its DDL is the operator's
and runs, its metadata formats and dead-letter reasons are what the code produces."""

from __future__ import annotations

import json
import re
from datetime import date
from pathlib import Path

import pytest

from airflow_provider_kinesis_doris.core.chunks import RECORDED_DEAD_LETTER
from airflow_provider_kinesis_doris.core.doris.client import DorisStreamLoadClient
from airflow_provider_kinesis_doris.core.doris.connection import DorisConnectionConfig
from airflow_provider_kinesis_doris.core.doris.result import LoadOutcome
from airflow_provider_kinesis_doris.core.model import KinesisRecord
from airflow_provider_kinesis_doris.core.mapping import DeadLetter, RecordMapping, Row, dead_letter_ddl, map_record
from airflow_provider_kinesis_doris.testing.builders import kinesis_record
from tests.conftest import DORIS_PASSWORD, DORIS_USER

USAGE = (Path(__file__).resolve().parents[2] / "docs" / "usage.md").read_text()
SQL_BLOCKS = re.findall(r"```sql\n(.*?)```", USAGE, re.S)
SEQUENCE = 49671234567890123456789012345678901234567890123456


def _normal(sql: str) -> str:
    return " ".join(sql.replace(";", " ").split())


def _record(data: bytes, sub: int = 0) -> KinesisRecord:
    return kinesis_record(data, SEQUENCE, sub, shard_id="shardId-000000000004", arrival_ms=1767225600123,
                          partition_key="user-3")


def test_the_dead_letter_ddl_is_the_operators() -> None:
    (documented,) = [block for block in SQL_BLOCKS if "events_dead_letter` (" in block]
    assert _normal(documented) == _normal(dead_letter_ddl("analytics", "events_dead_letter", {"replication_num": "1"}))


def _create_the_documented_tables(doris_server) -> None:  # type: ignore[no-untyped-def]
    doris_server.execute_sql("", "DROP DATABASE IF EXISTS analytics")  # each test starts with empty tables
    doris_server.execute_sql("", "CREATE DATABASE analytics")
    for block in SQL_BLOCKS:
        if block.startswith("CREATE TABLE"):
            doris_server.execute_sql("analytics", block.strip().rstrip(";"))


def _queries(text: str) -> list[str]:
    """The SELECT statements of the ```sql blocks in ``text``, without their comments."""
    statements = []
    for block in re.findall(r"```sql\n(.*?)```", text, re.S):
        code = "\n".join(line for line in block.splitlines() if not line.lstrip().startswith("--"))
        statements += [s.strip() for s in code.split(";") if s.strip().upper().startswith("SELECT")]
    return statements


def test_the_documented_tables_can_be_created_and_loaded(doris_server) -> None:  # type: ignore[no-untyped-def]
    _create_the_documented_tables(doris_server)
    columns = {row[0]: row[1] for row in doris_server.execute_sql("analytics", "DESC events")}
    assert columns["_kinesis_sequence"] == "VARCHAR(80)" and columns["_kinesis_arrival"] == "BIGINT"
    dead = {row[0]: row[1] for row in doris_server.execute_sql("analytics", "DESC events_dead_letter")}
    assert list(dead) == ["stream_name", "shard_id", "sequence_number", "sub_sequence_number", "arrival_ms",
                          "partition_key", "reason", "payload_base64"]  # fmt: skip
    # the dead-letter row the loader writes has exactly these columns
    row = json.loads(DeadLetter(_record(b"[1]"), "payload is JSON list, expected an object").as_row("events"))
    assert list(row) == list(dead)


def test_the_metadata_formats() -> None:
    mapping = RecordMapping(metadata_columns=("_kinesis_shard", "_kinesis_sequence", "_kinesis_arrival", "_kinesis_partition_key"))
    row = map_record(_record(b'{"event_id": 7, "_kinesis_shard": "mine"}', sub=2), mapping)
    assert isinstance(row, Row)
    assert json.loads(row.line) == {
        "event_id": 7,
        "_kinesis_shard": "shardId-000000000004",  # the metadata value wins over the payload's
        "_kinesis_sequence": f"{SEQUENCE}:2",
        "_kinesis_arrival": 1767225600123,
        "_kinesis_partition_key": "user-3",
    }
    assert f"`{SEQUENCE}:0`" in USAGE and "`1767225600123`" in USAGE


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "payload is empty"),
        (b"\xff\xfe", "payload is not UTF-8 text: invalid start byte at byte 0"),
        (b'{"event_id": 1', "payload is not JSON: Expecting ',' delimiter: line 1 column 15 (char 14)"),
        (b'{"event_id": NaN}', "payload is not JSON: NaN is not valid JSON"),
        (b"[1, 2]", "payload is JSON list, expected an object"),
        (b'{"event_id": null}', "missing required fields ['event_id']"),
        (b"[" * 300 + b"]" * 300, "payload nests more than 256 arrays/objects deep (at byte 256)"),
    ],
)
def test_the_documented_reasons(data: bytes, reason: str) -> None:
    mapped = map_record(_record(data), RecordMapping(required_fields=("event_id",)))
    assert isinstance(mapped, DeadLetter) and mapped.reason == reason
    assert f"`{reason}`" in USAGE


def test_the_transform_reasons_are_documented() -> None:
    def rejects(payload: dict) -> None:  # type: ignore[type-arg]
        return None

    def raises(payload: dict) -> dict:  # type: ignore[type-arg]
        raise ValueError("bad amount")

    assert map_record(_record(b"{}"), RecordMapping(transform=rejects)).reason == "transform rejected the record"  # type: ignore[union-attr]
    assert map_record(_record(b"{}"), RecordMapping(transform=raises)).reason == "transform raised ValueError: bad amount"  # type: ignore[union-attr]
    def lists(payload: dict) -> list:  # type: ignore[type-arg]
        return [payload]

    def dates(payload: dict) -> dict:  # type: ignore[type-arg]
        return {"day": date(2026, 1, 1)}

    for transform in (lists, dates):
        reason = map_record(_record(b"{}"), RecordMapping(transform=transform)).reason  # type: ignore[union-attr]
        assert f"`{reason}`" in USAGE
    assert "`transform rejected the record`" in USAGE and "`transform raised ValueError: ...`" in USAGE
    assert f"`{RECORDED_DEAD_LETTER}`" in USAGE


def test_the_documented_queries_run_on_the_standin(doris_server) -> None:  # type: ignore[no-untyped-def]
    """The dead-letter queries of docs/usage.md, with Doris's DIV, FROM_UNIXTIME and FROM_BASE64,
    answer on the stand-in as on Doris."""
    _create_the_documented_tables(doris_server)
    client = DorisStreamLoadClient(DorisConnectionConfig(host="127.0.0.1", port=doris_server.fe_port, user=DORIS_USER,
                                                         password=DORIS_PASSWORD))  # fmt: skip
    row = DeadLetter(_record(b"[1]"), "payload is JSON list, expected an object").as_row("events")
    assert client.stream_load("analytics", "events_dead_letter", row, label="usage_docs_queries").outcome is LoadOutcome.SUCCESS
    queries = _queries(USAGE)
    assert len(queries) == 2
    answers = [doris_server.execute_sql("analytics", query) for query in queries]
    assert answers[0] == [("payload is JSON list, expected an object", 1)]
    assert answers[1] == [("shardId-000000000004", str(SEQUENCE), 0, "2026-01-01 00:00:00",
                           "payload is JSON list, expected an object", "[1]")]  # fmt: skip
    assert "`FROM_UNIXTIME(_kinesis_arrival DIV 1000)`" in USAGE
    assert doris_server.execute_sql("analytics", "SELECT FROM_UNIXTIME(1767225600123 DIV 1000)") == [("2026-01-01 00:00:00",)]
