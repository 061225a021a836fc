"""Planning one interval: per shard, find or create the range ``[boundary(start), boundary(end))``.

Steps (DESIGN.md §4, §4b): list shards; reconcile them with the store (register new shards with
their parents, mark closed ones CLOSED); then, parents before children, decide for each listed
shard:

- ``REPLAYED``: a range of this interval is stored; it is returned unchanged (I2);
- ``ENDED``: an earlier range already ends at the shard's end (closed, and drained or about to be);
- ``NOT_CREATED``: the shard was created after the interval end (a parent still took records at
  or after the end, or the parent itself was not created yet);
- ``WAITING``: strict order and a parent is not drained up to the interval start (I5);
- ``COVERED``: stored ranges (e.g. an initial TRIM_HORIZON sweep) already hold the interval;
- ``NEW``: a range is created from the two boundaries, which are resolved (probe) and persisted
  first when not stored. Stored ranges clip a new range instead of overlapping it.

Ranges live in "instant space": a range references the boundary items at two instants, and two
ranges tile a shard when one ends at the instant where the other starts (I1). Planning never
moves a high-water mark.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_kinesis_doris.core.boundaries import DEFAULT_MAX_PAGES, resolve_boundary
from airflow_provider_kinesis_doris.core.checkpoints import (
    CheckpointStore,
    ShardCheckpoint,
    contiguous_loaded_end,
    wall_clock_ms,
)
from airflow_provider_kinesis_doris.core.errors import CheckpointConflict, ConfigurationError
from airflow_provider_kinesis_doris.core.model import (
    Boundary,
    BoundaryKind,
    ShardInfo,
    ShardRange,
    ShardState,
)
from airflow_provider_kinesis_doris.core.topology import (
    ParentProgress,
    blocking_parents,
    list_shards,
    parents_first,
)

log = logging.getLogger(__name__)

SHARD_START_INSTANT_MS = 0
"""The instant of a TRIM_HORIZON sweep's start boundary: every record arrives after it."""
_CLOSE_ATTEMPTS = 3


class InitialPosition(str, enum.Enum):
    INTERVAL = "INTERVAL"
    """A shard's first range starts at its interval's start."""
    TRIM_HORIZON = "TRIM_HORIZON"
    """A shard's first range starts at SHARD_START (reads everything still retained)."""


class ShardDecision(str, enum.Enum):
    NEW = "NEW"
    REPLAYED = "REPLAYED"
    WAITING = "WAITING"
    COVERED = "COVERED"
    ENDED = "ENDED"
    NOT_CREATED = "NOT_CREATED"


@dataclass(frozen=True, slots=True)
class ShardPlan:
    """What the plan decided for one shard.

    ``lease_counter`` is the shard's counter when planned: the commit fences on it."""

    shard_id: str
    parent_ids: tuple[str, ...]
    state: ShardState
    lease_counter: int
    decision: ShardDecision
    range: ShardRange | None = None
    waiting_for: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Plan:
    """The ranges of one interval, shards in parents-before-children order."""

    pipeline_id: str
    stream_name: str
    interval_start_ms: int
    interval_end_ms: int
    shards: tuple[ShardPlan, ...]

    @property
    def ranges(self) -> tuple[ShardRange, ...]:
        """Every range to read (new and replayed), parents before children."""
        return tuple(s.range for s in self.shards if s.range is not None)

    @property
    def new_ranges(self) -> tuple[ShardRange, ...]:
        return self._ranges_with(ShardDecision.NEW)

    @property
    def replayed_ranges(self) -> tuple[ShardRange, ...]:
        return self._ranges_with(ShardDecision.REPLAYED)

    @property
    def waiting(self) -> dict[str, tuple[str, ...]]:
        """Shard id → the parents it waits for."""
        return {s.shard_id: s.waiting_for for s in self.shards if s.decision is ShardDecision.WAITING}

    def shard(self, shard_id: str) -> ShardPlan:
        for shard_plan in self.shards:
            if shard_plan.shard_id == shard_id:
                return shard_plan
        raise KeyError(f"Shard {shard_id} is not in the plan of interval {self.interval_start_ms}")

    def _ranges_with(self, decision: ShardDecision) -> tuple[ShardRange, ...]:
        return tuple(s.range for s in self.shards if s.decision is decision and s.range is not None)


def plan_interval(
    kinesis: Any,
    store: CheckpointStore,
    pipeline_id: str,
    stream_name: str,
    interval_start_ms: int,
    interval_end_ms: int,
    *,
    initial_position: str | InitialPosition = InitialPosition.INTERVAL,
    relaxed_order: bool = False,
    max_probe_pages: int = DEFAULT_MAX_PAGES,
    clock: Callable[[], int] = wall_clock_ms,
) -> Plan:
    """Plan the sealed interval ``[interval_start_ms, interval_end_ms)`` and persist its ranges.

    :param kinesis: a boto3 Kinesis client.
    :param store: the pipeline's checkpoint store.
    :param pipeline_id: must be the store's pipeline.
    :param stream_name: the stream.
    :param interval_start_ms: interval start, epoch ms (inclusive).
    :param interval_end_ms: interval end, epoch ms (exclusive); later than the start.
    :param initial_position: ``INTERVAL`` or ``TRIM_HORIZON`` (a shard's first range sweeps from
        its start).
    :param relaxed_order: children do not wait for parents (order cannot matter in the table).
    :param max_probe_pages: GetRecords calls per boundary probe.
    :param clock: now, in epoch ms.
    :return: the plan; every range in it is persisted.
    :raises ConfigurationError: bad interval, initial position or pipeline id.
    """
    _validate(store, pipeline_id, interval_start_ms, interval_end_ms)
    try:
        position = InitialPosition(initial_position)
    except ValueError:
        raise ConfigurationError(
            f"initial_position must be one of {[p.value for p in InitialPosition]}, got {initial_position!r}"
        ) from None
    listed = list_shards(kinesis, stream_name)
    checkpoints = reconcile_shards(store, listed)
    planner = _IntervalPlanner(
        kinesis, store, stream_name, interval_start_ms, interval_end_ms, listed,
        sweep=position is InitialPosition.TRIM_HORIZON, relaxed=relaxed_order,
        max_probe_pages=max_probe_pages, clock=clock,
    )  # fmt: skip
    ordered = parents_first(listed)
    shard_plans = tuple(planner.plan_shard(shard, checkpoints[shard.shard_id]) for shard in ordered)
    return Plan(pipeline_id, stream_name, interval_start_ms, interval_end_ms, shard_plans)


def _validate(store: CheckpointStore, pipeline_id: str, start_ms: int, end_ms: int) -> None:
    if store.pipeline_id != pipeline_id:
        raise ConfigurationError(
            f"Store is for pipeline {store.pipeline_id!r}, planning asked for {pipeline_id!r}"
        )
    if start_ms < 0 or end_ms <= start_ms:
        raise ConfigurationError(f"Interval [{start_ms}, {end_ms}) is empty or negative; nothing to plan")


def reconcile_shards(store: CheckpointStore, listed: Sequence[ShardInfo]) -> dict[str, ShardCheckpoint]:
    """Register listed shards the store does not know (with their parents) and mark shards that
    ListShards reports closed as CLOSED.

    :return: shard id → stored checkpoint, for every shard the store knows.
    """
    known = {checkpoint.shard_id: checkpoint for checkpoint in store.list_shard_checkpoints()}
    for info in listed:
        checkpoint = known.get(info.shard_id) or store.register_shard(info)
        if not info.is_open and checkpoint.state is ShardState.OPEN:
            checkpoint = _close(store, info.shard_id)
        known[info.shard_id] = checkpoint
    listed_ids = {info.shard_id for info in listed}
    for shard_id, checkpoint in known.items():
        if shard_id not in listed_ids and checkpoint.state is not ShardState.DRAINED:
            log.warning("shard %s (%s) left ListShards undrained: expired", shard_id, checkpoint.state.value)
    return known


def _close(store: CheckpointStore, shard_id: str) -> ShardCheckpoint:
    """Mark CLOSED; a concurrent update of another attribute is retried on the fresh counter."""
    for attempt in range(_CLOSE_ATTEMPTS):
        try:
            return store.mark_closed(shard_id)
        except CheckpointConflict:
            if attempt == _CLOSE_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def clip_span(
    interval_start_ms: int, interval_end_ms: int, stored: Sequence[ShardRange], *, sweep: bool
) -> tuple[int, int] | None:
    """The instants ``[first, last)`` a new range of the interval may cover without overlapping
    stored ranges; None if they already cover it.

    :param stored: the shard's stored ranges (disjoint spans of instants).
    :param sweep: a shard with no range yet starts at SHARD_START (instant 0).
    :raises ConfigurationError: a stored range lies strictly inside the interval, which would leave
        two uncovered pieces (intervals of one pipeline must not partially overlap).
    """
    if not stored:
        return (SHARD_START_INSTANT_MS if sweep else interval_start_ms), interval_end_ms
    low, high = interval_start_ms, interval_end_ms
    for shard_range in sorted(stored, key=lambda r: r.start.instant_ms):
        first, last = shard_range.start.instant_ms, shard_range.end.instant_ms
        if last <= low or first >= high:
            continue
        if first <= low:
            low = last
        elif last < high:
            raise ConfigurationError(
                f"Interval [{interval_start_ms}, {interval_end_ms}) of shard {shard_range.shard_id} would be "
                f"split by the stored range [{first}, {last}) of interval {shard_range.interval_start_ms}"
            )
        else:
            high = first
    return (low, high) if low < high else None


def ends_before(stored: Sequence[ShardRange], instant_ms: int) -> bool:
    """True if a stored range ends at the shard's end at or before ``instant_ms``."""
    return any(r.end.kind is BoundaryKind.SHARD_END and r.end.instant_ms <= instant_ms for r in stored)


class _IntervalPlanner:
    """Decisions for the shards of one interval; remembers what it decided for parents."""

    def __init__(
        self,
        kinesis: Any,
        store: CheckpointStore,
        stream_name: str,
        start_ms: int,
        end_ms: int,
        listed: Sequence[ShardInfo],
        *,
        sweep: bool,
        relaxed: bool,
        max_probe_pages: int,
        clock: Callable[[], int],
    ) -> None:
        self.kinesis = kinesis
        self.store = store
        self.stream_name = stream_name
        self.start_ms = start_ms
        self.end_ms = end_ms
        self.listed_ids = frozenset(info.shard_id for info in listed)
        self.sweep = sweep
        self.relaxed = relaxed
        self.max_probe_pages = max_probe_pages
        self.clock = clock
        self.decided: dict[str, ShardPlan] = {}

    def plan_shard(self, shard: ShardInfo, checkpoint: ShardCheckpoint) -> ShardPlan:
        decision, shard_range, waiting_for = self._decide(shard)
        shard_plan = ShardPlan(
            shard.shard_id, shard.parent_ids, checkpoint.state, checkpoint.lease_counter,
            decision, shard_range, waiting_for,
        )  # fmt: skip
        self.decided[shard.shard_id] = shard_plan
        log.info(
            "interval [%s, %s) shard %s (%s): %s%s", self.start_ms, self.end_ms, shard.shard_id,
            checkpoint.state.value, decision.value, _describe(shard_range, waiting_for),
        )  # fmt: skip
        return shard_plan

    def _decide(self, shard: ShardInfo) -> tuple[ShardDecision, ShardRange | None, tuple[str, ...]]:
        stored = self.store.get_range(shard.shard_id, self.start_ms)
        if stored is not None:
            return ShardDecision.REPLAYED, stored, ()
        ranges = self.store.ranges_for_shard(shard.shard_id)
        if ends_before(ranges, self.start_ms):
            return ShardDecision.ENDED, None, ()
        if self._created_after(shard, self.end_ms):
            return ShardDecision.NOT_CREATED, None, ()
        progress = {p: self._progress(p) for p in shard.parent_ids if p in self.listed_ids}
        waiting_for = blocking_parents(
            shard, self.start_ms, listed_ids=self.listed_ids, progress=progress, relaxed=self.relaxed
        )
        if waiting_for:
            return ShardDecision.WAITING, None, waiting_for
        span = clip_span(self.start_ms, self.end_ms, ranges, sweep=self.sweep or self._born_in_scope(shard))
        if span is None:
            return ShardDecision.COVERED, None, ()
        proposed = self._new_range(shard, *span)
        stored = self.store.create_range(proposed)
        # A concurrent planner of the same interval may have stored it first: follow the store.
        return (ShardDecision.NEW if stored == proposed else ShardDecision.REPLAYED), stored, ()

    def _new_range(self, shard: ShardInfo, first_ms: int, last_ms: int) -> ShardRange:
        start = self._boundary(shard, first_ms)
        return ShardRange(
            pipeline_id=self.store.pipeline_id,
            stream_name=self.stream_name,
            shard_id=shard.shard_id,
            interval_start_ms=self.start_ms,
            interval_end_ms=self.end_ms,
            start=start,
            # A start whose record arrived at or after the end is the end's cut too: no probe.
            end=self._boundary(shard, last_ms, earlier=start),
        )

    def _boundary(self, shard: ShardInfo, instant_ms: int, earlier: Boundary | None = None) -> Boundary:
        created_after = instant_ms == SHARD_START_INSTANT_MS or self._created_after(shard, instant_ms)
        return resolve_boundary(
            self.kinesis, self.store, self.stream_name, shard, instant_ms,
            created_after=created_after, earlier=earlier, max_pages=self.max_probe_pages, clock=self.clock,
        )  # fmt: skip

    def _created_after(self, shard: ShardInfo, instant_ms: int) -> bool:
        """A child was created after ``instant_ms`` if a parent was (not created in this plan),
        or a parent's stored cut at that instant is not its end: the parent still took records
        at or after the instant, so it was still open then."""
        for parent in shard.parent_ids:
            parent_plan = self.decided.get(parent)
            if parent_plan is not None and parent_plan.decision is ShardDecision.NOT_CREATED:
                return True
            cut = self.store.get_boundary(parent, instant_ms)
            if cut is not None and cut.kind is not BoundaryKind.SHARD_END:
                return True
        return False

    def _born_in_scope(self, shard: ShardInfo) -> bool:
        """A child created while one of its parents was being loaded by this pipeline holds only
        records in scope: its first range sweeps from SHARD_START. Otherwise a child that waited
        for its parents through the interval it was created in would never get the records it took
        before the interval it is first planned in (I1)."""
        for parent in shard.parent_ids:
            ranges = list(self.store.ranges_for_shard(parent))
            planned = self.decided.get(parent)
            if planned is not None and planned.range is not None:
                ranges.append(planned.range)
            if ranges and min(ranges, key=lambda r: r.start.instant_ms).start.kind is not BoundaryKind.SHARD_END:
                return True
        return False

    def _progress(self, parent_id: str) -> ParentProgress:
        checkpoint = self.store.get_shard(parent_id)
        assert checkpoint is not None, "listed shards are registered by reconcile_shards"
        ranges = self.store.ranges_for_shard(parent_id)
        loaded_end = contiguous_loaded_end(ranges)
        floor = min((r.start.instant_ms for r in ranges), default=None)
        parent_plan = self.decided.get(parent_id)
        planned = parent_plan.range if parent_plan is not None else None
        return ParentProgress(
            state=checkpoint.state,
            loaded_through_ms=loaded_end.instant_ms if loaded_end is not None else floor,
            planned_from_ms=planned.start.instant_ms if planned is not None else None,
            waiting=parent_plan is not None and parent_plan.decision is ShardDecision.WAITING,
        )


def _describe(shard_range: ShardRange | None, waiting_for: tuple[str, ...]) -> str:
    if waiting_for:
        return f" on parents {list(waiting_for)}"
    if shard_range is None:
        return ""
    return (
        f" [{shard_range.start.kind.value}@{shard_range.start.instant_ms}, "
        f"{shard_range.end.kind.value}@{shard_range.end.instant_ms})"
    )
