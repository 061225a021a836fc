"""The shard ledger: each shard's item (its lifecycle, lease counter and marks), its cuts
(boundaries) and the pipeline's shard set (topology)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from airflow_provider_kinesis_doris.core.errors import CheckpointConflict, CheckpointNotFound
from airflow_provider_kinesis_doris.core.model import Boundary, BoundaryKind, ShardInfo, ShardState, describe_instant
from airflow_provider_kinesis_doris.core.stores.items import (
    BOUNDARY_PREFIX,
    SHARD_PREFIX,
    TOPOLOGY_KEY,
    boundary_from_item,
    boundary_sk,
    shard_attributes,
    shard_from_item,
    shard_sk,
    ShardCheckpoint,
    TopologyRecord,
)
from airflow_provider_kinesis_doris.core.stores.primitives import StoreItems

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FencedUpdate:
    """``changes`` to a shard, applied only if its counter is still ``shard``'s and every
    ``extra_expected`` attribute holds (:meth:`ShardLedger.fenced_update`)."""

    shard: ShardCheckpoint
    changes: Mapping[str, Any]
    extra_expected: Mapping[str, Any]


class BoundaryStore(Protocol):
    """Boundaries are written once; a PENDING one is made concrete once."""

    def get_boundary(self, shard_id: str, instant_ms: int) -> Boundary | None:
        """The stored boundary of ``shard_id`` at ``instant_ms``, or None if never resolved."""

    def put_boundary(self, boundary: Boundary) -> Boundary:
        """Store ``boundary`` unless one exists for its (shard, instant); return the stored one
        (ours, or the one that won)."""

    def resolve_pending(self, proposed: Boundary) -> Boundary:
        """Replace the stored PENDING boundary at (proposed.shard_id, proposed.instant_ms) with
        the concrete ``proposed`` one, only if it is still PENDING; return what is stored after
        the attempt. The caller must follow the returned boundary, not its proposal."""


class ShardLedger:
    """Shards and their cuts on the store's items.

    :param items: the pipeline's items.
    """

    def __init__(self, items: StoreItems) -> None:
        self._items = items
        self._settled_boundaries: dict[tuple[str, int], Boundary] = {}
        """Concrete boundaries seen (they never change): :meth:`get_boundary`."""

    @property
    def pipeline_id(self) -> str:
        """The pipeline whose shards these are (the steps that take the ledger alone name it)."""
        return self._items.pipeline_id

    # boundaries (BoundaryStore) ---------------------------------------------------------------

    def get_boundary(self, shard_id: str, instant_ms: int) -> Boundary | None:
        """The stored boundary of ``shard_id`` at ``instant_ms``, or None if never resolved.

        A concrete boundary never changes once stored (put once; only PENDING is resolved, once),
        so this store remembers the ones it has seen: every range read needs its two cuts, and a
        run reads the same ranges while it plans, checks, loads and commits."""
        settled = self._settled_boundaries.get((shard_id, instant_ms))
        if settled is not None:
            return settled
        item = self._items.get(boundary_sk(shard_id, instant_ms))
        return self._settle(boundary_from_item(item)) if item else None

    def read_boundaries(self, shard_ids: Iterable[str], instant_ms: int) -> dict[str, Boundary]:
        """The shards' boundaries stored at ``instant_ms``, PENDING ones too, read in batches
        (BatchGetItem); the concrete ones are remembered as :meth:`get_boundary` remembers them, so
        that it answers them from memory: a run plans every shard from the cut at its interval's
        start, which the previous interval stored."""
        items = self._items.get_many([boundary_sk(shard_id, instant_ms) for shard_id in shard_ids]).values()
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
        return self.put_boundaries([boundary])[0]

    def put_boundaries(self, boundaries: Sequence[Boundary]) -> list[Boundary]:
        """:meth:`put_boundary` of each (of distinct shards or instants), handed over at once:
        grouped transactions of as many as fit; the stored ones, in order."""
        written = self._items.put_new_grouped_all([self.boundary_item(boundary) for boundary in boundaries])
        return [self._settle(boundary) if ok else self._stored(boundary) for boundary, ok in zip(boundaries, written)]

    def _stored(self, boundary: Boundary) -> Boundary:
        """The boundary that won the put of ``boundary``."""
        stored = self.get_boundary(boundary.shard_id, boundary.instant_ms)
        assert stored is not None, "a put-once item existed a moment ago and items are never deleted"
        return stored

    def boundary_item(self, boundary: Boundary) -> dict[str, Any]:
        """The item that stores ``boundary`` (put once), for a planner that puts it in the same
        request as its range (``RangeBook.create_range``)."""
        item = {
            "sk": boundary_sk(boundary.shard_id, boundary.instant_ms),
            "kind": "boundary",
            "shard_id": boundary.shard_id,
            "instant_ms": boundary.instant_ms,
            "boundary_kind": boundary.kind.value,
            "resolved_ms": self._items.clock(),
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
            "resolved_ms": self._items.clock(),
        }
        sk = boundary_sk(proposed.shard_id, proposed.instant_ms)
        if self._items.update(sk, changes, {"boundary_kind": BoundaryKind.PENDING.value}):
            log.info("boundary of shard %s: %s", proposed.shard_id, proposed.describe())
            return self._settle(proposed)
        stored = self.get_boundary(proposed.shard_id, proposed.instant_ms)
        return stored if stored is not None else self.put_boundary(proposed)

    def boundaries_for_shard(self, shard_id: str) -> list[Boundary]:
        """Every stored boundary of the shard, by instant."""
        return [self._settle(boundary_from_item(item)) for item in self._items.query(f"{BOUNDARY_PREFIX}{shard_id}#")]

    def boundary_at_or_before(self, shard_id: str, instant_ms: int) -> Boundary | None:
        """The stored boundary of the shard at the latest instant not after ``instant_ms`` (one
        item read)."""
        items = self._items.query(
            f"{BOUNDARY_PREFIX}{shard_id}#", high=boundary_sk(shard_id, instant_ms), descending=True, limit=1
        )
        return self._settle(boundary_from_item(items[0])) if items else None

    def earliest_same_cut(self, after: Boundary, cut: Boundary) -> int | None:
        """The earliest instant after ``after`` whose stored cut of the shard is ``cut`` (no record
        lies between the two), before ``cut``'s own instant; None if there is none."""
        items = self._items.query(
            f"{BOUNDARY_PREFIX}{cut.shard_id}#", low=boundary_sk(cut.shard_id, after.instant_ms + 1),
            high=boundary_sk(cut.shard_id, cut.instant_ms - 1),
        )  # fmt: skip
        stored = (self._settle(boundary_from_item(item)) for item in items)
        return next((boundary.instant_ms for boundary in stored if boundary.same_cut(cut)), None)

    def cuts_between(self, shard_id: str, low_ms: int, high_ms: int) -> list[Boundary]:
        """The shard's stored cuts at instants from ``low_ms`` to ``high_ms``, earliest first."""
        items = self._items.query(
            f"{BOUNDARY_PREFIX}{shard_id}#", low=boundary_sk(shard_id, low_ms), high=boundary_sk(shard_id, high_ms)
        )
        return [self._settle(boundary_from_item(item)) for item in items]

    def forget_cuts_before(self, shard_id: str, instant_ms: int) -> int:
        """Delete the shard's cuts before ``instant_ms`` (pruned history: the ranges that referenced
        them went first); items deleted."""
        if instant_ms <= 0:
            return 0
        doomed = [item["sk"] for item in self._items.query(f"{BOUNDARY_PREFIX}{shard_id}#", high=boundary_sk(shard_id, instant_ms - 1))]
        self._items.delete(doomed)
        return len(doomed)

    # shards ---------------------------------------------------------------------------------

    def get_shard(self, shard_id: str) -> ShardCheckpoint | None:
        """The stored shard, or None if it was never registered."""
        item = self._items.get(shard_sk(shard_id))
        return shard_from_item(item) if item else None

    def list_shard_checkpoints(self) -> list[ShardCheckpoint]:
        """Every shard registered for this pipeline, by shard id."""
        return [shard_from_item(item) for item in self._items.query(SHARD_PREFIX)]

    def register_shard(self, info: ShardInfo) -> ShardCheckpoint:
        """Create the shard item (once) with its parents and hash range; OPEN or CLOSED as listed.

        :param info: the shard as ListShards reports it.
        :return: the stored shard (ours, or the one registered first).
        """
        item = {
            "sk": shard_sk(info.shard_id),
            "kind": "shard",
            "shard_id": info.shard_id,
            "parent_ids": list(info.parent_ids),
            "starting_hash_key": str(info.starting_hash_key),
            "ending_hash_key": str(info.ending_hash_key),
            "state": (ShardState.OPEN if info.is_open else ShardState.CLOSED).value,
            "lease_counter": 0,
            "updated_ms": self._items.clock(),
        }
        item["registered_ms"] = item["updated_ms"]
        # A new stream's first run registers every shard at once: grouped, one request carries several.
        if self._items.put_new_grouped(item):
            parents = list(info.parent_ids)
            log.info("registered shard %s (parents %s, %s)", info.shard_id, parents, item["state"])
            return shard_from_item(item)
        return self.require_shard(info.shard_id)

    def mark_closed(self, shard_id: str) -> ShardCheckpoint:
        """OPEN → CLOSED (ListShards reports an EndingSequenceNumber). No-op if not OPEN.

        :raises CheckpointConflict: the shard changed between our read and our write.
        """
        shard = self.require_shard(shard_id)
        if shard.state is not ShardState.OPEN:
            return shard
        closed = self.fenced_update(shard, {"state": ShardState.CLOSED.value}, extra_expected={"state": "OPEN"})
        log.info("shard %s is closed", shard_id)
        return closed

    def require_shard(self, shard_id: str) -> ShardCheckpoint:
        shard = self.get_shard(shard_id)
        if shard is None:
            raise CheckpointNotFound(f"Shard {shard_id} is not registered in pipeline {self._items.pipeline_id}")
        return shard

    def fenced_update(
        self, shard: ShardCheckpoint, changes: Mapping[str, Any], *, extra_expected: Mapping[str, Any],
        grouped: bool = False,
    ) -> ShardCheckpoint:
        """Apply ``changes`` and bump the counter, if the counter is still the one read.

        :param grouped: the write may go with other threads' writes (the store's grouped update).
        :return: the shard as updated."""
        if grouped:
            updated = self.fenced_updates([FencedUpdate(shard, changes, extra_expected)])[0]
        else:
            sk, all_changes, expected = self._fenced(FencedUpdate(shard, changes, extra_expected))
            item = self._items.update(sk, all_changes, expected)
            updated = shard_from_item(item) if item is not None else None
        if updated is None:
            stored = self.get_shard(shard.shard_id)
            raise lease_conflict(shard.shard_id, shard.lease_counter, stored.lease_counter if stored else None)
        return updated

    def fenced_updates(self, updates: Sequence[FencedUpdate]) -> list[ShardCheckpoint | None]:
        """:meth:`fenced_update` of each, in one grouped write (transactions of many shards): each
        shard as updated, or None where its counter had moved (the caller reads it again)."""
        writes = [self._fenced(update) for update in updates]
        applied = self._items.update_grouped_all(writes)
        updated: list[ShardCheckpoint | None] = []
        for update, (_, all_changes, _), ok in zip(updates, writes, applied):
            # The counter held, so the stored shard was ``update.shard``: it is now that with the changes.
            merged = {**shard_attributes(update.shard), **all_changes}
            updated.append(shard_from_item({name: value for name, value in merged.items() if value is not None}) if ok else None)
        return updated

    def _fenced(self, update: FencedUpdate) -> tuple[str, dict[str, Any], dict[str, Any]]:
        """The conditional update of :meth:`fenced_update`: its key, its changes with the counter
        bumped, and its condition."""
        shard = update.shard
        all_changes = {**update.changes, "lease_counter": shard.lease_counter + 1, "updated_ms": self._items.clock()}
        return shard_sk(shard.shard_id), all_changes, {"lease_counter": shard.lease_counter, **update.extra_expected}

    # topology -------------------------------------------------------------------------------

    def get_topology(self) -> TopologyRecord | None:
        item = self._items.get(TOPOLOGY_KEY)
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
            "updated_ms": self._items.clock(),
        }
        if expected_version is None:
            stored = self._items.put_new({"sk": TOPOLOGY_KEY, "kind": "topology", **values})
        else:
            stored = self._items.update(TOPOLOGY_KEY, values, {"version": expected_version})
        if not stored:
            current = self.get_topology()
            raise CheckpointConflict(
                f"Topology of pipeline {self._items.pipeline_id}: expected version {expected_version}, "
                f"stored version is {current.version if current else None}"
            )
        return self.get_topology()  # type: ignore[return-value]


def lease_conflict(shard_id: str, expected: int, stored: int | None) -> CheckpointConflict:
    return CheckpointConflict(
        f"Shard {shard_id}: expected lease counter {expected}, stored counter is {stored}; "
        "another run updated this shard"
    )
