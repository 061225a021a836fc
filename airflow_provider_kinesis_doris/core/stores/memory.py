"""An in-memory checkpoint store with the same API, conditions and errors as the DynamoDB one.

The parts of :class:`core.stores.checkpoint_store.CheckpointStore` hold all logic; only the storage
primitives (:class:`~.primitives.StoreItems`) live here, each atomic under one lock (a put of several items too; grouped writes are
written one by one, in order). Several stores (pipelines, or concurrent
"runs" of one pipeline) can share a :class:`MemoryTable`, like processes sharing a DynamoDB table.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
from airflow_provider_kinesis_doris.core.stores.items import ABSENT, wall_clock_ms
from airflow_provider_kinesis_doris.core.stores.primitives import StoreItems


class MemoryTable:
    """Items keyed by (pk, sk); thread-safe."""

    def __init__(self) -> None:
        self.items: dict[tuple[str, str], dict[str, Any]] = {}
        self.lock = threading.Lock()


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

    def of_pipeline(self, pipeline_id: str) -> MemoryItems:
        return type(self)(pipeline_id, self.table, clock=self.clock)

    def get(self, sk: str) -> dict[str, Any] | None:
        with self.table.lock:
            item = self.table.items.get((self.pipeline_id, sk))
            return copy.deepcopy(item) if item is not None else None

    def get_many(self, sks: Sequence[str]) -> dict[str, dict[str, Any]]:
        return {sk: item for sk in sks if (item := self.get(sk)) is not None}

    def query(
        self, prefix: str, *, low: str | None = None, high: str | None = None, descending: bool = False,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        with self.table.lock:
            keys = sorted(
                (k for k in self.table.items
                 if k[0] == self.pipeline_id and k[1].startswith(prefix)
                 and (low is None or k[1] >= low) and (high is None or k[1] <= high)),
                reverse=descending,
            )  # fmt: skip
            return [copy.deepcopy(self.table.items[k]) for k in keys[:limit]]

    def put_new(self, item: dict[str, Any]) -> bool:
        return self.put_new_all([item])

    def put_new_all(self, items: Sequence[dict[str, Any]]) -> bool:
        keys = [(self.pipeline_id, item["sk"]) for item in items]
        with self.table.lock:
            if any(key in self.table.items for key in keys):
                return False
            for key, item in zip(keys, items):
                stored = {name: value for name, value in copy.deepcopy(item).items() if value is not None}
                self.table.items[key] = {**stored, "pk": self.pipeline_id}
            return True

    def update(self, sk: str, changes: Mapping[str, Any], expected: Mapping[str, Any]) -> dict[str, Any] | None:
        with self.table.lock:
            item = self.table.items.get((self.pipeline_id, sk))
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
            with self.table.lock:
                self.table.items.pop((self.pipeline_id, sk), None)


def _matches(item: Mapping[str, Any], name: str, expected: Any) -> bool:
    if expected is ABSENT:
        return name not in item
    return name in item and item[name] == expected
