"""Planning one interval: per shard, find or create the range ``[boundary(start), boundary(end))``.

Steps (``docs/design.md``, "The model"): list shards; reconcile them with the store (register new shards with
their parents, mark closed ones CLOSED); then, parents before children, decide for each listed
shard. The decision depends only on the interval and on facts that never change once stored
(boundaries, the pipeline's floor), never on which runs happened to come first (I10):

- every shard alive in the interval gets its range ``[boundary(start), boundary(end))``, stored
  once under the interval's start (``NEW``, or ``REPLAYED`` when stored; I2). A shard created
  after the interval gets an empty range, cut without a probe (``NOT_CREATED``), so the shard's
  ranges still tile it without a hole;
- ``ENDED``: a stored boundary at or before the interval's start is the shard's end: the closed
  shard has no record there, and no range is needed;
- ``WAITING``: the range is stored like any other but not loaded in this run, because a parent is
  not loaded up to it (I5). The run then fails naming the parents (I9), and its retry loads it;
- ``COVERED``: a TRIM_HORIZON pipeline's interval before its floor: its records are in the floor
  range, which sweeps every shard from its start up to the floor interval's end, and that range is
  what the run loads;
- ``EMPTY``: the cuts at the interval's start and end are the same cut (a quiet shard): no record
  arrived in it, and no range is stored. Nothing moves the shard's mark over it: the commit of the
  shard's next range crosses it (its start is that same cut), and a replay decides the same from
  the same stored cuts;
- ``PRUNED``: the interval lies in the shard's pruned history (``core.prune``): it was loaded, and
  its range is gone with its records' retention. Nothing is planned. Any other interval starting
  before the pipeline's prune horizon is planned only from a stored range; without one it is
  refused (:class:`PrunedHistory`).

Ranges live in "instant space": a range references the boundary items at two instants, and two
ranges tile a shard when one ends at the instant where the other starts (I1). A range is created
with a conditional put under the key of its interval start: two planners of the same span agree
on the first one stored, and a stored range that overlaps the interval otherwise is refused
loudly (the pipeline's intervals changed). Planning never moves a high-water mark forward; a
backfill before a shard's earliest range pulls it back (``rewind_high_water_mark``).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from airflow_provider_kinesis_doris.core import handover
from airflow_provider_kinesis_doris.core.concurrency import DEFAULT_DRIVER_CONCURRENCY, map_bounded
from airflow_provider_kinesis_doris.core.kinesis.boundaries import resolve_boundary
from airflow_provider_kinesis_doris.core.plan_cuts import CutFinder, CutRequest, new_range_cut_requests
from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
from airflow_provider_kinesis_doris.core.stores.items import Floor, ShardCheckpoint, wall_clock_ms
from airflow_provider_kinesis_doris.core.retry import retry_on_conflict
from airflow_provider_kinesis_doris.core.errors import ConfigurationError, PrunedHistory
from airflow_provider_kinesis_doris.core.settings import PipelineConfig
from airflow_provider_kinesis_doris.core.model import (
    describe_instant,
    describe_interval,
    Boundary,
    BoundaryKind,
    RangeState,
    SHARD_START_INSTANT_MS,
    ShardInfo,
    ShardRange,
    ShardState,
)
from airflow_provider_kinesis_doris.core.kinesis.topology import (
    ParentProgress,
    blocking_parents,
    list_shards,
    parent_generations,
    parents_first,
    trim_horizon,
)

log = logging.getLogger(__name__)

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
    PRUNED = "PRUNED"
    EMPTY = "EMPTY"


@dataclass(frozen=True, slots=True)
class ShardPlan:
    """What the plan decided for one shard.

    ``lease_counter`` is the shard's counter when planned; ``checkpoint`` the shard as the planner
    last read or wrote it, which the commit's first attempt fences on."""

    shard_id: str
    parent_ids: tuple[str, ...]
    state: ShardState
    lease_counter: int
    decision: ShardDecision
    range: ShardRange | None = None
    waiting_for: tuple[str, ...] = ()
    checkpoint: ShardCheckpoint | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Plan:
    """The ranges of one interval, shards in parents-before-children order."""

    pipeline_id: str
    stream_name: str
    interval_start_ms: int
    interval_end_ms: int
    shards: tuple[ShardPlan, ...]
    trim_horizon_ms: int | None = None
    """Instants before it may have lost records to the stream's retention (when planned)."""

    @property
    def ranges(self) -> tuple[ShardRange, ...]:
        """Every range to read in this run (all but the waiting ones), parents before children."""
        return tuple(s.range for s in self.shards if s.range is not None and s.decision is not ShardDecision.WAITING)

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
        raise KeyError(f"Shard {shard_id} is not in the plan of interval {describe_interval((self.interval_start_ms, self.interval_end_ms))}")

    def _ranges_with(self, decision: ShardDecision) -> tuple[ShardRange, ...]:
        return tuple(s.range for s in self.shards if s.decision is decision and s.range is not None)


def plan_interval(
    kinesis: Any,
    store: CheckpointStore,
    config: PipelineConfig,
    interval_start_ms: int,
    interval_end_ms: int,
    *,
    clock: Callable[[], int] = wall_clock_ms,
    find_cuts: CutFinder | None = None,
) -> Plan:
    """Plan the sealed interval ``[interval_start_ms, interval_end_ms)`` and persist its ranges.

    :param kinesis: a boto3 Kinesis client.
    :param store: the pipeline's checkpoint store.
    :param config: the pipeline's settings; the planner follows its ``pipeline_id`` (the store's),
        ``stream_name``, ``initial_position`` (``TRIM_HORIZON``: a shard's first range sweeps from
        its start), ``relaxed_order`` (children do not wait for parents), ``chunk_max_rows`` and
        ``chunk_max_bytes`` (stored with each new range, so its loaders need not settle them; a
        replayed range keeps its own) and ``driver_concurrency`` (shards planned at the same time,
        a generation of the lineage at a time: parents are decided before their children).
    :param interval_start_ms: interval start, epoch ms (inclusive).
    :param interval_end_ms: interval end, epoch ms (exclusive); later than the start.
    :param clock: now, in epoch ms.
    :param find_cuts: finds the cuts of the interval's new ranges ahead, elsewhere (the loader
        processes: :mod:`~.plan_cuts`); without it the planner reads Kinesis for each itself.
    :return: the plan; every range in it is persisted.
    :raises ConfigurationError: bad interval, initial position or pipeline id.
    """
    _validate(store, config.pipeline_id, interval_start_ms, interval_end_ms)
    position = settle_initial_position(store, config.initial_position)
    floor = store.ranges.settle_floor(interval_start_ms, interval_end_ms) if position is InitialPosition.TRIM_HORIZON else None
    if floor is not None:
        _check_aligned(floor, interval_start_ms, interval_end_ms)
    prune_horizon_ms = store.ranges.prune_horizon()
    own_ranges = floor is None or interval_end_ms > floor.end_ms
    if own_ranges:
        # Before the prune horizon no new range is planned, and the grid there is pruned.
        registers = prune_horizon_ms is None or interval_start_ms >= prune_horizon_ms
        handover.check_after_start(store.ranges, interval_start_ms, interval_end_ms)
        overlapped = store.ranges.register_interval(interval_start_ms, interval_end_ms, register=registers)
        if overlapped is not None:
            raise _misaligned(None, interval_start_ms, interval_end_ms, overlapped)
        # After registering: a handover reads the grid after its claim (core.handover).
        handover.check_before_end(store.ranges, interval_start_ms, interval_end_ms)
    listed = list_shards(kinesis, config.stream_name)
    shard_ids = [info.shard_id for info in listed]
    checkpoints = reconcile_shards(store, listed, config.driver_concurrency)
    horizon_ms = trim_horizon(kinesis, config.stream_name, clock)
    # The cuts at the interval's start, stored by the previous interval's run, and the interval's
    # ranges of an earlier attempt: batched reads.
    starts = store.ledger.read_boundaries(shard_ids, interval_start_ms)
    stored = store.ranges.ranges_at(shard_ids, interval_start_ms) if own_ranges else {}
    requests = new_range_cut_requests(listed, starts, stored, interval_start_ms, interval_end_ms) if find_cuts and own_ranges else []
    found = find_cuts(requests, horizon_ms) if find_cuts and requests else {}
    planner = _IntervalPlanner(
        kinesis, store, config, interval_start_ms, interval_end_ms, listed,
        floor=floor, trim_horizon_ms=horizon_ms, prune_horizon_ms=prune_horizon_ms, stored=stored,
        checkpoints=checkpoints, clock=clock, uncut=set(shard_ids) - set(starts), found=found,
    )  # fmt: skip
    planner.store_found_ahead(requests)
    for generation in parent_generations(listed):
        map_bounded(planner.plan_shard, generation, config.driver_concurrency)
    shard_plans = tuple(planner.decided[shard.shard_id] for shard in parents_first(listed))
    return Plan(config.pipeline_id, config.stream_name, interval_start_ms, interval_end_ms, shard_plans, horizon_ms)


def settle_initial_position(store: CheckpointStore, setting: str | InitialPosition) -> InitialPosition:
    """The pipeline's initial position, recorded with its first plan; a run's ``setting`` cannot
    move it, since a shard's first range decides where all its later ranges lie (I1). A
    TRIM_HORIZON pipeline stays one (its floor sweeps what a run set to INTERVAL would plan again);
    an INTERVAL pipeline set to TRIM_HORIZON would sweep over the ranges it loaded: refused.

    :raises ConfigurationError: ``setting`` is no initial position, or TRIM_HORIZON for a pipeline
        that started at INTERVAL.
    """
    try:
        wanted = InitialPosition(setting)
    except ValueError:
        raise ConfigurationError(
            f"initial_position must be one of {[p.value for p in InitialPosition]}, got {setting!r}"
        ) from None
    recorded = InitialPosition(store.ranges.settle_initial_position(wanted.value))
    if recorded is wanted:
        return recorded
    if recorded is InitialPosition.TRIM_HORIZON:
        log.warning(
            "pipeline %s started with initial_position TRIM_HORIZON (recorded with its first plan) and keeps it: "
            "initial_position %s applies to a new pipeline_id only",
            store.pipeline_id, wanted.value,
        )  # fmt: skip
        return recorded
    raise ConfigurationError(
        f"initial_position {wanted.value} applies to a new pipeline_id only: pipeline {store.pipeline_id!r} "
        f"started with initial_position {recorded.value} (recorded with its first plan) and has planned ranges "
        "from there; sweeping its shards from their start now would load those records again. Set "
        f"initial_position back to {recorded.value} for this pipeline; to load what the stream still keeps from "
        "before it, start a new pipeline_id with TRIM_HORIZON into another table."
    )


def _validate(store: CheckpointStore, pipeline_id: str, start_ms: int, end_ms: int) -> None:
    if store.pipeline_id != pipeline_id:
        raise ConfigurationError(
            f"Store is for pipeline {store.pipeline_id!r}, planning asked for {pipeline_id!r}"
        )
    if start_ms < 0 or end_ms <= start_ms:
        raise ConfigurationError(f"Interval {describe_interval((start_ms, end_ms))} is empty or negative; nothing to plan")


def _check_aligned(floor: Floor, start_ms: int, end_ms: int) -> None:
    """An interval either lies before the floor interval's end or after it: one that straddles
    its start or end would be loaded partly by the floor range and partly by its own."""
    if any(start_ms < edge < end_ms for edge in (floor.start_ms, floor.end_ms)) or (
        start_ms == floor.start_ms and end_ms != floor.end_ms
    ):
        raise ConfigurationError(
            f"Interval {describe_interval((start_ms, end_ms))} does not align with the pipeline's floor interval "
            f"{describe_interval((floor.start_ms, floor.end_ms))} (its TRIM_HORIZON sweep): the intervals of one pipeline "
            "must not partially overlap. Use a new pipeline_id after changing the schedule."
        )


def reconcile_shards(
    store: CheckpointStore, listed: Sequence[ShardInfo], concurrency: int = DEFAULT_DRIVER_CONCURRENCY
) -> dict[str, ShardCheckpoint]:
    """Register listed shards the store does not know (with their parents) and mark shards that
    ListShards reports closed as CLOSED.

    :param concurrency: shards registered or closed at the same time.
    :return: shard id → stored checkpoint, for every shard the store knows.
    """
    # A new pipeline is laid out for its stream as listed, before its first shard's item; one
    # laid out already keeps its count.
    store.items.layout.expect_shards(sum(1 for info in listed if info.is_open))
    known = {checkpoint.shard_id: checkpoint for checkpoint in store.ledger.list_shard_checkpoints()}

    def reconcile(info: ShardInfo) -> ShardCheckpoint:
        checkpoint = known.get(info.shard_id) or store.ledger.register_shard(info)
        return _close(store, info.shard_id) if _newly_closed(checkpoint, info) else checkpoint

    # Only shards that need a write go to the pool: a steady stream has none.
    changing = [info for info in listed if info.shard_id not in known or _newly_closed(known[info.shard_id], info)]
    known.update(zip([info.shard_id for info in changing], map_bounded(reconcile, changing, concurrency)))
    listed_ids = {info.shard_id for info in listed}
    for shard_id, checkpoint in known.items():
        if shard_id not in listed_ids and checkpoint.state is not ShardState.DRAINED:
            log.warning("shard %s (%s) left ListShards undrained: expired", shard_id, checkpoint.state.value)
    return known


def _newly_closed(checkpoint: ShardCheckpoint, info: ShardInfo) -> bool:
    return not info.is_open and checkpoint.state is ShardState.OPEN


def _close(store: CheckpointStore, shard_id: str) -> ShardCheckpoint:
    """Mark CLOSED; a concurrent update of another attribute is retried on the fresh counter."""
    return retry_on_conflict(lambda: store.ledger.mark_closed(shard_id), f"shard {shard_id}")


class _IntervalPlanner:
    """Decisions for the shards of one interval; remembers what it decided for parents."""

    def __init__(
        self,
        kinesis: Any,
        store: CheckpointStore,
        config: PipelineConfig,
        start_ms: int,
        end_ms: int,
        listed: Sequence[ShardInfo],
        *,
        floor: Floor | None,
        trim_horizon_ms: int,
        prune_horizon_ms: int | None,
        stored: dict[str, ShardRange],
        checkpoints: dict[str, ShardCheckpoint],
        clock: Callable[[], int],
        uncut: set[str],
        found: Mapping[CutRequest, Boundary],
    ) -> None:
        self.kinesis = kinesis
        self.store = store
        self.config = config
        self.start_ms = start_ms
        self.end_ms = end_ms
        self.listed_ids = frozenset(info.shard_id for info in listed)
        self.floor = floor
        self.trim_horizon_ms = trim_horizon_ms
        self.clock = clock
        self.prune_horizon_ms = prune_horizon_ms
        self.stored = stored
        """The interval's stored ranges, by shard, when it has its own (not the floor's)."""
        self.decided: dict[str, ShardPlan] = {}
        self.rewound: dict[str, ShardCheckpoint] = {}
        self.checkpoints = checkpoints
        """Each shard as this run's listing read it."""
        self.uncut = uncut
        """Shards with no cut stored at the interval's start when the run began: a new range's
        start there is resolved without reading first (put once all the same)."""
        self.found = found
        """Cuts found ahead (:mod:`~.plan_cuts`), by what was asked: taken for that shard, instant
        and earlier cut instead of a read of Kinesis."""
        self.quiet_ends: dict[Boundary, Boundary] = {}
        self.ranges_ahead: dict[ShardRange, ShardRange] = {}
        """Quiet end cuts and new ranges stored before the shards were planned
        (:meth:`store_found_ahead`): each one put → the one stored, taken where the planner would
        put that very one."""

    def store_found_ahead(self, requests: Sequence[CutRequest]) -> None:
        """Store what the cuts found ahead decide before the shards are planned, handed over at
        once (transactions of a hundred items) rather than a write a shard from the planner's
        threads: the end cut of each shard found quiet (the end is the start's cut: no record
        arrived), and the new range, with its end, of each other shard whose mark needs no rewind
        (the steady state; :meth:`_behind_mark`).

        Only where the planner would store that very item itself: an end read from a stored start
        that is a record's cut, in an interval after the prune horizon and outside the shard's
        pruned history. A shard with a record before the interval's end was created before that
        end, so the planner cuts it there as found; it takes a stored item only where it proposes
        that same one (:attr:`quiet_ends`, :attr:`ranges_ahead`), and otherwise follows the store
        as after any put it lost."""
        if self._before_prune_horizon(self.start_ms):
            return  # decided from the cuts stored when it was planned, or refused (I10)
        quiet: list[Boundary] = []
        ranges: list[ShardRange] = []
        for request in requests:
            start, end = request.earlier, self.found.get(request)
            if start is None or start.position is None or end is None:
                continue
            if _in_pruned_span(self.checkpoints[request.shard.shard_id], self.start_ms, self.end_ms):
                continue
            proposed = self._proposed_range(request.shard, self.start_ms, self.end_ms, start, end)
            if _holds_no_record(proposed):
                quiet.append(end)
            elif self._behind_mark(proposed):
                ranges.append(proposed)
        if quiet:
            self.quiet_ends = dict(zip(quiet, self.store.ledger.put_boundaries(quiet)))
        if ranges:
            self.ranges_ahead = dict(zip(ranges, self.store.ranges.create_ranges(ranges, with_end=True)))

    def plan_shard(self, shard: ShardInfo) -> ShardPlan:
        checkpoint = self.checkpoints[shard.shard_id]
        decision, shard_range = self._decide(shard, checkpoint)
        checkpoint = self.rewound.get(shard.shard_id, checkpoint)
        waiting_for = self._waiting_for(shard, shard_range)
        if waiting_for:
            decision = ShardDecision.WAITING
        shard_plan = ShardPlan(
            shard.shard_id, shard.parent_ids, checkpoint.state, checkpoint.lease_counter,
            decision, shard_range, waiting_for, checkpoint,
        )  # fmt: skip
        self.decided[shard.shard_id] = shard_plan
        log.info(
            "interval %s shard %s (%s): %s%s", describe_interval((self.start_ms, self.end_ms)), shard.shard_id,
            checkpoint.state.value, decision.value, _describe(shard_range, waiting_for),
        )  # fmt: skip
        return shard_plan

    def _decide(self, shard: ShardInfo, checkpoint: ShardCheckpoint) -> tuple[ShardDecision, ShardRange | None]:
        if self.floor is not None and self.end_ms <= self.floor.end_ms:
            # Before or at the floor: the records are in the floor range, which sweeps the shard.
            floor_start, floor_end = self.floor.start_ms, self.floor.end_ms
            if _in_pruned_span(checkpoint, floor_start, floor_end):
                return ShardDecision.PRUNED, None
            stored_floor = self._stored_range(shard.shard_id, floor_start, floor_end)
            self._check_not_pruned(shard.shard_id, floor_start, floor_end, stored_floor)
            floor_range = self._find_or_create(shard, floor_start, floor_end, SHARD_START_INSTANT_MS, stored_floor)
            covered = self.start_ms != self.floor.start_ms
            return (ShardDecision.COVERED if covered else floor_range[0]), floor_range[1]
        if _in_pruned_span(checkpoint, self.start_ms, self.end_ms):
            return ShardDecision.PRUNED, None
        # The interval fits the pipeline's grid (registered), so the shard's range of it, if any, is
        # the one under its start.
        stored = self.stored.get(shard.shard_id)
        if stored is not None and stored.interval_end_ms != self.end_ms:
            raise _misaligned(shard.shard_id, self.start_ms, self.end_ms, (stored.interval_start_ms, stored.interval_end_ms))
        if stored is None and self._before_prune_horizon(self.start_ms) and self._stored_cuts_meet(shard.shard_id):
            return ShardDecision.EMPTY, None
        self._check_not_pruned(shard.shard_id, self.start_ms, self.end_ms, stored)
        if stored is None and self._ended_before(shard, self.start_ms):
            return ShardDecision.ENDED, None
        decision, shard_range = self._find_or_create(shard, self.start_ms, self.end_ms, self.start_ms, stored)
        if decision is ShardDecision.NEW and self._created_after(shard, self.end_ms):
            decision = ShardDecision.NOT_CREATED
        return decision, shard_range

    def _stored_cuts_meet(self, shard_id: str) -> bool:
        """Whether the interval's two cuts are stored and are the same cut: it was planned EMPTY.
        A quiet interval older than the prune horizon has no range to replay, but its cuts outlive
        the ranges pruned before it, and decide it without reading Kinesis."""
        start = self.store.ledger.get_boundary(shard_id, self.start_ms)
        if start is None or start.position is None:
            return False
        end = self.store.ledger.get_boundary(shard_id, self.end_ms)
        return end is not None and start.same_cut(end)

    def _check_not_pruned(self, shard_id: str, start_ms: int, end_ms: int, stored: ShardRange | None) -> None:
        """A range not stored yet cannot be planned before the prune horizon: its records are past
        retention, and the cuts of the shard's parents that decide whether it existed then (and
        where its range would start) may be pruned (I10).

        :raises PrunedHistory: no range is stored and the interval starts before the horizon.
        """
        if stored is None and self._before_prune_horizon(start_ms):
            raise PrunedHistory(
                f"Interval {describe_interval((start_ms, end_ms))} of shard {shard_id} starts before the pipeline's "
                f"prune horizon {describe_instant(self.prune_horizon_ms)} and has no stored range: it is older than the stream's "
                "retention plus Doris's label window, its records are gone from Kinesis and the pipeline no "
                "longer tracks that time, so it cannot be planned."
            )

    def _before_prune_horizon(self, start_ms: int) -> bool:
        return self.prune_horizon_ms is not None and start_ms < self.prune_horizon_ms

    def _stored_range(self, shard_id: str, start_ms: int, end_ms: int) -> ShardRange | None:
        """The stored range of the floor interval ``[start_ms, end_ms)``, or None; refused when a
        stored range overlaps it without matching it. Stored ranges are disjoint, so the latest
        one starting before the end is the only one that can be either (one Query)."""
        latest = self.store.ranges.interval_before(shard_id, end_ms)
        if latest is None or (latest[0] != start_ms and latest[1] <= start_ms):
            return None
        if latest != (start_ms, end_ms):
            raise _misaligned(shard_id, start_ms, end_ms, latest)
        return self.store.ranges.get_range(shard_id, start_ms)

    def _find_or_create(
        self, shard: ShardInfo, interval_start_ms: int, interval_end_ms: int, first_ms: int, stored: ShardRange | None
    ) -> tuple[ShardDecision, ShardRange | None]:
        """``stored`` (the interval's stored range), or a new one over ``[first_ms, interval_end_ms)``;
        none when the new one would hold no record (``EMPTY``: nothing is stored)."""
        if stored is None:
            proposed = self._new_range(shard, interval_start_ms, interval_end_ms, first_ms)
            end_stored = _holds_no_record(proposed)
            if end_stored:
                # No range: the quiet interval's end cut is stored alone (later walks read it), and
                # the stored one decides.
                end = self.quiet_ends.get(proposed.end) or self.store.ledger.put_boundary(proposed.end)
                proposed = replace(proposed, end=end)
                if _holds_no_record(proposed):
                    return ShardDecision.EMPTY, None
            # Before and after the range is stored: a commit running meanwhile may have advanced the
            # mark from the earliest range it saw, past this one.
            self._rewind_past(proposed, fence=False)
            stored = self.ranges_ahead.get(proposed) or self.store.ranges.create_range(proposed, with_end=not end_stored)
            # A concurrent planner of the same interval may have stored it first: follow the store.
            decision = ShardDecision.NEW if stored == proposed else ShardDecision.REPLAYED
        else:
            decision = ShardDecision.REPLAYED
        if stored.interval_end_ms != interval_end_ms:
            # A concurrent planner stored the interval's range with another end.
            raise _misaligned(shard.shard_id, interval_start_ms, interval_end_ms, (stored.interval_start_ms, stored.interval_end_ms))
        self._rewind_past(stored, fence=True)
        return decision, stored

    def _rewind_past(self, shard_range: ShardRange, *, fence: bool) -> None:
        """Keep the high-water mark from claiming records of a range that is not loaded (a
        backfill before the shard's earliest range). A range cut at the shard's end, or before
        its birth, holds no record and moves nothing.

        Nor does a range at or after the mark this run listed (the steady state: no read). Since
        then a commit can only have moved the mark by loaded ranges, or across intervals that hold
        no record, and this range holds records and is not loaded; a pruning only across cuts that
        are the mark's, which end before this range's end cut; a rewind only back.

        :param fence: ``shard_range`` is stored: with no mark to pull back, the shard's counter is
            bumped all the same (``rewind_high_water_mark``), so a commit that read the shard
            before the range was stored cannot move the mark past it. A lost race is read again:
            the commit that won it may have done just that. The first attempt writes fenced on the
            shard as this run last read it (the listing, or the rewind before the range was
            stored) instead of reading it again; a stale one costs that conflict."""
        empty = shard_range.start.kind is BoundaryKind.SHARD_END or (
            shard_range.start.kind is BoundaryKind.SHARD_START and shard_range.end.kind is BoundaryKind.SHARD_START
        )
        listed = self.checkpoints[shard_range.shard_id]
        start_ms = shard_range.start.instant_ms
        if shard_range.state is RangeState.PLANNED and not empty and not self._behind_mark(shard_range):
            first = iter([self.rewound.get(shard_range.shard_id, listed)])
            shard = retry_on_conflict(
                lambda: self.store.marks.rewind_high_water_mark(
                    shard_range.shard_id, start_ms, fence=fence, known=next(first, None)
                ),
                f"shard {shard_range.shard_id}",
            )
            self.rewound[shard.shard_id] = shard

    def _behind_mark(self, shard_range: ShardRange) -> bool:
        """Whether the range lies at or after the shard's mark and pruning as this run listed
        them: planning it pulls nothing back (:meth:`_rewind_past`)."""
        listed = self.checkpoints[shard_range.shard_id]
        start_ms = shard_range.start.instant_ms
        return (
            listed.high_water_mark is not None
            and listed.high_water_mark.instant_ms <= start_ms
            and (listed.pruned_through_ms or 0) <= start_ms
        )

    def _ended_before(self, shard: ShardInfo, instant_ms: int) -> bool:
        """A stored cut before the instant is the shard's end: the closed shard has no record at
        or after it (cuts at later instants can only lie later)."""
        if shard.is_open:
            return False
        # Strictly before: a cut at the instant itself may have been stored by an attempt at this
        # very interval that died before storing its range, and must not change the decision.
        latest = self.store.ledger.boundary_at_or_before(shard.shard_id, instant_ms - 1)
        return latest is not None and latest.kind is BoundaryKind.SHARD_END

    def _new_range(self, shard: ShardInfo, interval_start_ms: int, interval_end_ms: int, first_ms: int) -> ShardRange:
        start = self._boundary(shard, first_ms, unstored=first_ms == self.start_ms and shard.shard_id in self.uncut)
        # A start whose record arrived at or after the end is the end's cut too: no probe. The end
        # of a new range is rarely stored yet (a killed attempt, or the next interval run first):
        # resolved without reading first, and put once with the range (or alone when the interval
        # is quiet) all the same.
        end = self._boundary(shard, interval_end_ms, earlier=start, unstored=True, put=False)
        return self._proposed_range(shard, interval_start_ms, interval_end_ms, start, end)

    def _proposed_range(
        self, shard: ShardInfo, interval_start_ms: int, interval_end_ms: int, start: Boundary, end: Boundary
    ) -> ShardRange:
        return ShardRange(
            pipeline_id=self.store.pipeline_id, stream_name=self.config.stream_name, shard_id=shard.shard_id,
            interval_start_ms=interval_start_ms, interval_end_ms=interval_end_ms, start=start, end=end,
            chunk_limits=self.config.chunk_limits,
        )  # fmt: skip

    def _boundary(
        self, shard: ShardInfo, instant_ms: int, earlier: Boundary | None = None, *, unstored: bool = False,
        put: bool = True,
    ) -> Boundary:
        created_after = instant_ms == SHARD_START_INSTANT_MS or self._created_after(shard, instant_ms)
        found = self.found.get(CutRequest(shard, instant_ms, earlier))
        return resolve_boundary(
            self.kinesis, self.store.ledger, self.config.stream_name, shard, instant_ms,
            created_after=created_after, earlier=earlier, unstored=unstored, put=put,
            trim_horizon_ms=self.trim_horizon_ms, clock=self.clock, found=found,
        )  # fmt: skip

    def _created_after(self, shard: ShardInfo, instant_ms: int) -> bool:
        """A child was created after ``instant_ms`` if a parent was created after the interval's
        end (and the instant is not later), or a parent's stored cut at that instant is not its
        end: the parent still took records at or after the instant, so it was still open then."""
        for parent in shard.parent_ids:
            parent_plan = self.decided.get(parent)
            if (
                instant_ms <= self.end_ms
                and parent_plan is not None
                and parent_plan.decision is ShardDecision.NOT_CREATED
            ):
                return True
            cut = self.store.ledger.get_boundary(parent, instant_ms)
            if cut is not None and cut.kind is not BoundaryKind.SHARD_END:
                return True
        return False

    def _waiting_for(self, shard: ShardInfo, shard_range: ShardRange | None) -> tuple[str, ...]:
        """Parents that must be loaded further before this range (none for a loaded range: a
        replay of it loads nothing new)."""
        if shard_range is None or shard_range.state is RangeState.LOADED:
            return ()
        progress = {p: self._progress(p) for p in shard.parent_ids if p in self.listed_ids}
        return blocking_parents(
            shard, shard_range.interval_start_ms, listed_ids=self.listed_ids, progress=progress, relaxed=self.config.relaxed_order
        )

    def _progress(self, parent_id: str) -> ParentProgress:
        checkpoint = self.store.ledger.get_shard(parent_id)
        assert checkpoint is not None, "listed shards are registered by reconcile_shards"
        loaded_end = self.store.marks.loaded_through(parent_id, checkpoint.high_water_mark)
        if loaded_end is None:
            earliest = self.store.ranges.earliest_range(parent_id)
            loaded_through_ms = earliest.start.instant_ms if earliest is not None else None
        else:
            loaded_through_ms = loaded_end.instant_ms
        parent_plan = self.decided.get(parent_id)
        planned = parent_plan.range if parent_plan is not None else None
        return ParentProgress(
            state=checkpoint.state,
            loaded_through_ms=loaded_through_ms,
            ended=loaded_end is not None and loaded_end.kind is BoundaryKind.SHARD_END,
            planned_from_ms=planned.start.instant_ms if planned is not None else None,
            waiting=parent_plan is not None and parent_plan.decision is ShardDecision.WAITING,
        )


def _holds_no_record(shard_range: ShardRange) -> bool:
    """A range between two cuts at the same record (a shard created after the interval keeps its
    stored NOT_CREATED range instead, cut at the shard's start)."""
    return shard_range.start.position is not None and shard_range.start.same_cut(shard_range.end)


def _in_pruned_span(checkpoint: ShardCheckpoint, start_ms: int, end_ms: int) -> bool:
    """Whether ``[start_ms, end_ms)`` lies in the shard's pruned history: it was loaded, nothing to
    plan. The checkpoint may predate a pruning that runs meanwhile; a range planned then is
    refused where its high-water mark is rewound, which reads the shard afresh."""
    since, through = checkpoint.pruned_from_ms, checkpoint.pruned_through_ms
    return since is not None and through is not None and since <= start_ms and end_ms <= through


def _misaligned(shard_id: str | None, start_ms: int, end_ms: int, stored: tuple[int, int]) -> ConfigurationError:
    """:param stored: the stored range's interval, ``(start_ms, end_ms)``."""
    of_shard = f" of shard {shard_id}" if shard_id is not None else ""
    return ConfigurationError(
        f"Interval {describe_interval((start_ms, end_ms))}{of_shard} overlaps the stored range of interval "
        f"{describe_interval(stored)} without matching it: the intervals of one "
        "pipeline must not partially overlap (was the schedule changed, or does another DAG use the same "
        f"pipeline_id?). Nothing was loaded{' for this shard' if shard_id is not None else ''}; use a new "
        "pipeline_id for a new schedule."
    )


def _describe(shard_range: ShardRange | None, waiting_for: tuple[str, ...]) -> str:
    if shard_range is None:
        return ""
    described = (
        f" [{shard_range.start.describe(position=False)}, {shard_range.end.describe(position=False)})"
    )
    return f"{described} on parents {list(waiting_for)}" if waiting_for else described
