"""The planner against kinesis-mock: paging, AT_TIMESTAMP cuts, replays, split and merge.

Each test creates its own stream. Instants come from this machine's clock, which kinesis-mock
also stamps arrivals with; pauses of 100 ms keep batches apart at millisecond resolution.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from airflow_provider_kinesis_doris.core.model import Boundary, BoundaryKind, Position, ShardState
from airflow_provider_kinesis_doris.core.plan import Plan, ShardDecision, plan_interval
from airflow_provider_kinesis_doris.core.kinesis.topology import list_shards
from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
from airflow_provider_kinesis_doris.core.stores.memory import memory_store
from airflow_provider_kinesis_doris.testing.builders import pipeline_config, wait_stream_active

pytestmark = pytest.mark.integration

PIPELINE = "pipe"
PAUSE_S = 0.1


def _now_ms() -> int:
    return int(time.time() * 1000)


def _pause() -> int:
    """Sleep, take an instant, sleep again: no arrival stamp can equal the instant."""
    time.sleep(PAUSE_S)
    instant = _now_ms()
    time.sleep(PAUSE_S)
    return instant


def _create_stream(client: Any, shards: int) -> str:
    stream = f"plan-{uuid.uuid4().hex[:10]}"
    client.create_stream(StreamName=stream, ShardCount=shards)
    wait_stream_active(client, stream)
    return stream


def _shard_ids(client: Any, stream: str) -> dict[str, Any]:
    return {shard.shard_id: shard for shard in list_shards(client, stream)}


def _put(client: Any, stream: str, shard_id: str, count: int) -> list[int]:
    """Write ``count`` records into ``shard_id`` (by its starting hash key); their sequences."""
    hash_key = _shard_ids(client, stream)[shard_id].starting_hash_key
    sequences = []
    for index in range(count):
        response = client.put_record(
            StreamName=stream, Data=f"r{index}".encode(), PartitionKey=f"k{index}", ExplicitHashKey=str(hash_key)
        )
        assert response["ShardId"] == shard_id
        sequences.append(int(response["SequenceNumber"]))
    return sequences


def _plan(client: Any, store: CheckpointStore, stream: str, start: int, end: int, **settings: Any) -> Plan:
    return plan_interval(client, store, pipeline_config(pipeline_id=PIPELINE, stream_name=stream, **settings), start, end)


def _commit(store: CheckpointStore, plan: Plan) -> None:
    """As ``core.commit`` does, fenced on the shard as read now: a later plan may have touched the
    shard's counter since ``plan`` read it (a range stored ahead of the mark fences out commits that
    read the shard before it existed)."""
    for shard_plan in plan.shards:
        if shard_plan.range is not None:
            store.ranges.mark_range_loaded(shard_plan.shard_id, plan.interval_start_ms)
            store.marks.advance_high_water_mark(shard_plan.shard_id)


def test_list_shards_pages_with_next_token_alone(kinesis_client: Any) -> None:
    stream = _create_stream(kinesis_client, 12)
    sent: list[dict[str, Any]] = []
    kinesis_client.meta.events.register(
        "before-parameter-build.kinesis.ListShards", lambda params, **_: sent.append(dict(params))
    )

    shards = list_shards(kinesis_client, stream, page_size=5)

    assert len({s.shard_id for s in shards}) == 12 and all(s.is_open for s in shards)
    follow_up = ["MaxResults", "NextToken"]
    assert [sorted(p) for p in sent] == [["MaxResults", "StreamName"], follow_up, follow_up]


def test_at_timestamp_cut_lands_on_the_first_record_of_the_later_batch_and_replays_are_exact(
    kinesis_client: Any,
) -> None:
    stream = _create_stream(kinesis_client, 1)
    shard = next(iter(_shard_ids(kinesis_client, stream)))
    store = memory_store(PIPELINE)
    start = _pause()
    first_batch = _put(kinesis_client, stream, shard, 3)
    middle = _pause()
    second_batch = _put(kinesis_client, stream, shard, 3)
    end = _pause()

    earlier = _plan(kinesis_client, store, stream, start, middle)
    later = _plan(kinesis_client, store, stream, middle, end)
    _put(kinesis_client, stream, shard, 2)  # new data after both intervals were planned
    earlier_replay = _plan(kinesis_client, store, stream, start, middle)
    later_replay = _plan(kinesis_client, store, stream, middle, end)

    (earlier_range,) = earlier.new_ranges
    (later_range,) = later.new_ranges
    assert earlier_range.start == Boundary(shard, start, BoundaryKind.AT, Position(first_batch[0]))
    assert earlier_range.end == Boundary(shard, middle, BoundaryKind.AT, Position(second_batch[0]))
    assert later_range.start == earlier_range.end  # one stored boundary, shared: no gap, no overlap
    assert later_range.end == Boundary(shard, end, BoundaryKind.PENDING)  # nothing at/after `end` yet
    assert earlier_replay.replayed_ranges == (earlier_range,) and not earlier_replay.new_ranges
    assert later_replay.replayed_ranges == (later_range,) and not later_replay.new_ranges


def test_split_and_merge_register_lineage_and_children_wait_for_both_merge_parents(kinesis_client: Any) -> None:
    stream = _create_stream(kinesis_client, 2)
    left, right = sorted(_shard_ids(kinesis_client, stream))
    store = memory_store(PIPELINE)
    start = _pause()
    _put(kinesis_client, stream, left, 2)
    _put(kinesis_client, stream, right, 2)
    cut = _pause()
    after_cut_left = _put(kinesis_client, stream, left, 2)
    _put(kinesis_client, stream, right, 1)

    left_info = _shard_ids(kinesis_client, stream)[left]
    split_key = (left_info.starting_hash_key + left_info.ending_hash_key) // 2
    kinesis_client.split_shard(StreamName=stream, ShardToSplit=left, NewStartingHashKey=str(split_key))
    wait_stream_active(kinesis_client, stream)
    low_child, high_child = sorted(set(_shard_ids(kinesis_client, stream)) - {left, right})
    _put(kinesis_client, stream, low_child, 1)
    _put(kinesis_client, stream, high_child, 1)
    kinesis_client.merge_shards(StreamName=stream, ShardToMerge=high_child, AdjacentShardToMerge=right)
    wait_stream_active(kinesis_client, stream)
    (merged,) = set(_shard_ids(kinesis_client, stream)) - {left, right, low_child, high_child}
    _put(kinesis_client, stream, merged, 2)
    end = _pause()

    shards = _shard_ids(kinesis_client, stream)
    assert shards[low_child].parent_ids == (left,) and shards[high_child].parent_ids == (left,)
    assert shards[merged].parent_ids == (high_child, right)
    assert {sid for sid, s in shards.items() if not s.is_open} == {left, right, high_child}

    # The first interval is planned after the reshard: the children did not exist during it.
    first = _plan(kinesis_client, store, stream, start, cut)
    assert {s.shard_id: s.decision for s in first.shards} == {
        left: ShardDecision.NEW, right: ShardDecision.NEW,
        low_child: ShardDecision.NOT_CREATED, high_child: ShardDecision.NOT_CREATED, merged: ShardDecision.NOT_CREATED,
    }  # fmt: skip
    assert first.shard(left).range.end == Boundary(left, cut, BoundaryKind.AT, Position(after_cut_left[0]))
    assert {c.shard_id: c.state for c in store.ledger.list_shard_checkpoints()} == {
        left: ShardState.CLOSED, right: ShardState.CLOSED, high_child: ShardState.CLOSED,
        low_child: ShardState.OPEN, merged: ShardState.OPEN,
    }  # fmt: skip

    # Strict order: the parents' first interval is not loaded yet.
    second = _plan(kinesis_client, store, stream, cut, end)
    assert second.waiting == {low_child: (left,), high_child: (left,), merged: (high_child, right)}
    assert second.shard(left).range.end.kind is BoundaryKind.SHARD_END
    assert second.shard(right).range.end.kind is BoundaryKind.SHARD_END

    relaxed = _plan(kinesis_client, memory_store(PIPELINE), stream, cut, end, relaxed_order=True)
    assert not relaxed.waiting and len(relaxed.ranges) == 5

    _commit(store, first)
    second_again = _plan(kinesis_client, store, stream, cut, end)
    assert not second_again.waiting
    order = [s.shard_id for s in second_again.shards]
    assert order.index(merged) > order.index(high_child) and order.index(high_child) > order.index(left)
    # A child's range of the interval it was born in starts at the cut its first interval stored:
    # the shard's start, so no record it took is left behind; the waiting plan already stored it.
    assert second_again.shard(merged).range.start == Boundary(merged, cut, BoundaryKind.SHARD_START)
    assert first.shard(merged).range.end == second_again.shard(merged).range.start
    assert second_again.shard(left).decision is ShardDecision.REPLAYED
    assert second_again.shard(merged).decision is ShardDecision.REPLAYED
