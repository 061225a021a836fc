"""The store's fenced primitives: what every pipeline-state write is built on."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from airflow_provider_kinesis_doris.core.errors import CheckpointConflict, CheckpointNotFound
from airflow_provider_kinesis_doris.core.model import Boundary
from airflow_provider_kinesis_doris.core.stores.items import (
    shard_attributes,
    shard_from_item,
    shard_sk,
    ShardCheckpoint,
    wall_clock_ms,
)


class StorePrimitives:
    """The primitives every pipeline-state item is read and written through, and the fenced
    shard update built on them. Every write that can race is conditional; a lost race returns
    False or raises :class:`CheckpointConflict`, never overwrites.

    Subclasses (:class:`~airflow_provider_kinesis_doris.core.stores.dynamodb.DynamoCheckpointStore`,
    :class:`~airflow_provider_kinesis_doris.core.stores.memory.MemoryCheckpointStore`) provide :meth:`_get`, :meth:`_get_many`, :meth:`_query`, :meth:`_put_new`, :meth:`_update` and :meth:`_delete`
    (for pruning only).

    :param pipeline_id: the partition this store reads and writes; nothing else is touched.
    :param clock: epoch milliseconds for ``updated_ms`` attributes.
    """

    def __init__(self, pipeline_id: str, *, clock: Callable[[], int] = wall_clock_ms) -> None:
        if not pipeline_id:
            raise ValueError("pipeline_id must not be empty")
        self.pipeline_id = pipeline_id
        self._clock = clock
        self._settled_boundaries: dict[tuple[str, int], Boundary] = {}
        """Concrete boundaries seen (they never change): ``RangeStore.get_boundary``."""
        self._loaded_ranges: dict[str, Mapping[str, Any]] = {}
        """Range items seen LOADED, by sort key (their span and state never change again)."""
        self._planned_ranges: dict[str, Mapping[str, Any]] = {}
        """Range items seen PLANNED, by sort key: marking one LOADED needs no answer but whether it
        applied (a grouped write)."""
        self._grid_complete = False
        """The table's interval grid is known to hold every stored range's interval."""

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

    def _get_many(self, sks: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The items ``sks`` of this pipeline that exist, by sort key (strongly consistent, in
        batches)."""
        raise NotImplementedError

    def _put_new(self, item: dict[str, Any]) -> bool:
        """Store ``item`` (it carries ``sk``) unless its key exists; False if it existed."""
        raise NotImplementedError

    def _put_new_all(self, items: Sequence[dict[str, Any]]) -> bool:
        """Store every item of ``items`` if none of their keys exists, else none (atomically);
        whether they were stored."""
        raise NotImplementedError

    def _put_new_grouped(self, item: dict[str, Any]) -> bool:
        """:meth:`_put_new`, possibly sent together with the puts of other threads (one request
        for many items where the store can do that)."""
        return self._put_new_grouped_all([item])[0]

    def _put_new_grouped_all(self, items: Sequence[dict[str, Any]]) -> list[bool]:
        """:meth:`_put_new_grouped` of each item (each put once on its own, in one request where
        the store can); whether each was stored."""
        return [self._put_new(item) for item in items]

    def _update_grouped(self, sk: str, changes: Mapping[str, Any], expected: Mapping[str, Any]) -> bool:
        """:meth:`_update` that answers only whether it applied, possibly sent together with the
        writes of other threads."""
        return self._update(sk, changes, expected) is not None

    def _update(self, sk: str, changes: Mapping[str, Any], expected: Mapping[str, Any]) -> dict[str, Any] | None:
        """Apply ``changes`` (None removes the attribute) if the item exists and every ``expected``
        attribute has the given value (``ABSENT``: does not exist). Returns the item as updated
        (so the writer need not read it back), or None if the condition failed."""
        raise NotImplementedError

    def _delete(self, sks: Sequence[str]) -> None:
        """Delete the items ``sks`` of this pipeline, in batches, in this order (absent ones are
        no error). Not atomic: a crash leaves a prefix deleted."""
        raise NotImplementedError

    def get_shard(self, shard_id: str) -> ShardCheckpoint | None:
        raise NotImplementedError

    def _require_shard(self, shard_id: str) -> ShardCheckpoint:
        shard = self.get_shard(shard_id)
        if shard is None:
            raise CheckpointNotFound(f"Shard {shard_id} is not registered in pipeline {self.pipeline_id}")
        return shard

    def _fenced_update(
        self, shard: ShardCheckpoint, changes: Mapping[str, Any], *, extra_expected: Mapping[str, Any],
        grouped: bool = False,
    ) -> ShardCheckpoint:
        """Apply ``changes`` and bump the counter, if the counter is still the one read.

        :param grouped: the write may go with other threads' writes (:meth:`_update_grouped`).
        :return: the shard as updated."""
        all_changes = {**changes, "lease_counter": shard.lease_counter + 1, "updated_ms": self._clock()}
        expected = {"lease_counter": shard.lease_counter, **extra_expected}
        if grouped:
            # The counter held, so the stored shard was ``shard``: it is now that with the changes.
            applied = self._update_grouped(shard_sk(shard.shard_id), all_changes, expected)
            merged = {**shard_attributes(shard), **all_changes}
            updated = {name: value for name, value in merged.items() if value is not None} if applied else None
        else:
            updated = self._update(shard_sk(shard.shard_id), all_changes, expected)
        if updated is None:
            stored = self.get_shard(shard.shard_id)
            raise lease_conflict(shard.shard_id, shard.lease_counter, stored.lease_counter if stored else None)
        return shard_from_item(updated)



def lease_conflict(shard_id: str, expected: int, stored: int | None) -> CheckpointConflict:
    return CheckpointConflict(
        f"Shard {shard_id}: expected lease counter {expected}, stored counter is {stored}; "
        "another run updated this shard"
    )


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
