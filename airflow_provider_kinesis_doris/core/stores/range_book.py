"""The range book: each shard's planned ranges (their cuts, chunk limits and loaded state), the
floor, the interval grid, the intervals a run adopts and the prune horizon: what a plan fixes."""

from __future__ import annotations

import logging

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from airflow_provider_kinesis_doris.core.errors import CheckpointNotFound
from airflow_provider_kinesis_doris.core.model import Boundary, ChunkLimits, RangeState, ShardRange, describe_instant
from airflow_provider_kinesis_doris.core.stores.items import (
    ABSENT,
    ADOPTED_PREFIX,
    FLOOR_KEY,
    HANDED_OVER_KEY,
    INITIAL_POSITION_KEY,
    TAKEN_OVER_KEY,
    GAPLESS_KEY,
    INTERVAL_PREFIX,
    INTERVALS_KEY,
    PRUNE_KEY,
    RANGE_PREFIX,
    adopted_sk,
    Floor,
    Handover,
    interval_sk,
    range_sk,
)
from airflow_provider_kinesis_doris.core.stores.primitives import StoreItems
from airflow_provider_kinesis_doris.core.stores.shard_ledger import ShardLedger

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadedRange:
    """A range whose every chunk Doris reported visible, with what its load counted."""

    shard_id: str
    interval_start_ms: int
    counts: Mapping[str, int]


@dataclass(frozen=True)
class RangeSpan:
    """A stored range's interval, start cut and whether it is loaded, without its cuts read
    (what pruning weighs, :meth:`RangeBook.spans_through`)."""

    interval_start_ms: int
    interval_end_ms: int
    start_instant_ms: int
    loaded: bool


class RangeBook:
    """Ranges on the store's items: each planned once with its cuts, then marked loaded once.

    :param items: the pipeline's items.
    :param ledger: the shards' cuts, which every range references.
    """

    def __init__(self, items: StoreItems, ledger: ShardLedger) -> None:
        self._items = items
        self._ledger = ledger
        self._loaded_ranges: dict[str, Mapping[str, Any]] = {}
        """Range items seen LOADED, by sort key (their span and state never change again)."""
        self._planned_ranges: dict[str, Mapping[str, Any]] = {}
        """Range items seen PLANNED, by sort key: marking one LOADED needs no answer but whether it
        applied (a grouped write)."""
        self._grid_complete = False
        """The table's interval grid is known to hold every stored range's interval."""

    @property
    def pipeline_id(self) -> str:
        """The pipeline whose ranges these are (the steps that take the book alone name it)."""
        return self._items.pipeline_id

    # ranges ---------------------------------------------------------------------------------

    def get_range(self, shard_id: str, interval_start_ms: int) -> ShardRange | None:
        """The stored range of the interval starting at ``interval_start_ms``, or None."""
        known = self.loaded_range(shard_id, interval_start_ms)
        if known is not None:
            return known
        item = self._items.get(range_sk(shard_id, interval_start_ms))
        return self._with_boundaries(item) if item is not None else None

    def ranges_at(self, shard_ids: Sequence[str], interval_start_ms: int) -> dict[str, ShardRange]:
        """The shards' stored ranges of the interval starting at ``interval_start_ms``, by shard, in
        batches (BatchGetItem; their cuts are read as :meth:`get_range` reads them)."""
        items = self._items.get_many([range_sk(shard_id, interval_start_ms) for shard_id in shard_ids])
        return {item["shard_id"]: self._with_boundaries(item) for item in items.values()}

    def loaded_range(self, shard_id: str, interval_start_ms: int) -> ShardRange | None:
        """The range, if this store has seen it LOADED (no read: a loaded range's span and state
        never change again, and its cuts are read through :meth:`get_boundary`)."""
        item = self._loaded_ranges.get(range_sk(shard_id, interval_start_ms))
        return self._with_boundaries(item) if item is not None else None

    def ranges_for_shard(self, shard_id: str) -> list[ShardRange]:
        """Every stored range of the shard, by interval start (two Queries over its history: for
        operations and tests, not for the per-run path)."""
        boundaries = {b.instant_ms: b for b in self._ledger.boundaries_for_shard(shard_id)}
        return [self._range_from_item(item, boundaries) for item in self._items.query(f"{RANGE_PREFIX}{shard_id}#")]

    def earliest_range(self, shard_id: str) -> ShardRange | None:
        """The shard's range of the earliest interval, or None (one item read)."""
        return self.first_range_from(shard_id, 0)

    def interval_before(self, shard_id: str, interval_start_ms: int) -> tuple[int, int] | None:
        """``(start_ms, end_ms)`` of the shard's range of the latest interval starting before
        ``interval_start_ms`` (one item read, its cuts not needed)."""
        if interval_start_ms <= 0:
            return None
        high = range_sk(shard_id, interval_start_ms - 1)
        items = self._items.query(f"{RANGE_PREFIX}{shard_id}#", high=high, descending=True, limit=1)
        return (int(items[0]["interval_start_ms"]), int(items[0]["interval_end_ms"])) if items else None

    def first_range_from(self, shard_id: str, instant_ms: int) -> ShardRange | None:
        """The shard's range of the earliest interval starting at or after ``instant_ms``, or None
        (one item read)."""
        items = self._items.query(f"{RANGE_PREFIX}{shard_id}#", low=range_sk(shard_id, instant_ms), limit=1)
        return self._with_boundaries(items[0]) if items else None

    def planned_ms_of_interval_ending(self, shard_id: str, end_ms: int) -> int | None:
        """When the shard's range of the interval ending at ``end_ms`` was planned; None if it has
        none, or one stored before the planning time was kept (one item read)."""
        high = range_sk(shard_id, end_ms - 1)
        items = self._items.query(f"{RANGE_PREFIX}{shard_id}#", high=high, descending=True, limit=1)
        if items and int(items[0]["interval_end_ms"]) == end_ms and "planned_ms" in items[0]:
            return int(items[0]["planned_ms"])
        return None

    def _with_boundaries(self, item: Mapping[str, Any]) -> ShardRange:
        sk = range_sk(item["shard_id"], int(item["interval_start_ms"]))
        if item["state"] == RangeState.LOADED.value:
            self._loaded_ranges[sk] = item
        else:
            self._planned_ranges[sk] = item
        shard_id = item["shard_id"]
        start = self._ledger.get_boundary(shard_id, int(item["start_instant_ms"]))
        end = self._ledger.get_boundary(shard_id, int(item["end_instant_ms"]))
        return self._range_from_item(item, {b.instant_ms: b for b in (start, end) if b is not None})

    def create_range(self, shard_range: ShardRange, *, with_end: bool = False) -> ShardRange:
        """Store a PLANNED range once. Its two boundaries must already be stored, unless
        ``with_end``: then its end is put once in the same request (a range is never stored
        without its cuts).

        :return: the stored range: ours, or the one a concurrent planner stored first (and with the
            end cut a concurrent resolver stored first).
        """
        return self.create_ranges([shard_range], with_end=with_end)[0]

    def create_ranges(self, shard_ranges: Sequence[ShardRange], *, with_end: bool = False) -> list[ShardRange]:
        """:meth:`create_range` of each (of distinct shards or intervals), handed over at once: a
        range and its end go in one request, several ranges to a request; the stored ones, in order."""
        units = [[self._ledger.boundary_item(r.end), self._range_item(r)] if with_end else [self._range_item(r)] for r in shard_ranges]
        # Planning stores the ranges of many shards at once: grouped, one request carries several.
        answers = self._items.put_new_grouped_units(units)
        return [self._created(r, unit, written) for r, unit, written in zip(shard_ranges, units, answers)]

    def _created(self, shard_range: ShardRange, unit: list[dict[str, Any]], written: list[bool]) -> ShardRange:
        """The range stored after the put of ``unit`` (its end cut first when it carries two)."""
        end_written = written[0] if len(unit) == 2 else True
        if end_written:
            self._ledger.remember_boundary(shard_range.end)
        item = unit[-1]
        if all(written):
            self._planned_ranges[item["sk"]] = item
            return self._range_from_item(item, {b.instant_ms: b for b in (shard_range.start, shard_range.end)})
        stored = self.get_range(shard_range.shard_id, shard_range.interval_start_ms)
        assert stored is not None, "a put-once item existed a moment ago and items are never deleted"
        return stored

    def _range_item(self, shard_range: ShardRange) -> dict[str, Any]:
        item = {
            "sk": range_sk(shard_range.shard_id, shard_range.interval_start_ms),
            "kind": "range",
            "shard_id": shard_range.shard_id,
            "stream_name": shard_range.stream_name,
            "interval_start_ms": shard_range.interval_start_ms,
            "interval_end_ms": shard_range.interval_end_ms,
            "start_instant_ms": shard_range.start.instant_ms,
            "end_instant_ms": shard_range.end.instant_ms,
            "state": RangeState.PLANNED.value,
            "counts": {},
            "planned_ms": self._items.clock(),
            "updated_ms": self._items.clock(),
        }
        if shard_range.chunk_limits is not None:
            item.update(asdict(shard_range.chunk_limits))
        return item

    def mark_range_loaded(
        self, shard_id: str, interval_start_ms: int, counts: Mapping[str, int] | None = None
    ) -> ShardRange:
        """PLANNED → LOADED with its counts (records read, rows loaded, ...). Idempotent.

        :raises CheckpointNotFound: no such range.
        """
        return self.mark_ranges_loaded([LoadedRange(shard_id, interval_start_ms, counts or {})])[0]

    def mark_ranges_loaded(self, loaded: Sequence[LoadedRange]) -> list[ShardRange]:
        """:meth:`mark_range_loaded` of each range: those this store has seen PLANNED in one grouped
        write (a commit of a thousand shards is then some ten transactions rather than a thousand
        writes), the others each on its own. Idempotent.

        :raises CheckpointNotFound: one has no such range.
        """
        expected = {"state": RangeState.PLANNED.value}
        marks = [
            (range_sk(mark.shard_id, mark.interval_start_ms),
             {"state": RangeState.LOADED.value, "counts": dict(mark.counts), "updated_ms": self._items.clock()})
            for mark in loaded
        ]  # fmt: skip
        # Only its loaded state changes of a range this store read PLANNED: the write need only say
        # whether it applied.
        planned = [self._planned_ranges.pop(sk, None) for sk, _ in marks]
        applied = iter(self._items.update_grouped_all(
            [(sk, changes, expected) for (sk, changes), item in zip(marks, planned) if item is not None]))  # fmt: skip
        marked = []
        for mark, (sk, changes), item in zip(loaded, marks, planned):
            if item is not None:
                updated = {**item, **changes} if next(applied) else None
            else:
                updated = self._items.update(sk, changes, expected)
            stored = self._with_boundaries(updated) if updated is not None else self.get_range(mark.shard_id, mark.interval_start_ms)
            if stored is None:
                raise CheckpointNotFound(f"No range of shard {mark.shard_id} for interval start {describe_instant(mark.interval_start_ms)}")
            marked.append(stored)
        return marked

    def settle_chunk_limits(self, shard_id: str, interval_start_ms: int, proposed: ChunkLimits) -> ChunkLimits:
        """The chunk limits of a range, fixed by the first run that loads it.

        Labels follow chunk spans, so every run of a range must cut it alike: a later or
        concurrent run with other limits would otherwise load the same records under other
        labels (duplicates). The first caller stores its limits (conditional write); everyone
        gets the stored ones.

        :param proposed: this run's limits.
        :return: the limits stored for the range.
        :raises CheckpointNotFound: no such range.
        """
        sk = range_sk(shard_id, interval_start_ms)
        item = self._items.update(sk, asdict(proposed), {"chunk_max_rows": ABSENT})
        item = item or self._items.get(sk)
        if item is None:
            raise CheckpointNotFound(f"No range of shard {shard_id} for interval start {describe_instant(interval_start_ms)}")
        return _chunk_limits_of(item)

    def recent_loaded_counts(self, shard_id: str, limit: int) -> dict[int, dict[str, int]]:
        """Interval start → counts, for those of the shard's ``limit`` latest ranges that are LOADED
        (one Query of at most ``limit`` items)."""
        items = self._items.query(f"{RANGE_PREFIX}{shard_id}#", descending=True, limit=limit)
        return {
            int(item["interval_start_ms"]): {name: int(value) for name, value in item.get("counts", {}).items()}
            for item in items
            if item["state"] == RangeState.LOADED.value
        }

    def range_planned_ms(self, shard_id: str, interval_start_ms: int) -> int | None:
        """When the range was first planned (None for ranges stored before this was kept)."""
        item = self._items.get(range_sk(shard_id, interval_start_ms))
        return int(item["planned_ms"]) if item is not None and "planned_ms" in item else None

    def range_counts(self, shard_id: str, interval_start_ms: int) -> dict[str, int]:
        """The counts stored when the range was marked loaded (empty before)."""
        item = self._items.get(range_sk(shard_id, interval_start_ms))
        return {name: int(value) for name, value in (item or {}).get("counts", {}).items()}

    def _range_from_item(self, item: Mapping[str, Any], boundaries: Mapping[int, Boundary]) -> ShardRange:
        shard_id = item["shard_id"]
        try:
            start = boundaries[int(item["start_instant_ms"])]
            end = boundaries[int(item["end_instant_ms"])]
        except KeyError as missing:
            raise CheckpointNotFound(
                f"Range {item['sk']} of pipeline {self._items.pipeline_id} references boundary {missing}, "
                "which is not stored"
            ) from None
        return ShardRange(
            pipeline_id=self._items.pipeline_id,
            stream_name=item["stream_name"],
            shard_id=shard_id,
            interval_start_ms=int(item["interval_start_ms"]),
            interval_end_ms=int(item["interval_end_ms"]),
            start=start,
            end=end,
            state=RangeState(item["state"]),
            # Ranges of the layout without a planning time may have chunks keyed the older way: their
            # loader settles the limits and looks for those (chunks_for_range).
            chunk_limits=_chunk_limits_of(item) if "chunk_max_rows" in item and "planned_ms" in item else None,
        )

    # pruning (core.prune) -------------------------------------------------------------------

    def spans_through(self, shard_id: str, start_ms: int) -> list[RangeSpan]:
        """The shard's ranges of intervals starting at or before ``start_ms``, earliest first
        (one Query, their cuts not read)."""
        return [
            RangeSpan(
                int(item["interval_start_ms"]), int(item["interval_end_ms"]), int(item["start_instant_ms"]),
                loaded=item["state"] == RangeState.LOADED.value,
            )  # fmt: skip
            for item in self._items.query(f"{RANGE_PREFIX}{shard_id}#", high=range_sk(shard_id, start_ms))
        ]

    def next_interval_start(self, shard_id: str, instant_ms: int) -> int | None:
        """The start of the shard's earliest range starting at or after ``instant_ms`` (one item
        read, its cuts not needed), or None."""
        items = self._items.query(f"{RANGE_PREFIX}{shard_id}#", low=range_sk(shard_id, instant_ms), limit=1)
        return int(items[0]["interval_start_ms"]) if items else None

    def forget_ranges(self, shard_id: str, interval_starts: Sequence[int]) -> int:
        """Delete the shard's ranges of these intervals (pruned history, whose chunks went first);
        items deleted."""
        doomed = [range_sk(shard_id, start_ms) for start_ms in interval_starts]
        self._items.delete(doomed)
        return len(doomed)

    # floor ----------------------------------------------------------------------------------

    def settle_floor(self, start_ms: int, end_ms: int) -> Floor:
        """The pipeline's floor interval: ``[start_ms, end_ms)`` if none is stored yet (conditional
        put), else the stored one. Two first runs racing agree on the winner's."""
        self._items.put_new({"sk": FLOOR_KEY, "kind": "floor", "start_ms": start_ms, "end_ms": end_ms,
                       "updated_ms": self._items.clock()})  # fmt: skip
        floor = self.get_floor()
        assert floor is not None, "a put-once item existed a moment ago and items are never deleted"
        return floor

    def settle_initial_position(self, position: str) -> str:
        """Where the pipeline's shards started (``INTERVAL`` or ``TRIM_HORIZON``), a fact fixed by
        its first plan: ``position`` if none is recorded yet (conditional put), else the recorded
        one. A pipeline planned before the fact was recorded keeps what its items show: a floor
        (only TRIM_HORIZON runs store one), else any planned interval (INTERVAL)."""
        item = self._items.get(INITIAL_POSITION_KEY)
        if item is None:
            if self.get_floor() is not None:
                position = "TRIM_HORIZON"
            elif self._items.query(INTERVAL_PREFIX, limit=1) or self._items.query(RANGE_PREFIX, limit=1):
                position = "INTERVAL"
            self._items.put_new({"sk": INITIAL_POSITION_KEY, "kind": "initial_position",
                                  "initial_position": position, "updated_ms": self._items.clock()})  # fmt: skip
            item = self._items.get(INITIAL_POSITION_KEY)
            assert item is not None, "a put-once item existed a moment ago and items are never deleted"
        return str(item["initial_position"])

    def get_floor(self) -> Floor | None:
        """The pipeline's floor interval, if a TRIM_HORIZON run stored one."""
        item = self._items.get(FLOOR_KEY)
        return Floor(int(item["start_ms"]), int(item["end_ms"])) if item is not None else None

    # handovers between pipelines (core.handover) ---------------------------------------------

    def handovers(self) -> tuple[Handover | None, Handover | None]:
        """``(taken_over, handed_over)``: the pipeline this one started from, and the one that took
        over from it (one batched read)."""
        items = self._items.get_many([TAKEN_OVER_KEY, HANDED_OVER_KEY])
        taken, handed = items.get(TAKEN_OVER_KEY), items.get(HANDED_OVER_KEY)
        return (
            _handover(taken["old"], self._items.pipeline_id, taken) if taken else None,
            _handover(self._items.pipeline_id, handed["new"], handed) if handed else None,
        )

    def claim_handover(self, new: str) -> Handover:
        """Mark this pipeline as handed over to ``new`` (put once), before its end is fixed: from
        now its plans wait (:class:`~airflow_provider_kinesis_doris.core.errors.HandoverPending`).
        The stored claim, which may name another pipeline."""
        self._items.put_new({"sk": HANDED_OVER_KEY, "kind": "handed_over", "new": new, "updated_ms": self._items.clock()})
        handed = self.handovers()[1]
        assert handed is not None, "a put-once item existed a moment ago and items are never deleted"
        return handed

    def fix_handover_end(self, new: str, last_start_ms: int, end_ms: int) -> Handover:
        """The instant this pipeline stops at: the end of ``[last_start_ms, end_ms)`` unless one is
        fixed already (conditional update); the stored handover."""
        self._items.update(HANDED_OVER_KEY, {"last_start_ms": last_start_ms, "end_ms": end_ms},
                            {"new": new, "end_ms": ABSENT})  # fmt: skip
        handed = self.handovers()[1]
        assert handed is not None and handed.end_ms is not None
        return handed

    def settle_taken_over(self, handover: Handover) -> Handover:
        """Record where this pipeline started (put once); the stored record."""
        self._items.put_new({"sk": TAKEN_OVER_KEY, "kind": "taken_over", "old": handover.old,
                              "last_start_ms": handover.last_start_ms, "end_ms": handover.end_ms,
                              "updated_ms": self._items.clock()})  # fmt: skip
        taken = self.handovers()[0]
        assert taken is not None, "a put-once item existed a moment ago and items are never deleted"
        return taken

    def last_interval(self) -> tuple[int, int] | None:
        """The latest interval planned: the grid's, or the floor (one Query, one read)."""
        self._register_stored_intervals()
        latest = self._items.query(INTERVAL_PREFIX, descending=True, limit=1)
        floor = self.get_floor()
        candidates = [(int(item["start_ms"]), int(item["end_ms"])) for item in latest]
        candidates += [(floor.start_ms, floor.end_ms)] if floor is not None else []
        return max(candidates, key=lambda interval: interval[1], default=None)

    def gaps_before(self, end_ms: int) -> list[tuple[int, int]]:
        """Spans below ``end_ms`` between two intervals of the grid (from the gapless mark) that no
        interval covers: intervals that were skipped and are not loaded yet."""
        grid = self.intervals_before(end_ms, with_floor=True)
        return [(previous[1], following[0]) for previous, following in zip(grid, grid[1:]) if previous[1] < following[0]]

    # the interval grid ----------------------------------------------------------------------

    def register_interval(self, start_ms: int, end_ms: int, *, register: bool = True) -> tuple[int, int] | None:
        """Add ``[start_ms, end_ms)`` to the pipeline's interval grid, unless it overlaps an
        interval of the grid without matching it. Ranges are stored only for registered intervals,
        so a shard's stored range of an interval that fits is the one under its start, if any.

        :param register: False: only check (an interval before the prune horizon, whose part of
            the grid is pruned, plans no new range).
        :return: ``(start_ms, end_ms)`` of the registered interval it overlaps without matching,
            or None when it fits (and is registered now, or was).
        """
        self._register_stored_intervals()
        # Registered intervals are disjoint: only the latest one starting before the end can
        # overlap, or be this one.
        latest = self._items.query(INTERVAL_PREFIX, high=interval_sk(end_ms - 1), descending=True, limit=1)
        if latest:
            stored = (int(latest[0]["start_ms"]), int(latest[0]["end_ms"]))
            if stored == (start_ms, end_ms):
                return None
            if stored[1] > start_ms:
                return stored
        if not register:
            return None
        item = {"sk": interval_sk(start_ms), "kind": "interval", "start_ms": start_ms, "end_ms": end_ms}
        if self._items.put_new(item):
            return None
        # A concurrent planner registered an interval with the same start.
        raced = self._items.get(interval_sk(start_ms))
        assert raced is not None, "a put-once item existed a moment ago"
        return None if int(raced["end_ms"]) == end_ms else (start_ms, int(raced["end_ms"]))

    def latest_interval_start(self) -> int | None:
        """The start of the grid's latest interval (one Query), or None when the grid is empty or
        not complete yet. No range starts later, but those of runs that register a later interval
        after this read."""
        if not self._grid_is_complete():
            return None
        latest = self._items.query(INTERVAL_PREFIX, descending=True, limit=1)
        return int(latest[0]["start_ms"]) if latest else None

    def _grid_is_complete(self) -> bool:
        """Whether the grid holds every stored range's interval (its marker item, read once)."""
        self._grid_complete = self._grid_complete or self._items.get(INTERVALS_KEY) is not None
        return self._grid_complete

    def _register_stored_intervals(self) -> None:
        """Once per table: register the interval of every stored range (tables written before the
        grid existed), then mark the grid complete. A run killed halfway does it again."""
        if self._grid_is_complete():
            return
        stored = {(int(item["interval_start_ms"]), int(item["interval_end_ms"])) for item in self._items.query(RANGE_PREFIX)}
        for start_ms, end_ms in sorted(stored):
            self._items.put_new({"sk": interval_sk(start_ms), "kind": "interval", "start_ms": start_ms, "end_ms": end_ms})
        if stored:
            log.info("pipeline %s: registered the %d intervals of its stored ranges", self._items.pipeline_id, len(stored))
        self._items.put_new({"sk": INTERVALS_KEY, "kind": "intervals", "updated_ms": self._items.clock()})
        self._grid_complete = True

    def intervals_before(self, start_ms: int, *, with_floor: bool = False) -> list[tuple[int, int]]:
        """The grid's intervals that start before ``start_ms``, oldest first, from the last one
        below which no interval is left unplanned (:meth:`advance_gapless`): in the steady state
        one Query of a few items.

        :param with_floor: also the floor interval of a TRIM_HORIZON pipeline, which is loaded by
            its sweep and not registered in the grid, first (one more read); or the other
            pipeline's interval this one took over after (``core.handover``), whose end is where
            this one starts."""
        self._register_stored_intervals()
        gapless = self._items.get(GAPLESS_KEY)
        low = interval_sk(int(gapless["start_ms"])) if gapless else None
        items = self._items.query(INTERVAL_PREFIX, low=low, high=interval_sk(start_ms - 1))
        grid = [(int(item["start_ms"]), int(item["end_ms"])) for item in items]
        # Past the gapless mark the floor is behind the grid read, and nothing before it is missing.
        floor = self.get_floor() if with_floor and gapless is None else None
        taken = self.handovers()[0] if floor is None and gapless is None else None
        if taken is not None and taken.last_start_ms is not None and taken.end_ms is not None:
            floor = Floor(taken.last_start_ms, taken.end_ms)
        if floor is not None and floor.start_ms < start_ms and not any(s < floor.end_ms for s, _ in grid):
            # Pruning deletes the grid's intervals up to its horizon but not the floor: past the
            # floor's end the intervals between it and the grid read are pruned, not missing.
            pruned = self._items.get(PRUNE_KEY)
            if pruned is None or int(pruned["horizon_ms"]) <= floor.end_ms:
                grid.insert(0, (floor.start_ms, floor.end_ms))
        return grid

    def intervals_between(self, start_ms: int, end_ms: int) -> list[tuple[int, int]]:
        """The grid's intervals inside ``[start_ms, end_ms)``, oldest first (one Query: for the
        audit, ``core.audit``; the floor is not in the grid)."""
        self._register_stored_intervals()
        items = self._items.query(INTERVAL_PREFIX, low=interval_sk(start_ms), high=interval_sk(end_ms - 1))
        return [(int(item["start_ms"]), int(item["end_ms"])) for item in items if int(item["end_ms"]) <= end_ms]

    def advance_gapless(self, start_ms: int) -> None:
        """Record that no interval below the grid's interval starting at ``start_ms`` is left
        unplanned. Only forward: a concurrent run's later claim stays (a lost race is no error,
        the next run advances it again)."""
        stored = self._items.get(GAPLESS_KEY)
        if stored is None:
            self._items.put_new({"sk": GAPLESS_KEY, "kind": "gapless", "start_ms": start_ms})
        elif int(stored["start_ms"]) < start_ms:
            self._items.update(GAPLESS_KEY, {"start_ms": start_ms}, {"start_ms": int(stored["start_ms"])})

    def settle_adopted(
        self, start_ms: int, proposed: Sequence[tuple[int, int]]
    ) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """The intervals the run of the interval starting at ``start_ms`` takes on: those an attempt
        of it stored first (put once), else ``proposed`` (stored now unless empty). A retry so loads
        exactly what its first attempt began, though those intervals are planned by then and no
        longer look skipped.

        :return: ``(to_load, loaded)``: those still to load, and those an earlier attempt loaded
            (:meth:`mark_adopted_loaded`), which the run reports without loading them again.
        """
        sk = adopted_sk(start_ms)
        if proposed and self._items.put_new({"sk": sk, "kind": "adopted", "intervals": [[s, e] for s, e in proposed],
                                       "updated_ms": self._items.clock()}):  # fmt: skip
            return list(proposed), []
        stored = self._items.get(sk)
        if stored is None:
            return [], []
        loaded = {(int(s), int(e)) for s, e in stored.get("loaded", [])}
        intervals = [(int(s), int(e)) for s, e in stored["intervals"]]
        return [i for i in intervals if i not in loaded], [i for i in intervals if i in loaded]

    def adopted_by(self, start_ms: int) -> list[tuple[int, int]]:
        """The intervals the run of the interval starting at ``start_ms`` took on (its catch-up),
        oldest first; empty if none (one read)."""
        stored = self._items.get(adopted_sk(start_ms))
        return sorted((int(s), int(e)) for s, e in stored["intervals"]) if stored else []

    def first_interval_start(self) -> int | None:
        """Where the pipeline starts: its floor's start, the instant it took over from another
        pipeline, or its grid's first interval; None before its first plan (pruning deletes the
        grid's intervals that end by its horizon: one starting after the horizon is the start)."""
        taken = self.handovers()[0]
        if taken is not None and taken.end_ms is not None:
            return taken.end_ms
        floor = self.get_floor()
        if floor is not None:
            return floor.start_ms
        self._register_stored_intervals()
        first = self._items.query(INTERVAL_PREFIX, limit=1)
        return int(first[0]["start_ms"]) if first else None

    def mark_adopted_loaded(self, start_ms: int, interval: tuple[int, int]) -> None:
        """Record that ``interval``, taken on by the run of the interval starting at ``start_ms``,
        is loaded: that run's retries no longer replay it (:meth:`settle_adopted`). Past the prune
        horizon they could not: a shard without a range there has nothing left to plan it from.
        Two attempts marking at once may lose one mark; its interval is then only replayed."""
        sk = adopted_sk(start_ms)
        stored = self._items.get(sk)
        if stored is None:
            return
        loaded = [[int(s), int(e)] for s, e in stored.get("loaded", [])]
        if list(interval) not in loaded:
            self._items.update(sk, {"loaded": [*loaded, list(interval)]}, {})

    def prune_grid(self, horizon_ms: int) -> int:
        """Delete the grid's intervals that end by the horizon (with the shards' history before it),
        and the adoptions of runs of intervals that start before it.

        :return: items deleted."""
        old = [item["sk"] for item in self._items.query(INTERVAL_PREFIX, high=interval_sk(horizon_ms)) if int(item["end_ms"]) <= horizon_ms]
        old += [item["sk"] for item in self._items.query(ADOPTED_PREFIX, high=adopted_sk(horizon_ms - 1))]
        self._items.delete(old)
        return len(old)

    # the prune horizon (core.prune) -------------------------------------------------------

    def prune_horizon(self) -> int | None:
        """The latest prune horizon raised (None before the first pruning)."""
        item = self._items.get(PRUNE_KEY)
        return int(item["horizon_ms"]) if item is not None else None

    def raise_prune_horizon(self, horizon_ms: int) -> bool:
        """Store ``horizon_ms`` as the prune horizon if it is later than the stored one (a
        conditional write); whether this call raised it: of concurrent runs, one prunes."""
        item = self._items.get(PRUNE_KEY)
        claimed = {"horizon_ms": horizon_ms, "updated_ms": self._items.clock()}
        if item is None:
            return self._items.put_new({"sk": PRUNE_KEY, "kind": "prune", **claimed})
        stored = int(item["horizon_ms"])
        return stored < horizon_ms and self._items.update(PRUNE_KEY, claimed, {"horizon_ms": stored}) is not None


def _chunk_limits_of(item: Mapping[str, Any]) -> ChunkLimits:
    """The chunk limits a range item keeps, under their own names (DynamoDB numbers are Decimals)."""
    return ChunkLimits(int(item["chunk_max_rows"]), int(item["chunk_max_bytes"]))


def _handover(old: str, new: str, item: Mapping[str, Any]) -> Handover:
    end_ms = item.get("end_ms")
    last_start_ms = item.get("last_start_ms")
    return Handover(old, new, int(last_start_ms) if last_start_ms is not None else None, int(end_ms) if end_ms is not None else None)
