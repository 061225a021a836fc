"""One pipeline's page, put together from the checkpoint table (``ui.status``), the metadata DB
(``ui.pipelines``: the runs, and what each loaded from its XCom) and Doris (row counts, dead
letters per reason), every source read only.

A source that does not answer (Doris down, a table not created yet) leaves its part of the page
saying so; the rest still shows: the page is for the moments something is wrong.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from airflow_provider_kinesis_doris.core.doris.identifiers import qualified_name, split_table_name
from airflow_provider_kinesis_doris.core.model import describe_instant, iso_utc
from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
from airflow_provider_kinesis_doris.ui.pipelines import (
    LoaderRun,
    PipelineTask,
    latest_xcom,
    recent_runs,
    run_summaries,
)
from airflow_provider_kinesis_doris.ui.status import StoreStatus, read_store_status

DEFAULT_HOURS = 6.0
MAX_GRID_INTERVALS = 200
"""The grid shows at most this many runs: a one-minute schedule's last 6 hours would be 360 cells
no one reads one by one."""

LOADED, CAUGHT_UP, PENDING, FAILED, LEFT_TO_OWN_RUN = "loaded", "caught up", "pending", "failed", "left to its own run"
_PENDING_TASK_STATES = {"running", "up_for_retry", "up_for_reschedule", "deferred", "restarting"}
_NOT_STARTED_TASK_STATES = {None, "none", "scheduled", "queued"}
_INTERVAL_KEYS = re.compile(r"\((\d+), (\d+)\)$")
"""The epoch-ms bounds at the end of ``core.model.describe_interval``'s text."""


@dataclass(frozen=True)
class IntervalCounts:
    """What one interval loaded over every shard, as the run that loaded it reported."""

    rows_loaded: int
    dead_lettered: int


def open_store(pipeline: PipelineTask) -> CheckpointStore:
    """The pipeline's checkpoint store through its AWS connection, as the loader opens it."""
    from airflow_provider_kinesis_doris.hooks.kinesis_pipeline import KinesisPipelineHook

    return KinesisPipelineHook(aws_conn_id=pipeline.aws_conn_id).checkpoint_store(
        pipeline.checkpoint_table, pipeline.pipeline_id
    )


def doris_scalar_rows(pipeline: PipelineTask) -> Callable[[str], Sequence[Sequence[Any]]]:
    """Runs a read-only query through the pipeline's Doris connection (the FE's HTTP SQL
    endpoint, the loader's own path)."""
    from airflow_provider_kinesis_doris.hooks.doris import DorisHook

    hook = DorisHook(doris_conn_id=pipeline.doris_conn_id)
    database, _ = split_table_name(pipeline.doris_table)
    return lambda statement: hook.run_sql(statement, database=database).rows


def pipeline_summary(pipeline: PipelineTask, runs: Sequence[LoaderRun], status: StoreStatus | None) -> dict[str, Any]:
    """The line of the pipelines list."""
    last = runs[0] if runs else None
    return {
        **{name: getattr(pipeline, name) for name in ("dag_id", "task_id", "stream_name", "doris_table", "pipeline_id",
                                                       "checkpoint_table")},
        "last_run": {"run_id": last.run_id, "interval_end": iso_utc(last.end_ms), "state": last.task_state} if last else None,
        "lag_ms": status.max_lag_ms if status else None,
        "state": pipeline_state(runs, status),
        "shards": len(status.shards) if status else None,
    }  # fmt: skip


def pipeline_state(runs: Sequence[LoaderRun], status: StoreStatus | None) -> str:
    """One word for the pipeline: failing when its latest finished run failed, else healthy."""
    if status is None:
        return "unreadable"
    finished = [run for run in runs if run.task_state in ("success", "failed", "upstream_failed")]
    if not finished:
        return "no run yet"
    return "failing" if finished[0].task_state != "success" else "healthy"


def build_page(
    session: Session, pipeline: PipelineTask, hours: float = DEFAULT_HOURS,
    store: CheckpointStore | None = None, doris_rows: Callable[[str], Sequence[Sequence[Any]]] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Everything the page shows of ``pipeline``, as JSON-able data."""
    runs = recent_runs(session, pipeline, hours)[:MAX_GRID_INTERVALS]
    summaries = run_summaries(session, pipeline, [run.run_id for run in runs])
    counts = interval_counts(summaries.values())
    caught_up = caught_up_intervals(runs, summaries)
    store = store if store is not None else open_store(pipeline)
    status, store_error = _read(lambda: read_store_status(store))
    doris_rows = doris_rows if doris_rows is not None else doris_scalar_rows(pipeline)
    return {
        "pipeline": pipeline_summary(pipeline, runs, status),
        "hours": hours,
        "store_error": store_error,
        "store": status.as_dict() if status else None,
        "rows_loaded": sum(interval.rows_loaded for interval in counts.values()),
        "intervals": [grid_cell(run, counts.get(run.start_ms), caught_up) for run in runs],
        "waiting": _waiting(session, pipeline, runs, status),
        "doris": _doris_counts(pipeline, doris_rows),
        "preflight": _preflight(session, pipeline, status),
        "audit": _audit(session, pipeline),
    }


def _read(read: Callable[[], Any]) -> tuple[Any, str | None]:
    try:
        return read(), None
    except Exception as exc:  # the page shows what failed; only the class and message, never a connection
        return None, f"{type(exc).__name__}: {exc}"


def interval_counts(summaries: Iterable[Mapping[str, Any]]) -> dict[int, IntervalCounts]:
    """Interval start → what it loaded: each summary's own interval and the skipped intervals its
    run loaded first (``skipped_intervals.loaded``; one taken on by an earlier try of the run is
    counted in that try's log only, as a failed try returns no summary)."""
    counts: dict[int, IntervalCounts] = {}
    for summary in summaries:
        counts[summary["interval"][0]] = _counts(summary)
        for loaded in (summary.get("skipped_intervals") or {}).get("loaded", []):
            counts[_interval_start(loaded["interval"])] = _counts(loaded)
    return counts


def _counts(totals: Mapping[str, Any]) -> IntervalCounts:
    # "loaded" counts what this try sent; a retry's replay finds the rest loaded by an earlier try.
    earlier = totals.get("already_loaded") or {}
    return IntervalCounts(
        rows_loaded=int(totals.get("loaded") or 0) + int(earlier.get("rows") or 0),
        dead_lettered=int(totals.get("dead_lettered") or 0) + int(earlier.get("dead_letters") or 0),
    )


def caught_up_intervals(runs: Sequence[LoaderRun], summaries: Mapping[str, Mapping[str, Any]]) -> dict[int, str]:
    """Interval start → the newest run that loaded it in its catch-up (``skipped_intervals.recovered``)."""
    caught: dict[int, str] = {}
    for run in runs:
        recovered = (summaries.get(run.run_id, {}).get("skipped_intervals") or {}).get("recovered", [])
        for described in recovered:
            caught.setdefault(_interval_start(described), run.run_id)
    return caught


def _interval_start(described: str) -> int:
    """The start (epoch ms) of an interval as ``core.model.describe_interval`` wrote it."""
    keys = _INTERVAL_KEYS.search(described)
    if keys is None:
        raise ValueError(f"{described!r} is not an interval as describe_interval writes it ('[start, end) (ms, ms)')")
    return int(keys.group(1))


def grid_cell(run: LoaderRun, counts: IntervalCounts | None, caught_up: dict[int, str]) -> dict[str, Any]:
    """The run's cell of the interval grid."""
    return {
        "run_id": run.run_id,
        "start": iso_utc(run.start_ms),
        "end": iso_utc(run.end_ms),
        "start_ms": run.start_ms,
        "task_state": run.task_state,
        "status": interval_status(run, caught_up),
        "caught_up_by": caught_up.get(run.start_ms) if run.task_state != "success" else None,
        # None: no summary tells (a failed run returns none; the task log has what it loaded).
        "rows_loaded": counts.rows_loaded if counts else None,
        "dead_lettered": counts.dead_lettered if counts else None,
    }


def interval_status(run: LoaderRun, caught_up: dict[int, str]) -> str:
    """The interval's cell: its own run loaded it, a later run caught it up, it failed, it is
    being loaded, or it waits for its own run (a catch-up leaves intervals that have one to it)."""
    if run.task_state == "success":
        return LOADED
    if run.start_ms in caught_up:
        return CAUGHT_UP
    if run.task_state in ("failed", "upstream_failed"):
        return FAILED
    if run.task_state in _NOT_STARTED_TASK_STATES:
        return LEFT_TO_OWN_RUN
    return PENDING


def _waiting(session: Session, pipeline: PipelineTask, runs: Sequence[LoaderRun], status: StoreStatus | None) -> list[str]:
    """The shards the latest run that could not load them waits for, in the words of ``ShardsWaiting``."""
    found = latest_xcom(session, pipeline.dag_id, pipeline.task_id, "waiting")
    if found is None:
        return []
    run_id, waiting = found
    run = next((run for run in runs if run.run_id == run_id), None)
    if run is None or run.task_state == "success" or not isinstance(waiting, dict):
        return []  # its retry loaded them, or the run is older than the page's window
    marks = {shard.shard_id: shard.loaded_through_ms for shard in status.shards} if status else {}
    lines = []
    for shard_id, parents in sorted(waiting.items()):
        described = ", ".join(f"{parent} ({_describe_mark(marks.get(parent))})" for parent in parents)
        lines.append(f"shard {shard_id} waits for {described}, which must be loaded up to {describe_instant(run.start_ms)}")
    return lines


def _describe_mark(mark_ms: int | None) -> str:
    return "nothing loaded" if mark_ms is None else f"loaded through {describe_instant(mark_ms)}"


def _doris_counts(pipeline: PipelineTask, rows: Callable[[str], Sequence[Sequence[Any]]]) -> dict[str, Any]:
    database, table = split_table_name(pipeline.doris_table)
    dead_letter_table = pipeline.dead_letter_table or f"{table}_dead_letter"
    table_rows, error = _read(lambda: int(rows(f"SELECT COUNT(*) FROM {qualified_name(database, table)}")[0][0]))
    stream = pipeline.stream_name.replace("\\", "\\\\").replace("'", "\\'")
    reasons, reasons_error = _read(lambda: {
        str(reason): int(count) for reason, count in rows(
            f"SELECT reason, COUNT(*) FROM {qualified_name(database, dead_letter_table)} "
            f"WHERE stream_name = '{stream}' GROUP BY reason"
        )
    })  # fmt: skip
    return {
        "table": pipeline.doris_table,
        "rows": table_rows,
        "error": error,
        "dead_letter_table": f"{database}.{dead_letter_table}",
        "dead_letters_by_reason": reasons,
        "dead_letters_error": reasons_error,
    }


def _preflight(session: Session, pipeline: PipelineTask, status: StoreStatus | None) -> dict[str, Any]:
    found = latest_xcom(session, pipeline.dag_id, pipeline.task_id, "return_value")
    warnings = found[1].get("preflight") if found and isinstance(found[1], dict) else None
    digest = status.preflight_digest if status else None
    return {
        "verdict": "passed" if digest else "not passed yet",
        "digest": digest,
        "warnings": warnings or [],
        "run_id": found[0] if found else None,
    }


def _audit(session: Session, pipeline: PipelineTask) -> dict[str, Any] | None:
    found = latest_xcom(session, pipeline.dag_id, pipeline.audit_task_id, "audit")
    if found is None:
        return None
    run_id, summary = found
    summary = summary if isinstance(summary, dict) else {}
    return {
        "run_id": run_id,
        "ok": summary.get("ok"),
        "span": summary.get("span"),
        "rows_found": summary.get("rows_found"),
        "differences": summary.get("differences"),
        "first_differences": list(summary.get("first_differences") or [])[:5],
    }

