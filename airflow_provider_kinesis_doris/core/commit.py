"""Commit: after the loads are visible, mark ranges loaded and move each shard's checkpoint.

Runs once per job on the driver side, only with reports of ranges whose every chunk Doris
reported visible (a failed chunk fails its Spark task, so no report exists for it): the
checkpoint therefore moves only after the sink (invariant I4). Every shard update is a fenced
conditional write; a lost race is re-read and retried, because the high-water mark is derived from
the stored ranges and recomputing it is idempotent.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from airflow_provider_kinesis_doris.core.concurrency import DEFAULT_DRIVER_CONCURRENCY, map_bounded
from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
from airflow_provider_kinesis_doris.core.stores.high_water_marks import HighWaterMarks, MarkAdvance
from airflow_provider_kinesis_doris.core.stores.range_book import LoadedRange, RangeBook
from airflow_provider_kinesis_doris.core.stores.shard_ledger import ShardLedger
from airflow_provider_kinesis_doris.core.stores.items import ShardCheckpoint
from airflow_provider_kinesis_doris.core.retry import retry_on_conflict
from airflow_provider_kinesis_doris.core.errors import CheckpointConflict
from airflow_provider_kinesis_doris.core.report import RangeReport
from airflow_provider_kinesis_doris.core.load_job import boundary_from_dict
from airflow_provider_kinesis_doris.core.model import BoundaryKind, ShardState

log = logging.getLogger(__name__)


@dataclass
class CommitResult:
    """Per shard: the high-water mark's kind and instant after the commit, and drained shards."""

    high_water_marks: dict[str, str] = field(default_factory=dict)
    drained: list[str] = field(default_factory=list)
    loaded_through_ms: dict[str, int] = field(default_factory=dict)
    """Per shard with a mark before its end: the instant its records are loaded up to."""


def commit_reports(
    store: CheckpointStore,
    reports: Iterable[RangeReport],
    concurrency: int = DEFAULT_DRIVER_CONCURRENCY,
    known: Mapping[str, ShardCheckpoint] | None = None,
) -> CommitResult:
    """Mark every reported range LOADED (in one grouped write: transactions of many ranges), then
    per shard advance its mark and retire it if the mark reached its end.

    :param concurrency: shards whose marks move at the same time. A shard's mark depends only on its own
        ranges and on which of its ancestors' ranges exist, never on their state, so shards commit
        independently.
    :param known: shards as the plan last read them: the first attempt to advance a mark fences
        on that instead of reading the shard again (a stale one costs a retry on a fresh read).
    """
    by_shard: dict[str, list[RangeReport]] = {}
    for report in reports:
        by_shard.setdefault(report.shard_id, []).append(report)
    shard_ids = sorted(by_shard)
    known = known or {}
    _mark_loaded(store.ledger, store.ranges, [report for shard_id in shard_ids for report in by_shard[shard_id]])
    # Read once every reported range is marked: see HighWaterMarks.loaded_through.
    last_interval_start_ms = store.ranges.latest_interval_start()
    advances = [MarkAdvance(shard_id, by_shard[shard_id][-1].millis_behind_latest, known.get(shard_id)) for shard_id in shard_ids]
    first = store.marks.advance_high_water_marks(advances, last_interval_start_ms, concurrency)
    commits = map_bounded(
        lambda moved: _commit_shard(store.marks, *moved, last_interval_start_ms), list(zip(advances, first)), concurrency
    )
    result = CommitResult()
    for shard_id, (mark, through_ms, drained) in zip(shard_ids, commits):
        result.high_water_marks[shard_id] = mark
        if through_ms is not None:
            result.loaded_through_ms[shard_id] = through_ms
        if drained:
            result.drained.append(shard_id)
    return result


def _mark_loaded(ledger: ShardLedger, ranges: RangeBook, reports: Sequence[RangeReport]) -> None:
    for report in reports:
        if report.end is not None:
            # The end the loader settled: the commit's walk reads it next.
            ledger.remember_boundary(boundary_from_dict(report.end))
    ranges.mark_ranges_loaded([
        LoadedRange(report.shard_id, report.interval_start_ms, {
            "records": report.records,
            "rows_loaded": report.rows_loaded,
            "rows_filtered": report.rows_filtered,
            "dead_lettered": report.dead_lettered,
        })
        for report in reports
    ])  # fmt: skip


def _commit_shard(
    marks: HighWaterMarks, advance: MarkAdvance, advanced: ShardCheckpoint | None, last_interval_start_ms: int | None
) -> tuple[str, int | None, bool]:
    """:param advanced: the shard after the grouped write of its mark, or None where that write lost a race.
    :return: the shard's mark after the commit, described; the instant it is loaded through
    (None at the shard's end, or without a mark); whether this commit drained it."""
    shard = advanced if advanced is not None else _advance_again(marks, advance, last_interval_start_ms)
    shard_id = advance.shard_id
    mark = shard.high_water_mark
    described = mark.describe(position=False) if mark else "none"
    # Drained follows from the stored ranges (the mark reached the shard's end), whichever
    # commit gets there: the range read to the end may have been committed by an earlier run.
    if mark is None or mark.kind is not BoundaryKind.SHARD_END or shard.state is not ShardState.CLOSED:
        through_ms = mark.instant_ms if mark is not None and mark.kind is not BoundaryKind.SHARD_END else None
        return described, through_ms, False
    try:
        marks.mark_drained(shard_id)
    except CheckpointConflict:
        log.info("shard %s was updated concurrently; the next commit marks it drained", shard_id)
        return described, None, False
    return described, None, True


def _advance_again(marks: HighWaterMarks, advance: MarkAdvance, last_interval_start_ms: int | None) -> ShardCheckpoint:
    """The mark of a shard whose grouped write lost a race, moved on a fresh read of the shard,
    and again while races are lost."""
    log.info("shard %s was updated concurrently; its mark is moved again on a fresh read", advance.shard_id)
    return retry_on_conflict(
        lambda: marks.advance_high_water_mark(
            advance.shard_id, last_lag_ms=advance.last_lag_ms, last_interval_start_ms=last_interval_start_ms
        ),
        f"shard {advance.shard_id}",
    )
