"""RangeReader over the real Kinesis wire protocol, on kinesis-mock: every boundary kind, KPL
aggregates, a split read parent-to-SHARD_END then children, replays, and trimmed starts; each
with GetRecords and again with enhanced fan-out (``SubscribeToShard`` through the devstack's
event-stream server in front of kinesis-mock), which must hand out the same records and cut the
same boundaries."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import pytest
from aws_kinesis_agg.aggregator import RecordAggregator

from airflow_provider_kinesis_doris.core.errors import DataTrimmed
from airflow_provider_kinesis_doris.core.kinesis.topology import KEPT_MARGIN_MS
from airflow_provider_kinesis_doris.core.model import (
    Boundary,
    BoundaryKind,
    KinesisRecord,
    Position,
    ShardRange,
)
from airflow_provider_kinesis_doris.core.kinesis.consumer import ensure_consumer
from airflow_provider_kinesis_doris.core.kinesis.reader import RangeReader, ReadOutcome
from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
from airflow_provider_kinesis_doris.core.stores.memory import memory_store
from tests.conftest import _client
from airflow_provider_kinesis_doris.testing.builders import wait_stream_active

pytestmark = pytest.mark.integration

PIPELINE = "reader-it"
HALF_HASH_RANGE = 2**127
# A user record as written: where it must come back, under which key, with which bytes.
Expected = tuple[Position, str, bytes]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def only_shard(client: Any, stream: str) -> str:
    (shard,) = client.list_shards(StreamName=stream)["Shards"]
    return str(shard["ShardId"])


def put_plain(client: Any, stream: str, key: str, data: bytes, **routing: str) -> list[Expected]:
    sequence = client.put_record(StreamName=stream, PartitionKey=key, Data=data, **routing)["SequenceNumber"]
    return [(Position(int(sequence)), key, data)]


def put_aggregate(client: Any, stream: str, users: list[tuple[str, bytes]]) -> list[Expected]:
    aggregator = RecordAggregator()
    for key, data in users:
        assert aggregator.add_user_record(key, data) is None
    key, _, blob = aggregator.clear_and_get().get_contents()
    sequence = int(client.put_record(StreamName=stream, PartitionKey=key, Data=blob)["SequenceNumber"])
    return [(Position(sequence, sub), user_key, data) for sub, (user_key, data) in enumerate(users)]


def write_mixed(client: Any, stream: str, tag: str) -> list[Expected]:
    """Two plain records, a KPL aggregate of four, two plain records: eight user records."""
    written = put_plain(client, stream, f"{tag}-a", f"{tag} plain 1".encode())
    written += put_plain(client, stream, f"{tag}-b", f"{tag} plain 2".encode())
    users = [(f"{tag}-u{i}", f'{{"{tag}": {i}}}'.encode()) for i in range(4)]
    written += put_aggregate(client, stream, users)
    written += put_plain(client, stream, f"{tag}-c", f"{tag} plain 3".encode())
    written += put_plain(client, stream, f"{tag}-d", b"\x00\xff raw bytes")
    return written


def sealed_instant() -> int:
    """An instant after every record written so far and before every record written later."""
    time.sleep(0.02)
    instant = now_ms()
    time.sleep(0.02)
    return instant


def cut(shard: str, instant: int, kind: BoundaryKind, position: Position | None = None) -> Boundary:
    return Boundary(shard, instant, kind, position)


def pending(store: CheckpointStore, shard: str, instant: int) -> Boundary:
    return store.ledger.put_boundary(cut(shard, instant, BoundaryKind.PENDING))


@dataclass(frozen=True)
class Via:
    """How a test's ranges are read: a Kinesis client, and a consumer for enhanced fan-out."""

    client: Any
    consumer_arn: str | None = None


@pytest.fixture(params=["polling", "efo"])
def via(request: pytest.FixtureRequest, kinesis_client: Any, stream: str) -> Via:
    if request.param == "polling":
        return Via(kinesis_client)
    efo = request.getfixturevalue("efo_server")
    return Via(_client("kinesis", efo.endpoint), ensure_consumer(kinesis_client, stream, "reader-it"))


def read(
    via: Via,
    store: CheckpointStore,
    stream: str,
    start: Boundary,
    end: Boundary,
    *,
    limit: int = 10_000,
) -> tuple[list[KinesisRecord], ReadOutcome]:
    shard_range = ShardRange(PIPELINE, stream, start.shard_id, start.instant_ms, end.instant_ms, start, end)
    reader = RangeReader(via.client, shard_range, store.ledger, consumer_arn=via.consumer_arn, limit=limit)
    return list(reader), reader.outcome


def as_written(records: list[KinesisRecord]) -> list[Expected]:
    return [(record.position, record.partition_key, record.data) for record in records]


def test_each_boundary_kind_cuts_where_it_says(kinesis_client, stream, via) -> None:
    written = write_mixed(kinesis_client, stream, "x")
    end_instant = sealed_instant()
    shard = only_shard(kinesis_client, stream)
    store = memory_store(PIPELINE)
    p3, a2 = written[6][0], written[4][0]  # plain record 3; the aggregate's third user record
    t0, t1, t2 = end_instant - 3, end_instant - 2, end_instant - 1  # instants only name the cuts here

    # Limit 2 forces several GetRecords calls; AT(a2) cuts the aggregate between two ranges.
    at_a2 = cut(shard, t1, BoundaryKind.AT, a2)
    from_start = cut(shard, t0, BoundaryKind.SHARD_START)
    records, outcome = read(via, store, stream, from_start, at_a2, limit=2)
    assert as_written(records) == written[:4]
    assert outcome.last_position == written[3][0]
    if via.consumer_arn is None:
        assert outcome.get_records_calls >= 2 and outcome.subscribe_calls == 0
    else:  # pushed: one subscription, no GetRecords
        assert outcome.subscribe_calls == 1 and outcome.get_records_calls == 0

    after_p3 = cut(shard, t2, BoundaryKind.AFTER, p3)
    records, _ = read(via, store, stream, at_a2, after_p3)
    assert as_written(records) == written[4:7]

    end = pending(store, shard, end_instant)
    records, outcome = read(via, store, stream, after_p3, end)
    assert as_written(records) == written[7:]
    settled = cut(shard, end_instant, BoundaryKind.AFTER, written[-1][0])
    assert outcome.end == settled == store.ledger.get_boundary(shard, end_instant)
    assert outcome.millis_behind_latest == 0 and not outcome.drained


def test_pending_boundaries_cut_at_the_first_record_arriving_at_or_after_them(kinesis_client, stream, via) -> None:
    before = write_mixed(kinesis_client, stream, "early")
    middle = sealed_instant()
    later = write_mixed(kinesis_client, stream, "late")
    end = sealed_instant()
    shard = only_shard(kinesis_client, stream)

    # Consecutive intervals share the middle boundary; the first read settles it, the second follows.
    store = memory_store(PIPELINE)
    floor = cut(shard, middle - 60_000, BoundaryKind.SHARD_START)
    first, first_outcome = read(via, store, stream, floor, pending(store, shard, middle))
    second, second_outcome = read(
        via, store, stream, pending(store, shard, middle), pending(store, shard, end)
    )
    assert as_written(first) == before and as_written(second) == later
    assert first_outcome.end == second_outcome.start == cut(shard, middle, BoundaryKind.AT, later[0][0])

    # A fresh pipeline finds the same cut from the start side, with AT_TIMESTAMP.
    fresh = memory_store(PIPELINE)
    records, outcome = read(
        via, fresh, stream, pending(fresh, shard, middle), pending(fresh, shard, end)
    )
    assert as_written(records) == later
    assert outcome.start == fresh.ledger.get_boundary(shard, middle) == first_outcome.end


def test_replay_of_a_settled_range_after_more_writes_is_identical(kinesis_client, stream, via) -> None:
    written = write_mixed(kinesis_client, stream, "one")
    end_instant = sealed_instant()
    shard = only_shard(kinesis_client, stream)
    store = memory_store(PIPELINE)
    start = cut(shard, end_instant - 60_000, BoundaryKind.SHARD_START)
    end = pending(store, shard, end_instant)
    first, first_outcome = read(via, store, stream, start, end)
    assert first_outcome.end == cut(shard, end_instant, BoundaryKind.AFTER, written[-1][0])

    write_mixed(kinesis_client, stream, "two")  # arrives after the end instant, but is not in the range
    replay, replay_outcome = read(via, store, stream, start, end)  # same (PENDING) range item
    assert replay == first
    assert replay_outcome.end == first_outcome.end
    assert as_written(replay) == written


def test_split_parent_reads_to_shard_end_then_children_read_their_own_records(kinesis_client, stream, via) -> None:
    parent = only_shard(kinesis_client, stream)
    in_parent = write_mixed(kinesis_client, stream, "parent")
    kinesis_client.split_shard(
        StreamName=stream, ShardToSplit=parent, NewStartingHashKey=str(HALF_HASH_RANGE)
    )
    wait_stream_active(kinesis_client, stream)
    shards = kinesis_client.list_shards(StreamName=stream)["Shards"]
    children = sorted(shard["ShardId"] for shard in shards if shard.get("ParentShardId") == parent)
    assert len(children) == 2
    in_child = {
        children[0]: put_plain(kinesis_client, stream, "low", b"low", ExplicitHashKey="0"),
        children[1]: put_plain(kinesis_client, stream, "high", b"high", ExplicitHashKey=str(HALF_HASH_RANGE)),
    }
    end_instant = sealed_instant()
    store = memory_store(PIPELINE)

    floor = end_instant - 60_000
    records, outcome = read(via, store, stream, cut(parent, floor, BoundaryKind.SHARD_START),
                            pending(store, parent, end_instant), limit=3)  # fmt: skip
    assert as_written(records) == in_parent
    assert outcome.drained
    parent_end = cut(parent, end_instant, BoundaryKind.SHARD_END)
    assert outcome.end == parent_end == store.ledger.get_boundary(parent, end_instant)

    for child, expected in in_child.items():
        records, outcome = read(via, store, stream, cut(child, floor, BoundaryKind.SHARD_START),
                                pending(store, child, end_instant))  # fmt: skip
        assert as_written(records) == expected
        assert not outcome.drained
        assert outcome.end == cut(child, end_instant, BoundaryKind.AFTER, expected[-1][0])


def test_start_record_kinesis_does_not_hold_is_reported_as_trimmed(kinesis_client, stream, via) -> None:
    """An AFTER start within an hour of the stream's trim horizon: retention may have taken records
    after its record too."""
    written = put_plain(kinesis_client, stream, "k", b"v")
    shard = only_shard(kinesis_client, stream)
    vanished = Position(written[0][0].sequence - 1)  # kinesis-mock: ResourceNotFoundException
    summary = kinesis_client.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]
    near_horizon = now_ms() - int(summary["RetentionPeriodHours"]) * 3_600_000 + KEPT_MARGIN_MS // 2
    start = cut(shard, near_horizon, BoundaryKind.AFTER, vanished)
    end = cut(shard, sealed_instant(), BoundaryKind.SHARD_END)
    with pytest.raises(DataTrimmed, match=str(vanished.sequence)):
        read(via, memory_store(PIPELINE), stream, start, end)


def test_an_after_start_whose_record_kinesis_does_not_hold_reads_on_while_its_instant_is_kept(
    kinesis_client, stream, via
) -> None:
    """A shard quiet for longer than retention: its last record gone, the cut after it recent. The
    records after it are read from the trim horizon, on the wire of both ways to read."""
    written = put_plain(kinesis_client, stream, "k", b"v")
    shard = only_shard(kinesis_client, stream)
    vanished = Position(written[0][0].sequence - 1)  # kinesis-mock: ResourceNotFoundException
    instant = sealed_instant()
    start = cut(shard, instant - 1, BoundaryKind.AFTER, vanished)
    end = cut(shard, instant, BoundaryKind.AFTER, written[0][0])

    records, outcome = read(via, memory_store(PIPELINE), stream, start, end)

    assert as_written(records) == written and outcome.records == 1


def test_a_client_that_skips_record_parsing_reads_the_same_records(kinesis_client, kinesis_mock_endpoint, stream) -> None:
    from botocore.exceptions import ClientError

    from airflow_provider_kinesis_doris.core.kinesis.shard_pages import skip_record_parsing

    written = write_mixed(kinesis_client, stream, "wire")
    shard = only_shard(kinesis_client, stream)
    pending_end = sealed_instant()
    wire_client = _client("kinesis", kinesis_mock_endpoint)
    skip_record_parsing(wire_client)

    iterator = wire_client.get_shard_iterator(StreamName=stream, ShardId=shard, ShardIteratorType="TRIM_HORIZON")
    page = wire_client.get_records(ShardIterator=iterator["ShardIterator"])
    # Records as sent (base64 text, epoch seconds); the rest of the response parsed by botocore.
    assert all(isinstance(record["Data"], str) for record in page["Records"]) and len(page["Records"]) == 5
    assert isinstance(page["MillisBehindLatest"], int) and isinstance(page["NextShardIterator"], str)

    start = cut(shard, 0, BoundaryKind.SHARD_START)
    parsed, _ = read(Via(kinesis_client), memory_store(PIPELINE), stream, start, pending(memory_store(PIPELINE), shard, pending_end))
    store = memory_store(PIPELINE)
    unparsed, outcome = read(Via(wire_client), store, stream, start, pending(store, shard, pending_end))
    assert as_written(unparsed) == as_written(parsed) == written
    assert [r.arrival_ms for r in unparsed] == [r.arrival_ms for r in parsed]
    assert outcome.end.kind is BoundaryKind.AFTER and outcome.end.position == written[-1][0]

    # An error answer still reaches botocore's parser whole: the same error either way.
    # Cut in half, not its tail replaced: kinesis-mock's iterators carry no checksum, and a
    # replaced tail once decoded to an iterator it accepted (the test failed on a fresh clone).
    bad = iterator["ShardIterator"][: len(iterator["ShardIterator"]) // 2]
    errors = []
    for client in (kinesis_client, wire_client):
        with pytest.raises(ClientError) as error:
            client.get_records(ShardIterator=bad)
        errors.append(error.value.response["Error"])
    assert errors[0] == errors[1] and errors[0]["Code"]
