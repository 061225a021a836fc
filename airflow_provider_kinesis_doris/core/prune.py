"""Pruning: the checkpoint table keeps each shard's history only as far back as a run can use it.

After the commit, at most once per ``PRUNE_EVERY_MS`` for the pipeline, one run deletes every
shard's loaded history that lies before the *prune horizon*: the stream's trim horizon (now less
its retention) less Doris's label window. Records before it are gone from Kinesis, so no run can
read them again, and a label window further back no Doris label of theirs is remembered either.

Only ranges below a shard's high-water mark go (every one of them LOADED), with their chunks,
contents and cuts (:func:`prune_shard`: the marks record the span, then each part forgets its own
items of it), and the pipeline's interval grid before the horizon. The shard item keeps the span
that was pruned, and a run of an interval inside it plans nothing for the shard (``PRUNED``). The table
therefore holds, per shard, the intervals of about one retention period plus one label window
plus one pruning period, however long the pipeline runs. The run that prunes makes one Query per
shard with loaded history, plus the deletes; the other runs of the hour read one item.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from airflow_provider_kinesis_doris.core.concurrency import DEFAULT_DRIVER_CONCURRENCY, map_bounded
from airflow_provider_kinesis_doris.core.errors import CheckpointConflict
from airflow_provider_kinesis_doris.core.model import describe_instant
from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
from airflow_provider_kinesis_doris.core.stores.shard_ledger import ShardLedger
from airflow_provider_kinesis_doris.core.stores.items import ShardCheckpoint

log = logging.getLogger(__name__)

PRUNE_EVERY_MS = 3_600_000
"""The prune horizon moves in steps of an hour: runs agree on it, and the table is pruned at most
once an hour (a Query per shard then, nothing in the runs between)."""


@dataclass(frozen=True)
class PruneResult:
    horizon_ms: int
    items_deleted: int
    shards_pruned: int
    shards_skipped: tuple[str, ...] = ()
    """Shards another writer updated while they were pruned (pruned next time)."""


def prune_horizon(trim_horizon_ms: int, label_keep_seconds: int) -> int:
    """The instant before which a shard's loaded history may go: the trim horizon less the label
    window, rounded down to ``PRUNE_EVERY_MS``."""
    horizon = trim_horizon_ms - label_keep_seconds * 1000
    return horizon - horizon % PRUNE_EVERY_MS


def prune_if_due(
    store: CheckpointStore, horizon_ms: int, concurrency: int = DEFAULT_DRIVER_CONCURRENCY
) -> PruneResult | None:
    """Prune every registered shard up to ``horizon_ms`` if no run has claimed that horizon yet.

    :return: what was pruned, or None when another run pruned up to the horizon already.
    """
    if horizon_ms <= 0 or not store.ranges.raise_prune_horizon(horizon_ms):
        return None
    return _prune_shards(store, _with_history(store.ledger, horizon_ms), horizon_ms, concurrency)


def prune_shards(
    store: CheckpointStore, shards: Sequence[ShardCheckpoint], horizon_ms: int,
    concurrency: int = DEFAULT_DRIVER_CONCURRENCY,
) -> PruneResult:
    """Raise the pipeline's prune horizon to ``horizon_ms``, then prune each shard's loaded
    history before it (:func:`prune_shard`, one Query per shard, then the deletes).
    A shard that another writer updated since it was read is skipped and pruned next time.

    :param shards: the shards as read (``ShardLedger.list_shard_checkpoints``)."""
    store.ranges.raise_prune_horizon(horizon_ms)
    return _prune_shards(store, shards, horizon_ms, concurrency)


def prune_shard(store: CheckpointStore, shard: ShardCheckpoint, horizon_ms: int) -> int:
    """Delete the shard's loaded history before ``horizon_ms``: the marks record the span on the
    shard item first (:meth:`~.stores.high_water_marks.HighWaterMarks.claim_pruned_span`), then
    each part forgets its own items of it, chunks before the ranges and ranges before the cuts
    they reference, so a run killed among the deletes leaves a prefix the next pruning finishes.

    :return: items deleted.
    :raises CheckpointConflict: another writer updated the shard since it was read.
    """
    span = store.marks.claim_pruned_span(shard, horizon_ms)
    if span is None:
        return 0
    deleted = store.chunks.forget_chunks_through(span.shard_id, span.range_starts[-1]) if span.range_starts else 0
    deleted += store.ranges.forget_ranges(span.shard_id, span.range_starts)
    deleted += store.ledger.forget_cuts_before(span.shard_id, span.cuts_before_ms)
    log.info("shard %s: pruned %d items of its history before %d", span.shard_id, deleted, span.through_ms)
    return deleted


def _prune_shards(
    store: CheckpointStore, shards: Sequence[ShardCheckpoint], horizon_ms: int, concurrency: int
) -> PruneResult:
    """After the horizon is raised: planners refuse what has no stored range before it."""

    def prune(shard: ShardCheckpoint) -> int | None:
        try:
            return prune_shard(store, shard, horizon_ms)
        except CheckpointConflict:
            log.info("shard %s was updated while it was pruned; it is pruned next time", shard.shard_id)
            return None

    deleted = map_bounded(prune, shards, concurrency)
    result = PruneResult(
        horizon_ms,
        items_deleted=sum(count or 0 for count in deleted) + store.ranges.prune_grid(horizon_ms),
        shards_pruned=sum(1 for count in deleted if count),
        shards_skipped=tuple(shard.shard_id for shard, count in zip(shards, deleted) if count is None),
    )
    log.info(
        "pipeline %s: pruned %d items of %d shards before %s", store.pipeline_id, result.items_deleted,
        result.shards_pruned, describe_instant(horizon_ms),
    )  # fmt: skip
    return result


def _with_history(ledger: ShardLedger, horizon_ms: int) -> list[ShardCheckpoint]:
    """Registered shards (listed or not) with a mark and history before the horizon not pruned yet
    (a quiet shard's reaches past its mark)."""
    return [
        shard
        for shard in ledger.list_shard_checkpoints()
        if shard.high_water_mark is not None and horizon_ms > (shard.pruned_through_ms or 0)
    ]
