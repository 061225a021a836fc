"""The chunk log: each chunk's intent and outcome under its range, the chunks' settled contents
(invariant I7), and the labels kept to check Doris's label window."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from airflow_provider_kinesis_doris.core.errors import CheckpointNotFound
from airflow_provider_kinesis_doris.core.model import Position
from airflow_provider_kinesis_doris.core.stores.items import (
    ABSENT,
    CHUNK_INTENT,
    CHUNK_PREFIX,
    CONTENT_PREFIX,
    LABEL_CANARIES_KEY,
    LabelCanary,
    chunk_from_item,
    chunk_sk,
    ChunkRecord,
    range_chunks_prefix,
    range_contents_prefix,
)
from airflow_provider_kinesis_doris.core.stores.primitives import StoreItems


class ChunkLog:
    """Chunks on the store's items: an intent put once before a chunk is loaded, its outcome after.

    :param items: the pipeline's items.
    """

    def __init__(self, items: StoreItems) -> None:
        self._items = items

    def put_chunk_intent(
        self, label: str, shard_id: str, first: Position, last: Position, interval_start_ms: int, *, attempt: str
    ) -> bool:
        """Record, before loading, that chunk ``label`` holds ``first..last`` of the range of
        ``shard_id`` starting at ``interval_start_ms``, and that ``attempt`` is about to send it.

        :return: whether this call created the intent (False: another attempt had recorded the
            chunk already, and may have sent it).
        """
        return self._items.put_new(self._intent_item(label, shard_id, first, last, interval_start_ms, attempt))

    def put_chunk_intent_with_content(
        self, label: str, shard_id: str, first: Position, last: Position, interval_start_ms: int, content: str,
        *, attempt: str,
    ) -> bool:  # fmt: skip
        """:meth:`settle_chunk_content` and :meth:`put_chunk_intent` in one write, for a chunk of which
        nothing is stored yet (a run loading it for the first time): both items are put, or neither.

        :return: whether both were put. False: one of them existed and nothing was written; the
            caller settles the content, then puts the intent.
        """
        content_item = self._content_item(shard_id, interval_start_ms, first, content)
        intent_item = self._intent_item(label, shard_id, first, last, interval_start_ms, attempt)
        return self._items.put_new_all([content_item, intent_item])

    def renew_chunk_intent(self, read: ChunkRecord, attempt: str) -> bool:
        """Make ``attempt`` the owner of a chunk known not loaded (never sent, or refused for
        certain), with a fresh intent whose label window starts now; only if the chunk is still as
        ``read`` (its state and the attempt that wrote it), so an outcome another attempt recorded
        since is never overwritten.

        :return: whether ``attempt`` owns the chunk now.
        """
        changes = {"state": CHUNK_INTENT, "attempt": attempt, "txn_id": None, "updated_ms": self._items.clock()}
        expected = {"state": read.state, "attempt": read.attempt if read.attempt is not None else ABSENT}
        return self._items.update(chunk_sk(read.shard_id, read.interval_start_ms, read.label), changes, expected) is not None

    def _intent_item(
        self, label: str, shard_id: str, first: Position, last: Position, interval_start_ms: int, attempt: str
    ) -> dict[str, Any]:
        return {
            "sk": chunk_sk(shard_id, interval_start_ms, label),
            "kind": "chunk",
            "label": label,
            "shard_id": shard_id,
            "interval_start_ms": interval_start_ms,
            "first": first.encode(),
            "last": last.encode(),
            "state": CHUNK_INTENT,
            "attempt": attempt,
            "updated_ms": self._items.clock(),
        }

    def _content_item(self, shard_id: str, interval_start_ms: int, first: Position, content: str) -> dict[str, Any]:
        sk = _content_sk(shard_id, interval_start_ms, first)
        return {"sk": sk, "kind": "chunk_content", "content": content, "updated_ms": self._items.clock()}

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
        owner: str | None = None,
    ) -> ChunkRecord:
        """Record the outcome of chunk ``label`` of the range ``(shard_id, interval_start_ms)`` (a
        Doris load state such as VISIBLE or ABORTED).

        :param owner: write only if the chunk is still the intent of this attempt (a lost race
            leaves the stored chunk as it is, and it is returned): an outcome that only the sender
            can know, such as "not loaded", is never recorded over another attempt's send.
        :raises CheckpointNotFound: no intent was recorded for ``label``.
        """
        changes = {
            "state": state,
            "txn_id": txn_id,
            "rows_loaded": rows_loaded,
            "rows_filtered": rows_filtered,
            "updated_ms": self._items.clock(),
        }
        expected = {"state": CHUNK_INTENT, "attempt": owner} if owner is not None else {}
        updated = self._items.update(chunk_sk(shard_id, interval_start_ms, label), changes, expected)
        if updated is not None:
            return chunk_from_item(updated)
        stored = self.get_chunk(label, shard_id, interval_start_ms)
        if stored is None:
            raise CheckpointNotFound(f"No intent recorded for chunk {label} in pipeline {self._items.pipeline_id}")
        return stored

    def get_chunk(self, label: str, shard_id: str, interval_start_ms: int) -> ChunkRecord | None:
        """The chunk ``label`` of the range ``(shard_id, interval_start_ms)``, or None."""
        item = self._items.get(chunk_sk(shard_id, interval_start_ms, label))
        return chunk_from_item(item) if item else None

    def chunks_for_range(self, shard_id: str, interval_start_ms: int) -> list[ChunkRecord]:
        """The chunks recorded for one range, ordered by their first position (one Query of the
        range's own chunk items; the migration to the buckets moved a 0.x table's chunks there)."""
        items = self._items.query(range_chunks_prefix(shard_id, interval_start_ms))
        return sorted((chunk_from_item(item) for item in items), key=lambda c: c.first)

    def settle_chunk_content(self, shard_id: str, interval_start_ms: int, first: Position, content: str) -> str:
        """Fix a chunk's content (which of its records are dead letters, encoded by
        ``core.chunks.ChunkContent``) before its first load: the first writer's is stored once and
        returned to everyone.

        :param content: at most ``core.chunks`` keeps under DynamoDB's item size.
        """
        item = self._content_item(shard_id, interval_start_ms, first, content)
        if self._items.put_new(item):
            return content
        item = self._items.get(item["sk"])
        assert item is not None, "a put-once item existed a moment ago and items are never deleted"
        return str(item["content"])

    def amend_chunk_content(self, shard_id: str, interval_start_ms: int, first: Position, settled: str, amended: str) -> str:
        """Replace a chunk's settled content, only if it is still ``settled``: for rows Doris refused
        when the chunk was loaded as settled (its load failed whole, so nothing of it is visible).

        :return: the content stored now (ours, or another run's amendment that came first).
        """
        self._items.update(_content_sk(shard_id, interval_start_ms, first), {"content": amended, "updated_ms": self._items.clock()},
                     {"content": settled})  # fmt: skip
        stored = self.chunk_content(shard_id, interval_start_ms, first)
        assert stored is not None, "settled contents are never deleted"
        return stored

    def chunk_content(self, shard_id: str, interval_start_ms: int, first: Position) -> str | None:
        """The settled content of the range's chunk starting at ``first`` (a strongly consistent
        read), or None if none is settled."""
        item = self._items.get(_content_sk(shard_id, interval_start_ms, first))
        return str(item["content"]) if item else None

    def chunk_contents_for_range(self, shard_id: str, interval_start_ms: int) -> list[str]:
        """The settled contents of the range's chunks (one Query of the range's own items)."""
        return [str(item["content"]) for item in self._items.query(range_contents_prefix(shard_id, interval_start_ms))]

    def forget_chunks_through(self, shard_id: str, interval_start_ms: int) -> int:
        """Delete the chunks and settled contents of the shard's ranges of intervals starting at
        or before ``interval_start_ms`` (pruned history: they go before their ranges); items
        deleted."""
        doomed = [
            item["sk"]
            for prefix, last in ((CHUNK_PREFIX, range_chunks_prefix), (CONTENT_PREFIX, range_contents_prefix))
            for item in self._items.query(f"{prefix}{shard_id}#", high=last(shard_id, interval_start_ms) + "\uffff")
        ]
        self._items.delete(doomed)
        return len(doomed)

    def label_canaries(self) -> list[LabelCanary]:
        """The labels kept to check Doris's label window, oldest first."""
        item = self._items.get(LABEL_CANARIES_KEY)
        return [LabelCanary(label, loaded_ms) for label, loaded_ms in json.loads(item["canaries"])] if item else []

    def replace_label_canaries(self, stored: Sequence[LabelCanary], canaries: Sequence[LabelCanary]) -> bool:
        """Store ``canaries`` if the stored ones are still ``stored``; False if another task
        replaced them first (its canary serves as well)."""
        text = _canaries_text(canaries)
        if not stored:
            return self._items.put_new({"sk": LABEL_CANARIES_KEY, "kind": "label_canaries", "canaries": text})
        return self._items.update(LABEL_CANARIES_KEY, {"canaries": text}, {"canaries": _canaries_text(stored)}) is not None


def _content_sk(shard_id: str, interval_start_ms: int, first: Position) -> str:
    return f"{range_contents_prefix(shard_id, interval_start_ms)}{first.encode()}"


def _canaries_text(canaries: Sequence[LabelCanary]) -> str:
    return json.dumps([[canary.label, canary.loaded_ms] for canary in canaries])
