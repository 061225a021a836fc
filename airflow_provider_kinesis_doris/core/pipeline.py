"""One interval end to end: plan → read + load (by a runner: Spark, or this process) → commit.

The Airflow operator and the tests both go through :func:`run_interval`; only the runner and
where the settings come from differ.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
from airflow_provider_kinesis_doris.core.stores.items import wall_clock_ms
from airflow_provider_kinesis_doris.core.catch_up import CatchUp, SkippedIntervals, find_skipped
from airflow_provider_kinesis_doris.core.commit import CommitResult, commit_reports
from airflow_provider_kinesis_doris.core.fields import FieldMismatch, compare
from airflow_provider_kinesis_doris.core.handover import take_over
from airflow_provider_kinesis_doris.core.concurrency import map_bounded
from airflow_provider_kinesis_doris.core.errors import DataTrimmed, IntervalsSkipped, Phase, ShardsWaiting, in_phase, readme_section
from airflow_provider_kinesis_doris.core.load_job import LoadJob, boundary_to_dict
from airflow_provider_kinesis_doris.core.settings import Credentials, PipelineConfig
from airflow_provider_kinesis_doris.core.label_window import check_label_window
from airflow_provider_kinesis_doris.core.report import RangeReport
from airflow_provider_kinesis_doris.core.model import Boundary, BoundaryKind, ShardRange, describe_instant, describe_interval
from airflow_provider_kinesis_doris.core.kinesis.topology import trim_horizon
from airflow_provider_kinesis_doris.core.plan import InitialPosition, Plan, plan_interval, settle_initial_position
from airflow_provider_kinesis_doris.core.plan_cuts import CutFinder, CutRequest
from airflow_provider_kinesis_doris.core.prune import PruneResult, prune_horizon, prune_if_due
from airflow_provider_kinesis_doris.core.kinesis.reader import RangeReader, holds_a_record
from airflow_provider_kinesis_doris.core.rebalance import weights_for_plan

log = logging.getLogger(__name__)

BACKLOG_SHARE_OF_RETENTION = 0.5
"""Skipped intervals left for later runs fail the run once the oldest is older than this share of
the stream's retention (I11)."""

CutsElsewhere = Callable[[PipelineConfig, Credentials, Sequence[CutRequest], "int | None"], "dict[CutRequest, Boundary]"]
"""Finds a plan's cuts ahead elsewhere (``core.loader_processes.find_cuts_in_processes``), given the
pipeline, its credentials, the requests and the stream's trim horizon."""

Runner = Callable[[LoadJob, Credentials], Sequence[RangeReport]]
"""Loads a job's ranges and returns one report per range (``spark.runner.run_spark_job`` or
``core.load.run_here``)."""


@dataclass(frozen=True)
class IntervalResult:
    plan: Plan
    reports: tuple[RangeReport, ...]
    commit: CommitResult | None
    pruned: PruneResult | None = None
    skipped: SkippedIntervals = SkippedIntervals()
    """Intervals below this one that no DAG run covers (``core.catch_up``)."""
    recovered: tuple[IntervalResult, ...] = ()
    """The results of the skipped intervals this run loaded first, oldest first."""
    finished_ms: int | None = None
    """When the run committed (its clock): a shard's lag is measured from its high-water mark."""
    fields: FieldMismatch | None = None
    """The loaded rows' JSON members against the table's columns, where they differ (``core.fields``)."""

    def summary(self) -> dict[str, Any]:
        """Per shard what was planned and loaded; JSON-safe, free of secrets (the task log and the
        metrics get it; :func:`~.report.xcom_summary` shapes the XCom from it)."""
        by_shard = {report.shard_id: report for report in self.reports}
        marks = self.commit.high_water_marks if self.commit else {}
        shards: dict[str, Any] = {}
        for shard in self.plan.shards:
            entry: dict[str, Any] = {"state": shard.state.value, "decision": shard.decision.value}
            if shard.waiting_for:
                entry["waiting_for"] = list(shard.waiting_for)
            report = by_shard.get(shard.shard_id)
            if report is not None:
                entry.update(
                    records=report.records,
                    loaded=report.rows_loaded,
                    filtered=report.rows_filtered,
                    dead_lettered=report.dead_lettered,
                    skipped=report.records_skipped,
                    dead_letter_reasons=report.dead_letter_reasons,
                    already_loaded={"rows": report.rows_already_loaded, "dead_letters": report.dead_letters_already_loaded},
                    chunks=report.chunks,
                    chunks_already_loaded=report.chunks_already_loaded,
                    chunks_retried=report.chunks_retried,
                    lag_ms=self._lag_ms(shard.shard_id, report.millis_behind_latest),
                    labels=report.labels,
                    end=report.end,
                    high_water_mark=marks.get(shard.shard_id),
                )
            shards[shard.shard_id] = entry
        pruned = {"pruned": {"horizon_ms": self.pruned.horizon_ms, "items": self.pruned.items_deleted}} if self.pruned else {}
        unmatched = [result.fields for result in (self, *self.recovered) if result.fields is not None]
        return {
            "pipeline_id": self.plan.pipeline_id,
            "interval": [self.plan.interval_start_ms, self.plan.interval_end_ms],
            **pruned,
            **({"unmatched_fields": unmatched[0].summary()} if unmatched else {}),
            "skipped_intervals": {
                **self.skipped.summary(),
                "loaded": [_interval_totals(result) for result in self.recovered],
            },
            "records": sum(r.records for r in self.reports),
            "loaded": sum(r.rows_loaded for r in self.reports),
            "filtered": sum(r.rows_filtered for r in self.reports),
            "dead_lettered": sum(r.dead_lettered for r in self.reports),
            # Records that make no row by design (a CloudWatch Logs control message): neither
            # loaded nor dead letters, counted here so that none is lost silently (I6).
            "skipped": sum(r.records_skipped for r in self.reports),
            "dead_letter_reasons": _summed(r.dead_letter_reasons for r in self.reports),
            # What a replay found loaded by an earlier attempt; "loaded" and "dead_lettered" count
            # only what this run sent.
            "already_loaded": {
                "rows": sum(r.rows_already_loaded for r in self.reports),
                "dead_letters": sum(r.dead_letters_already_loaded for r in self.reports),
            },
            # Transactions besides the loads that enter Doris's label window (label_num_threshold).
            "probe_loads": sum(r.probe_loads for r in self.reports),
            "loads_aborted": sum(r.loads_aborted for r in self.reports),
            "shards": shards,
        }

    def _lag_ms(self, shard_id: str, read_lag_ms: int | None) -> int | None:
        """How far the shard's loaded data is behind: from its high-water mark to the commit, or
        what the read's last page said if that is larger. A mark that stays in front of an
        interval nobody loaded then shows, however fresh the last read was (I11)."""
        through_ms = self.commit.loaded_through_ms.get(shard_id) if self.commit else None
        if through_ms is None or self.finished_ms is None:
            return read_lag_ms
        return max(read_lag_ms or 0, self.finished_ms - through_ms)


def _interval_totals(result: IntervalResult) -> dict[str, Any]:
    """What one recovered interval loaded (its shards are in the task log)."""
    full = result.summary()
    return {
        "interval": describe_interval((result.plan.interval_start_ms, result.plan.interval_end_ms)),
        **{name: full[name] for name in ("records", "loaded", "filtered", "dead_lettered", "skipped", "probe_loads",
                                          "loads_aborted")},
    }


def _summed(counts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    total: Counter[str] = Counter()
    for count in counts:
        total.update(count)
    return dict(total.most_common())


def run_interval(
    config: PipelineConfig,
    start_ms: int,
    end_ms: int,
    *,
    kinesis: Any,
    store: CheckpointStore,
    credentials: Credentials,
    runner: Runner,
    clock: Callable[[], int] = wall_clock_ms,
    catch_up: CatchUp | None = None,
    doris: Any | None = None,
    find_cuts: CutsElsewhere | None = None,
) -> IntervalResult:
    """Plan ``[start_ms, end_ms)``, load its ranges with ``runner``, then commit; first the same
    for each interval below it that no DAG run covers, when ``catch_up`` says how to find them.

    An interval with nothing to read returns without calling the runner (no Spark start).

    :param config: the pipeline's settings, the driver's among them (``driver_concurrency``,
        ``prune``, ``waiting_warn_after_ms``).
    :param clock: now, in epoch ms (what is sealed, and the trim horizon).
    :param catch_up: the DAG's timetable and runs, to find the intervals Airflow never ran
        (``core.catch_up``); None: plan this interval only.
    :param doris: the Doris client the driver asks the label-window canary with, before the runner
        starts; None: one built from ``config.doris`` and ``credentials``' password for each run
        that loads.
    :param find_cuts: finds the cuts of each plan's new ranges ahead, elsewhere (the loader
        processes of ``InProcessRunner(processes=N)``); None: the plan reads them itself.
    :raises ShardsWaiting: after loading and committing the rest, when shards wait for parents
        that are not loaded up to them yet: the run must not end green (I9); its retry loads them.
    :raises IntervalsSkipped: intervals below this one are skipped and ``catch_up`` says not to
        load them, or the timetable does not tile a gap of the pipeline's intervals.
    """

    # Where a pipeline that continues another starts, fixed before its first plan.
    take_over(store, config.take_over_from, config.initial_position)
    # The pipeline's recorded position, which every interval of this run plans with.
    config = replace(config, initial_position=settle_initial_position(store, config.initial_position).value)

    def run(start: int, end: int) -> IntervalResult:
        return _run_one(
            config, start, end, kinesis=kinesis, store=store, credentials=credentials, runner=runner, clock=clock,
            doris=doris, find_cuts=partial(find_cuts, config, credentials) if find_cuts else None,
        )  # fmt: skip

    if catch_up is None:
        return run(start_ms, end_ms)
    sweeps = InitialPosition(config.initial_position) is InitialPosition.TRIM_HORIZON
    skipped = find_skipped(store.ranges, start_ms, end_ms, catch_up, sweeps=sweeps)
    horizon_ms = None
    if skipped.unplanned or skipped.deferred or skipped.left_to_own_runs:
        # The prune horizon lies behind the trim horizon by the label window; each pruning read
        # the trim horizon of its time, which a stream's retention raised since may have moved back.
        pruned_ms = store.ranges.prune_horizon() or 0
        horizon_ms = trim_horizon(kinesis, config.stream_name, clock)
        _raise_if_trimmed(skipped, config.pipeline_id, max(horizon_ms, pruned_ms))
    tried: dict[tuple[int, int], IntervalResult | ShardsWaiting] = {}
    for interval in skipped.adopted:
        tried[interval] = _waiting_or_result(run, interval)
        _mark_if_loaded(store, start_ms, interval, tried[interval])
    tried[(start_ms, end_ms)] = _waiting_or_result(run, (start_ms, end_ms))
    # A recovered interval's children may wait for a parent's range that only a later interval
    # holds (its quiet intervals do not move the parent's mark), this run's own included: once
    # more, after those are loaded. Never a reason to leave this run's own interval unplanned.
    for interval in skipped.adopted:
        if isinstance(tried[interval], ShardsWaiting):
            tried[interval] = _waiting_or_result(run, interval)
            _mark_if_loaded(store, start_ms, interval, tried[interval])
    own = tried.pop((start_ms, end_ms))
    recovered = tuple(o.result if isinstance(o, ShardsWaiting) else o for o in tried.values())
    if isinstance(own, ShardsWaiting):
        own.result = replace(own.result, skipped=skipped, recovered=recovered)
        raise own
    still_waiting = [outcome for outcome in tried.values() if isinstance(outcome, ShardsWaiting)]
    if still_waiting:
        raise still_waiting[0]
    result = replace(own, skipped=skipped, recovered=recovered)
    if horizon_ms is not None:
        _raise_if_backlog_ages(result, config.pipeline_id, catch_up.max_intervals, clock(), horizon_ms)
    return result


def _mark_if_loaded(store: CheckpointStore, start_ms: int, interval: tuple[int, int], outcome: IntervalResult | ShardsWaiting) -> None:
    if not isinstance(outcome, ShardsWaiting):
        with in_phase(Phase.COMMITTING):
            store.ranges.mark_adopted_loaded(start_ms, interval)


def _waiting_or_result(run: Callable[[int, int], IntervalResult], interval: tuple[int, int]) -> IntervalResult | ShardsWaiting:
    try:
        return run(*interval)
    except ShardsWaiting as waiting:
        return waiting


def _raise_if_trimmed(skipped: SkippedIntervals, pipeline_id: str, horizon_ms: int) -> None:
    """Skipped intervals not planned yet that start before the stream's trim horizon may have lost
    records to retention before anyone loaded them: that is loud (I6), never a partial load. (A
    retry replays those its first attempt planned, as any replay: the planner and reader check.)
    Those left to a DAG run of their own are checked too: a run that stays queued (a paused
    backfill's) would otherwise let the prune horizon pass them unseen."""
    # The deferred ones (past max_intervals) are named too: the run stops here, before them.
    unloaded = sorted({*skipped.unplanned, *skipped.deferred, *skipped.left_to_own_runs})
    trimmed = [interval for interval in unloaded if interval[0] < horizon_ms]
    if trimmed:
        waiting = [interval for interval in trimmed if interval in skipped.left_to_own_runs]
        raise DataTrimmed(
            f"Pipeline {pipeline_id}: {len(trimmed)} interval(s) that no DAG run loaded are older than the "
            f"stream's retention, so Kinesis may have deleted their records before they were loaded: "
            + ", ".join(describe_interval(interval) for interval in trimmed[:5])
            + (" ..." if len(trimmed) > 5 else "")
            + ". Nothing of them was loaded. "
            + (f"{len(waiting)} of them, from {describe_interval(waiting[0])}, were left to a DAG run of their own "
               "that has not loaded them (queued, or a paused backfill's). " if waiting else "")
            + "Raise the stream's retention period before it happens again; "
            f"see {readme_section('Intervals Airflow did not run')}."
        )


def _raise_if_backlog_ages(result: IntervalResult, pipeline_id: str, max_intervals: int, now_ms: int, horizon_ms: int) -> None:
    """Intervals left for later runs (beyond ``max_intervals``) are loaded by them, unless runs take
    on fewer than the schedule skips: then the backlog only grows, and is loud once its oldest
    interval is older than :data:`BACKLOG_SHARE_OF_RETENTION` of the stream's retention, well
    before retention deletes its records (``DataTrimmed``). After this run's loads and commits."""
    deferred = result.skipped.deferred
    retention_ms = now_ms - horizon_ms
    if deferred and deferred[0][0] < now_ms - retention_ms * BACKLOG_SHARE_OF_RETENTION:
        raise IntervalsSkipped(
            f"Pipeline {pipeline_id}: {len(deferred)} interval(s) that no DAG run covered are left for later runs, "
            f"from {describe_interval(deferred[0])} to {describe_interval(deferred[-1])}, and the oldest is older than "
            f"{BACKLOG_SHARE_OF_RETENTION:.0%} of the stream's retention ({retention_ms // 3_600_000} h): runs take on "
            f"{max_intervals} each (StateConfig(max_skipped_intervals=...)) and the backlog is not shrinking fast "
            "enough. This run loaded its own interval and the oldest skipped ones. Raise max_skipped_intervals, or "
            "load the backlog with a backfill of those intervals, before retention deletes their records; see "
            f"{readme_section('Intervals Airflow did not run')}.",
            intervals=deferred,
        )


def _run_one(
    config: PipelineConfig,
    start_ms: int,
    end_ms: int,
    *,
    kinesis: Any,
    store: CheckpointStore,
    credentials: Credentials,
    runner: Runner,
    clock: Callable[[], int],
    doris: Any | None,
    find_cuts: CutFinder | None,
) -> IntervalResult:
    with in_phase(Phase.PLANNING):
        plan = plan_interval(kinesis, store, config, start_ms, end_ms, clock=clock, find_cuts=find_cuts)
    for shard in plan.shards:
        log.info(
            "plan %s %s shard %s (%s): %s%s",
            config.pipeline_id, describe_interval((start_ms, end_ms)), shard.shard_id, shard.state.value, shard.decision.value,
            f", waiting for {list(shard.waiting_for)}" if shard.waiting_for else "",
        )  # fmt: skip
    if not plan.ranges:
        with in_phase(Phase.COMMITTING):
            result = IntervalResult(plan, (), None, _prune(plan, config, store))
        _raise_if_waiting(result, store, clock(), config.waiting_warn_after_ms)
        return result
    with in_phase(Phase.PLANNING):
        checked = map_bounded(lambda r: _report_if_empty(kinesis, store, r, clock), plan.ranges, config.driver_concurrency)
        empty = {report.shard_id: report for report in checked if report is not None}
        to_load = replace(plan, shards=tuple(s for s in plan.shards if s.range is None or s.shard_id not in empty))
        # Weights from recent traffic (kept by the rebalance step) spread heavy shards apart.
        topology = store.ledger.get_topology()
        assignment = topology.assignment if topology else None
        job = LoadJob.of(config, to_load, lambda: weights_for_plan(store.ledger, store.ranges), assignment) if to_load.ranges else None
    with in_phase(Phase.LOADING):
        if job is not None:
            check_label_window(job, store.chunks, credentials, clock, doris=doris)
        loaded = tuple(runner(job, credentials)) if job is not None else ()
    if not to_load.ranges:
        log.info(
            "plan %s %s: no shard has records in the interval; nothing to start",
            config.pipeline_id, describe_interval((start_ms, end_ms)),
        )  # fmt: skip
    reports = loaded + tuple(empty.values())
    known = {shard.shard_id: shard.checkpoint for shard in plan.shards if shard.checkpoint is not None}
    with in_phase(Phase.COMMITTING):
        committed = commit_reports(store, reports, config.driver_concurrency, known)
        pruned = _prune(plan, config, store)
    result = IntervalResult(plan, reports, committed, pruned, finished_ms=clock(), fields=_unmatched(config, reports))
    _raise_if_waiting(result, store, clock(), config.waiting_warn_after_ms)
    return result


def _unmatched(config: PipelineConfig, reports: Sequence[RangeReport]) -> FieldMismatch | None:
    """The loaded rows' members against the table's columns, logged where they differ."""
    members = {member for report in reports for member in report.fields}
    if config.table_columns is None or not members:
        return None
    mismatch = compare(members, config.table_columns)
    if not (mismatch.members_without_column or mismatch.columns_without_member):
        return None
    log.warning(
        "pipeline %s, table %s.%s: %s. A field renamed upstream loads as NULL: rename the column or the field, or "
        "set MappingConfig(unmatched_fields='fail') to refuse such records before they load",
        config.pipeline_id, config.doris_database, config.doris_table, mismatch.describe(),
    )  # fmt: skip
    return mismatch


def _prune(plan: Plan, config: PipelineConfig, store: CheckpointStore) -> PruneResult | None:
    if not config.prune or plan.trim_horizon_ms is None:
        return None
    return prune_if_due(store, prune_horizon(plan.trim_horizon_ms, config.doris.label_keep_seconds), config.driver_concurrency)


def _raise_if_waiting(result: IntervalResult, store: CheckpointStore, now_ms: int, waiting_warn_after_ms: int) -> None:
    """Fail a run that left ranges of its interval unloaded, naming each shard, how long it has
    waited, how far each parent it waits for is loaded and the span the parents lack (I9)."""
    plan = result.plan
    if not plan.waiting:
        return
    lines = []
    lacking: list[tuple[int | None, int]] = []
    for shard_id, parents in sorted(plan.waiting.items()):
        shard_range = plan.shard(shard_id).range
        needed = shard_range.interval_start_ms if shard_range is not None else plan.interval_start_ms
        planned_ms = store.ranges.range_planned_ms(shard_id, needed)
        waited_ms = now_ms - planned_ms if planned_ms is not None else 0
        marks = {parent: _loaded_through(store, parent) for parent in parents}
        described = ", ".join(f"{parent} ({_describe_mark(mark)})" for parent, mark in marks.items())
        lines.append(
            f"shard {shard_id} waits for {described}, which must be loaded up to {describe_instant(needed)} "
            f"(waiting for {waited_ms // 1000} s)"
        )
        lacking += [(_lacking_from(store, parent, mark), needed) for parent, mark in marks.items()]
        if waited_ms > waiting_warn_after_ms:
            log.error(
                "shard %s of pipeline %s has waited %d s (more than %d s) for parents %s: is a run of an "
                "earlier interval failed for good?", shard_id, plan.pipeline_id, waited_ms // 1000,
                waiting_warn_after_ms // 1000, list(parents),
            )  # fmt: skip
    span = _lacking_span(lacking)
    message = (
        f"Pipeline {plan.pipeline_id} interval {describe_interval((plan.interval_start_ms, plan.interval_end_ms))}: "
        f"{len(lines)} shard(s) cannot be loaded before their parents (everything else is loaded): "
        + "; ".join(lines)
        + f". The parents lack the intervals {_describe_span(span)}: once runs of those intervals have loaded "
        "them, this run's retry loads these shards. Or use relaxed_order if the table does not depend on the "
        "order of records."
    )
    log.warning("%s", message)
    raise ShardsWaiting(message, waiting=plan.waiting, result=result, lacking=span)


def _loaded_through(store: CheckpointStore, shard_id: str) -> Boundary | None:
    shard = store.ledger.get_shard(shard_id)
    return store.marks.loaded_through(shard_id, shard.high_water_mark if shard else None)


def _describe_mark(mark: Boundary | None) -> str:
    return "nothing loaded" if mark is None else f"loaded through {describe_instant(mark.instant_ms)}"


def _lacking_from(store: CheckpointStore, parent: str, mark: Boundary | None) -> int | None:
    """Where the parent's unloaded span starts: at its loaded mark, else at its earliest range;
    None when no range of it was ever planned."""
    if mark is not None:
        return mark.instant_ms
    earliest = store.ranges.earliest_range(parent)
    return earliest.interval_start_ms if earliest is not None else None


def _lacking_span(lacking: Sequence[tuple[int | None, int]]) -> tuple[int | None, int]:
    """One span covering what every waiting shard's parents lack (start None: unknown)."""
    starts = [start for start, _ in lacking]
    return (None if None in starts else min(s for s in starts if s is not None)), max(end for _, end in lacking)


def _describe_span(span: tuple[int | None, int]) -> str:
    start, end = span
    if start is None:
        return f"before {describe_instant(end)} (no range of a parent was ever planned)"
    return describe_interval((start, end))


def _report_if_empty(
    kinesis: Any, store: CheckpointStore, shard_range: ShardRange, clock: Callable[[], int]
) -> RangeReport | None:
    """A report for a range that holds no record, found with one GetRecords on the driver; None
    if it holds any (known from its cuts, or read). Empty intervals then start no Spark, and their
    ranges are still committed, so checkpoints and drained parents advance exactly as if they had
    been read."""
    if shard_range.start.kind is BoundaryKind.SHARD_END:
        return RangeReport(shard_range.shard_id, shard_range.interval_start_ms, end=boundary_to_dict(shard_range.end), drained=True)
    if holds_a_record(shard_range.start, shard_range.end):
        return None
    if shard_range.start.kind is BoundaryKind.SHARD_START and store.chunks.chunks_for_range(
        shard_range.shard_id, shard_range.interval_start_ms
    ):
        # A sweep reads from whatever retention still keeps: finding nothing says nothing about the
        # chunks an earlier attempt cut, which the loader checks against the read (DataTrimmed).
        return None
    reader = RangeReader(kinesis, shard_range, store.ledger, limit=1, clock=lambda: clock() / 1000)
    records = iter(reader)
    if next(records, None) is not None:
        records.close()
        return None
    outcome = reader.outcome
    return RangeReport(
        shard_range.shard_id,
        shard_range.interval_start_ms,
        end=boundary_to_dict(outcome.end),
        drained=outcome.drained,
        millis_behind_latest=outcome.millis_behind_latest,
        get_records_calls=outcome.get_records_calls,
    )
