"""Durable pipeline state in one DynamoDB table: shards, boundaries, ranges, chunks, topology.

One partition per pipeline (``pk`` = pipeline id); the sort key ``sk`` names the item:

- ``shard#<shard_id>``: lineage, state OPEN → CLOSED → DRAINED, high-water mark, lease counter;
- ``boundary#<shard_id>#<instant_ms, 15 digits>``: a cut between records, written once;
- ``range#<shard_id>#<interval_start_ms, 15 digits>``: references to its two boundaries;
- ``chunk#<shard_id>#<interval_start_ms, 15 digits>#<label>``: intent and outcome of one Stream
  Load (invariant I7), under its range so a run reads only its ranges' chunks;
- ``content#<shard_id>#<interval_start_ms, 15 digits>#<first position>``: which records of a chunk
  are dead letters, fixed once before its first load;
- ``topology``: the last shard set seen and the shard → partition assignment;
- ``floor``: the interval a TRIM_HORIZON pipeline's first ranges sweep up to, written once.

Every write that can race is conditional and a lost race never overwrites: put-once items return
the stored winner, fenced updates raise :class:`CheckpointConflict`. Every read is a consistent
``GetItem`` or a paginated ``Query`` on the pipeline's partition (never a ``Scan``).

The logic lives in :class:`CheckpointStore`, which needs four primitives (get, query by prefix,
put-if-absent, conditional update). :class:`DynamoCheckpointStore` implements them on DynamoDB;
``testing.memory_store`` implements them in memory, so both stores behave alike by construction.

Sequence numbers (56 digits) and hash keys (39 digits) exceed DynamoDB's 38-digit numbers, so
they are stored as strings.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

from airflow_provider_kinesis_doris.core.errors import CheckpointConflict, KinesisDorisError
from airflow_provider_kinesis_doris.core.model import (
    Boundary,
    BoundaryKind,
    Position,
    RangeState,
    ShardInfo,
    ShardRange,
    ShardState,
)

log = logging.getLogger(__name__)

SHARD_PREFIX = "shard#"
BOUNDARY_PREFIX = "boundary#"
RANGE_PREFIX = "range#"
CHUNK_PREFIX = "chunk#"
CONTENT_PREFIX = "content#"
TOPOLOGY_KEY = "topology"
FLOOR_KEY = "floor"
CHUNK_INTENT = "INTENT"
CHUNK_NOT_LOADED = "NOT_LOADED"
"""A chunk's load provably did not reach Doris, or Doris failed it definitely: send it again."""
_INSTANT_DIGITS = 15
_DEFAULT_PAGE_SIZE = 100


class ABSENT:
    """Marker for an expected attribute that must not exist (``attribute_not_exists``)."""


class CheckpointNotFound(KinesisDorisError, LookupError):
    """An update names a shard, range or chunk that was never stored."""


class ShardNotDrained(KinesisDorisError):
    """``mark_drained`` was asked for a shard whose last range is not loaded (or that is open)."""


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def shard_key(shard_id: str) -> str:
    return f"{SHARD_PREFIX}{shard_id}"


def boundary_key(shard_id: str, instant_ms: int) -> str:
    return f"{BOUNDARY_PREFIX}{shard_id}#{instant_ms:0{_INSTANT_DIGITS}d}"


def range_key(shard_id: str, interval_start_ms: int) -> str:
    return f"{RANGE_PREFIX}{shard_id}#{interval_start_ms:0{_INSTANT_DIGITS}d}"


def chunk_key(shard_id: str, interval_start_ms: int, label: str) -> str:
    return f"{_range_chunks_prefix(shard_id, interval_start_ms)}{label}"


def _range_chunks_prefix(shard_id: str, interval_start_ms: int) -> str:
    return f"{CHUNK_PREFIX}{shard_id}#{interval_start_ms:0{_INSTANT_DIGITS}d}#"


def _range_contents_prefix(shard_id: str, interval_start_ms: int) -> str:
    return f"{CONTENT_PREFIX}{shard_id}#{interval_start_ms:0{_INSTANT_DIGITS}d}#"


def _legacy_chunk_key(label: str) -> str:
    """Where chunks were kept before they were keyed by range (read, never written)."""
    return f"{CHUNK_PREFIX}{label}"


# --- value objects -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ShardCheckpoint:
    """The stored state of one shard.

    ``high_water_mark`` is the end boundary of the longest contiguous run of LOADED ranges from
    the shard's floor (its earliest range); ``lease_counter`` grows with every update and fences
    concurrent writers."""

    shard_id: str
    parent_ids: tuple[str, ...]
    starting_hash_key: int
    ending_hash_key: int
    state: ShardState
    lease_counter: int
    high_water_mark: Boundary | None
    last_lag_ms: int | None
    updated_ms: int
    registered_ms: int | None = None
    """When a run first listed the shard (None for shards registered before this was kept)."""


@dataclass(frozen=True, slots=True)
class ChunkRecord:
    """Intent (``state == "INTENT"``) or outcome (a Doris state such as ``VISIBLE``) of one chunk."""

    label: str
    shard_id: str
    interval_start_ms: int
    first: Position
    last: Position
    state: str
    txn_id: str | None
    rows_loaded: int
    rows_filtered: int
    updated_ms: int


@dataclass(frozen=True, slots=True)
class Floor:
    """The interval ``[start_ms, end_ms)`` whose ranges sweep a TRIM_HORIZON pipeline's shards from
    their start: fixed by the first run that plans, so every later run agrees on it (I10)."""

    start_ms: int
    end_ms: int


@dataclass(frozen=True, slots=True)
class TopologyRecord:
    """The shard set the sensor saw last and the current shard → Spark partition assignment."""

    shard_ids: tuple[str, ...]
    version: int
    assignment: Mapping[str, int] = field(default_factory=dict)
    updated_ms: int = 0


# --- item <-> value object ---------------------------------------------------------------------


def _boundary_from_item(item: Mapping[str, Any]) -> Boundary:
    position = item.get("position")
    return Boundary(
        shard_id=item["shard_id"],
        instant_ms=int(item["instant_ms"]),
        kind=BoundaryKind(item["boundary_kind"]),
        position=Position.decode(position) if position else None,
        # Items written before the attribute existed have none: their boundary carries no hint.
        arrival_ms=item.get("arrival_ms"),
    )


def _boundary_attributes(boundary: Boundary | None, prefix: str) -> dict[str, Any]:
    """Boundary fields flattened under ``prefix`` (None values mean "remove")."""
    if boundary is None:
        return {f"{prefix}instant_ms": None, f"{prefix}kind": None, f"{prefix}position": None}
    return {
        f"{prefix}instant_ms": boundary.instant_ms,
        f"{prefix}kind": boundary.kind.value,
        f"{prefix}position": boundary.position.encode() if boundary.position else None,
    }


def _shard_from_item(item: Mapping[str, Any]) -> ShardCheckpoint:
    mark = None
    if item.get("hwm_kind"):
        mark = _boundary_from_item(
            {
                "shard_id": item["shard_id"],
                "instant_ms": item["hwm_instant_ms"],
                "boundary_kind": item["hwm_kind"],
                "position": item.get("hwm_position"),
            }
        )
    return ShardCheckpoint(
        shard_id=item["shard_id"],
        parent_ids=tuple(item.get("parent_ids", ())),
        starting_hash_key=int(item["starting_hash_key"]),
        ending_hash_key=int(item["ending_hash_key"]),
        state=ShardState(item["state"]),
        lease_counter=int(item["lease_counter"]),
        high_water_mark=mark,
        last_lag_ms=int(item["last_lag_ms"]) if "last_lag_ms" in item else None,
        updated_ms=int(item["updated_ms"]),
        registered_ms=int(item["registered_ms"]) if "registered_ms" in item else None,
    )


def _chunk_from_item(item: Mapping[str, Any]) -> ChunkRecord:
    return ChunkRecord(
        label=item["label"],
        shard_id=item["shard_id"],
        interval_start_ms=int(item["interval_start_ms"]),
        first=Position.decode(item["first"]),
        last=Position.decode(item["last"]),
        state=item["state"],
        txn_id=item.get("txn_id"),
        rows_loaded=int(item.get("rows_loaded", 0)),
        rows_filtered=int(item.get("rows_filtered", 0)),
        updated_ms=int(item["updated_ms"]),
    )


# --- the store ---------------------------------------------------------------------------------


class CheckpointStore:
    """Pipeline state with conditional writes. Implements ``core.store.BoundaryStore``.

    Subclasses provide :meth:`_get`, :meth:`_query`, :meth:`_put_new` and :meth:`_update`.

    :param pipeline_id: the partition this store reads and writes; nothing else is touched.
    :param clock: epoch milliseconds for ``updated_ms`` attributes.
    """

    def __init__(self, pipeline_id: str, *, clock: Callable[[], int] = wall_clock_ms) -> None:
        if not pipeline_id:
            raise ValueError("pipeline_id must not be empty")
        self.pipeline_id = pipeline_id
        self._clock = clock

    # primitives -----------------------------------------------------------------------------

    def _get(self, sk: str) -> dict[str, Any] | None:
        """The item ``sk`` of this pipeline (strongly consistent), or None."""
        raise NotImplementedError

    def _query(
        self, prefix: str, *, low: str | None = None, high: str | None = None, descending: bool = False,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """Items of this pipeline whose ``sk`` starts with ``prefix`` (and is at least ``low``, at
        most ``high``), sorted by ``sk`` (descending if asked), at most ``limit`` of them."""
        raise NotImplementedError

    def _put_new(self, item: dict[str, Any]) -> bool:
        """Store ``item`` (it carries ``sk``) unless its key exists; False if it existed."""
        raise NotImplementedError

    def _update(self, sk: str, changes: Mapping[str, Any], expected: Mapping[str, Any]) -> bool:
        """Apply ``changes`` (None removes the attribute) if the item exists and every ``expected``
        attribute has the given value (``ABSENT``: does not exist). False if the condition failed."""
        raise NotImplementedError

    # shards ---------------------------------------------------------------------------------

    def get_shard(self, shard_id: str) -> ShardCheckpoint | None:
        """The stored shard, or None if it was never registered."""
        item = self._get(shard_key(shard_id))
        return _shard_from_item(item) if item else None

    def list_shard_checkpoints(self) -> list[ShardCheckpoint]:
        """Every shard registered for this pipeline, by shard id."""
        return [_shard_from_item(item) for item in self._query(SHARD_PREFIX)]

    def register_shard(self, info: ShardInfo) -> ShardCheckpoint:
        """Create the shard item (once) with its parents and hash range; OPEN or CLOSED as listed.

        :param info: the shard as ListShards reports it.
        :return: the stored shard (ours, or the one registered first).
        """
        item = {
            "sk": shard_key(info.shard_id),
            "kind": "shard",
            "shard_id": info.shard_id,
            "parent_ids": list(info.parent_ids),
            "starting_hash_key": str(info.starting_hash_key),
            "ending_hash_key": str(info.ending_hash_key),
            "state": (ShardState.OPEN if info.is_open else ShardState.CLOSED).value,
            "lease_counter": 0,
            "updated_ms": self._clock(),
        }
        item["registered_ms"] = item["updated_ms"]
        if self._put_new(item):
            parents = list(info.parent_ids)
            log.info("registered shard %s (parents %s, %s)", info.shard_id, parents, item["state"])
        return self._require_shard(info.shard_id)

    def mark_closed(self, shard_id: str) -> ShardCheckpoint:
        """OPEN → CLOSED (ListShards reports an EndingSequenceNumber). No-op if not OPEN.

        :raises CheckpointConflict: the shard changed between our read and our write.
        """
        shard = self._require_shard(shard_id)
        if shard.state is not ShardState.OPEN:
            return shard
        self._fenced_update(shard, {"state": ShardState.CLOSED.value}, extra_expected={"state": "OPEN"})
        log.info("shard %s is closed", shard_id)
        return self._require_shard(shard_id)

    def advance_high_water_mark(
        self, shard_id: str, *, expected_counter: int, last_lag_ms: int | None = None
    ) -> ShardCheckpoint:
        """Move the shard's high-water mark forward to the end of its contiguous LOADED run.

        Only :meth:`rewind_high_water_mark` moves it back. The write is conditional on
        ``expected_counter`` and on the stored mark, so of two concurrent runs only one advances
        the shard.

        :param shard_id: the shard.
        :param expected_counter: the lease counter this run read (e.g. from its plan).
        :param last_lag_ms: the last MillisBehindLatest seen; replaces the stored one.
        :return: the shard after the update.
        :raises CheckpointConflict: another writer updated the shard since ``expected_counter``.
        """
        shard = self._require_shard(shard_id)
        if shard.lease_counter != expected_counter:
            raise _conflict(shard_id, expected_counter, shard.lease_counter)
        current = shard.high_water_mark
        mark = self.loaded_through(shard_id, current)
        changes: dict[str, Any] = {}
        if mark is not None and mark != current:
            changes.update(_boundary_attributes(mark, "hwm_"))
        if last_lag_ms is not None:
            changes["last_lag_ms"] = last_lag_ms
        if not changes:
            return shard
        hwm_expected = {"hwm_instant_ms": current.instant_ms if current else ABSENT}
        self._fenced_update(shard, changes, extra_expected=hwm_expected)
        if mark is not None and "hwm_kind" in changes:
            log.info("shard %s high-water mark -> %s at %s", shard_id, mark.kind.value, mark.instant_ms)
        return self._require_shard(shard_id)

    def _range_past_an_empty_gap(self, cut: Boundary) -> ShardRange | None:
        """The next stored range after ``cut``, if the intervals between hold no record of the
        shard. They have no range when their runs listed the shards before this one existed (a
        later run of an earlier interval gave it the range that ends at ``cut``). Empty for sure:
        the range starts at the very same cut, ``cut`` is the shard's end, the range starts at the
        shard's start, or the interval before the range was planned before the shard existed."""
        items = self._query(
            f"{RANGE_PREFIX}{cut.shard_id}#", low=range_key(cut.shard_id, cut.instant_ms + 1), limit=1
        )
        if not items:
            return None
        following = self._with_boundaries(items[0])
        resolved = cut.kind is not BoundaryKind.PENDING
        same_cut = (following.start.kind, following.start.position) == (cut.kind, cut.position)
        nothing_between = cut.kind is BoundaryKind.SHARD_END or following.start.kind is BoundaryKind.SHARD_START
        if resolved and (same_cut or nothing_between):
            return following
        return following if self._planned_before_it_existed(cut.shard_id, following.interval_start_ms) else None

    def _planned_before_it_existed(self, shard_id: str, until_ms: int) -> bool:
        """Whether an ancestor's range of an interval ending at ``until_ms`` was planned before
        this shard was registered. Every run registers each shard it lists before it plans any
        range, so that run did not list this one: it was created later, after the interval's end
        (runs plan sealed intervals only), and holds no record before ``until_ms``."""
        shard = self.get_shard(shard_id)
        if shard is None or shard.registered_ms is None:
            return False
        ancestors, seen = list(shard.parent_ids), set()
        while ancestors:
            ancestor = ancestors.pop()
            if ancestor in seen:
                continue
            seen.add(ancestor)
            items = self._query(f"{RANGE_PREFIX}{ancestor}#", high=range_key(ancestor, until_ms - 1), descending=True, limit=1)
            if items and int(items[0]["interval_end_ms"]) == until_ms and "planned_ms" in items[0]:
                if int(items[0]["planned_ms"]) < shard.registered_ms:
                    return True
            if (checkpoint := self.get_shard(ancestor)) is not None:
                ancestors.extend(checkpoint.parent_ids)
        return False

    def rewind_high_water_mark(self, shard_id: str, before_ms: int) -> ShardCheckpoint:
        """Drop the shard's high-water mark if it lies past ``before_ms``, where a range that is
        not loaded starts (a backfill before the shard's earliest range): the mark claims that
        everything before it is loaded, so it restarts from that range. A DRAINED shard becomes
        CLOSED again until the commit that loads the range drains it.

        :raises CheckpointConflict: another writer updated the shard concurrently (re-plan).
        """
        shard = self._require_shard(shard_id)
        mark = shard.high_water_mark
        if mark is None or mark.instant_ms <= before_ms:
            return shard
        changes: dict[str, Any] = _boundary_attributes(None, "hwm_")
        if shard.state is ShardState.DRAINED:
            changes["state"] = ShardState.CLOSED.value
        self._fenced_update(shard, changes, extra_expected={"hwm_instant_ms": mark.instant_ms})
        log.warning(
            "shard %s: a range starting at %d is not loaded yet and lies before the high-water mark "
            "(%s at %d); the mark restarts from it", shard_id, before_ms, mark.kind.value, mark.instant_ms,
        )  # fmt: skip
        return self._require_shard(shard_id)

    def loaded_through(self, shard_id: str, since: Boundary | None = None) -> Boundary | None:
        """End of the contiguous run of LOADED ranges from the shard's earliest range.

        Walks forward from ``since`` (the stored high-water mark, which lies on that run) one range
        at a time, so a run reads the ranges loaded since the mark moved, not the shard's history.

        :param since: a boundary the run is known to reach; None: start at the earliest range.
        :return: the run's end, or None if the earliest range is not loaded.
        """
        # The stored mark is a copy of a boundary taken when it moved; a PENDING cut may have been
        # resolved since (to SHARD_END when the shard closed without a record after it).
        mark = self.get_boundary(shard_id, since.instant_ms) or since if since is not None else None
        if mark is None:
            first = self.earliest_range(shard_id)
            if first is None or first.state is not RangeState.LOADED:
                return None
            mark = first.end
        while mark.kind is not BoundaryKind.SHARD_END:
            following = self.get_range(shard_id, mark.instant_ms) or self._range_past_an_empty_gap(mark)
            if following is None:
                break
            # Across an empty gap, everything before the next range is loaded: its children may
            # read the intervals the gap spans (the next range is read before them).
            mark = following.start if following.interval_start_ms != mark.instant_ms else mark
            if following.state is not RangeState.LOADED:
                break
            mark = following.end
        if mark.kind is BoundaryKind.PENDING:
            # A cut left PENDING (no reader met it) after a cut that is the shard's end is the end
            # too; otherwise the run would stop there for good when no later range is needed.
            earlier = self.boundary_at_or_before(shard_id, mark.instant_ms - 1)
            if earlier is not None and earlier.kind is BoundaryKind.SHARD_END:
                return Boundary(shard_id, mark.instant_ms, BoundaryKind.SHARD_END)
        return mark

    def mark_drained(self, shard_id: str, *, expected_counter: int | None = None) -> ShardCheckpoint:
        """CLOSED → DRAINED, only once the high-water mark is SHARD_END (its last range is loaded).

        Drops the stored lag: a drained shard has none.

        :param expected_counter: fence on this counter; default: the counter read now.
        :raises ShardNotDrained: the shard is open, or its loaded run does not reach SHARD_END.
        :raises CheckpointConflict: another writer updated the shard concurrently.
        """
        shard = self._require_shard(shard_id)
        if shard.state is ShardState.DRAINED:
            return shard
        if expected_counter is not None and shard.lease_counter != expected_counter:
            raise _conflict(shard_id, expected_counter, shard.lease_counter)
        mark = shard.high_water_mark
        if shard.state is not ShardState.CLOSED or mark is None or mark.kind is not BoundaryKind.SHARD_END:
            described = f"{mark.kind.value} at {mark.instant_ms}" if mark else "none"
            raise ShardNotDrained(
                f"Shard {shard_id} of pipeline {self.pipeline_id} cannot be marked drained: state "
                f"{shard.state.value}, high-water mark {described} (needs CLOSED and SHARD_END)"
            )
        changes = {"state": ShardState.DRAINED.value, "last_lag_ms": None}
        self._fenced_update(shard, changes, extra_expected={"state": ShardState.CLOSED.value})
        log.info("shard %s is drained", shard_id)
        return self._require_shard(shard_id)

    def _require_shard(self, shard_id: str) -> ShardCheckpoint:
        shard = self.get_shard(shard_id)
        if shard is None:
            raise CheckpointNotFound(f"Shard {shard_id} is not registered in pipeline {self.pipeline_id}")
        return shard

    def _fenced_update(
        self, shard: ShardCheckpoint, changes: Mapping[str, Any], *, extra_expected: Mapping[str, Any]
    ) -> None:
        """Apply ``changes`` and bump the counter, if the counter is still the one read."""
        all_changes = {**changes, "lease_counter": shard.lease_counter + 1, "updated_ms": self._clock()}
        expected = {"lease_counter": shard.lease_counter, **extra_expected}
        if not self._update(shard_key(shard.shard_id), all_changes, expected):
            stored = self.get_shard(shard.shard_id)
            raise _conflict(shard.shard_id, shard.lease_counter, stored.lease_counter if stored else None)

    # boundaries (core.store.BoundaryStore) ------------------------------------------------------

    def get_boundary(self, shard_id: str, instant_ms: int) -> Boundary | None:
        """The stored boundary of ``shard_id`` at ``instant_ms``, or None if never resolved."""
        item = self._get(boundary_key(shard_id, instant_ms))
        return _boundary_from_item(item) if item else None

    def put_boundary(self, boundary: Boundary) -> Boundary:
        """Store ``boundary`` unless one exists for its (shard, instant); return the stored one."""
        item = {
            "sk": boundary_key(boundary.shard_id, boundary.instant_ms),
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
        if self._put_new(item):
            return boundary
        stored = self.get_boundary(boundary.shard_id, boundary.instant_ms)
        assert stored is not None, "a put-once item existed a moment ago and items are never deleted"
        return stored

    def resolve_pending(self, proposed: Boundary) -> Boundary:
        """Replace the stored PENDING boundary with the concrete ``proposed`` one, only if it is
        still PENDING; return what is stored after the attempt (follow it, not the proposal).
        If nothing is stored yet, ``proposed`` is put once.

        :raises ValueError: ``proposed`` is itself PENDING.
        """
        if not proposed.is_concrete:
            raise ValueError(
                f"Cannot resolve boundary of shard {proposed.shard_id} at {proposed.instant_ms} to PENDING"
            )
        changes = {
            "boundary_kind": proposed.kind.value,
            "position": proposed.position.encode() if proposed.position else None,
            "arrival_ms": proposed.arrival_ms,
            "resolved_ms": self._clock(),
        }
        sk = boundary_key(proposed.shard_id, proposed.instant_ms)
        if self._update(sk, changes, {"boundary_kind": BoundaryKind.PENDING.value}):
            log.info("boundary of shard %s at %s: %s", proposed.shard_id, proposed.instant_ms, proposed)
            return proposed
        stored = self.get_boundary(proposed.shard_id, proposed.instant_ms)
        return stored if stored is not None else self.put_boundary(proposed)

    def boundaries_for_shard(self, shard_id: str) -> list[Boundary]:
        """Every stored boundary of the shard, by instant."""
        return [_boundary_from_item(item) for item in self._query(f"{BOUNDARY_PREFIX}{shard_id}#")]

    def boundary_at_or_before(self, shard_id: str, instant_ms: int) -> Boundary | None:
        """The stored boundary of the shard at the latest instant not after ``instant_ms`` (one
        item read)."""
        items = self._query(
            f"{BOUNDARY_PREFIX}{shard_id}#", high=boundary_key(shard_id, instant_ms), descending=True, limit=1
        )
        return _boundary_from_item(items[0]) if items else None

    # ranges ---------------------------------------------------------------------------------

    def get_range(self, shard_id: str, interval_start_ms: int) -> ShardRange | None:
        """The stored range of the interval starting at ``interval_start_ms``, or None."""
        item = self._get(range_key(shard_id, interval_start_ms))
        return self._with_boundaries(item) if item is not None else None

    def ranges_for_shard(self, shard_id: str) -> list[ShardRange]:
        """Every stored range of the shard, by interval start (two Queries over its history: for
        operations and tests, not for the per-run path)."""
        boundaries = {b.instant_ms: b for b in self.boundaries_for_shard(shard_id)}
        return [self._range_from_item(item, boundaries) for item in self._query(f"{RANGE_PREFIX}{shard_id}#")]

    def earliest_range(self, shard_id: str) -> ShardRange | None:
        """The shard's range of the earliest interval, or None (one item read)."""
        return self._neighbour_range(shard_id, None, descending=False)

    def range_before(self, shard_id: str, interval_start_ms: int) -> ShardRange | None:
        """The shard's range of the latest interval starting before ``interval_start_ms``."""
        if interval_start_ms <= 0:
            return None
        return self._neighbour_range(shard_id, range_key(shard_id, interval_start_ms - 1), descending=True)

    def _neighbour_range(self, shard_id: str, high: str | None, *, descending: bool) -> ShardRange | None:
        items = self._query(f"{RANGE_PREFIX}{shard_id}#", high=high, descending=descending, limit=1)
        return self._with_boundaries(items[0]) if items else None

    def _with_boundaries(self, item: Mapping[str, Any]) -> ShardRange:
        shard_id = item["shard_id"]
        start = self.get_boundary(shard_id, int(item["start_instant_ms"]))
        end = self.get_boundary(shard_id, int(item["end_instant_ms"]))
        return self._range_from_item(item, {b.instant_ms: b for b in (start, end) if b is not None})

    def create_range(self, shard_range: ShardRange) -> ShardRange:
        """Store a PLANNED range once. Its two boundaries must already be stored.

        :return: the stored range: ours, or the one a concurrent planner stored first.
        """
        item = {
            "sk": range_key(shard_range.shard_id, shard_range.interval_start_ms),
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
        self._put_new(item)
        stored = self.get_range(shard_range.shard_id, shard_range.interval_start_ms)
        assert stored is not None, "a put-once item existed a moment ago and items are never deleted"
        return stored

    def mark_range_loaded(
        self, shard_id: str, interval_start_ms: int, counts: Mapping[str, int] | None = None
    ) -> ShardRange:
        """PLANNED → LOADED with its counts (records read, rows loaded, ...). Idempotent.

        :raises CheckpointNotFound: no such range.
        """
        sk = range_key(shard_id, interval_start_ms)
        changes = {
            "state": RangeState.LOADED.value,
            "counts": dict(counts or {}),
            "updated_ms": self._clock(),
        }
        self._update(sk, changes, {"state": RangeState.PLANNED.value})
        stored = self.get_range(shard_id, interval_start_ms)
        if stored is None:
            raise CheckpointNotFound(f"No range of shard {shard_id} for interval start {interval_start_ms}")
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
        sk = range_key(shard_id, interval_start_ms)
        self._update(sk, {"chunk_max_rows": max_rows, "chunk_max_bytes": max_bytes}, {"chunk_max_rows": ABSENT})
        item = self._get(sk)
        if item is None:
            raise CheckpointNotFound(f"No range of shard {shard_id} for interval start {interval_start_ms}")
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
        item = self._get(range_key(shard_id, interval_start_ms))
        return int(item["planned_ms"]) if item is not None and "planned_ms" in item else None

    def range_counts(self, shard_id: str, interval_start_ms: int) -> dict[str, int]:
        """The counts stored when the range was marked loaded (empty before)."""
        item = self._get(range_key(shard_id, interval_start_ms))
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
        )

    # chunks (I7) ----------------------------------------------------------------------------

    def record_chunk_intent(
        self, label: str, shard_id: str, first: Position, last: Position, range_key: int
    ) -> ChunkRecord:
        """Record, before loading, that chunk ``label`` holds ``first..last`` of a range.

        :param range_key: the interval start of the range the chunk belongs to.
        :return: the stored chunk: a new intent, or what an earlier attempt recorded.
        """
        self.put_chunk_intent(label, shard_id, first, last, range_key)
        return self._require_chunk(label, shard_id, range_key)

    def put_chunk_intent(self, label: str, shard_id: str, first: Position, last: Position, range_key: int) -> bool:
        """:meth:`record_chunk_intent`, telling whether this call created the intent (False: another
        attempt had recorded the chunk already, and may have sent it)."""
        item = {
            "sk": chunk_key(shard_id, range_key, label),
            "kind": "chunk",
            "label": label,
            "shard_id": shard_id,
            "interval_start_ms": range_key,
            "first": first.encode(),
            "last": last.encode(),
            "state": CHUNK_INTENT,
            "updated_ms": self._clock(),
        }
        return self._put_new(item)

    def record_chunk_outcome(
        self,
        label: str,
        state: str,
        txn_id: str | None = None,
        *,
        shard_id: str,
        interval_start_ms: int,
        rows_loaded: int = 0,
        rows_filtered: int = 0,
        expected_state: str | None = None,
    ) -> ChunkRecord:
        """Record the outcome of chunk ``label`` of the range ``(shard_id, interval_start_ms)`` (a
        Doris load state such as VISIBLE or ABORTED).

        :param expected_state: write only if the stored state is this one (a lost race leaves the
            stored chunk as it is, and it is returned).
        :raises CheckpointNotFound: no intent was recorded for ``label``.
        """
        changes = {
            "state": state,
            "txn_id": txn_id,
            "rows_loaded": rows_loaded,
            "rows_filtered": rows_filtered,
            "updated_ms": self._clock(),
        }
        keys = (chunk_key(shard_id, interval_start_ms, label), _legacy_chunk_key(label))
        expected = {"state": expected_state} if expected_state is not None else {}
        any(self._update(sk, changes, expected) for sk in keys)
        stored = self.get_chunk(label, shard_id, interval_start_ms)
        if stored is None:
            raise CheckpointNotFound(f"No intent recorded for chunk {label} in pipeline {self.pipeline_id}")
        return stored

    def get_chunk(self, label: str, shard_id: str, interval_start_ms: int) -> ChunkRecord | None:
        """The chunk ``label`` of the range ``(shard_id, interval_start_ms)``, or None."""
        item = self._get(chunk_key(shard_id, interval_start_ms, label)) or self._get(_legacy_chunk_key(label))
        return _chunk_from_item(item) if item else None

    def chunks_for_range(self, shard_id: str, interval_start_ms: int) -> list[ChunkRecord]:
        """The chunks recorded for one range, ordered by their first position (one Query of the
        range's own chunk items; ranges planned before chunks were keyed by range also look at
        the pipeline's chunk items of that older layout)."""
        items = self._query(_range_chunks_prefix(shard_id, interval_start_ms))
        range_item = self._get(range_key(shard_id, interval_start_ms))
        if range_item is not None and "planned_ms" not in range_item:
            items += [item for item in self._query(CHUNK_PREFIX) if item["sk"] == _legacy_chunk_key(item["label"])]
        chunks = (_chunk_from_item(item) for item in items)
        selected = [c for c in chunks if c.shard_id == shard_id and c.interval_start_ms == interval_start_ms]
        return sorted(selected, key=lambda c: c.first)

    def settle_chunk_content(self, shard_id: str, interval_start_ms: int, first: Position, content: str) -> str:
        """Fix a chunk's content (which of its records are dead letters, encoded by
        ``core.chunks.ChunkContent``) before its first load: the first writer's is stored once and
        returned to everyone.

        :param content: at most ``core.chunks`` keeps under DynamoDB's item size.
        """
        sk = f"{_range_contents_prefix(shard_id, interval_start_ms)}{first.encode()}"
        self._put_new({"sk": sk, "kind": "chunk_content", "content": content, "updated_ms": self._clock()})
        item = self._get(sk)
        assert item is not None, "a put-once item existed a moment ago and items are never deleted"
        return str(item["content"])

    def amend_chunk_content(self, shard_id: str, interval_start_ms: int, first: Position, settled: str, amended: str) -> str:
        """Replace a chunk's settled content, only if it is still ``settled``: for rows Doris refused
        when the chunk was loaded as settled (its load failed whole, so nothing of it is visible).

        :return: the content stored now (ours, or another run's amendment that came first).
        """
        sk = f"{_range_contents_prefix(shard_id, interval_start_ms)}{first.encode()}"
        self._update(sk, {"content": amended, "updated_ms": self._clock()}, {"content": settled})
        item = self._get(sk)
        assert item is not None, "settled contents are never deleted"
        return str(item["content"])

    def chunk_contents_for_range(self, shard_id: str, interval_start_ms: int) -> list[str]:
        """The settled contents of the range's chunks (one Query of the range's own items)."""
        return [str(item["content"]) for item in self._query(_range_contents_prefix(shard_id, interval_start_ms))]

    def _require_chunk(self, label: str, shard_id: str, interval_start_ms: int) -> ChunkRecord:
        chunk = self.get_chunk(label, shard_id, interval_start_ms)
        if chunk is None:
            raise CheckpointNotFound(f"No chunk {label} in pipeline {self.pipeline_id}")
        return chunk

    # floor ----------------------------------------------------------------------------------

    def settle_floor(self, start_ms: int, end_ms: int) -> Floor:
        """The pipeline's floor interval: ``[start_ms, end_ms)`` if none is stored yet (conditional
        put), else the stored one. Two first runs racing agree on the winner's."""
        self._put_new({"sk": FLOOR_KEY, "kind": "floor", "start_ms": start_ms, "end_ms": end_ms,
                       "updated_ms": self._clock()})  # fmt: skip
        item = self._get(FLOOR_KEY)
        assert item is not None, "a put-once item existed a moment ago and items are never deleted"
        return Floor(int(item["start_ms"]), int(item["end_ms"]))

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


def _conflict(shard_id: str, expected: int, stored: int | None) -> CheckpointConflict:
    return CheckpointConflict(
        f"Shard {shard_id}: expected lease counter {expected}, stored counter is {stored}; "
        "another run updated this shard"
    )


# --- DynamoDB ----------------------------------------------------------------------------------


def _to_python(value: Any) -> Any:
    """DynamoDB's Decimals back to ints (we store only integral numbers)."""
    if isinstance(value, Decimal):
        return int(value)
    if isinstance(value, list):
        return [_to_python(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_python(v) for k, v in value.items()}
    return value


def _is_condition_failure(error: ClientError) -> bool:
    return error.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException"


class DynamoCheckpointStore(CheckpointStore):
    """:class:`CheckpointStore` on a DynamoDB table (``pk``/``sk`` strings).

    :param client: a boto3 DynamoDB client.
    :param table_name: the table; see :meth:`create_table_if_missing`.
    :param pipeline_id: the partition key of every item this store touches.
    :param page_size: Query ``Limit``; pages are always followed to the end.
    :param clock: epoch milliseconds for ``updated_ms`` attributes.
    """

    def __init__(
        self,
        client: Any,
        table_name: str,
        pipeline_id: str,
        *,
        page_size: int = _DEFAULT_PAGE_SIZE,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        super().__init__(pipeline_id, clock=clock)
        if page_size < 1:
            raise ValueError(f"page_size must be positive, got {page_size}")
        from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

        self._client = client
        self.table_name = table_name
        self._page_size = page_size
        self._serializer = TypeSerializer()
        self._deserializer = TypeDeserializer()

    def create_table_if_missing(self, *, wait_seconds: int = 120) -> None:
        """Create the table (on-demand billing) unless it exists; wait until it is ACTIVE."""
        try:
            self._client.describe_table(TableName=self.table_name)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
                raise
            self._create_table()
        waiter = self._client.get_waiter("table_exists")
        waiter.wait(TableName=self.table_name, WaiterConfig={"Delay": 1, "MaxAttempts": wait_seconds})

    def _create_table(self) -> None:
        try:
            self._client.create_table(
                TableName=self.table_name,
                AttributeDefinitions=[
                    {"AttributeName": "pk", "AttributeType": "S"},
                    {"AttributeName": "sk", "AttributeType": "S"},
                ],
                KeySchema=[
                    {"AttributeName": "pk", "KeyType": "HASH"},
                    {"AttributeName": "sk", "KeyType": "RANGE"},
                ],
                BillingMode="PAY_PER_REQUEST",
            )
            log.info("created checkpoint table %s", self.table_name)
        except ClientError as error:
            # Another process created it between our describe and create.
            if error.response.get("Error", {}).get("Code") != "ResourceInUseException":
                raise

    def _key(self, sk: str) -> dict[str, Any]:
        return {"pk": {"S": self.pipeline_id}, "sk": {"S": sk}}

    def _decode(self, item: Mapping[str, Any]) -> dict[str, Any]:
        return {name: _to_python(self._deserializer.deserialize(value)) for name, value in item.items()}

    def _get(self, sk: str) -> dict[str, Any] | None:
        response = self._client.get_item(TableName=self.table_name, Key=self._key(sk), ConsistentRead=True)
        item = response.get("Item")
        return self._decode(item) if item else None

    def _query(
        self, prefix: str, *, low: str | None = None, high: str | None = None, descending: bool = False,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        values: dict[str, Any] = {":pk": {"S": self.pipeline_id}, ":prefix": {"S": prefix}}
        condition = "pk = :pk AND begins_with(sk, :prefix)"
        if low is not None or high is not None:
            # Keys of one prefix sort below prefix + U+FFFF (they are ASCII).
            condition = "pk = :pk AND sk BETWEEN :low AND :high"
            values = {":pk": values[":pk"], ":low": {"S": low or prefix}, ":high": {"S": high or prefix + "\uffff"}}
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": condition,
            "ExpressionAttributeValues": values,
            "ConsistentRead": True,
            "ScanIndexForward": not descending,
            "Limit": min(self._page_size, limit) if limit else self._page_size,
        }
        items: list[dict[str, Any]] = []
        while True:
            response = self._client.query(**request)
            items.extend(self._decode(item) for item in response.get("Items", []))
            if "LastEvaluatedKey" not in response or (limit and len(items) >= limit):
                return items[:limit] if limit else items
            request["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    def _put_new(self, item: dict[str, Any]) -> bool:
        attributes = {name: self._serializer.serialize(v) for name, v in item.items() if v is not None}
        attributes["pk"] = {"S": self.pipeline_id}
        try:
            self._client.put_item(
                TableName=self.table_name, Item=attributes, ConditionExpression="attribute_not_exists(sk)"
            )
        except ClientError as error:
            if _is_condition_failure(error):
                return False
            raise
        return True

    def _update(self, sk: str, changes: Mapping[str, Any], expected: Mapping[str, Any]) -> bool:
        names: dict[str, str] = {}
        values: dict[str, Any] = {}
        sets, removes, conditions = [], [], ["attribute_exists(sk)"]
        for index, (attribute, value) in enumerate(changes.items()):
            names[f"#c{index}"] = attribute
            if value is None:
                removes.append(f"#c{index}")
            else:
                values[f":c{index}"] = self._serializer.serialize(value)
                sets.append(f"#c{index} = :c{index}")
        for index, (attribute, value) in enumerate(expected.items()):
            names[f"#e{index}"] = attribute
            if value is ABSENT:
                conditions.append(f"attribute_not_exists(#e{index})")
            else:
                values[f":e{index}"] = self._serializer.serialize(value)
                conditions.append(f"#e{index} = :e{index}")
        clauses = [f"SET {', '.join(sets)}"] if sets else []
        if removes:
            clauses.append(f"REMOVE {', '.join(removes)}")
        expression = " ".join(clauses)
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "Key": self._key(sk),
            "UpdateExpression": expression,
            "ConditionExpression": " AND ".join(conditions),
            "ExpressionAttributeNames": names,
        }
        if values:
            request["ExpressionAttributeValues"] = values
        try:
            self._client.update_item(**request)
        except ClientError as error:
            if _is_condition_failure(error):
                return False
            raise
        return True
