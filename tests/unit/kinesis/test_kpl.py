"""KPL de-aggregation: aggregates unpack into raw user bytes numbered 0..n-1; anything that is
not a well-formed aggregate stays one plain record, never dropped (invariant I6)."""

from __future__ import annotations

import hashlib

import pytest
from aws_kinesis_agg import MAGIC, deaggregator
from aws_kinesis_agg.aggregator import RecordAggregator
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_kinesis_doris.core.kinesis.kpl import UserRecord, deaggregate

# The library's generated protobuf class, reached the way core.kinesis.kpl reaches it.
AggregatedRecord = deaggregator.messages_pb2.AggregatedRecord


def aggregate(users: list[tuple[str, bytes]], explicit_hash_key: str | None = None) -> tuple[str, bytes]:
    """Pack user records with the library's producer side; returns (outer partition key, bytes)."""
    aggregator = RecordAggregator()
    for partition_key, data in users:
        assert aggregator.add_user_record(partition_key, data, explicit_hash_key) is None
    partition_key, _, blob = aggregator.clear_and_get().get_contents()
    return partition_key, blob


def framed(message: bytes) -> bytes:
    return MAGIC + message + hashlib.md5(message).digest()  # noqa: S324


user_records = st.lists(
    st.tuples(st.text(min_size=1, max_size=20), st.binary(max_size=200)), min_size=1, max_size=30
)


@settings(max_examples=100, deadline=None)
@given(user_records)
def test_aggregate_unpacks_to_the_raw_user_bytes_in_order(records: list[tuple[str, bytes]]) -> None:
    outer_key, blob = aggregate(records)
    unpacked = deaggregate(blob, outer_key)
    assert unpacked == [UserRecord(index, key, data) for index, (key, data) in enumerate(records)]
    assert all(isinstance(user.data, bytes) for user in unpacked)


def test_explicit_hash_key_does_not_change_the_user_records() -> None:
    records = [("a", b"1"), ("b", b"2")]
    outer_key, blob = aggregate(records, explicit_hash_key="12345")
    assert [(u.sub_sequence, u.partition_key, u.data) for u in deaggregate(blob, outer_key)] == [
        (0, "a", b"1"),
        (1, "b", b"2"),
    ]


@pytest.mark.parametrize(
    "data",
    [
        b'{"plain": "json"}',
        b"",
        MAGIC,  # magic alone, nothing after it
        MAGIC + b"\x00" * 16,  # magic and a digest-sized tail but no message
    ],
)
def test_plain_record_is_one_user_record_with_unchanged_bytes(data: bytes) -> None:
    assert deaggregate(data, "pk") == [UserRecord(0, "pk", data)]


def test_aggregate_with_wrong_digest_is_kept_whole() -> None:
    outer_key, blob = aggregate([("a", b"1"), ("b", b"2")])
    corrupted = blob[:-1] + bytes([blob[-1] ^ 0xFF])
    assert deaggregate(corrupted, outer_key) == [UserRecord(0, outer_key, corrupted)]


def test_aggregate_whose_protobuf_does_not_parse_is_kept_whole() -> None:
    data = framed(b"\xff\xff\xff\xff")
    assert deaggregate(data, "pk") == [UserRecord(0, "pk", data)]


def test_aggregate_with_missing_partition_key_is_kept_whole_not_truncated() -> None:
    # aws-kinesis-agg's own deaggregator would yield record 0 and silently drop record 1.
    message = AggregatedRecord()
    message.partition_key_table.append("a")
    message.records.add(partition_key_index=0, data=b"first")
    message.records.add(partition_key_index=3, data=b"second")
    data = framed(message.SerializeToString())
    assert deaggregate(data, "outer") == [UserRecord(0, "outer", data)]


def test_empty_aggregate_is_kept_whole() -> None:
    message = AggregatedRecord()
    message.partition_key_table.append("a")
    data = framed(message.SerializeToString())
    assert deaggregate(data, "outer") == [UserRecord(0, "outer", data)]
