"""Commit: after the loads are visible, mark ranges loaded and move each shard's checkpoint.

Runs once per job on the driver side, only with reports of ranges whose every chunk Doris
reported visible (a failed chunk fails its Spark task, so no report exists for it): the
checkpoint therefore moves only after the sink (invariant I4). Every shard update is a fenced
conditional write; a lost race is re-read and retried, because the high-water mark is derived from
the stored ranges and recomputing it is idempotent.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
from airflow_provider_kinesis_doris.core.retry import retry_on_conflict
from airflow_provider_kinesis_doris.core.errors import CheckpointConflict
from airflow_provider_kinesis_doris.core.load import RangeReport
from airflow_provider_kinesis_doris.core.model import BoundaryKind, ShardState

log = logging.getLogger(__name__)



@dataclass
class CommitResult:
    """Per shard: the high-water mark's kind and instant after the commit, and drained shards."""

    high_water_marks: dict[str, str] = field(default_factory=dict)
    drained: list[str] = field(default_factory=list)


def commit_reports(store: CheckpointStore, reports: Iterable[RangeReport]) -> CommitResult:
    """Mark every reported range LOADED, then advance the shards' marks and retire the shards whose
    mark reached their end."""
    result = CommitResult()
    by_shard: dict[str, list[RangeReport]] = {}
    for report in reports:
        store.mark_range_loaded(
            report.shard_id,
            report.interval_start_ms,
            {
                "records": report.records,
                "rows_loaded": report.rows_loaded,
                "rows_filtered": report.rows_filtered,
                "dead_lettered": report.dead_lettered,
            },
        )
        by_shard.setdefault(report.shard_id, []).append(report)
    for shard_id, shard_reports in sorted(by_shard.items()):
        lag = shard_reports[-1].millis_behind_latest
        shard = _advance(store, shard_id, lag)
        mark = shard.high_water_mark
        result.high_water_marks[shard_id] = mark.describe(position=False) if mark else "none"
        # Drained follows from the stored ranges (the mark reached the shard's end), whichever
        # commit gets there: the range read to the end may have been committed by an earlier run.
        if mark is not None and mark.kind is BoundaryKind.SHARD_END and shard.state is ShardState.CLOSED:
            try:
                store.mark_drained(shard_id)
                result.drained.append(shard_id)
            except CheckpointConflict:
                log.info("shard %s was updated concurrently; the next commit marks it drained", shard_id)
    return result


def _advance(store: CheckpointStore, shard_id: str, lag_ms: int | None):  # type: ignore[no-untyped-def]
    def advance_once():  # type: ignore[no-untyped-def]
        shard = store.get_shard(shard_id)
        if shard is None:
            raise CheckpointConflict(f"Shard {shard_id} disappeared from pipeline {store.pipeline_id} during commit")
        return store.advance_high_water_mark(shard_id, expected_counter=shard.lease_counter, last_lag_ms=lag_ms)

    return retry_on_conflict(advance_once, f"shard {shard_id}")
