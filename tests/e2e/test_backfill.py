"""Backfills through Airflow's own CLI on the local stack: intervals already loaded, never-loaded
past intervals before and between loaded ones, several runs at once — zero duplicates, zero gaps.

Airflow 3.x: ``airflow backfill create`` with scheduler, dag-processor, api-server and triggerer
started and stopped here. Airflow 2.11: ``airflow dags backfill`` (runs in the CLI process)."""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from airflow_provider_kinesis_doris.version_compat import AIRFLOW_V_3_0_PLUS
from tests.e2e.airflow_services import airflow3_services, airflow_cli
from tests.e2e.conftest import DB, events_per_interval

# Spark itself is covered by the dag.test and cluster tests; here each task loads in its own
# process, so several backfill runs at once do not start a JVM each on a 2-core machine.
pytestmark = [pytest.mark.airflow, pytest.mark.e2e, pytest.mark.timeout(900), pytest.mark.usefixtures("scheduler_slot")]

DAG_ID = "kinesis_to_doris_example"


@pytest.fixture
def scheduler_slot(request: pytest.FixtureRequest) -> None:
    """Airflow 3's backfill runs under a scheduler, so it waits for the machine's one scheduler
    slot; 2.11's runs in the CLI process, with no scheduler whose intervals it could make lag."""
    if AIRFLOW_V_3_0_PLUS:
        request.getfixturevalue("one_airflow_scheduler_at_a_time")


def _iso(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=timezone.utc).isoformat()


def _runs(env: dict[str, str]) -> list[dict]:
    args = ["dags", "list-runs", DAG_ID, "-o", "json"] if AIRFLOW_V_3_0_PLUS else ["dags", "list-runs", "-d", DAG_ID, "-o", "json"]
    out = airflow_cli(*args, env=env).stdout
    listed = [line for line in out.splitlines() if line.startswith("[{") or line.strip() == "[]"]
    assert listed, f"no JSON list in: {out[-2000:]}"
    return json.loads(listed[-1])


def _wait_for_runs(env: dict[str, str], logical_dates: list[int], since: datetime, timeout: float = 600) -> list[dict]:
    """The backfill runs of ``logical_dates``, once each finished after ``since`` (a reprocessed
    run keeps its run id and is cleared, so only its end date tells it ran again)."""
    wanted = {datetime.fromtimestamp(ms / 1000, tz=timezone.utc) for ms in logical_dates}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = [r for r in _runs(env) if r["run_id"].startswith("backfill")
                and datetime.fromisoformat(r["logical_date"]) in wanted]  # fmt: skip
        finished = [r for r in runs if r["state"] in ("success", "failed") and r.get("end_date")
                    and datetime.fromisoformat(r["end_date"]) > since]  # fmt: skip
        if len(finished) == len(wanted):
            return finished
        time.sleep(3)
    raise TimeoutError(f"backfill runs did not finish: {_runs(env)}")


def _create_backfill(env: dict[str, str], *args: str) -> None:
    """``airflow backfill create``, once the scheduler has closed the previous backfill (it marks
    a finished backfill complete on its own schedule, and allows one running backfill per DAG);
    SQLite may also refuse the write while the scheduler holds its lock. "No runs to create" is
    retried too: until the dag-processor has parsed the file with this test's dates, the DAG's
    copy in the database can still carry an earlier test's end date (seen once in CI: the
    backfill ran a second before the dag-processor's first parse)."""
    deadline = time.monotonic() + 420
    retryable_errors = ("AlreadyRunningBackfill", "database is locked", "No runs to create")
    while True:
        try:
            airflow_cli("backfill", "create", "--dag-id", DAG_ID, *args, env=env)
            return
        except AssertionError as exc:
            retryable = any(error in str(exc) for error in retryable_errors)
            if not retryable or time.monotonic() > deadline:
                raise
            time.sleep(3)


def test_backfills_load_every_interval_exactly_once(example, monkeypatch, kinesis_client, doris_server, tmp_path: Path) -> None:
    interval_s = int(os.environ["KD_EXAMPLE_INTERVAL_SECONDS"])
    bounds, produced = events_per_interval(kinesis_client, example["stream"], 4, 20)
    monkeypatch.setenv("KD_EXAMPLE_START", _iso(bounds[0]))
    monkeypatch.setenv("KD_EXAMPLE_END", _iso(bounds[3]))
    monkeypatch.setenv("KD_EXAMPLE_MAX_ACTIVE_RUNS", "3")
    monkeypatch.setenv("KD_EXAMPLE_USE_SPARK", "false")
    # Airflow 2.11's executor starts `airflow tasks run` from PATH.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    assert interval_s * 1000 == bounds[1] - bounds[0]
    # Backfills read the DAG from the metadata DB, where an earlier test may have left this DAG
    # parsed under its own dates (Airflow 3's dag.test() syncs every DAG of its bundles): without
    # this, `backfill create` can run on that copy before the dag-processor reparses the file.
    airflow_cli("dags", "reserialize", env=env)

    if AIRFLOW_V_3_0_PLUS:
        with airflow3_services(env, tmp_path) as service_env:
            deadline = time.monotonic() + 120
            while True:  # the dag-processor must have parsed the DAG before it can be unpaused
                try:
                    airflow_cli("dags", "unpause", DAG_ID, env=service_env)
                    break
                except AssertionError:
                    assert time.monotonic() < deadline, "the DAG was never parsed"
                    time.sleep(2)
            for loaded in (bounds[1], bounds[3]):  # intervals 1 and 3 first
                since = datetime.now(timezone.utc)
                _create_backfill(service_env, "--from-date", _iso(loaded), "--to-date", _iso(loaded))
                _wait_for_runs(service_env, [loaded], since)
            since = datetime.now(timezone.utc)
            _create_backfill(service_env, "--from-date", _iso(bounds[0]), "--to-date", _iso(bounds[3]),
                             "--max-active-runs", "3", "--reprocess-behavior", "completed")  # fmt: skip
            runs = _wait_for_runs(service_env, bounds[:4], since)
    else:
        for loaded in (bounds[1], bounds[3]):
            airflow_cli("dags", "backfill", "-s", _iso(loaded), "-e", _iso(loaded), "-y", DAG_ID, env=env)
        airflow_cli("dags", "backfill", "-s", _iso(bounds[0]), "-e", _iso(bounds[3]), "--reset-dagruns", "-y", DAG_ID, env=env)
        runs = _runs(env)

    assert runs and all(run["state"] == "success" for run in runs), runs
    rows = doris_server.execute_sql(DB, f"SELECT event_id FROM {example['table']} ORDER BY event_id")
    assert [row[0] for row in rows] == sorted(produced)
