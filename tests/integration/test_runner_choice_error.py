"""``SparkOrInProcess``'s estimate (``core.runner_choice``) against intervals of known size, on
kinesis-mock and moto DynamoDB: each slot of ``SLOT_MS`` gets a known number of records on each
shard (routed by explicit hash key), the pipeline loads the slots as intervals, and the estimate
of a run is compared with what that run loaded. The bounds asserted are the ones the module's
docstring documents."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import pytest
from aws_kinesis_agg.aggregator import RecordAggregator

from airflow_provider_kinesis_doris.core.load import run_here
from airflow_provider_kinesis_doris.core.pipeline import IntervalResult
from airflow_provider_kinesis_doris.core.runner_choice import (
    MAX_RETENTION_MS,
    SHARD_WRITE_LIMIT_RECORDS_PER_S,
    SPARK,
    AutoRunner,
    RunnerChoice,
)
from kinesis_doris_devstack.scenario import event, now_ms, sealed_end, wait_past

pytestmark = pytest.mark.integration

SLOT_MS = 1_500
"""One slot's length: its records are put at its start and must have arrived before its end."""
PUT_MARGIN_MS = 20
"""How long after a slot's start its records are put (arrival stamps are the emulator's clock)."""
FORCE_ESTIMATE = 1
"""A threshold under any write-limit bound, so the estimate reads the shards' counts."""


def _shard_keys(kinesis: Any, stream: str) -> list[str]:
    """An explicit hash key of each shard, in the listing's order."""
    return [shard["HashKeyRange"]["StartingHashKey"] for shard in kinesis.list_shards(StreamName=stream)["Shards"]]


def _plain(keys: Sequence[str], per_shard: Sequence[int], first_id: int) -> list[dict[str, Any]]:
    """``per_shard[i]`` JSON events for shard ``i``: one Kinesis record each."""
    ids = iter(range(first_id, first_id + sum(per_shard)))
    return [
        {"PartitionKey": "k", "ExplicitHashKey": key, "Data": json.dumps(event(next(ids))).encode()}
        for key, count in zip(keys, per_shard)
        for _ in range(count)
    ]


def _aggregated(keys: Sequence[str], per_shard: Sequence[int], first_id: int) -> list[dict[str, Any]]:
    """``per_shard[i]`` JSON events for shard ``i`` in one KPL aggregate (one Kinesis record)."""
    ids = iter(range(first_id, first_id + sum(per_shard)))
    records = []
    for key, count in zip(keys, per_shard):
        if count:
            aggregator = RecordAggregator()
            for _ in range(count):
                assert aggregator.add_user_record("k", json.dumps(event(next(ids))).encode(), key) is None
            partition_key, _, blob = aggregator.clear_and_get().get_contents()
            records.append({"PartitionKey": partition_key, "ExplicitHashKey": key, "Data": blob})
    return records


Build = Callable[[Sequence[str], Sequence[int], int], list[dict[str, Any]]]
"""Kinesis records of a slot from the shards' explicit hash keys, records per shard, first event id."""


def _write_slots(kinesis: Any, stream: str, slots: Sequence[Sequence[int]], *, build: Build = _plain) -> list[int]:
    """Put each slot's records (per shard) at the start of a slot of its own; the slots' bounds,
    waited past."""
    keys = _shard_keys(kinesis, stream)
    start = now_ms() + PUT_MARGIN_MS
    bounds = [start + index * SLOT_MS for index in range(len(slots) + 1)]
    for index, per_shard in enumerate(slots):
        records = build(keys, per_shard, index * 1_000)
        if not records:
            continue
        wait_past(bounds[index], margin_ms=PUT_MARGIN_MS)
        response = kinesis.put_records(StreamName=stream, Records=records)
        assert response["FailedRecordCount"] == 0
        arrived_by = sealed_end(kinesis, stream, response["Records"])
        assert arrived_by <= bounds[index + 1], f"slot {index}'s records arrived after its end: the machine is too slow"
    wait_past(bounds[-1])
    return bounds


def _load(world: dict[str, Any], bounds: Sequence[int], **options: Any) -> None:
    """Load each slot of ``bounds`` as an interval of its own (the shards' recent counts)."""
    for start, end in zip(bounds, bounds[1:]):
        world["run"](start, end, **options)


def _estimated_run(
    world: dict[str, Any], start: int, end: int, max_records: int = FORCE_ESTIMATE, **options: Any
) -> tuple[RunnerChoice, int]:
    """Run ``[start, end)`` with ``SparkOrInProcess``'s chooser (both sides load here): its
    choice, and the records the run loaded."""
    auto = AutoRunner(world["store"], spark=run_here, in_process=run_here, max_records=max_records)
    result: IntervalResult = world["run"](start, end, runner=auto, **options)
    assert auto.choice is not None
    return auto.choice, sum(report.records for report in result.reports)


def test_an_interval_longer_than_the_recent_ones_is_estimated_at_their_rate(world, kinesis_client) -> None:  # type: ignore[no-untyped-def]
    """The reported case: intervals of one slot, then one of four (a schedule made longer). The
    counts are per interval; read as they are, the estimate said 76 for a run of 304."""
    bounds = _write_slots(kinesis_client, world["stream"], [(57, 19)] * 7)
    _load(world, bounds[:4])

    choice, loaded = _estimated_run(world, bounds[3], bounds[7])

    assert loaded == 4 * 76
    assert (choice.estimated_records, choice.ranges_at_write_limit) == (loaded, 0)


def test_steady_traffic_on_a_busy_shard_beside_a_quiet_one_is_estimated_exactly(world, kinesis_client) -> None:  # type: ignore[no-untyped-def]
    bounds = _write_slots(kinesis_client, world["stream"], [(60, 0)] * 4)
    _load(world, bounds[:4])

    choice, loaded = _estimated_run(world, bounds[3], bounds[4])

    assert loaded == 60
    assert (choice.estimated_records, choice.ranges, choice.ranges_at_write_limit) == (60, 1, 0)


def test_quiet_intervals_between_do_not_lower_the_estimate(world, kinesis_client) -> None:  # type: ignore[no-untyped-def]
    """Quiet intervals store no range, so a count's spacing to the shard's next range spans them:
    its rate is understated, and a range as long as its interval counts it whole."""
    bounds = _write_slots(kinesis_client, world["stream"], [(30, 20), (0, 0), (0, 0), (30, 20)])
    _load(world, bounds[:4])

    choice, loaded = _estimated_run(world, bounds[3], bounds[4])

    assert choice.estimated_records == loaded == 50


def test_traffic_that_grew_is_underestimated_by_the_factor_it_grew(world, kinesis_client) -> None:  # type: ignore[no-untyped-def]
    """The inherent error: the estimate sees only the shards' past."""
    bounds = _write_slots(kinesis_client, world["stream"], [(20, 10)] * 3 + [(80, 40)])
    _load(world, bounds[:4])

    choice, loaded = _estimated_run(world, bounds[3], bounds[4])

    assert (choice.estimated_records, loaded) == (30, 4 * 30)


def test_an_interval_shorter_than_the_recent_ones_counts_their_whole_count(world, kinesis_client) -> None:  # type: ignore[no-untyped-def]
    """Intervals of two slots, then one of one: the estimate is high by the ratio of lengths."""
    bounds = _write_slots(kinesis_client, world["stream"], [(10, 15)] * 5)
    _load(world, bounds[0:5:2])

    choice, loaded = _estimated_run(world, bounds[4], bounds[5])

    assert (choice.estimated_records, loaded) == (2 * 25, 25)


def test_kpl_aggregates_count_as_their_user_records(world, kinesis_client) -> None:  # type: ignore[no-untyped-def]
    """The shards' counts are user records, so the estimate from them is too. A shard without
    counts is bounded in Kinesis records, each aggregate one of them."""
    bounds = _write_slots(kinesis_client, world["stream"], [(99, 50)] * 3, build=_aggregated)
    first, first_loaded = _estimated_run(world, bounds[0], bounds[1])
    _load(world, bounds[1:3])

    choice, loaded = _estimated_run(world, bounds[2], bounds[3])

    assert first_loaded == loaded == 149
    assert (first.estimated_records, first.ranges_at_write_limit) == (2 * SLOT_MS * SHARD_WRITE_LIMIT_RECORDS_PER_S // 1000, 2)
    assert (choice.estimated_records, choice.ranges_at_write_limit) == (149, 0)


def test_a_new_pipeline_counts_each_shard_at_the_write_limit(world, kinesis_client) -> None:  # type: ignore[no-untyped-def]
    """Without counts the bound holds (plain records): here 297 records against 3,000."""
    bounds = _write_slots(kinesis_client, world["stream"], [(200, 97)])

    choice, loaded = _estimated_run(world, bounds[0], bounds[1], max_records=10**6)

    assert loaded == 297
    assert (choice.estimated_records, choice.ranges_at_write_limit) == (2 * SLOT_MS, 2)


def test_a_trim_horizon_sweep_counts_all_the_stream_retains(world, kinesis_client) -> None:  # type: ignore[no-untyped-def]
    """A TRIM_HORIZON pipeline's first ranges read everything retained, whatever their interval:
    with a 38 ms floor interval the write limit over the interval said 76 for 297, in process."""
    bounds = _write_slots(kinesis_client, world["stream"], [(200, 97)])
    sweep = replace(world["config"], initial_position="TRIM_HORIZON")
    wait_past(bounds[1] + 38)

    choice, loaded = _estimated_run(world, bounds[1], bounds[1] + 38, max_records=10**6, cfg=sweep)

    assert loaded == 297
    assert (choice.estimated_records, choice.runner) == (2 * MAX_RETENTION_MS * SHARD_WRITE_LIMIT_RECORDS_PER_S // 1000, SPARK)


def test_an_interval_without_records_asks_for_no_estimate(world, kinesis_client) -> None:  # type: ignore[no-untyped-def]
    """The driver finds the ranges empty before loading: no runner is called, so nothing is
    estimated (and no Spark starts)."""
    bounds = _write_slots(kinesis_client, world["stream"], [(0, 0)])
    auto = AutoRunner(world["store"], spark=run_here, in_process=run_here, max_records=FORCE_ESTIMATE)

    result = world["run"](bounds[0], bounds[1], runner=auto)

    assert auto.choice is None
    assert sum(report.records for report in result.reports) == 0
