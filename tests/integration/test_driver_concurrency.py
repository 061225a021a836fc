"""Two runs of one interval planning, loading and committing at the same time, each with its own
pool of driver threads, over a stream with a split in the interval: on kinesis-mock, moto
DynamoDB and the Doris stand-in. Whatever the threads interleave, one range per shard is stored,
every record lands once, and the parent is drained."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from airflow_provider_kinesis_doris.core.errors import CheckpointConflict, ShardsWaiting
from airflow_provider_kinesis_doris.core.model import RangeState, ShardState
from airflow_provider_kinesis_doris.core.pipeline import IntervalResult
from kinesis_doris_devstack.scenario import event, now_ms, put_events, split, wait_past

pytestmark = pytest.mark.integration

RIVALS = 2
LOST_RACE = (CheckpointConflict, ShardsWaiting)
"""How a run may fail when its rival got there first; its retry finishes the interval."""


def _race(world: dict[str, Any], start: int, end: int) -> list[IntervalResult | BaseException]:
    barrier = threading.Barrier(RIVALS)
    outcomes: list[IntervalResult | BaseException] = [RuntimeError("did not run")] * RIVALS

    def rival(index: int) -> None:
        barrier.wait()
        try:
            outcomes[index] = world["run"](start, end, replace(world["config"], driver_concurrency=4))
        except BaseException as error:  # noqa: BLE001 - the test judges every outcome below
            outcomes[index] = error

    threads = [threading.Thread(target=rival, args=(index,)) for index in range(RIVALS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return outcomes


def test_two_runs_of_one_interval_racing_with_driver_pools_store_one_range_per_shard_and_load_once(
    world: dict[str, Any], kinesis_client: Any
) -> None:
    stream, store = world["stream"], world["store"]
    start = now_ms()
    put_events(kinesis_client, stream, [event(i) for i in range(40)])
    lower, upper = split(kinesis_client, stream, "shardId-000000000000")
    put_events(kinesis_client, stream, [event(i) for i in range(40, 80)])
    end = now_ms()
    wait_past(end)

    outcomes = _race(world, start, end)

    failures = [o for o in outcomes if isinstance(o, BaseException)]
    assert all(isinstance(f, LOST_RACE) for f in failures), failures
    plans = [o.plan for o in outcomes if isinstance(o, IntervalResult)]
    for plan in plans[1:]:
        # Both runs planned the same ranges: whoever stored a range first, the other followed it.
        assert {s.shard_id: s.range for s in plan.shards} == {s.shard_id: s.range for s in plans[0].shards}
    if failures:
        world["run"](start, end, replace(world["config"], driver_concurrency=4))
    else:
        # Each chunk was sent under its label by one run; the other found it loaded.
        assert sum(o.summary()["loaded"] for o in outcomes if isinstance(o, IntervalResult)) == 80

    shard_ids = {"shardId-000000000000", "shardId-000000000001", lower, upper}
    for shard_id in shard_ids:
        ranges = store.ranges.ranges_for_shard(shard_id)
        assert [(r.interval_start_ms, r.state) for r in ranges] == [(start, RangeState.LOADED)], shard_id
    assert store.ledger.get_shard("shardId-000000000000").state is ShardState.DRAINED
    loaded = Counter(event_id for event_id, _, _ in world["rows"]())
    assert loaded == Counter(range(80)), "every record once"
