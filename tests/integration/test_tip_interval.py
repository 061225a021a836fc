"""An interval whose every shard ends at the tip (records inside it, none after it yet: a quiet or
slow shard at seal time) on kinesis-mock, moto DynamoDB and the Doris stand-in: each shard's end is
planned PENDING and settled once by its reader, and the loaders read those ends in batches, not
one GetItem per shard."""

from __future__ import annotations

import pytest

from airflow_provider_kinesis_doris.core.model import BoundaryKind
from airflow_provider_kinesis_doris.core.stores.items import boundary_sk
from kinesis_doris_devstack.scenario import event, sealed_interval

pytestmark = pytest.mark.integration


def test_the_loaders_read_the_pending_ends_at_the_tip_in_batches(world, kinesis_client, dynamodb_reads) -> None:
    stream, store = world["stream"], world["store"]
    start, end, put = sealed_interval(kinesis_client, stream, [event(i) for i in range(10)])
    shards = [shard["ShardId"] for shard in kinesis_client.list_shards(StreamName=stream)["Shards"]]
    assert {entry["ShardId"] for entry in put} == set(shards), "every shard needs records inside the interval"

    result = world["run"](start, end)

    assert result.summary()["loaded"] == 10
    assert [row[0] for row in world["rows"]()] == list(range(10))
    ends = {shard: store.ledger.get_boundary(shard, end) for shard in shards}
    # Each end was at the tip: cut after the shard's last record by its reader.
    assert {cut.kind for cut in ends.values()} == {BoundaryKind.AFTER}, ends
    end_reads = {shard: dynamodb_reads[boundary_sk(shard, end)] for shard in shards}
    assert end_reads == dict.fromkeys(shards, 0), f"the end cuts were read one GetItem at a time: {end_reads}"
