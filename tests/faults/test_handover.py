"""A new pipeline_id takes over where another pipeline stops (``core.handover``), over the
in-memory fakes with the real planner, loader and commit: every record once across the switch,
the old pipeline refused past its end, the new one before its start, and each refusal naming
what to do."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from airflow_provider_kinesis_doris.core.catch_up import CatchUp, Interval
from airflow_provider_kinesis_doris.core.errors import ConfigurationError, HandoverPending
from airflow_provider_kinesis_doris.core.handover import take_over
from airflow_provider_kinesis_doris.core.load_job import LoadJob
from airflow_provider_kinesis_doris.core.mapping import RecordMapping
from airflow_provider_kinesis_doris.core.pipeline import IntervalResult, run_interval
from airflow_provider_kinesis_doris.core.report import RangeReport
from airflow_provider_kinesis_doris.core.settings import Credentials
from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
from airflow_provider_kinesis_doris.core.stores.memory import memory_store
from airflow_provider_kinesis_doris.testing.builders import load_in_thread, pipeline_config
from airflow_provider_kinesis_doris.testing.fake_kinesis import FakeKinesis
from airflow_provider_kinesis_doris.testing.memory_doris import MemoryDoris

STREAM = "events"
T0 = 1_700_000_040_000
IV = 60_000


class World:
    """Two shards, three records each in each of ``intervals`` one-minute intervals; pipeline
    ``old`` and pipeline ``new`` in one checkpoint table, loading one Doris table."""

    def __init__(self, intervals: int = 8) -> None:
        self.kinesis = FakeKinesis(now_ms=T0)
        self.kinesis.create_stream(StreamName=STREAM, ShardCount=2)
        self.produced: list[int] = []
        for k in range(intervals):
            for j in range(3):
                self.kinesis.now_ms = T0 + k * IV + 1_000 + j
                event = k * 10 + j
                self.kinesis.put_record(StreamName=STREAM, Data=json.dumps({"event_id": event}).encode(), PartitionKey=str(j))
                self.produced.append(event)
        self.kinesis.now_ms = T0 + intervals * IV + 100
        self.old = memory_store("old", clock=lambda: self.kinesis.now_ms)
        self.new = self.old.of_pipeline("new")
        self.doris = MemoryDoris()
        self.config = pipeline_config(stream_name=STREAM, mapping=RecordMapping(metadata_columns=("_kinesis_sequence",)))

    def run(self, store: CheckpointStore, start_ms: int, end_ms: int, *, step_ms: int = IV, **changes: Any) -> IntervalResult:
        config = replace(self.config, pipeline_id=store.pipeline_id, **changes)

        def runner(job: LoadJob, credentials: Credentials) -> list[RangeReport]:
            return load_in_thread(self.kinesis, store, self.doris)(job, credentials)

        catch_up = CatchUp(next_interval=lambda start, end: _next_on_grid(end, step_ms))
        return run_interval(
            config, start_ms, end_ms, kinesis=self.kinesis, store=store, credentials=Credentials(), runner=runner,
            clock=lambda: self.kinesis.now_ms, catch_up=catch_up, doris=self.doris,
        )  # fmt: skip

    def old_run(self, k: int) -> IntervalResult:
        return self.run(self.old, T0 + k * IV, T0 + (k + 1) * IV)

    def visible(self) -> Counter[int]:
        return self.doris.tally("t", "event_id")


def _next_on_grid(end_ms: int, step_ms: int) -> Interval:
    """The interval of a timetable of ``step_ms`` steps (aligned at ``T0``) that follows ``end_ms``."""
    start = T0 + -(-(end_ms - T0) // step_ms) * step_ms
    return start, start + step_ms


def test_the_new_pipeline_starts_where_the_old_one_stops_and_the_old_one_stops_there() -> None:
    world = World()
    for k in range(3):
        world.old_run(k)

    # The new DAG's first run is of interval 4: interval 3, between the two, is its catch-up's.
    first = world.run(world.new, T0 + 4 * IV, T0 + 5 * IV, take_over_from="old")

    assert [interval for interval in first.skipped.adopted] == [(T0 + 3 * IV, T0 + 4 * IV)]
    assert world.visible() == Counter(world.produced[: 5 * 3])
    with pytest.raises(ConfigurationError, match=r"Pipeline old was handed over to pipeline new at .*Pause or remove this DAG"):
        world.old_run(3)
    with pytest.raises(ConfigurationError, match=r"took over from pipeline old at .* lies before that.*start_date"):
        world.run(world.new, T0 + 2 * IV, T0 + 3 * IV)
    world.old_run(1)  # a late rerun of the old DAG replays, loading nothing new
    world.run(world.new, T0 + 5 * IV, T0 + 6 * IV)  # the setting is recorded: later runs need not repeat it
    assert world.visible() == Counter(world.produced[: 6 * 3])


def test_a_new_schedule_that_starts_later_loads_the_span_between_as_a_bridge() -> None:
    world = World()
    for k in range(3):
        world.old_run(k)

    # Two-minute intervals from T0: the first after 3 minutes starts at 4; [3, 4) lies between.
    world.run(world.new, T0 + 6 * IV, T0 + 8 * IV, step_ms=2 * IV, take_over_from="old")

    assert world.visible() == Counter(world.produced)
    assert world.new.ranges.handovers()[0].end_ms == T0 + 3 * IV  # type: ignore[union-attr]


def test_an_old_plan_that_registered_before_the_claim_is_the_old_pipelines() -> None:
    """The race the claim is ordered for: the old pipeline registers interval 3, then the new one
    claims and fixes the end, then the old plan reads the claim. The end lies after interval 3, so
    the old run loads it and the new pipeline starts after it: once each."""
    world = World()
    for k in range(3):
        world.old_run(k)
    register = world.old.ranges.register_interval

    def register_then_take_over(start_ms: int, end_ms: int, **kwargs: Any) -> Any:
        registered = register(start_ms, end_ms, **kwargs)
        if start_ms == T0 + 3 * IV:
            world.run(world.new, T0 + 4 * IV, T0 + 5 * IV, take_over_from="old")
        return registered

    world.old.ranges.register_interval = register_then_take_over  # type: ignore[method-assign]
    world.old_run(3)

    assert world.new.ranges.handovers()[0].end_ms == T0 + 4 * IV  # type: ignore[union-attr]
    assert world.visible() == Counter(world.produced[: 5 * 3])


def test_an_old_plan_while_the_end_is_being_fixed_waits_and_its_retry_loads() -> None:
    world = World()
    world.old_run(0)
    world.old.ranges.claim_handover("new")  # the new pipeline's run died right after its claim

    with pytest.raises(HandoverPending, match="waits until it has fixed where this pipeline stops"):
        world.old_run(1)
    world.run(world.new, T0 + 3 * IV, T0 + 4 * IV, take_over_from="old")  # its retry

    # Interval 1 was registered before its plan read the claim: it is the old pipeline's.
    assert world.new.ranges.handovers()[0].end_ms == T0 + 2 * IV  # type: ignore[union-attr]
    world.old_run(1)
    with pytest.raises(ConfigurationError, match="handed over"):
        world.old_run(2)
    assert world.visible() == Counter(world.produced[: 4 * 3])


def test_a_handover_killed_after_fixing_the_end_keeps_that_end_on_its_retry() -> None:
    """The first attempt claimed the old pipeline and fixed its end, then died before copying the
    cuts. The old pipeline meanwhile registered a later interval (refused: it lies past the end).
    The retry must not move the end past it: that interval's records are the new pipeline's."""
    world = World()
    for k in range(2):
        world.old_run(k)
    world.old.ranges.claim_handover("new")
    world.old.ranges.fix_handover_end("new", T0 + IV, T0 + 2 * IV)
    with pytest.raises(ConfigurationError, match="handed over"):
        world.old_run(2)

    handover = take_over(world.new, "old", "INTERVAL")

    assert (handover.last_start_ms, handover.end_ms) == (T0 + IV, T0 + 2 * IV)  # type: ignore[union-attr]
    assert take_over(world.new, None, "INTERVAL") == handover, "recorded: later runs need not name it"
    world.run(world.new, T0 + 3 * IV, T0 + 4 * IV)
    assert world.visible() == Counter(world.produced[: 4 * 3])


def test_a_gap_the_old_pipeline_left_is_named_and_the_handover_goes_on_once_it_is_backfilled() -> None:
    world = World()
    world.run(world.old, T0, T0 + IV)
    # A run without catch-up (an old version of the operator) leaves interval 1 unplanned.
    run_interval(
        replace(world.config, pipeline_id="old"), T0 + 2 * IV, T0 + 3 * IV, kinesis=world.kinesis, store=world.old,
        credentials=Credentials(), runner=lambda job, c: load_in_thread(world.kinesis, world.old, world.doris)(job, c),
        clock=lambda: world.kinesis.now_ms, doris=world.doris,
    )  # fmt: skip

    with pytest.raises(ConfigurationError, match=r"\[2023-11-14T22:15:00Z, 2023-11-14T22:16:00Z\).*Backfill them on the old DAG"):
        world.run(world.new, T0 + 3 * IV, T0 + 4 * IV, take_over_from="old")
    world.old_run(1)  # the backfill: before the old pipeline's end, still its own
    world.run(world.new, T0 + 3 * IV, T0 + 4 * IV, take_over_from="old")

    assert world.visible() == Counter(world.produced[: 4 * 3])


@pytest.mark.parametrize(
    ("setup", "changes", "message"),
    [
        ("none", {"take_over_from": "new"}, "names this pipeline itself"),
        ("none", {"take_over_from": "old", "initial_position": "TRIM_HORIZON"}, "Set initial_position to INTERVAL"),
        ("none", {"take_over_from": "nobody"}, "has planned no interval in this checkpoint table"),
        ("new planned", {"take_over_from": "old"}, "only a new pipeline_id can take over"),
        ("another took over", {"take_over_from": "old"}, "'other' took over from it already"),
        ("new took over", {"take_over_from": "nobody"}, "a pipeline starts once"),
    ],
)
def test_a_handover_that_cannot_be_exact_is_refused_naming_the_fix(setup: str, changes: dict[str, Any], message: str) -> None:
    world = World()
    world.old_run(0)
    if setup == "new planned":
        world.run(world.new, T0 + IV, T0 + 2 * IV)
    elif setup == "another took over":
        world.run(world.old.of_pipeline("other"), T0 + 2 * IV, T0 + 3 * IV, take_over_from="old")
    elif setup == "new took over":
        world.run(world.new, T0 + 2 * IV, T0 + 3 * IV, take_over_from="old")
    loaded = world.visible()

    with pytest.raises(ConfigurationError, match=message):
        world.run(world.new, T0 + 5 * IV, T0 + 6 * IV, **changes)
    assert world.visible() == loaded, "refused before anything was planned or loaded"
