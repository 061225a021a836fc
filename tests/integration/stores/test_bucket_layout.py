"""A pipeline's items spread over its buckets on DynamoDB (moto, server mode): where they land,
Queries across shards, the refusal of a table in the old layout and its migration; and the count
a pipeline is laid out with, on both stores."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.core.model import Boundary, BoundaryKind, Position, ShardInfo, ShardRange
from airflow_provider_kinesis_doris.core.stores.buckets import MAX_BUCKETS, BucketLayout, bucket_count_for, partition_key
from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
from airflow_provider_kinesis_doris.core.stores.dynamodb import DynamoItems, dynamo_store
from airflow_provider_kinesis_doris.core.stores.items import boundary_sk, range_sk, shard_sk
from airflow_provider_kinesis_doris.core.stores.migrate import migrate_pipeline
from airflow_provider_kinesis_doris.core.stores.primitives import StoreItems

pytestmark = pytest.mark.integration

PIPELINE = "orders-to-doris"
SEQ = 49_600_000_000_000_000_000_000_000_000_000_000_000_000_000_000_000_000_000
SHARDS = [f"shardId-{n:012d}" for n in range(256)]
"""Enough for every one of the 128 buckets to hold a shard (crc32 spreads these ids 1 to 3 a bucket)."""
OLD_SHARDS = SHARDS[:70]
"""The open shards of the pipeline an old version wrote: the migration lays it out in 4 buckets."""


@pytest.fixture
def table_name(dynamodb_client: Any) -> str:
    name = f"buckets-{uuid.uuid4().hex[:8]}"
    DynamoItems(dynamodb_client, name, PIPELINE).create_table_if_missing()
    return name


def _scan(client: Any, table_name: str) -> list[dict[str, Any]]:
    paginator = client.get_paginator("scan")
    return [item for page in paginator.paginate(TableName=table_name, ConsistentRead=True) for item in page["Items"]]


def _register_and_plan(store: Any, shard_ids: list[str], planned: int | None = None) -> None:
    """Each shard registered, the first ``planned`` (all by default) with a range and its two
    cuts, and one interval of the grid."""
    for shard_id in shard_ids:
        store.ledger.register_shard(ShardInfo(shard_id, (), 0, 2**128 - 1, SEQ, True))
    assert store.ranges.register_interval(0, 1000) is None
    for offset, shard_id in enumerate(shard_ids[:planned]):
        start = store.ledger.put_boundary(Boundary(shard_id, 0, BoundaryKind.AT, Position(SEQ + offset)))
        end = store.ledger.put_boundary(Boundary(shard_id, 1000, BoundaryKind.AT, Position(SEQ + offset + 1)))
        store.ranges.create_range(ShardRange(PIPELINE, "orders", shard_id, 0, 1000, start, end))


def test_a_pipelines_items_land_in_its_buckets_one_shard_in_one(dynamodb_client: Any, table_name: str) -> None:
    store = dynamo_store(dynamodb_client, table_name, PIPELINE)
    _register_and_plan(store, SHARDS, planned=40)

    items = _scan(dynamodb_client, table_name)
    partitions = {item["pk"]["S"] for item in items}
    assert partitions == {partition_key(PIPELINE, bucket) for bucket in range(MAX_BUCKETS)}
    by_key = {item["sk"]["S"]: item["pk"]["S"] for item in items}
    for shard_id in SHARDS[:40]:
        assert by_key[shard_sk(shard_id)] == by_key[boundary_sk(shard_id, 1000)] == by_key[range_sk(shard_id, 0)]
    assert by_key["interval#000000000000000"] == by_key["layout"] == partition_key(PIPELINE, 0)
    shards_per_bucket = Counter(pk for sk, pk in by_key.items() if sk.startswith("shard#"))
    assert max(shards_per_bucket.values()) <= 3


def test_queries_across_shards_merge_the_buckets_in_key_order(dynamodb_client: Any, table_name: str) -> None:
    store = dynamo_store(dynamodb_client, table_name, PIPELINE)
    _register_and_plan(store, SHARDS[:100], planned=10)
    items = DynamoItems(dynamodb_client, table_name, PIPELINE, page_size=7)
    ordered = sorted(shard_sk(shard_id) for shard_id in SHARDS[:100])

    assert [item["sk"] for item in items.query("shard#")] == ordered
    assert [item["sk"] for item in items.query("shard#", descending=True, limit=9)] == ordered[::-1][:9]
    assert [item["sk"] for item in items.query("shard#", low=ordered[40], high=ordered[60], limit=5)] == ordered[40:45]
    assert [c.shard_id for c in store.ledger.list_shard_checkpoints()] == sorted(SHARDS[:100])
    one_shard = items.query(f"range#{SHARDS[3]}#")
    assert [item["sk"] for item in one_shard] == [range_sk(SHARDS[3], 0)]


def _old_layout_pipeline(dynamodb_client: Any, table_name: str, *, chunk_label: str | None = None) -> list[dict[str, Any]]:
    """The pipeline written as versions before the buckets wrote it: every item under pk = its id;
    with a chunk of ``chunk_label`` in the range of shard 7 if given."""
    store = dynamo_store(dynamodb_client, table_name, "scratch")
    _register_and_plan(store, OLD_SHARDS)
    if chunk_label is not None:
        assert store.chunks.put_chunk_intent(chunk_label, SHARDS[7], Position(SEQ + 7), Position(SEQ + 7), 0, attempt="a")
    old = []
    for item in _scan(dynamodb_client, table_name):
        dynamodb_client.delete_item(TableName=table_name, Key={"pk": item["pk"], "sk": item["sk"]})
        if item["sk"]["S"] != "layout":
            old.append({**item, "pk": {"S": PIPELINE}})
    for item in old:
        dynamodb_client.put_item(TableName=table_name, Item=item)
    return old


def test_a_pipeline_in_the_old_layout_is_refused_naming_the_command_that_migrates_it(
    dynamodb_client: Any, table_name: str
) -> None:
    _old_layout_pipeline(dynamodb_client, table_name)
    store = dynamo_store(dynamodb_client, table_name, PIPELINE)

    with pytest.raises(ConfigurationError) as refused:
        store.ledger.list_shard_checkpoints()
    message = str(refused.value)
    assert table_name in message and PIPELINE in message
    assert (
        f"python -m airflow_provider_kinesis_doris.core.stores.migrate --table {table_name} --pipeline-id {PIPELINE}"
        in message
    )
    with pytest.raises(ConfigurationError, match="old layout"):
        store.ranges.settle_floor(0, 1000)
    assert not any(item["pk"]["S"].startswith(f"{PIPELINE}#") for item in _scan(dynamodb_client, table_name))


def test_the_migration_moves_the_old_layout_so_the_store_reads_the_same_state(
    dynamodb_client: Any, table_name: str, dynamodb_endpoint: str
) -> None:
    old = _old_layout_pipeline(dynamodb_client, table_name)
    command = [
        sys.executable, "-m", "airflow_provider_kinesis_doris.core.stores.migrate",
        "--table", table_name, "--pipeline-id", PIPELINE, "--endpoint-url", dynamodb_endpoint, "--region", "us-east-1",
    ]  # fmt: skip
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=True)
    assert f"{len(old)} items copied to 4 buckets, {len(old)} old items deleted" in done.stdout

    items = _scan(dynamodb_client, table_name)
    assert {item["pk"]["S"] for item in items} == {partition_key(PIPELINE, bucket) for bucket in range(4)}
    assert {item["sk"]["S"] for item in items} == {item["sk"]["S"] for item in old} | {"layout"}
    store = dynamo_store(dynamodb_client, table_name, PIPELINE)
    assert [c.shard_id for c in store.ledger.list_shard_checkpoints()] == sorted(OLD_SHARDS)
    stored = store.ranges.get_range(SHARDS[7], 0)
    assert stored is not None and stored.end.position == Position(SEQ + 8)
    assert store.ranges.register_interval(0, 1000) is None

    again = migrate_pipeline(dynamodb_client, table_name, PIPELINE)
    assert (again.copied, again.deleted) == (0, 0)


def test_the_migration_puts_a_chunk_kept_from_before_chunks_were_keyed_by_range_under_its_range(
    dynamodb_client: Any, table_name: str
) -> None:
    """0.x kept chunks at ``chunk#<label>``; the migration moves them under their range, the one
    place the store looks for a range's chunks."""
    label = "kd:orders:0001"
    old = _old_layout_pipeline(dynamodb_client, table_name, chunk_label=label)
    chunk = next(item for item in old if item["sk"]["S"].startswith("chunk#"))
    dynamodb_client.delete_item(TableName=table_name, Key={"pk": chunk["pk"], "sk": chunk["sk"]})
    dynamodb_client.put_item(TableName=table_name, Item={**chunk, "sk": {"S": f"chunk#{label}"}})

    migrate_pipeline(dynamodb_client, table_name, PIPELINE)

    assert not any(item["sk"]["S"] == f"chunk#{label}" for item in _scan(dynamodb_client, table_name))
    chunks = dynamo_store(dynamodb_client, table_name, PIPELINE).chunks
    shard_id, start = chunk["shard_id"]["S"], int(chunk["interval_start_ms"]["N"])
    assert [c.label for c in chunks.chunks_for_range(shard_id, start)] == [label]
    assert chunks.record_chunk_outcome(label, "VISIBLE", shard_id=shard_id, interval_start_ms=start).state == "VISIBLE"
    stored = chunks.get_chunk(label, shard_id, start)
    assert stored is not None and stored.state == "VISIBLE"


def _copy(item: dict[str, Any]) -> dict[str, Any]:
    return {**item, "pk": {"S": partition_key(PIPELINE, BucketLayout(bucket_count_for(len(OLD_SHARDS))).bucket_of(item["sk"]["S"]))}}


def test_a_migration_killed_among_its_copies_is_finished_by_running_it_again(
    dynamodb_client: Any, table_name: str
) -> None:
    old = _old_layout_pipeline(dynamodb_client, table_name)
    for item in old[: len(old) // 2]:
        dynamodb_client.put_item(TableName=table_name, Item=_copy(item))

    migrated = migrate_pipeline(dynamodb_client, table_name, PIPELINE)

    assert (migrated.copied, migrated.deleted) == (len(old), len(old))
    assert [c.shard_id for c in dynamo_store(dynamodb_client, table_name, PIPELINE).ledger.list_shard_checkpoints()] == sorted(OLD_SHARDS)


def test_a_copy_unlike_its_original_stops_the_migration_before_the_layout_and_the_deletes(
    dynamodb_client: Any, table_name: str
) -> None:
    old = _old_layout_pipeline(dynamodb_client, table_name)
    dynamodb_client.put_item(TableName=table_name, Item={**_copy(old[0]), "state": {"S": "SOMETHING ELSE"}})

    with pytest.raises(RuntimeError, match=rf"1 copies of pipeline {PIPELINE}'s items .* differ from their originals \(first: '{old[0]['sk']['S']}'\)"):
        migrate_pipeline(dynamodb_client, table_name, PIPELINE)

    assert sum(1 for item in _scan(dynamodb_client, table_name) if item["pk"]["S"] == PIPELINE) == len(old)
    with pytest.raises(ConfigurationError, match="old layout"):
        dynamo_store(dynamodb_client, table_name, PIPELINE).ledger.list_shard_checkpoints()


def test_reads_of_a_pipeline_nothing_was_written_to_write_nothing(dynamodb_client: Any, table_name: str) -> None:
    """A read-only identity (the pipeline page) can read a pipeline before its first run: only the
    write of a shard's item records the layout (an item of no shard is in bucket 0 whatever it is)."""
    store = dynamo_store(dynamodb_client, table_name, PIPELINE)

    assert store.ledger.list_shard_checkpoints() == []
    assert store.ranges.get_floor() is None
    assert _scan(dynamodb_client, table_name) == []
    store.ranges.settle_floor(0, 1000)
    assert {item["sk"]["S"] for item in _scan(dynamodb_client, table_name)} == {"floor"}
    store.ledger.register_shard(ShardInfo(SHARDS[0], (), 0, 2**128 - 1, SEQ, True))
    assert {item["sk"]["S"] for item in _scan(dynamodb_client, table_name)} == {"floor", "layout", shard_sk(SHARDS[0])}


def test_a_pipeline_is_laid_out_for_its_open_shards_and_keeps_the_count_after_a_reshard(
    open_items: Callable[[], StoreItems],
) -> None:
    """Both stores: told 256 open shards before its first shard's item, a pipeline takes 8 buckets;
    a later run told 4,000 (a reshard) reads and writes it with the 8 it recorded, and its Queries
    across shards still merge every bucket's items in key order."""
    first = open_items()
    first.layout.expect_shards(256)
    _register_and_plan(CheckpointStore(first), SHARDS[:40], planned=5)

    later = open_items()
    later.layout.expect_shards(4000)
    _register_and_plan(CheckpointStore(later), SHARDS[40:60], planned=0)

    assert later.layout.to_read("shard#") == BucketLayout(8)
    assert [item["sk"] for item in later.query("shard#")] == sorted(shard_sk(shard_id) for shard_id in SHARDS[:60])
    assert [item["sk"] for item in later.query("shard#", descending=True, limit=3)] == sorted(
        shard_sk(shard_id) for shard_id in SHARDS[:60]
    )[::-1][:3]


def test_a_small_stream_keeps_its_pipeline_in_one_bucket(open_items: Callable[[], StoreItems]) -> None:
    items = open_items()
    items.layout.expect_shards(16)
    _register_and_plan(CheckpointStore(items), SHARDS[:16], planned=16)

    assert open_items().layout.to_read("range#") == BucketLayout(1)
    assert BucketLayout(1).buckets_of_query("range#") == [0]


@pytest.mark.parametrize(
    ("open_shards", "buckets"), [(0, 1), (1, 1), (32, 1), (33, 2), (256, 8), (1024, 32), (2049, 128), (4000, 128)]
)
def test_the_bucket_count_holds_about_32_open_shards_a_bucket(open_shards: int, buckets: int) -> None:
    assert bucket_count_for(open_shards) == buckets
