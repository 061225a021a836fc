"""What ``KinesisToDorisOperator`` says of a run: each shard's line and the run's metrics, and when
it cannot load, the step that failed and what to do, for the task log. Errors of this package keep
their class across Spark (the job returns them typed, ``core.errors.RangeFailure``), and
``core.pipeline.run_interval`` marks each error with the phase it came from
(``core.errors.failed_phase``), so the message names the step without wrapping the runner or the
store.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.providers.common.compat.sdk import AirflowException

from airflow_provider_kinesis_doris.core.errors import (
    CheckpointConflict,
    ConfigurationError,
    DataTrimmed,
    HandoverPending,
    IntervalsSkipped,
    LabelWindowBroken,
    PermanentStreamLoadError,
    Phase,
    ShardsWaiting,
    UnresolvableLoad,
    failed_phase,
    readme_section,
)
from airflow_provider_kinesis_doris.metrics import emit_interval_metrics, emit_label_window_broken
from airflow_provider_kinesis_doris.version_compat import AIRFLOW_V_3_0_PLUS


def report_totals(log: logging.Logger, pipeline_id: str, totals: Mapping[str, Any]) -> None:
    """Log each shard's line and each interval no DAG run covered that the run loaded, and send
    the run's metrics."""
    for shard_id, shard in totals["shards"].items():
        log.info("shard %s: %s", shard_id, shard)
    for recovered in totals["skipped_intervals"]["loaded"]:
        log.warning("loaded interval %s, which no DAG run covered: %s", recovered["interval"], recovered)
    emit_interval_metrics(pipeline_id, totals)


def empty_interval_message(start: Any, end: Any, dag: Any) -> str:
    """Why the run has no interval to load, and the timetables that give one on this Airflow."""
    timetable = type(getattr(dag, "timetable", None)).__name__ if getattr(dag, "timetable", None) is not None else None
    got = f"got [{start}, {end})" + (f" from the DAG's {timetable}" if timetable else "")
    if AIRFLOW_V_3_0_PLUS:
        why = (
            "On Airflow 3 a cron string gives a CronTriggerTimetable and schedule=timedelta(...) a "
            "DeltaTriggerTimetable: both make zero-length intervals, as do schedule=None, \"@once\" and "
            "\"@continuous\". Give the DAG a data-interval timetable: "
            "schedule=DeltaDataIntervalTimetable(timedelta(minutes=10)) or "
            "schedule=CronDataIntervalTimetable(\"*/10 * * * *\", timezone=\"UTC\"), both from airflow.sdk"
        )
    else:
        why = (
            "On Airflow 2.11 a timedelta or cron string gives DeltaDataIntervalTimetable or "
            "CronDataIntervalTimetable (cron only while [scheduler] create_cron_data_intervals is True); "
            "CronTriggerTimetable and DeltaTriggerTimetable without interval=, schedule=None, \"@once\" and "
            "\"@continuous\" make zero-length intervals. Give the DAG a data-interval timetable: "
            "schedule=DeltaDataIntervalTimetable(timedelta(minutes=10)) or "
            "schedule=CronDataIntervalTimetable(\"*/10 * * * *\", timezone=\"UTC\"), both from "
            "airflow.timetables.interval"
        )
    return (
        f"KinesisToDorisOperator needs a non-empty data interval [data_interval_start, data_interval_end), {got}. "
        f"{why}. See {readme_section('Schedules and dates')}."
    )


PREPARING_FAILED = (
    "Checking the deployment before planning failed (the checkpoint table, the Doris and AWS preflight, the "
    "Doris tables); nothing was planned or loaded"
)
PLANNING_FAILED = (
    "Planning the interval failed (listing the shards, fixing each shard's range in the checkpoint table); "
    "nothing was loaded"
)
COMMIT_FAILED = (
    "Committing the loaded ranges failed (marking them loaded and moving the checkpoints); the rows are in "
    "Doris, and a rerun of this task commits them without loading them twice"
)


def failed_step(exc: BaseException, loading: str) -> str:
    """The step of a run that raised ``exc``, as :func:`explain_failure` names it.

    :param loading: the load the runner ran (Spark and its master, or the task's process).
    """
    phase = failed_phase(exc)
    if phase is Phase.COMMITTING:
        return COMMIT_FAILED
    if phase is Phase.PLANNING:
        return PLANNING_FAILED
    return f"{loading[0].upper()}{loading[1:]} failed"


def run_failure(exc: BaseException, pipeline_id: str, loading: str) -> AirflowException:
    """The task's error for a run that raised ``exc`` (other than ``ShardsWaiting``); a broken
    label window is also counted in the metrics, as it needs an operator's hand.

    :param loading: the load the runner ran, as :func:`failed_step` takes it.
    """
    if isinstance(exc, LabelWindowBroken):
        emit_label_window_broken(pipeline_id)
    return AirflowException(explain_failure(exc, failed_step(exc, loading)))


def explain_failure(exc: BaseException, failed: str) -> str:
    """What failed and what to do: for an error of this package its class and advice, for any
    other the step that failed (:data:`PREPARING_FAILED` or :func:`failed_step`) and its message."""
    text = str(exc)
    for error_type, advice in (
        (DataTrimmed, "Kinesis retention deleted records before they were loaded; see the shard and position "
                      "above. Load them from a backup or accept the loss explicitly by re-planning."),
        (UnresolvableLoad, "A chunk's outcome cannot be decided after Doris forgot its label; follow the message."),
        (LabelWindowBroken, "Nothing was loaded. Make label_keep_seconds match Doris's label window (or raise the "
                            "FE's settings), then clear the task."),
        (PermanentStreamLoadError, "Doris rejected the data; open the ErrorURL above for the rejected rows, fix "
                                   "the mapping or max_filter_ratio, then clear the task."),
        (CheckpointConflict, "Another run updated the same shard concurrently; the loaded data is deduplicated by "
                             "label, so rerun this task once the other run has finished."),
        (ConfigurationError, "A setting is invalid; fix the operator arguments or the connection."),
        (HandoverPending, "A new pipeline is taking over from this one, or this one from another; nothing was "
                          "planned. The task's retry goes on once the other pipeline's step is done."),
        (IntervalsSkipped, "Intervals no DAG run covered are not all loaded; the message names them and what "
                           "loads them (a backlog's: this run loaded and committed its own interval first)."),
    ):
        if isinstance(exc, error_type):
            return f"{error_type.__name__}: {' '.join(text.split())[:2000]} — {advice}"
    line = _last_line_with(text, "Error")
    return f"{failed}: {line if type(exc).__name__ in line else f'{type(exc).__name__}: {line}'}"


def explain_waiting(exc: ShardsWaiting, dag_id: str, interval: timedelta) -> str:
    """The message of ``exc`` and the commands that load the intervals the parents lack, on both
    majors: no run of them may exist (a pause, ``catchup=False``), so clearing one is not enough."""
    start_ms, end_ms = exc.lacking
    first = _utc(start_ms).isoformat() if start_ms is not None else "<the parents' first interval start>"
    last = (_utc(end_ms) - interval).isoformat()
    return (
        f"ShardsWaiting: {' '.join(str(exc).split())[:2000]} — Everything else of the interval is loaded. Load "
        f"the intervals the parents lack with a run of each: on Airflow 2.11 `airflow dags backfill -s {first} "
        f"-e {last} {dag_id}`, on Airflow 3 `airflow backfill create --dag-id {dag_id} --from-date {first} "
        f"--to-date {last}` (dates are interval starts, both inclusive); where a run of one exists and failed, "
        "clear it instead. This task's retries then load these shards (give it retries that outlast those runs, "
        "or clear it once they succeeded)."
    )


def _utc(epoch_ms: int) -> datetime:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=timezone.utc)


def _last_line_with(text: str, needle: str) -> str:
    lines = [line.strip() for line in text.splitlines() if needle in line]
    return (lines[-1] if lines else text.strip().splitlines()[-1] if text.strip() else "no message")[:2000]
