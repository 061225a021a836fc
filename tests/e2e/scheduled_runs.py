"""The example DAG's runs as the scheduler made them, read from Airflow's metadata DB: for the
end-to-end tests that run a real scheduler (a paused DAG, scheduled runs)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from airflow_provider_kinesis_doris.version_compat import AIRFLOW_V_3_0_PLUS

DAG_ID = "kinesis_to_doris_example"
TASK_ID = "load_interval"

Interval = tuple[int, int]
T = TypeVar("T")


@dataclass(frozen=True)
class Run:
    run_id: str
    run_type: str
    state: str
    interval: Interval


def _value(enum_or_text: Any) -> str:
    """DagRunType and DagRunState are str enums on 3.x (their hash is the member name's)."""
    return str(getattr(enum_or_text, "value", enum_or_text))


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def runs_since(since: datetime) -> list[Run]:
    """This test's runs of the DAG, oldest interval first (earlier tests of the session left theirs)."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(DagRun).filter(DagRun.dag_id == DAG_ID, DagRun.queued_at >= since)
        rows = rows.order_by(DagRun.data_interval_start)
        return [Run(row.run_id, _value(row.run_type), _value(row.state),
                     (_ms(row.data_interval_start), _ms(row.data_interval_end))) for row in rows]  # fmt: skip


def returned(run_id: str) -> dict[str, Any]:
    """The load task's XCom (what ``execute`` returned) in the run ``run_id``."""
    from airflow.utils.session import create_session

    with create_session() as session:
        if AIRFLOW_V_3_0_PLUS:
            from airflow.models.xcom import XComModel

            query = XComModel.get_many(run_id=run_id, key="return_value", dag_ids=DAG_ID, task_ids=TASK_ID)
            return XComModel.deserialize_value(session.scalars(query).one())
        from airflow.models.xcom import XCom

        value = XCom.get_one(run_id=run_id, key="return_value", dag_id=DAG_ID, task_id=TASK_ID, session=session)
        assert value is not None, f"run {run_id} returned nothing"
        return value


def settled_through(since: datetime, end_ms: int) -> list[Run] | None:
    """This test's runs up to the first that succeeded with an interval ending at or after
    ``end_ms`` and left no skipped interval for the next run, once each of them has finished; None
    before. (Later runs may be on their way. A scheduler slowed by a loaded machine creates runs far
    apart; a run then catches up at most ``max_skipped_intervals`` and leaves the rest to the next.)"""
    runs = runs_since(since)
    done = [run for run in runs if run.state == "success" and run.interval[1] >= end_ms
            and not returned(run.run_id)["skipped_intervals"]["left_for_next_run"]["count"]]  # fmt: skip
    settled = [run for run in runs if done and run.interval[1] <= done[0].interval[1]]
    if settled and all(run.state in ("success", "failed") for run in settled):
        return settled
    return None


def wait_for(condition: Callable[[], T | None], what: str, since: datetime, log_dir: Path, timeout: float = 360) -> T:
    from sqlalchemy.exc import OperationalError

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OperationalError):  # SQLite: a writer of the scheduler's holds the lock
            found = condition()
            if found:
                return found
        time.sleep(2)
    raise TimeoutError(f"{what} within {timeout:.0f}s; this test's runs: {runs_since(since)}; Airflow's logs: {log_dir}")


def next_bound(epoch_ms: int, step_ms: int) -> int:
    """The first interval bound of the DAG's grid of ``step_ms`` after ``epoch_ms`` (the timetable
    rounds to the epoch)."""
    return (epoch_ms // step_ms + 1) * step_ms
