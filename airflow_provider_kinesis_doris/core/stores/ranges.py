"""Boundaries, ranges, the floor and the topology: what a plan fixes."""

from __future__ import annotations

import logging

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from airflow_provider_kinesis_doris.core.errors import CheckpointConflict, CheckpointNotFound
from airflow_provider_kinesis_doris.core.model import Boundary, BoundaryKind, RangeState, ShardRange, describe_instant
from airflow_provider_kinesis_doris.core.stores.base import StorePrimitives
from airflow_provider_kinesis_doris.core.stores.items import (
    ABSENT,
    ADOPTED_PREFIX,
    BOUNDARY_PREFIX,
    FLOOR_KEY,
    GAPLESS_KEY,
    INTERVAL_PREFIX,
    INTERVALS_KEY,
    PRUNE_KEY,
    RANGE_PREFIX,
    TOPOLOGY_KEY,
    boundary_from_item,
    boundary_sk,
    Floor,
    interval_sk,
    range_sk,
    TopologyRecord,
    adopted_sk,
)

log = logging.getLogger(__name__)


class RangeStore(StorePrimitives):
    # boundaries (core.store.BoundaryStore) ------------------------------------------------------

    def get_boundary(self, shard_id: str, instant_ms: int) -> Boundary | None:
        """The stored boundary of ``shard_id`` at ``instant_ms``, or None if never resolved.

        A concrete boundary never changes once stored (put once; only PENDING is resolved, once),
        so this store remembers the ones it has seen: every range read needs its two cuts, and a
        run reads the same ranges while it plans, checks, loads and commits."""
        settled = self._settled_boundaries.get((shard_id, instant_ms))
        if settled is not None:
            return settled
        item = self._get(boundary_sk(shard_id, instant_ms))
        return self._settle(boundary_from_item(item)) if item else None

    def prefetch_boundaries(self, shard_ids: Iterable[str], instant_ms: int) -> set[str]:
        """Read the shards' boundaries at ``instant_ms`` in batches (BatchGetItem), so that
        :meth:`get_boundary` answers the concrete ones from memory: a run plans every shard from
        the cut at its interval's start, which the previous interval stored.

        :return: the shards with no boundary stored there when read.
        """
        shard_ids = list(shard_ids)
        return set(shard_ids) - set(self.read_boundaries(shard_ids, instant_ms))

    def read_boundaries(self, shard_ids: Iterable[str], instant_ms: int) -> dict[str, Boundary]:
        """The shards' boundaries stored at ``instant_ms``, PENDING ones too, read in batches
        (BatchGetItem); the concrete ones are remembered as :meth:`get_boundary` remembers them."""
        items = self._get_many([boundary_sk(shard_id, instant_ms) for shard_id in shard_ids]).values()
        return {boundary.shard_id: self._settle(boundary) for boundary in map(boundary_from_item, items)}

    def remember_boundary(self, boundary: Boundary) -> None:
        """Remember a concrete boundary that another process read from or stored in this table (a
        loader's report carries the end it settled): :meth:`get_boundary` then answers it from
        memory, as it would after reading it."""
        self._settle(boundary)

    def _settle(self, boundary: Boundary) -> Boundary:
        if boundary.is_concrete:
            self._settled_boundaries[(boundary.shard_id, boundary.instant_ms)] = boundary
        return boundary

    def put_boundary(self, boundary: Boundary) -> Boundary:
        """Store ``boundary`` unless one exists for its (shard, instant); return the stored one."""
        # Planning puts the cuts of many shards at once: grouped, one request carries several.
        if self._put_new_grouped(self._boundary_item(boundary)):
            return self._settle(boundary)
        stored = self.get_boundary(boundary.shard_id, boundary.instant_ms)
        assert stored is not None, "a put-once item existed a moment ago and items are never deleted"
        return stored

    def _boundary_item(self, boundary: Boundary) -> dict[str, Any]:
        item = {
            "sk": boundary_sk(boundary.shard_id, boundary.instant_ms),
            "kind": "boundary",
            "shard_id": boundary.shard_id,
            "instant_ms": boundary.instant_ms,
            "boundary_kind": boundary.kind.value,
            "resolved_ms": self._clock(),
        }
        if boundary.position is not None:
            item["position"] = boundary.position.encode()
        if boundary.arrival_ms is not None:
            item["arrival_ms"] = boundary.arrival_ms
        return item

    def resolve_pending(self, proposed: Boundary) -> Boundary:
        """Replace the stored PENDING boundary with the concrete ``proposed`` one, only if it is
        still PENDING; return what is stored after the attempt (follow it, not the proposal).
        If nothing is stored yet, ``proposed`` is put once.

        :raises ValueError: ``proposed`` is itself PENDING.
        """
        if not proposed.is_concrete:
            raise ValueError(
                f"Cannot resolve boundary of shard {proposed.shard_id} at {describe_instant(proposed.instant_ms)} to PENDING"
            )
        changes = {
            "boundary_kind": proposed.kind.value,
            "position": proposed.position.encode() if proposed.position else None,
            "arrival_ms": proposed.arrival_ms,
            "resolved_ms": self._clock(),
        }
        sk = boundary_sk(proposed.shard_id, proposed.instant_ms)
        if self._update(sk, changes, {"boundary_kind": BoundaryKind.PENDING.value}):
            log.info("boundary of shard %s: %s", proposed.shard_id, proposed.describe())
            return self._settle(proposed)
        stored = self.get_boundary(proposed.shard_id, proposed.instant_ms)
        return stored if stored is not None else self.put_boundary(proposed)

    def boundaries_for_shard(self, shard_id: str) -> list[Boundary]:
        """Every stored boundary of the shard, by instant."""
        return [self._settle(boundary_from_item(item)) for item in self._query(f"{BOUNDARY_PREFIX}{shard_id}#")]

    def boundary_at_or_before(self, shard_id: str, instant_ms: int) -> Boundary | None:
        """The stored boundary of the shard at the latest instant not after ``instant_ms`` (one
        item read)."""
        items = self._query(
            f"{BOUNDARY_PREFIX}{shard_id}#", high=boundary_sk(shard_id, instant_ms), descending=True, limit=1
        )
        return self._settle(boundary_from_item(items[0])) if items else None

    # ranges ---------------------------------------------------------------------------------

    def get_range(self, shard_id: str, interval_start_ms: int) -> ShardRange | None:
        """The stored range of the interval starting at ``interval_start_ms``, or None."""
        known = self.loaded_range(shard_id, interval_start_ms)
        if known is not None:
            return known
        item = self._get(range_sk(shard_id, interval_start_ms))
        return self._with_boundaries(item) if item is not None else None

    def ranges_at(self, shard_ids: Sequence[str], interval_start_ms: int) -> dict[str, ShardRange]:
        """The shards' stored ranges of the interval starting at ``interval_start_ms``, by shard, in
        batches (BatchGetItem; their cuts are read as :meth:`get_range` reads them)."""
        items = self._get_many([range_sk(shard_id, interval_start_ms) for shard_id in shard_ids])
        return {item["shard_id"]: self._with_boundaries(item) for item in items.values()}

    def loaded_range(self, shard_id: str, interval_start_ms: int) -> ShardRange | None:
        """The range, if this store has seen it LOADED (no read: a loaded range's span and state
        never change again, and its cuts are read through :meth:`get_boundary`)."""
        item = self._loaded_ranges.get(range_sk(shard_id, interval_start_ms))
        return self._with_boundaries(item) if item is not None else None

    def ranges_for_shard(self, shard_id: str) -> list[ShardRange]:
        """Every stored range of the shard, by interval start (two Queries over its history: for
        operations and tests, not for the per-run path)."""
        boundaries = {b.instant_ms: b for b in self.boundaries_for_shard(shard_id)}
        return [self._range_from_item(item, boundaries) for item in self._query(f"{RANGE_PREFIX}{shard_id}#")]

    def earliest_range(self, shard_id: str) -> ShardRange | None:
        """The shard's range of the earliest interval, or None (one item read)."""
        return self._neighbour_range(shard_id, None, descending=False)

    def interval_before(self, shard_id: str, interval_start_ms: int) -> tuple[int, int] | None:
        """``(start_ms, end_ms)`` of the shard's range of the latest interval starting before
        ``interval_start_ms`` (one item read, its cuts not needed)."""
        if interval_start_ms <= 0:
            return None
        high = range_sk(shard_id, interval_start_ms - 1)
        items = self._query(f"{RANGE_PREFIX}{shard_id}#", high=high, descending=True, limit=1)
        return (int(items[0]["interval_start_ms"]), int(items[0]["interval_end_ms"])) if items else None

    def _neighbour_range(self, shard_id: str, high: str | None, *, descending: bool) -> ShardRange | None:
        items = self._query(f"{RANGE_PREFIX}{shard_id}#", high=high, descending=descending, limit=1)
        return self._with_boundaries(items[0]) if items else None

    def _with_boundaries(self, item: Mapping[str, Any]) -> ShardRange:
        sk = range_sk(item["shard_id"], int(item["interval_start_ms"]))
        if item["state"] == RangeState.LOADED.value:
            self._loaded_ranges[sk] = item
        else:
            self._planned_ranges[sk] = item
        shard_id = item["shard_id"]
        start = self.get_boundary(shard_id, int(item["start_instant_ms"]))
        end = self.get_boundary(shard_id, int(item["end_instant_ms"]))
        return self._range_from_item(item, {b.instant_ms: b for b in (start, end) if b is not None})

    def create_range(self, shard_range: ShardRange, *, with_end: bool = False) -> ShardRange:
        """Store a PLANNED range once. Its two boundaries must already be stored, unless
        ``with_end``: then its end is put once in the same request (a range is never stored
        without its cuts).

        :return: the stored range: ours, or the one a concurrent planner stored first (and with the
            end cut a concurrent resolver stored first).
        """
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
            "planned_ms": self._clock(),
            "updated_ms": self._clock(),
        }
        if shard_range.chunk_limits is not None:
            item["chunk_max_rows"], item["chunk_max_bytes"] = shard_range.chunk_limits
        # Planning stores the ranges of many shards at once: grouped, one request carries several.
        if with_end:
            end_written, written = self._put_new_grouped_all([self._boundary_item(shard_range.end), item])
        else:
            end_written, written = True, self._put_new_grouped(item)
        if end_written:
            self._settle(shard_range.end)
        if written and end_written:
            self._planned_ranges[item["sk"]] = item
            return self._range_from_item(item, {b.instant_ms: b for b in (shard_range.start, shard_range.end)})
        stored = self.get_range(shard_range.shard_id, shard_range.interval_start_ms)
        assert stored is not None, "a put-once item existed a moment ago and items are never deleted"
        return stored

    def mark_range_loaded(
        self, shard_id: str, interval_start_ms: int, counts: Mapping[str, int] | None = None
    ) -> ShardRange:
        """PLANNED → LOADED with its counts (records read, rows loaded, ...). Idempotent.

        :raises CheckpointNotFound: no such range.
        """
        sk = range_sk(shard_id, interval_start_ms)
        changes = {
            "state": RangeState.LOADED.value,
            "counts": dict(counts or {}),
            "updated_ms": self._clock(),
        }
        planned = self._planned_ranges.pop(sk, None)
        expected = {"state": RangeState.PLANNED.value}
        if planned is not None:
            # The commit marks many shards' ranges at once: grouped, one request carries several.
            # The range was PLANNED as this store read it, and only its loaded state changes.
            applied = self._update_grouped(sk, changes, expected)
            updated = {**planned, **changes} if applied else None
        else:
            updated = self._update(sk, changes, expected)
        stored = self._with_boundaries(updated) if updated is not None else self.get_range(shard_id, interval_start_ms)
        if stored is None:
            raise CheckpointNotFound(f"No range of shard {shard_id} for interval start {describe_instant(interval_start_ms)}")
        return stored

    def settle_chunk_limits(self, shard_id: str, interval_start_ms: int, max_rows: int, max_bytes: int) -> tuple[int, int]:
        """The chunk limits of a range, fixed by the first run that loads it.

        Labels follow chunk spans, so every run of a range must cut it alike: a later or
        concurrent run with other limits would otherwise load the same records under other
        labels (duplicates). The first caller stores its limits (conditional write); everyone
        gets the stored ones.

        :param max_rows: this run's rows per chunk.
        :param max_bytes: this run's bytes per chunk.
        :return: ``(max_rows, max_bytes)`` stored for the range.
        :raises CheckpointNotFound: no such range.
        """
        sk = range_sk(shard_id, interval_start_ms)
        item = self._update(sk, {"chunk_max_rows": max_rows, "chunk_max_bytes": max_bytes}, {"chunk_max_rows": ABSENT})
        item = item or self._get(sk)
        if item is None:
            raise CheckpointNotFound(f"No range of shard {shard_id} for interval start {describe_instant(interval_start_ms)}")
        return int(item["chunk_max_rows"]), int(item["chunk_max_bytes"])

    def recent_loaded_counts(self, shard_id: str, limit: int) -> dict[int, dict[str, int]]:
        """Interval start → counts, for those of the shard's ``limit`` latest ranges that are LOADED
        (one Query of at most ``limit`` items)."""
        items = self._query(f"{RANGE_PREFIX}{shard_id}#", descending=True, limit=limit)
        return {
            int(item["interval_start_ms"]): {name: int(value) for name, value in item.get("counts", {}).items()}
            for item in items
            if item["state"] == RangeState.LOADED.value
        }

    def range_planned_ms(self, shard_id: str, interval_start_ms: int) -> int | None:
        """When the range was first planned (None for ranges stored before this was kept)."""
        item = self._get(range_sk(shard_id, interval_start_ms))
        return int(item["planned_ms"]) if item is not None and "planned_ms" in item else None

    def range_counts(self, shard_id: str, interval_start_ms: int) -> dict[str, int]:
        """The counts stored when the range was marked loaded (empty before)."""
        item = self._get(range_sk(shard_id, interval_start_ms))
        return {name: int(value) for name, value in (item or {}).get("counts", {}).items()}

    def _range_from_item(self, item: Mapping[str, Any], boundaries: Mapping[int, Boundary]) -> ShardRange:
        shard_id = item["shard_id"]
        try:
            start = boundaries[int(item["start_instant_ms"])]
            end = boundaries[int(item["end_instant_ms"])]
        except KeyError as missing:
            raise CheckpointNotFound(
                f"Range {item['sk']} of pipeline {self.pipeline_id} references boundary {missing}, "
                "which is not stored"
            ) from None
        return ShardRange(
            pipeline_id=self.pipeline_id,
            stream_name=item["stream_name"],
            shard_id=shard_id,
            interval_start_ms=int(item["interval_start_ms"]),
            interval_end_ms=int(item["interval_end_ms"]),
            start=start,
            end=end,
            state=RangeState(item["state"]),
            # Ranges of the layout without a planning time may have chunks keyed the older way: their
            # loader settles the limits and looks for those (chunks_for_range).
            chunk_limits=(int(item["chunk_max_rows"]), int(item["chunk_max_bytes"]))
            if "chunk_max_rows" in item and "planned_ms" in item else None,
        )

    # floor ----------------------------------------------------------------------------------

    def settle_floor(self, start_ms: int, end_ms: int) -> Floor:
        """The pipeline's floor interval: ``[start_ms, end_ms)`` if none is stored yet (conditional
        put), else the stored one. Two first runs racing agree on the winner's."""
        self._put_new({"sk": FLOOR_KEY, "kind": "floor", "start_ms": start_ms, "end_ms": end_ms,
                       "updated_ms": self._clock()})  # fmt: skip
        floor = self.get_floor()
        assert floor is not None, "a put-once item existed a moment ago and items are never deleted"
        return floor

    def get_floor(self) -> Floor | None:
        """The pipeline's floor interval, if a TRIM_HORIZON run stored one."""
        item = self._get(FLOOR_KEY)
        return Floor(int(item["start_ms"]), int(item["end_ms"])) if item is not None else None

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
        latest = self._query(INTERVAL_PREFIX, high=interval_sk(end_ms - 1), descending=True, limit=1)
        if latest:
            stored = (int(latest[0]["start_ms"]), int(latest[0]["end_ms"]))
            if stored == (start_ms, end_ms):
                return None
            if stored[1] > start_ms:
                return stored
        if not register:
            return None
        item = {"sk": interval_sk(start_ms), "kind": "interval", "start_ms": start_ms, "end_ms": end_ms}
        if self._put_new(item):
            return None
        # A concurrent planner registered an interval with the same start.
        raced = self._get(interval_sk(start_ms))
        assert raced is not None, "a put-once item existed a moment ago"
        return None if int(raced["end_ms"]) == end_ms else (start_ms, int(raced["end_ms"]))

    def latest_interval_start(self) -> int | None:
        """The start of the grid's latest interval (one Query), or None when the grid is empty or
        not complete yet. No range starts later, but those of runs that register a later interval
        after this read."""
        if not self._grid_is_complete():
            return None
        latest = self._query(INTERVAL_PREFIX, descending=True, limit=1)
        return int(latest[0]["start_ms"]) if latest else None

    def _grid_is_complete(self) -> bool:
        """Whether the grid holds every stored range's interval (its marker item, read once)."""
        self._grid_complete = self._grid_complete or self._get(INTERVALS_KEY) is not None
        return self._grid_complete

    def _register_stored_intervals(self) -> None:
        """Once per table: register the interval of every stored range (tables written before the
        grid existed), then mark the grid complete. A run killed halfway does it again."""
        if self._grid_is_complete():
            return
        stored = {(int(item["interval_start_ms"]), int(item["interval_end_ms"])) for item in self._query(RANGE_PREFIX)}
        for start_ms, end_ms in sorted(stored):
            self._put_new({"sk": interval_sk(start_ms), "kind": "interval", "start_ms": start_ms, "end_ms": end_ms})
        if stored:
            log.info("pipeline %s: registered the %d intervals of its stored ranges", self.pipeline_id, len(stored))
        self._put_new({"sk": INTERVALS_KEY, "kind": "intervals", "updated_ms": self._clock()})
        self._grid_complete = True

    def intervals_before(self, start_ms: int, *, with_floor: bool = False) -> list[tuple[int, int]]:
        """The grid's intervals that start before ``start_ms``, oldest first, from the last one
        below which no interval is left unplanned (:meth:`advance_gapless`): in the steady state
        one Query of a few items.

        :param with_floor: also the floor interval of a TRIM_HORIZON pipeline, which is loaded by
            its sweep and not registered in the grid, first (one more read)."""
        self._register_stored_intervals()
        gapless = self._get(GAPLESS_KEY)
        low = interval_sk(int(gapless["start_ms"])) if gapless else None
        items = self._query(INTERVAL_PREFIX, low=low, high=interval_sk(start_ms - 1))
        grid = [(int(item["start_ms"]), int(item["end_ms"])) for item in items]
        # Past the gapless mark the floor is behind the grid read, and nothing before it is missing.
        floor = self.get_floor() if with_floor and gapless is None else None
        if floor is not None and floor.start_ms < start_ms and not any(s < floor.end_ms for s, _ in grid):
            # Pruning deletes the grid's intervals up to its horizon but not the floor: past the
            # floor's end the intervals between it and the grid read are pruned, not missing.
            pruned = self._get(PRUNE_KEY)
            if pruned is None or int(pruned["horizon_ms"]) <= floor.end_ms:
                grid.insert(0, (floor.start_ms, floor.end_ms))
        return grid

    def intervals_between(self, start_ms: int, end_ms: int) -> list[tuple[int, int]]:
        """The grid's intervals inside ``[start_ms, end_ms)``, oldest first (one Query: for the
        audit, ``core.audit``; the floor is not in the grid)."""
        self._register_stored_intervals()
        items = self._query(INTERVAL_PREFIX, low=interval_sk(start_ms), high=interval_sk(end_ms - 1))
        return [(int(item["start_ms"]), int(item["end_ms"])) for item in items if int(item["end_ms"]) <= end_ms]

    def advance_gapless(self, start_ms: int) -> None:
        """Record that no interval below the grid's interval starting at ``start_ms`` is left
        unplanned. Only forward: a concurrent run's later claim stays (a lost race is no error,
        the next run advances it again)."""
        stored = self._get(GAPLESS_KEY)
        if stored is None:
            self._put_new({"sk": GAPLESS_KEY, "kind": "gapless", "start_ms": start_ms})
        elif int(stored["start_ms"]) < start_ms:
            self._update(GAPLESS_KEY, {"start_ms": start_ms}, {"start_ms": int(stored["start_ms"])})

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
        if proposed and self._put_new({"sk": sk, "kind": "adopted", "intervals": [[s, e] for s, e in proposed],
                                       "updated_ms": self._clock()}):  # fmt: skip
            return list(proposed), []
        stored = self._get(sk)
        if stored is None:
            return [], []
        loaded = {(int(s), int(e)) for s, e in stored.get("loaded", [])}
        intervals = [(int(s), int(e)) for s, e in stored["intervals"]]
        return [i for i in intervals if i not in loaded], [i for i in intervals if i in loaded]

    def mark_adopted_loaded(self, start_ms: int, interval: tuple[int, int]) -> None:
        """Record that ``interval``, taken on by the run of the interval starting at ``start_ms``,
        is loaded: that run's retries no longer replay it (:meth:`settle_adopted`). Past the prune
        horizon they could not: a shard without a range there has nothing left to plan it from.
        Two attempts marking at once may lose one mark; its interval is then only replayed."""
        sk = adopted_sk(start_ms)
        stored = self._get(sk)
        if stored is None:
            return
        loaded = [[int(s), int(e)] for s, e in stored.get("loaded", [])]
        if list(interval) not in loaded:
            self._update(sk, {"loaded": [*loaded, list(interval)]}, {})

    def prune_grid(self, horizon_ms: int) -> int:
        """Delete the grid's intervals that end by the horizon (with the shards' history before it),
        and the adoptions of runs of intervals that start before it.

        :return: items deleted."""
        old = [item["sk"] for item in self._query(INTERVAL_PREFIX, high=interval_sk(horizon_ms)) if int(item["end_ms"]) <= horizon_ms]
        old += [item["sk"] for item in self._query(ADOPTED_PREFIX, high=adopted_sk(horizon_ms - 1))]
        self._delete(old)
        return len(old)

    # topology -------------------------------------------------------------------------------

    def get_topology(self) -> TopologyRecord | None:
        item = self._get(TOPOLOGY_KEY)
        if item is None:
            return None
        return TopologyRecord(
            shard_ids=tuple(item.get("shard_ids", ())),
            version=int(item["version"]),
            assignment={shard: int(part) for shard, part in item.get("assignment", {}).items()},
            updated_ms=int(item["updated_ms"]),
        )

    def save_topology(
        self, shard_ids: Iterable[str], assignment: Mapping[str, int], *, expected_version: int | None
    ) -> TopologyRecord:
        """Store the shard set and assignment as version ``expected_version + 1`` (1 if new).

        :param expected_version: the version read before (None: no topology stored yet).
        :raises CheckpointConflict: another writer saved a topology since.
        """
        version = 1 if expected_version is None else expected_version + 1
        values = {
            "shard_ids": sorted(shard_ids),
            "assignment": dict(assignment),
            "version": version,
            "updated_ms": self._clock(),
        }
        if expected_version is None:
            stored = self._put_new({"sk": TOPOLOGY_KEY, "kind": "topology", **values})
        else:
            stored = self._update(TOPOLOGY_KEY, values, {"version": expected_version})
        if not stored:
            current = self.get_topology()
            raise CheckpointConflict(
                f"Topology of pipeline {self.pipeline_id}: expected version {expected_version}, "
                f"stored version is {current.version if current else None}"
            )
        return self.get_topology()  # type: ignore[return-value]


