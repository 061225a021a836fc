"""Scheduled runs under Airflow's own scheduler, as a deployment runs them: the example DAG on
one-minute intervals with a producer writing all along, for ``KD_SCHEDULER_INTERVALS`` intervals
(10 by default; ``KD_SCHEDULER_SEAL_GRACE_SECONDS``, 30, and ``KD_SCHEDULER_USE_SPARK``, false, set
the rest), once with ``deferrable=False`` and once with ``deferrable=True``. Every record is
in Doris once, every run succeeds in one try, and no log says a task was killed.

Before, a run waited for its seal by rescheduling (or deferring) itself; it came back before the
scheduler had handled the end of its first execution, which the scheduler then took for the end of
the running one ("finished with state success, but the task instance's state attribute is
running"): it failed the running try, whose heartbeat met "Task Instance not found" and was killed,
and retried it. About 14 minutes a setting: ``make proof`` runs it (``KD_PROOF_SCHEDULER=1``), not
``make test``."""

from __future__ import annotations

import os
import threading
from datetime import datetime, timezone
from pathlib import Path

import pytest

from airflow_provider_kinesis_doris.version_compat import AIRFLOW_V_3_0_PLUS
from kinesis_doris_devstack.scenario import event, now_ms, put_events, wait_past
from tests.e2e.airflow_services import airflow2_services, airflow3_services, airflow_cli
from tests.e2e.conftest import DB
from tests.e2e.scheduled_runs import DAG_ID, TASK_ID, Run, next_bound, runs_since, settled_through, wait_for

pytestmark = [
    pytest.mark.airflow, pytest.mark.e2e, pytest.mark.timeout(2400),
    pytest.mark.usefixtures("one_airflow_scheduler_at_a_time"),
]  # fmt: skip

INTERVAL_S = 60
STEP_MS = INTERVAL_S * 1000
INTERVALS = int(os.environ.get("KD_SCHEDULER_INTERVALS", "10"))
SEAL_GRACE_S = int(os.environ.get("KD_SCHEDULER_SEAL_GRACE_SECONDS", "30"))
USE_SPARK = os.environ.get("KD_SCHEDULER_USE_SPARK", "false")
KILLED = ("Task killed", "state attribute is running", "Task Instance not found")


class _Producer(threading.Thread):
    """Puts a few events every two seconds from now until ``stop_ms`` (the wall clock)."""

    def __init__(self, kinesis_client, stream: str, stop_ms: int) -> None:  # type: ignore[no-untyped-def]
        super().__init__(name="producer", daemon=True)
        self._kinesis, self._stream, self._stop_ms = kinesis_client, stream, stop_ms
        self.produced: list[int] = []

    def run(self) -> None:
        stopped = threading.Event()
        while now_ms() < self._stop_ms - 2_000:
            ids = list(range(len(self.produced), len(self.produced) + 5))
            put_events(self._kinesis, self._stream, [event(i) for i in ids])
            self.produced.extend(ids)
            stopped.wait(2)


def _tries(runs: list[Run]) -> dict[str, int]:
    """The load task's try number in each run (more than 1: Airflow retried it)."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    run_ids = [run.run_id for run in runs]
    with create_session() as session:
        rows = session.query(TaskInstance).filter(
            TaskInstance.dag_id == DAG_ID, TaskInstance.task_id == TASK_ID, TaskInstance.run_id.in_(run_ids)
        )
        return {row.run_id: row.try_number for row in rows}


def _killed_lines(*folders: Path) -> list[str]:
    lines = []
    for folder in folders:
        for path in folder.rglob("*.log"):
            text = path.read_text(errors="replace")
            lines += [f"{path}: {line[:300]}" for line in text.splitlines() if any(mark in line for mark in KILLED)]
    return lines


@pytest.mark.parametrize("deferrable", [False, True], ids=["reschedule", "deferrable"])
def test_scheduled_runs_load_every_record_once_each_in_one_try(
    deferrable: bool, example, monkeypatch, kinesis_client, doris_server, airflow_db: Path, tmp_path: Path
) -> None:
    monkeypatch.setenv("KD_EXAMPLE_INTERVAL_SECONDS", str(INTERVAL_S))
    monkeypatch.setenv("KD_EXAMPLE_SEAL_GRACE_SECONDS", str(SEAL_GRACE_S))
    monkeypatch.setenv("KD_EXAMPLE_USE_SPARK", USE_SPARK)
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", str(deferrable))
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION", "True")
    env = dict(os.environ)
    airflow_cli("dags", "reserialize", env=env)
    airflow_cli("dags", "pause", DAG_ID, env=env)
    since = datetime.now(timezone.utc)

    services = airflow3_services if AIRFLOW_V_3_0_PLUS else airflow2_services
    with services(env, tmp_path) as service_env:
        airflow_cli("dags", "unpause", DAG_ID, env=service_env)
        first = wait_for(lambda: runs_since(since)[:1], "the scheduler created no run", since, tmp_path)[0]
        # The pipeline starts with the first interval a run plans: earlier records are not its own.
        begin = next_bound(max(now_ms(), first.interval[1]), STEP_MS)
        stop = begin + INTERVALS * STEP_MS
        wait_past(begin)
        producer = _Producer(kinesis_client, example["stream"], stop)
        producer.start()
        producer.join(timeout=(stop - now_ms()) / 1000 + 60)
        assert not producer.is_alive(), "the producer did not stop"
        timeout = 4 * INTERVAL_S + SEAL_GRACE_S
        runs = wait_for(lambda: settled_through(since, stop), "the scheduled runs did not finish", since, tmp_path, timeout)
        airflow_cli("dags", "pause", DAG_ID, env=service_env)  # no new run while the services stop
        tries = _tries(runs)

    report = "\n".join(f"{run} try {tries.get(run.run_id)}" for run in runs)
    rows = doris_server.execute_sql(DB, f"SELECT event_id FROM {example['table']}")
    assert sorted(int(row[0]) for row in rows) == sorted(producer.produced), report
    assert len(producer.produced) > INTERVALS * 100 and len(runs) >= INTERVALS, report
    assert {run.run_type for run in runs} == {"scheduled"} and {run.state for run in runs} == {"success"}, report
    assert set(tries.values()) == {1}, f"a run needed more than one try:\n{report}"
    assert _killed_lines(tmp_path, airflow_db / "logs") == [], report
