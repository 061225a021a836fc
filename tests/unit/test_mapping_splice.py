"""The fast path of the record mapping (the record's own bytes, metadata appended) must give the
same row as decoding and re-encoding, and step aside whenever it could not."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_kinesis_doris.core.kinesis.kpl import may_be_aggregate
from airflow_provider_kinesis_doris.core.model import KinesisRecord
from airflow_provider_kinesis_doris.core.mapping import METADATA_COLUMNS, RecordMapping, Row, map_record
from airflow_provider_kinesis_doris.testing.builders import kinesis_record

SHARD = "shardId-000000000002"
ALL_METADATA = RecordMapping(metadata_columns=tuple(METADATA_COLUMNS))


def record(data: bytes) -> KinesisRecord:
    return kinesis_record(data, 4242, 3, shard_id=SHARD, arrival_ms=1_700_000_000_456, partition_key='pk "quoted" ü')


def mapped_line(data: bytes, mapping: RecordMapping = ALL_METADATA) -> bytes:
    row = map_record(record(data), mapping)
    assert isinstance(row, Row)
    return row.line


def expected_object(payload: dict) -> dict:
    return {
        **payload,
        "_kinesis_shard": SHARD,
        "_kinesis_sequence": "4242:3",
        "_kinesis_arrival": 1_700_000_000_456,
        "_kinesis_partition_key": 'pk "quoted" ü',
    }


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=80, deadline=None)
@given(payload=st.dictionaries(st.text(max_size=6), json_values, max_size=5), compact=st.booleans())
def test_a_row_holds_the_payload_plus_metadata_whatever_the_formatting(payload: dict, compact: bool) -> None:
    data = json.dumps(payload, ensure_ascii=not compact, separators=(",", ":") if compact else None).encode()
    line = mapped_line(b"  " + data + b" ")
    assert b"\n" not in line
    assert json.loads(line) == expected_object(payload)


def test_a_compact_one_line_payload_is_kept_byte_for_byte() -> None:
    data = b'{"id":1,"big":12345678901234567890.5,"u":"\\u00fc"}'
    assert mapped_line(data, RecordMapping()) == data
    assert mapped_line(b"{}", RecordMapping(metadata_columns=("_kinesis_arrival",))) == b'{"_kinesis_arrival":1700000000456}'


@pytest.mark.parametrize(
    "data",
    [b'{\n  "id": 1\n}', b'{"id": 1}\r\n', b'{"id": 1, "_kinesis_shard": "forged"}'],
)
def test_multi_line_payloads_and_forged_metadata_are_re_encoded(data: bytes) -> None:
    line = mapped_line(data)
    assert b"\n" not in line and b"\r" not in line
    assert json.loads(line) == expected_object({"id": 1})


def test_a_transform_always_re_encodes_the_row() -> None:
    mapping = RecordMapping(transform=lambda row: {**row, "id": row["id"] + 1})
    assert json.loads(mapped_line(b'{"id": 1}', mapping)) == {"id": 2}


def test_only_bytes_with_the_kpl_magic_may_be_aggregates() -> None:
    assert may_be_aggregate(b"\xf3\x89\x9a\xc2rest")
    assert not may_be_aggregate(b'{"id": 1}')
    assert not may_be_aggregate(b"")


metadata_values = st.dictionaries(
    st.text(min_size=1, max_size=20), st.one_of(st.text(max_size=40), st.integers(min_value=0, max_value=2**63)),
    max_size=5,
)


@given(metadata_values)
@settings(max_examples=300)
def test_metadata_members_are_the_bytes_json_dumps_writes(metadata: dict) -> None:
    # Any difference would change a chunk's body between a run before and after this encoder.
    from airflow_provider_kinesis_doris.core.mapping import json_members

    expected = json.dumps(metadata, ensure_ascii=False, separators=(",", ":")).encode("utf-8")[1:-1]
    assert json_members(metadata) == expected
