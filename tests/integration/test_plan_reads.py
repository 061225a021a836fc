"""What planning a pipeline's first interval reads of each shard's item, on kinesis-mock and moto
DynamoDB: a shard without a high-water mark is fenced once its new range is stored, and that fenced
write follows the read made just before the range was stored instead of reading the shard again."""

from __future__ import annotations

import pytest

from airflow_provider_kinesis_doris.core.plan import ShardDecision, plan_interval
from airflow_provider_kinesis_doris.core.stores.items import shard_sk
from kinesis_doris_devstack.scenario import event, sealed_interval

pytestmark = pytest.mark.integration


def test_a_first_interval_reads_each_shard_once(world, kinesis_client, dynamodb_reads) -> None:
    stream, store = world["stream"], world["store"]
    start, end, _ = sealed_interval(kinesis_client, stream, [event(i) for i in range(10)])

    plan = plan_interval(kinesis_client, store, world["config"], start, end)

    reads = {shard.shard_id: dynamodb_reads[shard_sk(shard.shard_id)] for shard in plan.shards}
    assert {shard.decision for shard in plan.shards} == {ShardDecision.NEW}
    assert reads == dict.fromkeys(reads, 1), f"planning read a shard's item more than once: {reads}"
    # Registered at 0, fenced once: a commit that read a shard before its range was stored cannot
    # move its mark, and the plan holds the shard as fenced.
    stored = {shard.shard_id: store.ledger.get_shard(shard.shard_id) for shard in plan.shards}
    assert {shard.shard_id: shard.lease_counter for shard in plan.shards} == dict.fromkeys(stored, 1)
    assert {shard_id: shard.lease_counter for shard_id, shard in stored.items()} == dict.fromkeys(stored, 1)
