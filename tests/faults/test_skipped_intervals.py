"""Intervals Airflow never runs are loaded by a later run (I11), over the in-memory fakes with the
real planner, loader and commit. The first test is the reproduction of
``shared/repro/replay-contract-3/repro_skipped_interval_gap.py``: before ``core.catch_up`` the
3 records of interval 1 were never loaded and every run was green."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest

from airflow_provider_kinesis_doris.testing.builders import load_in_thread, pipeline_config
from airflow_provider_kinesis_doris.core.catch_up import GAPLESS_STEP, CatchUp, Interval
from airflow_provider_kinesis_doris.core.errors import DataTrimmed, IntervalsSkipped
from airflow_provider_kinesis_doris.core.report import RangeReport, xcom_summary
from airflow_provider_kinesis_doris.core.load_job import LoadJob
from airflow_provider_kinesis_doris.core.settings import Credentials
from airflow_provider_kinesis_doris.core.mapping import RecordMapping
from airflow_provider_kinesis_doris.core.pipeline import IntervalResult, run_interval
from airflow_provider_kinesis_doris.core.stores.memory import memory_store
from airflow_provider_kinesis_doris.testing.fake_kinesis import FakeKinesis
from airflow_provider_kinesis_doris.testing.faults import InjectedCrash
from airflow_provider_kinesis_doris.testing.memory_doris import MemoryDoris

STREAM = "events"
T0 = 1_700_000_040_000
IV = 60_000


class World:
    """One shard, three records in each of ``intervals`` intervals, and what a run needs."""

    def __init__(self, intervals: int = 4, retention_hours: int | None = None, **config: Any) -> None:
        self.kinesis = FakeKinesis(now_ms=T0, retention_hours=retention_hours)
        self.kinesis.create_stream(StreamName=STREAM, ShardCount=1)
        self.produced: list[int] = []
        for k in range(intervals):
            for j in range(3):
                self.kinesis.now_ms = T0 + k * IV + 1_000 + j
                self.kinesis.put_record(StreamName=STREAM, Data=json.dumps({"event_id": k * 10 + j}).encode(), PartitionKey="k")
                self.produced.append(k * 10 + j)
        self.kinesis.now_ms = T0 + intervals * IV + 100
        self.store = memory_store("p", clock=lambda: self.kinesis.now_ms)
        self.doris = MemoryDoris()
        self.config = pipeline_config(
            stream_name=STREAM, mapping=RecordMapping(metadata_columns=("_kinesis_sequence",)), **config
        )
        self.runs: set[Interval] = set()
        """Intervals a DAG run exists for (the scheduler created it), whether it ran or not."""

    def runner(self, job: LoadJob, credentials: Credentials) -> list[RangeReport]:
        return load_in_thread(self.kinesis, self.store, self.doris)(job, credentials)

    def catch_up(self, **changes: Any) -> CatchUp:
        return CatchUp(next_interval=lambda start, end: (end, end + IV), with_own_runs=self.with_runs, **changes)

    def with_runs(self, intervals: Sequence[Interval]) -> set[Interval]:
        return {interval for interval in intervals if interval in self.runs}

    def run(self, k: int, **changes: Any) -> IntervalResult:
        interval = (T0 + k * IV, T0 + (k + 1) * IV)
        self.runs.add(interval)
        return run_interval(
            self.config, *interval, kinesis=self.kinesis, store=self.store, credentials=Credentials(),
            runner=self.runner, clock=lambda: self.kinesis.now_ms, catch_up=self.catch_up(**changes),
            doris=self.doris,
        )  # fmt: skip

    def visible(self) -> Counter[int]:
        return self.doris.tally("t", "event_id")


def test_an_interval_no_dag_run_covers_is_loaded_by_the_next_run() -> None:
    world = World()

    for k in (0, 2, 3):  # the scheduler never runs interval 1 (catchup=False after a pause)
        result = world.run(k)
        if k == 2:
            summary = xcom_summary(result)["skipped_intervals"]
            described = "[2023-11-14T22:15:00Z, 2023-11-14T22:16:00Z) (1700000100000, 1700000160000)"
            assert [entry["interval"] for entry in summary["loaded"]] == [described]
            assert summary["recovered"] == [described]
            assert summary["left_for_next_run"] == {"count": 0}
            assert summary["loaded"][0]["loaded"] == 3

    assert world.visible() == Counter(world.produced)


def test_a_later_backfill_of_the_recovered_interval_replays_it() -> None:
    world = World()
    world.run(0)
    world.run(2)

    backfill = world.run(1)

    assert {shard.decision.value for shard in backfill.plan.shards} == {"REPLAYED"}
    assert backfill.summary()["loaded"] == 0
    assert world.visible() == Counter(world.produced[:9])


def test_an_interval_whose_run_exists_is_left_to_it() -> None:
    world = World()
    world.run(0)
    world.runs.add((T0 + IV, T0 + 2 * IV))  # queued behind max_active_runs, or failed and to be retried

    result = world.run(2)

    assert result.recovered == ()
    assert result.skipped.left_to_own_runs == ((T0 + IV, T0 + 2 * IV),)
    assert set(world.visible()) == {0, 1, 2, 20, 21, 22}
    world.run(1)  # the late run loads its own records
    assert world.visible() == Counter(world.produced[:9])


def test_at_most_max_intervals_per_run_oldest_first_the_rest_next_run() -> None:
    world = World(intervals=6)
    world.run(0)

    fifth = world.run(5, max_intervals=2)

    assert [start for start, _ in fifth.skipped.adopted] == [T0 + IV, T0 + 2 * IV]
    assert [start for start, _ in fifth.skipped.deferred] == [T0 + 3 * IV, T0 + 4 * IV]
    world.kinesis.now_ms += IV
    world.run(6, max_intervals=2)
    assert world.visible() == Counter(world.produced)


def test_a_backlog_left_for_later_runs_fails_once_its_oldest_is_half_the_retention_old() -> None:
    """docs/design.md (I11) says a run beyond max_skipped_intervals fails; it left the rest to the
    next run and stayed green, so a schedule that skips more than runs take on grew a backlog that
    was green until retention deleted its records. Now the run loads what it takes on, commits, and
    fails once the oldest interval left is older than half the stream's retention."""
    world = World(intervals=6, retention_hours=24)
    world.run(0)
    world.kinesis.now_ms = T0 + 11 * 3_600_000  # the oldest skipped interval is 11 h old: not yet
    assert [start for start, _ in world.run(5, max_intervals=1).skipped.deferred] == [T0 + 2 * IV, T0 + 3 * IV, T0 + 4 * IV]

    world.kinesis.now_ms = T0 + 13 * 3_600_000
    with pytest.raises(IntervalsSkipped, match=r"2 interval\(s\) that no DAG run covered are left for later runs.*"
                                               r"older than 50% of the stream's retention \(24 h\).*max_skipped_intervals") as red:
        world.run(6, max_intervals=1)
    assert red.value.intervals == ((T0 + 3 * IV, T0 + 4 * IV), (T0 + 4 * IV, T0 + 5 * IV))
    assert set(world.visible()) == set(world.produced) - {30, 31, 32, 40, 41, 42}, "its own and the oldest skipped loaded"
    world.run(7, max_intervals=10)
    assert world.visible() == Counter(world.produced)


def test_a_retry_loads_what_its_first_attempt_took_on() -> None:
    """The first attempt registers the skipped interval, then dies before loading it: the retry
    no longer sees a gap in the grid, and loads it because the adoption was stored."""
    world = World()
    world.run(0)
    loads = world.runner
    world.runner = lambda job, credentials: (_ for _ in ()).throw(InjectedCrash("killed while loading"))  # type: ignore[method-assign]
    with pytest.raises(InjectedCrash):
        world.run(2)
    world.runner = loads  # type: ignore[method-assign]

    retry = world.run(2)

    assert retry.skipped.adopted == ((T0 + IV, T0 + 2 * IV),)
    assert world.visible() == Counter(world.produced[:9])


def test_opting_out_fails_naming_the_intervals_and_the_backfill_commands() -> None:
    world = World()
    world.run(0)

    with pytest.raises(IntervalsSkipped) as failed:
        world.run(2, load=False)

    message = str(failed.value)
    assert failed.value.intervals == ((T0 + IV, T0 + 2 * IV),)
    assert "[2023-11-14T22:15:00Z, 2023-11-14T22:16:00Z)" in message
    assert "airflow backfill create --dag-id <dag_id> --from-date 2023-11-14T22:15:00Z --to-date 2023-11-14T22:15:00Z" in message
    assert "airflow dags backfill <dag_id> --start-date 2023-11-14T22:15:00Z --end-date 2023-11-14T22:15:00Z" in message
    assert set(world.visible()) == {0, 1, 2}, "nothing of the failing run is loaded"


def test_a_changed_schedule_loads_the_span_between_the_two_schedules_once_as_an_interval_of_its_own() -> None:
    """The schedule changes from one interval to two (a cron of 1 minute to one of 5, aligned):
    the new timetable's interval after the last one loaded straddles the new run's own, so the
    span between them belongs to neither schedule. Before, the run failed IntervalsSkipped and the
    only way on was a hand-written DAG; now the span is loaded once by the run, reported, and a
    replay of the run (or a later run) does not load it again."""
    world = World()
    world.run(0)
    world.runs.add((T0 + 2 * IV, T0 + 3 * IV))
    catch_up = CatchUp(next_interval=lambda start, end: (end, end + 2 * IV))  # the schedule changed

    def own_run() -> IntervalResult:
        return run_interval(
            world.config, T0 + 2 * IV, T0 + 3 * IV, kinesis=world.kinesis, store=world.store, credentials=Credentials(),
            runner=world.runner, clock=lambda: world.kinesis.now_ms, catch_up=catch_up, doris=world.doris,
        )  # fmt: skip

    result = own_run()
    assert result.skipped.adopted == ((T0 + IV, T0 + 2 * IV),)
    assert xcom_summary(result)["skipped_intervals"]["recovered"] == [
        "[2023-11-14T22:15:00Z, 2023-11-14T22:16:00Z) (1700000100000, 1700000160000)"
    ]
    assert world.visible() == Counter(world.produced[:9])
    own_run()  # a retry of the run replays the span
    assert world.visible() == Counter(world.produced[:9])


def test_a_span_a_timetable_leaves_between_its_intervals_is_loaded_even_past_a_skipped_run() -> None:
    """Suspected in the fourth round: a timetable whose intervals leave a span uncovered (a cron
    trigger with a shorter ``interval=``) passed silently when the run right after the span was
    itself skipped: the next run took that interval on, green, and the span's records were never
    loaded. Now the span is an interval of its own, loaded once by that run."""
    world = World()
    world.run(0)

    def with_a_span_after_the_first(start: int, end: int) -> Interval:
        return (end + IV, end + 2 * IV) if end == T0 + IV else (end, end + IV)

    catch_up = CatchUp(next_interval=with_a_span_after_the_first)
    result = run_interval(
        world.config, T0 + 3 * IV, T0 + 4 * IV, kinesis=world.kinesis, store=world.store, credentials=Credentials(),
        runner=world.runner, clock=lambda: world.kinesis.now_ms, catch_up=catch_up, doris=world.doris,
    )  # fmt: skip
    assert result.skipped.adopted == ((T0 + IV, T0 + 2 * IV), (T0 + 2 * IV, T0 + 3 * IV))
    assert world.visible() == Counter(world.produced)


def test_a_timetable_that_goes_back_over_a_loaded_interval_fails_loudly() -> None:
    world = World()
    world.run(0)
    catch_up = CatchUp(next_interval=lambda start, end: (end - IV // 2, end + IV // 2))  # overlaps the interval before

    with pytest.raises(IntervalsSkipped, match=r"No interval of the DAG's timetable fills \[2023-11-14T22:15:00Z"):
        run_interval(
            world.config, T0 + 2 * IV, T0 + 3 * IV, kinesis=world.kinesis, store=world.store, credentials=Credentials(),
            runner=world.runner, clock=lambda: world.kinesis.now_ms, catch_up=catch_up, doris=world.doris,
        )  # fmt: skip
    assert set(world.visible()) == {0, 1, 2}


def test_a_skipped_interval_past_retention_fails_loudly() -> None:
    world = World(retention_hours=24)
    world.run(0)
    world.kinesis.now_ms = T0 + 24 * 3_600_000 + 2 * IV  # interval 1 is past the 24 h retention now
    del world.kinesis.shard(STREAM, "shardId-000000000000").records[:6]

    with pytest.raises(DataTrimmed, match=r"older than the stream's retention.*\[2023-11-14T22:15:00Z, 2023-11-14T22:16:00Z\)"):
        world.run(1440 + 1)

    assert set(world.visible()) == {0, 1, 2}


def test_an_interval_left_to_a_run_that_never_runs_fails_loudly_once_past_retention() -> None:
    """Suspected in the fourth round: an interval left to its own DAG run (a paused backfill's
    queued run) was never checked against the trim horizon; once pruning passed it, its records
    were lost without a DataTrimmed. Now a run fails loudly naming it once it is past retention."""
    world = World(retention_hours=24)
    world.run(0)
    world.runs.add((T0 + IV, T0 + 2 * IV))  # queued by a backfill that was paused and never runs
    assert world.run(2).skipped.left_to_own_runs == ((T0 + IV, T0 + 2 * IV),)
    world.kinesis.now_ms = T0 + 24 * 3_600_000 + 2 * IV  # interval 1 is past the 24 h retention now

    with pytest.raises(DataTrimmed, match=r"1 of them, from \[2023-11-14T22:15:00Z, 2023-11-14T22:16:00Z\).*"
                                          r"left to a DAG run of their own that has not loaded them"):
        world.run(1440 + 1)
    assert 10 not in world.visible()


def test_a_trim_horizon_pipeline_loads_an_interval_skipped_after_its_floor() -> None:
    world = World(initial_position="TRIM_HORIZON")
    world.run(1)  # the floor: sweeps interval 0 and 1
    world.run(3)  # interval 2 is never run

    assert world.visible() == Counter(world.produced)


def test_lag_is_measured_from_the_high_water_mark() -> None:
    """Without catch-up the mark stays in front of the interval nobody ran, and the lag says so
    although the last read ended at the tip; with it the mark reaches the run's interval end."""
    stalled, caught_up = World(), World()
    for world in (stalled, caught_up):
        world.run(0)
    shard = "shardId-000000000000"
    stalled_run = run_interval(
        stalled.config, T0 + 2 * IV, T0 + 3 * IV, kinesis=stalled.kinesis, store=stalled.store,
        credentials=Credentials(), runner=stalled.runner, clock=lambda: stalled.kinesis.now_ms, doris=stalled.doris,
    )  # fmt: skip

    now = stalled.kinesis.now_ms
    assert stalled_run.summary()["shards"][shard]["lag_ms"] == now - (T0 + IV)
    assert caught_up.run(2).summary()["shards"][shard]["lag_ms"] == now - (T0 + 3 * IV)


def test_a_run_reads_the_grid_from_the_gapless_mark_and_a_later_gap_is_still_found() -> None:
    """The grid grows by one interval per run; past GAPLESS_STEP intervals a run moves the mark,
    so later runs query a bounded part of it. A gap after the mark is found all the same, and
    one before an interval left to its late run holds the mark back."""
    world = World(intervals=GAPLESS_STEP + 8)
    for k in range(GAPLESS_STEP + 2):
        world.run(k)
    read = world.store.ranges.intervals_before(T0 + (GAPLESS_STEP + 2) * IV)
    assert len(read) < GAPLESS_STEP, "the mark moved"
    late = (T0 + (GAPLESS_STEP + 2) * IV, T0 + (GAPLESS_STEP + 3) * IV)
    world.runs.add(late)  # its run is queued: left to it

    world.run(GAPLESS_STEP + 4)  # GAPLESS_STEP + 3 is skipped
    assert world.visible() == Counter(e for e in world.produced if e // 10 not in (GAPLESS_STEP + 2, GAPLESS_STEP + 5,
                                                                                  GAPLESS_STEP + 6, GAPLESS_STEP + 7))
    world.run(GAPLESS_STEP + 2)
    world.run(GAPLESS_STEP + 7)
    assert world.visible() == Counter(world.produced)
