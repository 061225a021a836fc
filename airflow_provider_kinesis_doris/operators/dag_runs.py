"""What a run needs to know of its DAG: its own data interval, and, to find the intervals Airflow
never ran (``core.catch_up``), the intervals of the DAG's timetable and which of them a DAG run
exists for.

How a task asks whether a run of an interval exists: on Airflow 3 through the Task SDK
(``RuntimeTaskInstance.get_dr_count``, answered by the API server: tasks have no database), on
Airflow 2 through the metadata database (``DagRun.find``). Both by the logical date the timetable
gives with the interval (the scheduler and backfills key their runs by it) and by state: only a
queued or running run still plans its interval (see ``_PENDING``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowException

from airflow_provider_kinesis_doris.core.catch_up import CatchUp, Interval
from airflow_provider_kinesis_doris.operators.loader_messages import empty_interval_message
from airflow_provider_kinesis_doris.version_compat import AIRFLOW_V_3_0_PLUS

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context


def interval_of(context: Context) -> tuple[datetime, datetime]:
    """The run's data interval ``[start, end)``.

    :raises AirflowException: the DAG's timetable gives no interval, or an empty one.
    """
    start, end = context.get("data_interval_start"), context.get("data_interval_end")
    if start is None or end is None or end <= start:
        raise AirflowException(empty_interval_message(start, end, context.get("dag")))
    return start, end


def epoch_ms(moment: datetime) -> int:
    """``moment`` in epoch milliseconds, as ``core`` keys intervals."""
    return int(moment.timestamp() * 1000)


def catch_up_for(context: Context, *, load: bool, max_intervals: int) -> CatchUp:
    """The DAG's timetable and runs, as ``core.catch_up`` asks for them."""
    dag = context["dag"]
    timetable = _core_timetable(dag.timetable)
    anchor: datetime = context["data_interval_start"]
    anchor_ms = epoch_ms(anchor)
    logical_dates: dict[Interval, datetime] = {}

    def moment(at_ms: int) -> datetime:
        # The context's own datetime type (pendulum's), which timetables compute with.
        return anchor + timedelta(milliseconds=at_ms - anchor_ms)

    def next_interval(start_ms: int, end_ms: int) -> Interval | None:
        from airflow.timetables.base import DataInterval, TimeRestriction

        info = timetable.next_dagrun_info(
            last_automated_data_interval=DataInterval(moment(start_ms), moment(end_ms)),
            restriction=TimeRestriction(earliest=None, latest=None, catchup=True),
        )
        if info is None:
            return None
        interval = (epoch_ms(info.data_interval.start), epoch_ms(info.data_interval.end))
        logical_dates[interval] = info.logical_date
        return interval

    def with_own_runs(intervals: Sequence[Interval]) -> set[Interval]:
        dates = [logical_dates[interval] for interval in intervals]
        existing = _existing(dag.dag_id, dates)
        return {interval for interval, date in zip(intervals, dates) if date in existing}

    return CatchUp(next_interval=next_interval, with_own_runs=with_own_runs, max_intervals=max_intervals, load=load)


def _core_timetable(timetable: Any) -> Any:
    """Airflow 3.3's Task SDK timetables only describe a schedule; the scheduler computes with
    their core counterparts."""
    if hasattr(timetable, "next_dagrun_info"):
        return timetable
    from airflow.serialization.encoders import coerce_to_core_timetable

    return coerce_to_core_timetable(timetable)


_PENDING = ("queued", "running")
"""States of a DAG run that will still plan its interval. A finished run whose interval is not
planned was not that interval's run: a manual run (``dags test``) holds the logical date of the
next scheduled interval but loads the one before it, and the scheduler then skips that interval.
A failed run of the interval may be cleared later; taking its interval over is safe all the same
(the same ranges and labels, I2, I3)."""


def _existing(dag_id: str, dates: Sequence[datetime]) -> set[datetime]:
    """The logical dates among ``dates`` that a queued or running run of the DAG has."""
    if not dates:
        return set()
    if AIRFLOW_V_3_0_PLUS:
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

        def count(wanted: list[datetime]) -> int:
            return RuntimeTaskInstance.get_dr_count(dag_id=dag_id, logical_dates=wanted, states=list(_PENDING))

        # One call when all or none have runs (catch-up, or a pause); one per date otherwise.
        found = count(list(dates))
        if found in (0, len(dates)):
            return set(dates) if found else set()
        return {date for date in dates if count([date])}
    from airflow.models.dagrun import DagRun

    runs = DagRun.find(dag_id=dag_id, execution_date=list(dates))
    return {run.execution_date for run in runs if run.state in _PENDING}

