"""Intervals Airflow never ran: found in the pipeline's interval grid, loaded by a later run (I11).

Airflow skips intervals in ordinary operation: ``catchup=False`` after a pause or scheduler
downtime creates only the latest run, and a manual ``dags test`` run holds the logical date of the
next scheduled interval, which the scheduler then skips. Records of such an interval are in
Kinesis all the same, and every run that plans only its own interval leaves them behind.

A run therefore looks at the grid of intervals its pipeline has planned (``interval#`` items) below
its own start: between two planned intervals, and between the latest one and its own, the DAG's
timetable (:attr:`CatchUp.next_interval`) names the intervals that should be there. Those that no
DAG run covers (:attr:`CatchUp.with_own_runs`) are *skipped*: the run loads them before its own,
oldest first, each under its own interval's key, so a later backfill of one replays it exactly (I2)
instead of planning a new range. An interval whose run exists and is only late (catch-up with
several active runs, a retry, an out-of-order backfill) is left to that run. Intervals before the
grid's first one are not skipped: that is where the pipeline started.

What a run took on is stored once before it plans any of it (``settle_adopted``), so its retries
load the same intervals even though they are in the grid by then.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from airflow_provider_kinesis_doris.core.errors import IntervalsSkipped
from airflow_provider_kinesis_doris.core.model import describe_interval, iso_utc
from airflow_provider_kinesis_doris.core.stores.range_book import RangeBook

log = logging.getLogger(__name__)

Interval = tuple[int, int]
"""``(start_ms, end_ms)`` of a data interval, epoch ms, end exclusive."""

DEFAULT_MAX_SKIPPED_INTERVALS = 10
"""Skipped intervals one run loads before its own at most; the rest wait for the next run."""

GAPLESS_STEP = 50
"""Grid intervals a run reads past the gapless mark before it moves the mark: one Query page, and
one write per this many runs in the steady state."""


def _no_runs(intervals: Sequence[Interval]) -> set[Interval]:
    return set()


@dataclass(frozen=True)
class CatchUp:
    """How a run finds and treats the intervals of its pipeline that no DAG run covers.

    :param next_interval: the interval that follows ``(start_ms, end_ms)`` in the DAG's
        timetable, or None where the timetable defines none (manual-only schedules).
    :param with_own_runs: of the intervals given, those a DAG run exists for (queued, running,
        failed or late): its own run loads each, and this run must not take it over.
    :param max_intervals: skipped intervals loaded by one run at most, oldest first; the rest are
        reported and left to the next run.
    :param load: False: do not load skipped intervals; fail the run naming them instead.
    """

    next_interval: Callable[[int, int], Interval | None]
    with_own_runs: Callable[[Sequence[Interval]], set[Interval]] = field(default=_no_runs)
    max_intervals: int = DEFAULT_MAX_SKIPPED_INTERVALS
    load: bool = True


@dataclass(frozen=True)
class SkippedIntervals:
    """What a run found below its own interval."""

    adopted: tuple[Interval, ...] = ()
    """Loaded by this run, before its own interval, oldest first."""
    deferred: tuple[Interval, ...] = ()
    """Skipped as well, beyond :attr:`CatchUp.max_intervals`: the next run loads them."""
    left_to_own_runs: tuple[Interval, ...] = ()
    """Not planned yet, but a DAG run of theirs exists: left to it."""
    unplanned: tuple[Interval, ...] = ()
    """Of :attr:`adopted`, those no run has planned yet (a retry finds the others planned)."""
    loaded_before: tuple[Interval, ...] = ()
    """Taken on by this run and loaded by an earlier attempt of it: not loaded again."""

    def summary(self) -> dict[str, object]:
        """JSON-safe, for XCom and the log (ISO 8601 UTC); its size does not grow with the gap."""
        return {
            "recovered": [describe_interval(interval) for interval in sorted((*self.loaded_before, *self.adopted))],
            "left_for_next_run": _span(self.deferred),
            "left_to_own_runs": _span(self.left_to_own_runs),
        }


def _span(intervals: Sequence[Interval]) -> dict[str, object]:
    if not intervals:
        return {"count": 0}
    return {"count": len(intervals), "from": iso_utc(intervals[0][0]), "to": iso_utc(intervals[-1][1])}


def find_skipped(
    ranges: RangeBook, start_ms: int, end_ms: int, catch_up: CatchUp, *, sweeps: bool = False
) -> SkippedIntervals:
    """The intervals below ``[start_ms, end_ms)`` that the grid lacks, sorted by who loads them.

    A run's own attempt stores what it takes on first; its retries get the stored list back.

    :param sweeps: the pipeline starts at TRIM_HORIZON: its first interval is the floor's.

    :raises IntervalsSkipped: with ``catch_up.load`` False, when any interval is skipped; or when
        the timetable's next interval reaches back into the one before it.
    """
    grid = ranges.intervals_before(start_ms, with_floor=sweeps)
    missing, bridges = _missing(grid, start_ms, catch_up.next_interval)
    of_the_timetable = [interval for interval in missing if interval not in bridges]
    with_runs = catch_up.with_own_runs(of_the_timetable) if of_the_timetable else set()
    skipped = [interval for interval in missing if interval not in with_runs]
    if skipped and not catch_up.load:
        message = _not_loading_message(ranges.pipeline_id, skipped, bridges)
        raise IntervalsSkipped(message, intervals=tuple(skipped))
    if bridges:
        log.warning(
            "pipeline %s: the DAG's timetable leaves %s between intervals of the pipeline (the schedule changed, or "
            "its intervals leave spans between them): each is loaded as an interval of its own",
            ranges.pipeline_id, ", ".join(describe_interval(bridge) for bridge in sorted(bridges)),
        )  # fmt: skip
    # A retry gets its first attempt's list back, though those intervals are planned by now.
    to_load, loaded_before = ranges.settle_adopted(start_ms, skipped[: catch_up.max_intervals])
    adopted = tuple(to_load)
    deferred = tuple(interval for interval in skipped if interval not in adopted and interval not in loaded_before)
    _advance_gapless(ranges, grid, missing)
    found = SkippedIntervals(
        adopted, deferred, tuple(interval for interval in missing if interval in with_runs),
        tuple(interval for interval in adopted if interval in missing), tuple(loaded_before),
    )  # fmt: skip
    if missing or adopted or loaded_before:
        summary = found.summary()
        log.warning(
            "pipeline %s interval %s: %d interval(s) below it were never planned, %d of them without a DAG run "
            "of their own; this run loads (or an earlier attempt of it loaded) %s first; left to the next run: %s; left to their own DAG runs: %s",
            ranges.pipeline_id, describe_interval((start_ms, end_ms)), len(missing), len(skipped),
            summary["recovered"] or "none", summary["left_for_next_run"], summary["left_to_own_runs"],
        )  # fmt: skip
    return found


def _advance_gapless(ranges: RangeBook, grid: Sequence[Interval], missing: Sequence[Interval]) -> None:
    """Up to the last planned interval before the first one still unplanned (this run's adopted
    ones are planned only after this, the late runs' whenever they run): later runs read the
    grid from there."""
    before = [interval for interval in grid if not missing or interval[1] <= missing[0][0]]
    if len(before) > GAPLESS_STEP:
        ranges.advance_gapless(before[-1][0])


def _missing(
    grid: Sequence[Interval], start_ms: int, next_interval: Callable[[int, int], Interval | None]
) -> tuple[list[Interval], set[Interval]]:
    """The timetable's intervals in each gap of ``grid`` below ``start_ms``, oldest first, and the
    bridges among them: where the timetable's next interval does not start where the one before it
    ends (the schedule changed, or its intervals leave a span between them), the span up to that
    next interval, or up to the grid's next interval, is an interval of its own. No DAG run has it;
    it is loaded like any skipped interval, so no record falls between two schedules.

    :raises IntervalsSkipped: the timetable's next interval starts before the one before it ends
        (or is empty): no interval can be cut there without overlapping one.
    """
    missing: list[Interval] = []
    bridges: set[Interval] = set()
    for previous, following_start in zip(grid, [s for s, _ in grid[1:]] + [start_ms]):
        interval = previous
        while interval[1] < following_start:
            following = next_interval(*interval)
            if following is None or following[0] > interval[1] or following[1] > following_start:
                # No interval of the timetable starts here and ends by the grid's next one: the span
                # up to the timetable's next start, or up to the grid's next interval, is a bridge.
                next_start = following[0] if following is not None and following[0] > interval[1] else following_start
                bridge = (interval[1], min(next_start, following_start))
                missing.append(bridge)
                bridges.add(bridge)
                interval = bridge
                continue
            if not interval[1] == following[0] < following[1]:
                raise IntervalsSkipped(
                    f"No interval of the DAG's timetable fills {describe_interval((interval[1], following_start))}, "
                    "which lies between intervals this pipeline loaded, without overlapping one"
                    f" (the timetable's next one is {describe_interval(following)})"
                    + ": records that arrived then would never be loaded. Use a new pipeline_id for a schedule "
                    "whose intervals overlap the old one's, or load that span with a DAG whose schedule covers it.",
                    intervals=((interval[1], following_start),),
                )
            missing.append(following)
            interval = following
    return missing, bridges


def _not_loading_message(pipeline_id: str, skipped: Sequence[Interval], bridges: set[Interval]) -> str:
    # Backfill dates are logical dates, the intervals' starts, and both ends are included: the
    # last interval's end would also backfill the interval after it.
    start, last_start = iso_utc(skipped[0][0]), iso_utc(skipped[-1][0])
    return (
        f"Pipeline {pipeline_id}: {len(skipped)} interval(s) were never run by Airflow and are not loaded: "
        + ", ".join(describe_interval(interval) for interval in skipped[:10])
        + (" ..." if len(skipped) > 10 else "")
        + ". This operator has load_skipped_intervals=False, so it does not load them itself. Load them with a "
        f"backfill: on Airflow 3, `airflow backfill create --dag-id <dag_id> --from-date {start} --to-date {last_start}`; "
        f"on Airflow 2, `airflow dags backfill <dag_id> --start-date {start} --end-date {last_start}` (dates are "
        "interval starts, both included); then clear this run. "
        "Or set load_skipped_intervals=True to have the next run load them."
        + (f" {len(bridges)} of them lie between two schedules (the schedule changed), and no backfill has them: "
           "only a run with load_skipped_intervals=True loads those." if bridges else "")
    )
