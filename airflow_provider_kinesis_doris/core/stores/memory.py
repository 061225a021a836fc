"""An in-memory checkpoint store with the same API, conditions and errors as the DynamoDB one.

The parts of :class:`core.stores.checkpoint_store.CheckpointStore` hold all logic; only the storage
primitives (:class:`~.primitives.StoreItems`) live here, each atomic under one lock (a put of several items too; grouped writes are
written one by one, in order). Several stores (pipelines, or concurrent
"runs" of one pipeline) can share a :class:`MemoryTable`, like processes sharing a DynamoDB table.
The items lie in the pipeline's buckets as on DynamoDB, found through the same
:class:`~.buckets.BucketLayout` (a Query across shards asks each bucket and merges the answers).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from airflow_provider_kinesis_doris.core.stores.buckets import (
    LAYOUT_KEY,
    PIPELINE_BUCKET,
    SHARDS_PER_BUCKET,
    RecordedLayout,
    partition_key,
)
from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
from airflow_provider_kinesis_doris.core.stores.items import ABSENT, wall_clock_ms
from airflow_provider_kinesis_doris.core.stores.primitives import StoreItems


class MemoryTable:
    """Items keyed by (pk, sk), ``pk`` = ``<pipeline id>#<bucket>`` as on DynamoDB; thread-safe.

    :param shards_per_bucket: the open shards per bucket a pipeline first written here is laid
        out for (:func:`~.buckets.bucket_count_for`); 1 spreads a test's few shards over buckets.
    """

    def __init__(self, *, shards_per_bucket: int = SHARDS_PER_BUCKET) -> None:
        self.items: dict[tuple[str, str], dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.shards_per_bucket = shards_per_bucket


def memory_store(
    pipeline_id: str, table: MemoryTable | None = None, *, clock: Callable[[], int] = wall_clock_ms
) -> CheckpointStore[MemoryItems]:
    """A :class:`CheckpointStore` on a :class:`MemoryTable` (:class:`MemoryItems`)."""
    return CheckpointStore(MemoryItems(pipeline_id, table, clock=clock))


class MemoryItems(StoreItems):
    """The items of one pipeline on a :class:`MemoryTable`.

    :param pipeline_id: the partition these items are; nothing else is touched.
    :param table: the shared table; a new private one by default.
    :param clock: epoch milliseconds for ``updated_ms`` attributes.
    """

    def __init__(
        self, pipeline_id: str, table: MemoryTable | None = None, *, clock: Callable[[], int] = wall_clock_ms
    ) -> None:
        if not pipeline_id:
            raise ValueError("pipeline_id must not be empty")
        self.pipeline_id = pipeline_id
        self.clock = clock
        self.table = table if table is not None else MemoryTable()
        self.layout = RecordedLayout(
            self._stored_buckets, self._put_buckets, shards_per_bucket=self.table.shards_per_bucket
        )

    def _key(self, sk: str, *, writing: bool = False) -> tuple[str, str]:
        return partition_key(self.pipeline_id, self.layout.bucket_of(sk, writing=writing)), sk

    def _layout_key(self) -> tuple[str, str]:
        return partition_key(self.pipeline_id, PIPELINE_BUCKET), LAYOUT_KEY

    def _stored_buckets(self) -> int | None:
        with self.table.lock:
            layout = self.table.items.get(self._layout_key())
            return int(layout["buckets"]) if layout is not None else None

    def _put_buckets(self, count: int) -> bool:
        # Straight to the table, as DynamoItems puts it before the write that needs it: the
        # write this one comes within may be a transaction in progress.
        return self._put_all_new([self._layout_key()], [{"sk": LAYOUT_KEY, "buckets": count}])

    def of_pipeline(self, pipeline_id: str) -> MemoryItems:
        return type(self)(pipeline_id, self.table, clock=self.clock)

    def get(self, sk: str) -> dict[str, Any] | None:
        key = self._key(sk)
        with self.table.lock:
            item = self.table.items.get(key)
            return copy.deepcopy(item) if item is not None else None

    def get_many(self, sks: Sequence[str]) -> dict[str, dict[str, Any]]:
        return {sk: item for sk in sks if (item := self.get(sk)) is not None}

    def query(
        self, prefix: str, *, low: str | None = None, high: str | None = None, descending: bool = False,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        layout = self.layout.to_read(prefix)
        wanted: dict[str, list[str]] = {
            partition_key(self.pipeline_id, bucket): [] for bucket in layout.buckets_of_query(prefix)
        }
        with self.table.lock:
            for pk, sk in self.table.items:
                if pk in wanted and sk.startswith(prefix) and (low is None or sk >= low) and (high is None or sk <= high):
                    wanted[pk].append(sk)
            answers = [
                [copy.deepcopy(self.table.items[(pk, sk)]) for sk in sorted(sks, reverse=descending)[:limit]]
                for pk, sks in wanted.items()
            ]
        return layout.merge(answers, descending=descending, limit=limit)

    def put_new(self, item: dict[str, Any]) -> bool:
        return self.put_new_all([item])

    def put_new_all(self, items: Sequence[dict[str, Any]]) -> bool:
        return self._put_all_new([self._key(item["sk"], writing=True) for item in items], items)

    def _put_all_new(self, keys: Sequence[tuple[str, str]], items: Sequence[dict[str, Any]]) -> bool:
        """Store ``items`` at ``keys`` if none of these exists, else none."""
        with self.table.lock:
            if any(key in self.table.items for key in keys):
                return False
            for (pk, _), item in zip(keys, items):
                stored = {name: value for name, value in copy.deepcopy(item).items() if value is not None}
                self.table.items[pk, item["sk"]] = {**stored, "pk": pk}
            return True

    def update(self, sk: str, changes: Mapping[str, Any], expected: Mapping[str, Any]) -> dict[str, Any] | None:
        key = self._key(sk, writing=True)
        with self.table.lock:
            item = self.table.items.get(key)
            if item is None or not all(_matches(item, name, value) for name, value in expected.items()):
                return None
            for name, value in changes.items():
                if value is None:
                    item.pop(name, None)
                else:
                    item[name] = copy.deepcopy(value)
            return copy.deepcopy(item)

    def delete(self, sks: Sequence[str]) -> None:
        for sk in sks:
            key = self._key(sk, writing=True)
            with self.table.lock:
                self.table.items.pop(key, None)


def _matches(item: Mapping[str, Any], name: str, expected: Any) -> bool:
    if expected is ABSENT:
        return name not in item
    return name in item and item[name] == expected
