"""Which of a pipeline's buckets (its partition-key values) an item lies in, which buckets a Query
asks, how their answers merge, and the count the pipeline's ``layout`` item fixes: the one layout
:class:`~.dynamodb.DynamoItems` and :class:`~.memory.MemoryItems` both store by
(docs/checkpoints.md, "Buckets")."""

from __future__ import annotations

import heapq
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from airflow_provider_kinesis_doris.core.stores.items import (
    BOUNDARY_PREFIX,
    CHUNK_PREFIX,
    CONTENT_PREFIX,
    RANGE_PREFIX,
    SHARD_PREFIX,
)
from airflow_provider_kinesis_doris.core.value_checks import check_optional_text, refuse

MAX_BUCKETS = 128
"""The most buckets a new pipeline takes (docs/checkpoints.md has the arithmetic: at 4,000 shards
no bucket takes more than one partition's throughput in an interval)."""
SHARDS_PER_BUCKET = 32
"""Open shards per bucket a new pipeline is laid out for: 4,000 shards take the 128 buckets, 16
take one, so a Query across shards of a small stream asks one partition, not 128."""
PIPELINE_BUCKET = 0
"""The bucket of the items not tied to a shard (interval grid, floor, topology, layout, ...)."""
LAYOUT_KEY = "layout"
"""The sort key of a pipeline's layout item (in :data:`PIPELINE_BUCKET`): its bucket count."""
_SHARD_KINDS = (SHARD_PREFIX, BOUNDARY_PREFIX, RANGE_PREFIX, CHUNK_PREFIX, CONTENT_PREFIX)
"""Sort-key prefixes followed by a shard id: the items of one shard share its bucket."""


def partition_key(pipeline_id: str, bucket: int) -> str:
    return f"{pipeline_id}#{bucket}"


def check_pipeline_id(name: str, value: str | None) -> str | None:
    """``value`` if it is None or a non-empty string that does not end in ``#`` and digits: such
    an id (``orders#1``) is the partition key of another pipeline's bucket (bucket 1 of
    ``orders``), which a store of the old layout's pipeline would read as its own, and which its
    migration would move away from that pipeline."""
    check_optional_text(name, value)
    head, _, bucket = (value or "").rpartition("#")
    if head and bucket.isdigit():
        raise refuse(name, f"an id that does not end in '#' and digits ({partition_key(head, int(bucket))!r} "
                     f"is bucket {bucket} of pipeline {head!r} in the checkpoint table): use another separator, "
                     f"e.g. {head + '-' + bucket!r}", value)  # fmt: skip
    return value


def bucket_count_for(open_shards: int, shards_per_bucket: int = SHARDS_PER_BUCKET) -> int:
    """The buckets a pipeline whose stream has ``open_shards`` is laid out with: the least power
    of two holding them ``shards_per_bucket`` to a bucket, at least 1, at most :data:`MAX_BUCKETS`."""
    if shards_per_bucket < 1:
        raise ValueError(f"shards_per_bucket must be positive, got {shards_per_bucket}")
    wanted = -(-open_shards // shards_per_bucket)
    count = 1
    while count < min(wanted, MAX_BUCKETS):
        count *= 2
    return count


def _shard_kind(sk: str) -> str | None:
    return next((kind for kind in _SHARD_KINDS if sk.startswith(kind)), None)


def reaches_shards(prefix: str) -> bool:
    """Whether items of a shard may have a sort key starting with ``prefix`` (or being it)."""
    return _shard_kind(prefix) is not None or any(kind.startswith(prefix) for kind in _SHARD_KINDS)


@dataclass(frozen=True, slots=True)
class BucketLayout:
    """A pipeline's items over ``buckets`` partition-key values: a shard's items in the bucket of
    its id's crc32 (a stable hash: Python's ``hash`` of a string changes from process to process),
    the items of no shard in :data:`PIPELINE_BUCKET`."""

    buckets: int

    def __post_init__(self) -> None:
        if self.buckets < 1:
            raise ValueError(f"a pipeline's bucket count must be positive, got {self.buckets}")

    def bucket_of(self, sk: str) -> int:
        """The bucket of the item ``sk``."""
        kind = _shard_kind(sk)
        if kind is None:
            return PIPELINE_BUCKET
        shard_id = sk[len(kind) :].split("#", 1)[0]
        return zlib.crc32(shard_id.encode()) % self.buckets

    def buckets_of_query(self, prefix: str) -> list[int]:
        """The buckets holding the items whose sort key starts with ``prefix``: one when the
        prefix names a whole shard id (``range#<shard>#``) or a kind of no shard, else all."""
        kind = _shard_kind(prefix)
        if (kind is not None and "#" in prefix[len(kind) :]) or not reaches_shards(prefix):
            return [self.bucket_of(prefix)]
        return list(range(self.buckets))

    @staticmethod
    def merge(answers: Iterable[list[dict[str, Any]]], *, descending: bool, limit: int | None) -> list[dict[str, Any]]:
        """The buckets' answers to one Query (each sorted by ``sk`` in the Query's direction, each
        cut to ``limit``) as one Query on one key answered: merged in that order, cut to ``limit``."""
        merged = list(heapq.merge(*answers, key=lambda item: str(item["sk"]), reverse=descending))
        return merged[:limit] if limit else merged


ONE_BUCKET = BucketLayout(1)
"""Where a pipeline's items are before its layout item exists: no item of a shard was written yet,
so all it has is in :data:`PIPELINE_BUCKET`."""


class RecordedLayout:
    """A pipeline's layout as its ``layout`` item fixes it, for one store object: read when first
    needed (and again while absent), written by :meth:`expect_shards` with the count for the open
    shards it is told of, else by the first write of a shard's item with :data:`MAX_BUCKETS` (put
    once: of two first runs, both go on with the count the winner stored). Reads never write, so
    a read-only identity (the pipeline page) can read any pipeline.

    :param read_count: the count the layout item holds, None while it has none; raises for a
        pipeline the backend cannot read (the old layout).
    :param put_count: put the layout item with a count unless it exists; whether it was put.
    :param shards_per_bucket: see :func:`bucket_count_for`.
    """

    def __init__(
        self, read_count: Callable[[], int | None], put_count: Callable[[int], bool], *,
        shards_per_bucket: int = SHARDS_PER_BUCKET,
    ) -> None:  # fmt: skip
        self._read_count = read_count
        self._put_count = put_count
        self._shards_per_bucket = shards_per_bucket
        self._count_to_record = MAX_BUCKETS
        self._stored: BucketLayout | None = None
        self._read_once = False

    def expect_shards(self, open_shards: int) -> None:
        """Lay the pipeline out for ``open_shards`` unless it is laid out: its layout item is put
        now, so the threads that then register its shards find it (not each one missing it and
        reading again). A pipeline whose layout is stored keeps it."""
        self._count_to_record = bucket_count_for(open_shards, self._shards_per_bucket)
        self.to_write(SHARD_PREFIX)

    def to_read(self, prefix: str) -> BucketLayout:
        """The layout to find the items whose sort key starts with ``prefix`` (or is it) in. Items
        of no shard are in :data:`PIPELINE_BUCKET` whatever the count: the layout item is read for
        them once only (the backend's check of the pipeline)."""
        if self._stored is None and (not self._read_once or reaches_shards(prefix)):
            count = self._read_count()
            self._read_once = True
            self._stored = BucketLayout(count) if count is not None else None
        return self._stored or ONE_BUCKET

    def bucket_of(self, sk: str, *, writing: bool = False) -> int:
        """The bucket of the item ``sk`` (:meth:`to_write`'s for a write, else :meth:`to_read`'s)."""
        return (self.to_write(sk) if writing else self.to_read(sk)).bucket_of(sk)

    def to_write(self, sk: str) -> BucketLayout:
        """:meth:`to_read`, with the layout item put first by the first write of a shard's item."""
        layout = self.to_read(sk)
        if self._stored is None and reaches_shards(sk):
            count = self._count_to_record
            stored = count if self._put_count(count) else self._read_count()
            assert stored is not None, "a pipeline's layout item vanished after its put failed"
            layout = self._stored = BucketLayout(stored)
        return layout
