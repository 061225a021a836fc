"""An interval without new data after a loaded one costs no Kinesis read: its end boundary is the
start boundary's cut, carried forward by the record's stored arrival stamp (kinesis-mock, moto
DynamoDB, the Doris stand-in)."""

from __future__ import annotations

import json

import pytest

from airflow_provider_kinesis_doris.core.stores.dynamodb import dynamo_store
from airflow_provider_kinesis_doris.core.settings import Credentials
from airflow_provider_kinesis_doris.core.model import Boundary, BoundaryKind, Position
from airflow_provider_kinesis_doris.core.pipeline import run_interval
from airflow_provider_kinesis_doris.core.plan import ShardDecision
from airflow_provider_kinesis_doris.testing.counting import CountingClient
from kinesis_doris_devstack.scenario import event, now_ms, put_events, sealed_end, wait_past
from tests.conftest import DORIS_PASSWORD

pytestmark = pytest.mark.integration

QUIET_MS = 50


def _no_runner(job, credentials):  # type: ignore[no-untyped-def]
    raise AssertionError(f"the runner was started for {len(job.ranges)} empty ranges")


def test_quiet_interval_after_a_loaded_one_reads_no_shard(world, kinesis_client) -> None:
    """[loaded) [quiet) [later): the quiet interval's end is carried forward from its start (the
    first later record, probed when the loaded interval was planned), so it is EMPTY: no range, no
    commit. The later interval still gets exactly the later records, and its commit carries every
    shard's mark across the quiet interval."""
    stream, store = world["stream"], world["store"]
    loaded_start = now_ms()
    wait_past(loaded_start)
    loaded = put_events(kinesis_client, stream, [event(i) for i in range(10)])
    quiet_start = sealed_end(kinesis_client, stream, loaded)
    quiet_end = quiet_start + QUIET_MS
    wait_past(quiet_end)
    shards = kinesis_client.list_shards(StreamName=stream)["Shards"]
    later_puts = [  # one later record in every shard
        kinesis_client.put_record(
            StreamName=stream, PartitionKey="later", Data=json.dumps(event(100 + number)).encode(),
            ExplicitHashKey=shard["HashKeyRange"]["StartingHashKey"],
        )  # fmt: skip
        for number, shard in enumerate(shards)
    ]
    later_end = sealed_end(kinesis_client, stream, later_puts)
    assert world["run"](loaded_start, quiet_start).summary()["loaded"] == 10

    counting = CountingClient(kinesis_client)
    quiet = run_interval(
        world["config"], quiet_start, quiet_end, kinesis=counting, store=store,
        credentials=Credentials(doris_password=DORIS_PASSWORD), runner=_no_runner,
    )  # fmt: skip

    reads = {name: counting.calls[name] for name in ("get_shard_iterator", "get_records")}
    assert reads == {"get_shard_iterator": 0, "get_records": 0}, f"the quiet interval read Kinesis: {reads}"
    assert quiet.summary()["records"] == 0 and quiet.commit is None
    assert {s.decision for s in quiet.plan.shards} == {ShardDecision.EMPTY} and quiet.plan.ranges == ()
    for shard in shards:
        start = store.ledger.get_boundary(shard["ShardId"], quiet_start)
        end = store.ledger.get_boundary(shard["ShardId"], quiet_end)
        assert start.kind is BoundaryKind.AT and start.arrival_ms >= quiet_end
        assert (end.kind, end.position, end.arrival_ms) == (start.kind, start.position, start.arrival_ms)
    later = world["run"](quiet_end, later_end)
    assert later.summary()["loaded"] == len(shards)
    assert {store.ledger.get_shard(shard["ShardId"]).high_water_mark.instant_ms for shard in shards} == {later_end}
    assert [row[0] for row in world["rows"]()] == [*range(10), *(100 + n for n in range(len(shards)))]


def test_boundary_items_keep_the_arrival_stamp_and_items_without_it_still_load(dynamodb_client) -> None:
    store = dynamo_store(dynamodb_client, "checkpoints_quiet_it", f"pipe-{now_ms()}")
    store.items.create_table_if_missing()
    at = Boundary("shard-a", 1_000, BoundaryKind.AT, Position(42), arrival_ms=1_500)
    store.ledger.put_boundary(at)
    # As items were written before the attribute existed:
    store.ledger.put_boundary(Boundary("shard-a", 2_000, BoundaryKind.AT, Position(43)))
    store.ledger.put_boundary(Boundary("shard-a", 3_000, BoundaryKind.PENDING))
    store.ledger.resolve_pending(Boundary("shard-a", 3_000, BoundaryKind.AT, Position(44), arrival_ms=3_100))

    assert store.ledger.get_boundary("shard-a", 1_000).arrival_ms == 1_500
    assert store.ledger.get_boundary("shard-a", 2_000).arrival_ms is None
    assert store.ledger.get_boundary("shard-a", 3_000).arrival_ms == 3_100
    # The stamp is a hint, not part of the cut: the boundary with and without it is the same.
    same_cut = Boundary("shard-a", 2_000, BoundaryKind.AT, Position(43), arrival_ms=1)
    assert store.ledger.get_boundary("shard-a", 2_000) == same_cut
