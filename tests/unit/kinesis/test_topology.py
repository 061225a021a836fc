"""Topology: complete ListShards listings, lineage order, readiness of children."""

from __future__ import annotations

import pytest

from airflow_provider_kinesis_doris.core.errors import KinesisDorisError
from airflow_provider_kinesis_doris.core.model import ShardInfo, ShardState
from airflow_provider_kinesis_doris.core.kinesis.topology import (
    ParentProgress,
    blocking_parents,
    children_of,
    list_shards,
    parent_generations,
    parents_first,
    shard_info,
)
from airflow_provider_kinesis_doris.testing.fake_kinesis import FakeKinesis

STREAM = "orders"


def _shard(shard_id: str, *parents: str, is_open: bool = True) -> ShardInfo:
    return ShardInfo(shard_id, tuple(parents), 0, 10, 0, is_open)


@pytest.fixture
def fake() -> FakeKinesis:
    fake = FakeKinesis()
    fake.create_stream(StreamName=STREAM, ShardCount=7)
    return fake


def test_list_shards_follows_next_token_alone_until_the_last_page(fake: FakeKinesis) -> None:
    shards = list_shards(fake, STREAM, page_size=3)

    assert [s.shard_id for s in shards] == [f"shardId-{i:012d}" for i in range(7)]
    assert fake.calls["list_shards"] == 3  # 3 + 3 + 1


def test_the_fake_rejects_stream_name_with_next_token_like_aws(fake: FakeKinesis) -> None:
    token = fake.list_shards(StreamName=STREAM, MaxResults=2)["NextToken"]

    with pytest.raises(Exception, match="NextToken and StreamName cannot be provided together"):
        fake.list_shards(StreamName=STREAM, NextToken=token)


def test_list_shards_restarts_when_the_token_expired(fake: FakeKinesis) -> None:
    fake.expire_next_tokens = 1

    shards = list_shards(fake, STREAM, page_size=4)

    assert len(shards) == 7
    assert fake.calls["list_shards"] == 2 + 2  # failed follow-up after page 1, then a full listing


def test_list_shards_gives_up_when_tokens_keep_expiring(fake: FakeKinesis) -> None:
    fake.expire_next_tokens = 10

    with pytest.raises(KinesisDorisError, match=f"stream {STREAM}: NextToken expired 2 times"):
        list_shards(fake, STREAM, page_size=4, max_restarts=1)


def test_list_shards_rejects_a_page_size_above_the_service_limit(fake: FakeKinesis) -> None:
    with pytest.raises(ValueError, match="1..1000, got 1001"):
        list_shards(fake, STREAM, page_size=1001)


def test_split_and_merge_lineage_and_closed_state(fake: FakeKinesis) -> None:
    fake.split_shard(StreamName=STREAM, ShardToSplit="shardId-000000000000", NewStartingHashKey="1000")
    fake.merge_shards(
        StreamName=STREAM, ShardToMerge="shardId-000000000002", AdjacentShardToMerge="shardId-000000000001"
    )

    by_id = {s.shard_id: s for s in list_shards(fake, STREAM)}

    assert by_id["shardId-000000000007"].parent_ids == ("shardId-000000000000",)
    assert by_id["shardId-000000000008"].parent_ids == ("shardId-000000000000",)
    assert by_id["shardId-000000000009"].parent_ids == ("shardId-000000000002", "shardId-000000000001")
    assert not by_id["shardId-000000000000"].is_open and by_id["shardId-000000000007"].is_open
    assert by_id["shardId-000000000007"].ending_hash_key == 999
    assert children_of(by_id.values())["shardId-000000000000"] == ("shardId-000000000007", "shardId-000000000008")


def test_shard_info_reads_open_and_closed_shards() -> None:
    raw = {
        "ShardId": "shardId-000000000003",
        "ParentShardId": "shardId-000000000001",
        "AdjacentParentShardId": "shardId-000000000002",
        "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": str(2**128 - 1)},
        "SequenceNumberRange": {"StartingSequenceNumber": "4960" + "0" * 52},
    }
    ending = {"EndingSequenceNumber": "9223372036854775807"}  # kinesis-mock's sentinel
    closed = {**raw, "SequenceNumberRange": {**raw["SequenceNumberRange"], **ending}}

    assert shard_info(raw).is_open and not shard_info(closed).is_open
    assert shard_info(raw).ending_hash_key == 2**128 - 1
    assert shard_info(raw).starting_sequence == int("4960" + "0" * 52)
    assert shard_info(raw).parent_ids == ("shardId-000000000001", "shardId-000000000002")


def test_parents_first_puts_every_child_after_its_parents() -> None:
    shards = [_shard("d", "b", "c"), _shard("c", "a"), _shard("b", "a"), _shard("a", "expired")]

    ordered = [s.shard_id for s in parents_first(shards)]

    assert ordered == ["a", "b", "c", "d"]


def test_generations_put_each_shard_after_every_listed_parent_and_independent_shards_together() -> None:
    # a → b, c (split); b + c → d (merge); e is unrelated; f's parent expired.
    shards = [_shard("d", "b", "c"), _shard("c", "a"), _shard("b", "a"), _shard("a"), _shard("e"), _shard("f", "gone")]

    generations = [[s.shard_id for s in generation] for generation in parent_generations(shards)]

    assert generations == [["a", "e", "f"], ["b", "c"], ["d"]]


def test_parents_first_rejects_a_cycle() -> None:
    with pytest.raises(KinesisDorisError, match="cycle"):
        parents_first([_shard("a", "b"), _shard("b", "a")])


@pytest.mark.parametrize(
    ("progress", "blocks"),
    [
        (ParentProgress(ShardState.DRAINED, None), False),
        (ParentProgress(ShardState.CLOSED, loaded_through_ms=2000), False),
        (ParentProgress(ShardState.CLOSED, loaded_through_ms=1000), True),
        # its loaded run reaches its end though the commit that got there did not mark it drained
        (ParentProgress(ShardState.CLOSED, loaded_through_ms=1000, ended=True), False),
        # its range in this plan continues its loaded run: read before the child, same run
        (ParentProgress(ShardState.CLOSED, loaded_through_ms=1000, planned_from_ms=1000), False),
        (ParentProgress(ShardState.CLOSED, loaded_through_ms=1000, planned_from_ms=1500), True),
        (ParentProgress(ShardState.CLOSED, loaded_through_ms=None), True),
        (ParentProgress(ShardState.CLOSED, loaded_through_ms=5000, waiting=True), True),
    ],
)
def test_a_child_waits_until_its_parent_is_drained_up_to_the_interval(progress: ParentProgress, blocks: bool) -> None:
    child = _shard("child", "parent")

    waiting = blocking_parents(child, 2000, listed_ids={"parent", "child"}, progress={"parent": progress})

    assert waiting == (("parent",) if blocks else ())


def test_expired_parents_do_not_block_and_relaxed_order_never_blocks() -> None:
    child = _shard("child", "expired", "parent")
    undrained = {"parent": ParentProgress(ShardState.CLOSED, loaded_through_ms=None)}

    assert blocking_parents(child, 2000, listed_ids={"parent"}, progress=undrained) == ("parent",)
    assert blocking_parents(child, 2000, listed_ids={"parent"}, progress=undrained, relaxed=True) == ()
    assert blocking_parents(child, 2000, listed_ids=set(), progress={}) == ()
