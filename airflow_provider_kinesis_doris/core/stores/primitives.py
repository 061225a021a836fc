"""The store's primitives: the items every part of the pipeline state is read and written through."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from airflow_provider_kinesis_doris.core.stores.buckets import RecordedLayout


class StoreItems(Protocol):
    """The items of one pipeline (partition ``pipeline_id``), as the parts of the checkpoint store
    (``shard_ledger``, ``range_book``, ``chunk_log``, ``high_water_marks``, ``preflight``) read
    and write them. Every write that can race is conditional; a lost race answers False or None,
    never overwrites.

    Implemented by :class:`~airflow_provider_kinesis_doris.core.stores.dynamodb.DynamoItems` and
    :class:`~airflow_provider_kinesis_doris.core.stores.memory.MemoryItems`, which provide
    :meth:`get`, :meth:`get_many`, :meth:`query`, :meth:`put_new`, :meth:`put_new_all`,
    :meth:`update`, :meth:`delete` (for pruning only) and :meth:`of_pipeline`; a backend that
    subclasses this protocol inherits the grouped writes as one write each.
    """

    pipeline_id: str
    clock: Callable[[], int]
    """Epoch milliseconds for ``updated_ms`` attributes."""
    layout: RecordedLayout
    """Which of the pipeline's buckets each item lies in; a planner that lists the stream tells
    it the open shards (``layout.expect_shards``) before the first shard's item is written."""

    def of_pipeline(self, pipeline_id: str) -> StoreItems:
        """The items of another pipeline in the same table (a handover reads and fences it)."""
        raise NotImplementedError

    def get(self, sk: str) -> dict[str, Any] | None:
        """The item ``sk`` of this pipeline (strongly consistent), or None."""
        raise NotImplementedError

    def query(
        self, prefix: str, *, low: str | None = None, high: str | None = None, descending: bool = False,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """Items of this pipeline whose ``sk`` starts with ``prefix`` (and is at least ``low``, at
        most ``high``), sorted by ``sk`` (descending if asked), at most ``limit`` of them."""
        raise NotImplementedError

    def get_many(self, sks: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The items ``sks`` of this pipeline that exist, by sort key (strongly consistent, in
        batches)."""
        raise NotImplementedError

    def put_new(self, item: dict[str, Any]) -> bool:
        """Store ``item`` (it carries ``sk``) unless its key exists; False if it existed."""
        raise NotImplementedError

    def put_new_all(self, items: Sequence[dict[str, Any]]) -> bool:
        """Store every item of ``items`` if none of their keys exists, else none (atomically);
        whether they were stored."""
        raise NotImplementedError

    def put_new_grouped(self, item: dict[str, Any]) -> bool:
        """:meth:`put_new`, possibly sent together with the puts of other threads (one request
        for many items where the store can do that)."""
        return self.put_new_grouped_all([item])[0]

    def put_new_grouped_all(self, items: Sequence[dict[str, Any]]) -> list[bool]:
        """:meth:`put_new_grouped` of each item (each put once on its own, in one request where
        the store can); whether each was stored."""
        return self.put_new_grouped_units([items])[0]

    def put_new_grouped_units(self, units: Sequence[Sequence[dict[str, Any]]]) -> list[list[bool]]:
        """:meth:`put_new_grouped_all` of each unit, handed over at once: a unit's items go in one
        request, as one call's do, and units share requests where the store can (a plan's new
        ranges, each with its end cut); whether each item was stored, per unit."""
        return [[self.put_new(item) for item in unit] for unit in units]

    def update_grouped(self, sk: str, changes: Mapping[str, Any], expected: Mapping[str, Any]) -> bool:
        """:meth:`update` that answers only whether it applied, possibly sent together with the
        writes of other threads."""
        return self.update_grouped_all([(sk, changes, expected)])[0]

    def update_grouped_all(self, updates: Sequence[tuple[str, Mapping[str, Any], Mapping[str, Any]]]) -> list[bool]:
        """:meth:`update_grouped` of each ``(sk, changes, expected)`` (in requests of many where the
        store can); whether each applied."""
        return [self.update(sk, changes, expected) is not None for sk, changes, expected in updates]

    def update(self, sk: str, changes: Mapping[str, Any], expected: Mapping[str, Any]) -> dict[str, Any] | None:
        """Apply ``changes`` (None removes the attribute) if the item exists and every ``expected``
        attribute has the given value (``ABSENT``: does not exist). Returns the item as updated
        (so the writer need not read it back), or None if the condition failed."""
        raise NotImplementedError

    def delete(self, sks: Sequence[str]) -> None:
        """Delete the items ``sks`` of this pipeline, in batches, in this order (absent ones are
        no error). Not atomic: a crash leaves a prefix deleted."""
        raise NotImplementedError
