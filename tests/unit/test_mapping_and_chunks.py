"""Record mapping (dead letters instead of drops, I6) and deterministic chunking (I2/I3)."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_kinesis_doris.testing.builders import kinesis_record
from airflow_provider_kinesis_doris.core.chunks import cut_chunks
from airflow_provider_kinesis_doris.core.model import ChunkLimits
from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.core.model import KinesisRecord
from airflow_provider_kinesis_doris.core.mapping import MAX_NESTING, DeadLetter, RecordMapping, Row, map_record


def record(data: bytes, sequence: int = 100, sub: int = 0) -> KinesisRecord:
    return kinesis_record(data, sequence, sub, partition_key="pk-1")


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "payload is empty"),
        (b"\xff\xfe\x00binary", "not UTF-8"),
        (b'{"a": 1', "not JSON"),
        (b"[1, 2]", "JSON list, expected an object"),
        (b'{"a": NaN}', "NaN is not valid JSON"),
    ],
)
def test_undecodable_payloads_become_dead_letters_with_a_reason(data: bytes, reason: str) -> None:
    mapped = map_record(record(data), RecordMapping())
    assert isinstance(mapped, DeadLetter)
    assert reason in mapped.reason


def test_metadata_columns_and_unicode_are_kept() -> None:
    mapping = RecordMapping(metadata_columns=("_kinesis_shard", "_kinesis_sequence", "_kinesis_arrival", "_kinesis_partition_key"))
    mapped = map_record(record('{"city": "Zürich", "n": 3}'.encode(), sequence=42, sub=7), mapping)
    assert isinstance(mapped, Row)
    assert json.loads(mapped.line) == {
        "city": "Zürich",
        "n": 3,
        "_kinesis_shard": "shardId-000000000001",
        "_kinesis_sequence": "42:7",
        "_kinesis_arrival": 1_700_000_000_123,
        "_kinesis_partition_key": "pk-1",
    }
    assert "Zürich".encode() in mapped.line


def test_required_fields_and_transform_failures_are_dead_lettered() -> None:
    def explode(row: dict) -> dict:
        raise KeyError("user_id")

    assert "missing required fields ['id']" in map_record(record(b'{"x": 1}'), RecordMapping(required_fields=("id",))).reason
    assert "transform raised KeyError" in map_record(record(b'{"x": 1}'), RecordMapping(transform=explode)).reason
    assert "rejected" in map_record(record(b'{"x": 1}'), RecordMapping(transform=lambda row: None)).reason


def test_dead_letter_row_carries_position_reason_and_raw_payload() -> None:
    dead = map_record(record(b"\x00\x01not json", sequence=9, sub=2), RecordMapping())
    row = json.loads(dead.as_row("events"))
    assert row["stream_name"] == "events"
    assert (row["sequence_number"], row["sub_sequence_number"]) == ("9", 2)
    assert base64.b64decode(row["payload_base64"]) == b"\x00\x01not json"


def test_unknown_metadata_column_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="_kinesis_nope"):
        RecordMapping(metadata_columns=("_kinesis_nope",))


@settings(max_examples=60, deadline=None)
@given(
    payload_sizes=st.lists(st.integers(min_value=0, max_value=300), min_size=0, max_size=80),
    bad=st.sets(st.integers(min_value=0, max_value=79)),
    chunk_max_rows=st.integers(min_value=1, max_value=20),
    chunk_max_bytes=st.integers(min_value=1, max_value=2000),
)
def test_chunks_cover_every_record_once_in_order_within_limits(payload_sizes, bad, chunk_max_rows, chunk_max_bytes) -> None:
    records = [
        record(b"not json" if i in bad else json.dumps({"i": i, "pad": "x" * size}).encode(), sequence=1000 + i)
        for i, size in enumerate(payload_sizes)
    ]
    mapped = [map_record(r, RecordMapping()) for r in records]
    chunks = list(cut_chunks(mapped, ChunkLimits(chunk_max_rows=chunk_max_rows, chunk_max_bytes=chunk_max_bytes)))

    covered = [pos for chunk in chunks for pos in range(chunk.first.sequence, chunk.last.sequence + 1)]
    assert covered == [r.position.sequence for r in records]
    assert sum(chunk.record_count for chunk in chunks) == len(records)
    for chunk in chunks:
        assert chunk.record_count <= chunk_max_rows
        assert chunk.body.count(b"\n") == chunk.row_count
        size = len(chunk.body) + sum(len(d.record.data) + 1 for d in chunk.dead_letters)
        assert size <= chunk_max_bytes or chunk.record_count == 1
    assert chunks == list(cut_chunks(mapped, ChunkLimits(chunk_max_rows=chunk_max_rows, chunk_max_bytes=chunk_max_bytes)))


def test_invalid_limits_are_rejected() -> None:
    with pytest.raises(ConfigurationError):
        ChunkLimits(chunk_max_rows=0)


@settings(max_examples=60, deadline=None)
@given(
    count=st.integers(min_value=1, max_value=60),
    first_rows=st.integers(min_value=1, max_value=9),
    replay_rows=st.integers(min_value=1, max_value=9),
    recorded_count=st.integers(min_value=0, max_value=10),
)
def test_replay_with_changed_limits_recreates_recorded_chunks(count, first_rows, replay_rows, recorded_count) -> None:
    """A half-loaded range replayed after the chunk size changed keeps its recorded chunks (I2)."""
    mapped = [map_record(record(json.dumps({"i": i}).encode(), sequence=500 + 3 * i), RecordMapping()) for i in range(count)]
    original = list(cut_chunks(mapped, ChunkLimits(chunk_max_rows=first_rows)))
    recorded = [(c.first, c.last) for c in original[:recorded_count]]

    replayed = list(cut_chunks(mapped, ChunkLimits(chunk_max_rows=replay_rows), recorded))

    assert replayed[: len(recorded)] == original[: len(recorded)]
    assert [r.record.position for r in mapped] == [
        pos for chunk in replayed for pos in (item.record.position for item in mapped) if chunk.first <= pos <= chunk.last
    ]
    assert all(chunk.record_count <= replay_rows for chunk in replayed[len(recorded):])


def test_dead_letter_table_is_created_with_the_given_properties(doris_server) -> None:  # type: ignore[no-untyped-def]
    from airflow_provider_kinesis_doris.core.mapping import dead_letter_ddl

    one_be = dead_letter_ddl("dead_letter_props", "one_be", {"replication_num": 1})
    doris_server.execute_sql("", "CREATE DATABASE IF NOT EXISTS dead_letter_props")
    doris_server.execute_sql("dead_letter_props", one_be)  # the stand-in parses Doris's PROPERTIES clause

    assert one_be.endswith('\nPROPERTIES ("replication_num" = "1")')
    assert "PROPERTIES" not in dead_letter_ddl("dead_letter_props", "default")
    assert ("one_be",) in doris_server.execute_sql("dead_letter_props", "SHOW TABLES")


# --- poison pills: one record's failure is its dead letter, never the run's ----------------------


def test_a_payload_nested_deeper_than_the_limit_is_a_dead_letter_not_a_recursion_error() -> None:
    deep = record(b"[" * 100_000 + b"]" * 100_000)
    mapped = map_record(deep, RecordMapping())
    assert isinstance(mapped, DeadLetter)
    assert mapped.reason == f"payload nests more than {MAX_NESTING} arrays/objects deep (at byte {MAX_NESTING})"


def test_nesting_up_to_the_limit_loads_and_brackets_inside_strings_do_not_count() -> None:
    at_limit = b'{"a":' + b"[" * (MAX_NESTING - 1) + b"]" * (MAX_NESTING - 1) + b"}"
    assert isinstance(map_record(record(at_limit), RecordMapping()), Row)
    one_more = b'{"a":' + b"[" * MAX_NESTING + b"]" * MAX_NESTING + b"}"
    assert isinstance(map_record(record(one_more), RecordMapping()), DeadLetter)
    quoted = json.dumps({"text": "[{" * MAX_NESTING, "escaped": '\\"[[[' * MAX_NESTING}).encode()
    assert json.loads(map_record(record(quoted), RecordMapping()).line) == json.loads(quoted)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("transform", "reason"),
    [
        (lambda row: [row], "transform returned list, expected a dict or None"),
        (lambda row: {"day": __import__("datetime").date(2026, 1, 1)}, "mapping raised TypeError: Object of type date is not JSON serializable"),
        (lambda row: row["absent"], "transform raised KeyError: 'absent'"),
    ],
)
def test_a_transform_result_that_cannot_be_a_row_is_a_dead_letter(transform, reason: str) -> None:  # type: ignore[no-untyped-def]
    mapped = map_record(record(b'{"a": 1}'), RecordMapping(transform=transform))
    assert isinstance(mapped, DeadLetter)
    assert mapped.reason == reason
