"""A paused DAG under a running scheduler: the example DAG (``catchup=False``) runs, is paused for
more than two whole intervals while records keep arriving, and is unpaused. Airflow then creates
only the latest interval's run; the runs after the pause load the intervals no run covered
themselves, so every record is in Doris once, without a backfill.

Airflow 3.x: api-server, scheduler, dag-processor and triggerer; Airflow 2.11: the scheduler (it
parses the DAGs itself). Each task loads in its own process (no Spark): the scheduler's runs must
keep up with short intervals on a 2-core machine. ``make proof`` runs it (``KD_PROOF_SCHEDULER=1``);
``make test`` takes the same runs in process (``tests/airflow/test_operator_skipped_intervals.py``)."""

from __future__ import annotations

import os
import re
from datetime import datetime, timezone
from pathlib import Path

import pytest

from airflow_provider_kinesis_doris.version_compat import AIRFLOW_V_3_0_PLUS
from kinesis_doris_devstack.scenario import event, now_ms, put_events, wait_past
from tests.e2e.airflow_services import airflow2_services, airflow3_services, airflow_cli
from tests.e2e.conftest import DB
from tests.e2e.scheduled_runs import DAG_ID, Interval, next_bound, returned, runs_since, settled_through, wait_for

pytestmark = [pytest.mark.airflow, pytest.mark.e2e, pytest.mark.timeout(900), pytest.mark.usefixtures("one_airflow_scheduler_at_a_time")]

INTERVAL_S = 10
STEP_MS = INTERVAL_S * 1000
PER_BATCH = 10


def _keys(described: str) -> Interval:
    """``(start_ms, end_ms)`` of an interval as the XCom describes it: ``[<ISO>, <ISO>) (<ms>, <ms>)``."""
    match = re.search(r"\((\d+), (\d+)\)$", described)
    assert match, described
    return int(match[1]), int(match[2])


def test_a_dag_paused_for_two_intervals_loads_every_record_once_without_a_backfill(
    example, monkeypatch, kinesis_client, doris_server, tmp_path: Path
) -> None:
    monkeypatch.setenv("KD_EXAMPLE_INTERVAL_SECONDS", str(INTERVAL_S))
    monkeypatch.setenv("KD_EXAMPLE_USE_SPARK", "false")
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION", "True")
    env = dict(os.environ)
    # The DAG in the metadata DB as this test's environment parses it (an earlier test may have left
    # it with other names and dates), paused until the scheduler runs.
    airflow_cli("dags", "reserialize", env=env)
    airflow_cli("dags", "pause", DAG_ID, env=env)
    since = datetime.now(timezone.utc)
    produced: list[int] = []

    def produce(batch: int) -> None:
        ids = list(range(batch * 1000, batch * 1000 + PER_BATCH))
        put_events(kinesis_client, example["stream"], [event(i) for i in ids])
        produced.extend(ids)

    services = airflow3_services if AIRFLOW_V_3_0_PLUS else airflow2_services
    with services(env, tmp_path) as service_env:
        airflow_cli("dags", "unpause", DAG_ID, env=service_env)
        first = wait_for(lambda: runs_since(since)[:1], "the scheduler created no run of the unpaused DAG", since, tmp_path)[0]
        # The pipeline starts with the first interval a run plans: earlier records are not its own.
        before_pause = next_bound(max(now_ms(), first.interval[1]), STEP_MS)
        wait_past(before_pause)
        produce(0)
        what = "no run loaded the interval before the pause"
        wait_for(lambda: settled_through(since, before_pause + STEP_MS), what, since, tmp_path)

        airflow_cli("dags", "pause", DAG_ID, env=service_env)
        paused_at = now_ms()
        produce(1)
        whole = next_bound(paused_at, STEP_MS)
        # Three whole intervals paused: Airflow runs the last of them on unpause (catchup=False
        # creates the latest finished interval's run), so at least two have no run of their own.
        for k in range(3):
            wait_past(whole + k * STEP_MS)
            produce(2 + k)
        wait_past(whole + 3 * STEP_MS)
        unpaused_at = now_ms()  # at the latest: the command takes seconds, and an interval may end meanwhile
        airflow_cli("dags", "unpause", DAG_ID, env=service_env)
        after_pause = next_bound(now_ms(), STEP_MS)
        wait_past(after_pause)
        produce(5)
        what = "the runs after the pause did not finish"
        runs = wait_for(lambda: settled_through(since, after_pause + STEP_MS), what, since, tmp_path)
        airflow_cli("dags", "pause", DAG_ID, env=service_env)  # no new run while the services stop
        succeeded = [run for run in runs if run.state == "success"]
        returned_by = {run.run_id: returned(run.run_id) for run in succeeded}

    report = "\n".join(f"{run} → {returned_by.get(run.run_id, {}).get('skipped_intervals')}" for run in runs)
    rows = doris_server.execute_sql(DB, f"SELECT event_id FROM {example['table']}")
    assert sorted(int(row[0]) for row in rows) == sorted(produced), report
    assert {run.run_type for run in runs} == {"scheduled"}, f"a backfill or manual run:\n{report}"
    assert [run.state for run in runs] == ["success"] * len(runs), report

    # Each interval from the first run's to the last one's is loaded by exactly one run: its own
    # or, having none, the run that recovered it (XCom).
    loaded_by: dict[Interval, list[str]] = {}
    for run in succeeded:
        loaded_by.setdefault(run.interval, []).append(run.run_id)
        for described in returned_by[run.run_id]["skipped_intervals"]["recovered"]:
            loaded_by.setdefault(_keys(described), []).append(f"{run.run_id} (recovered)")
    grid = [(start, start + STEP_MS) for start in range(runs[0].interval[0], runs[-1].interval[1], STEP_MS)]
    assert sorted(loaded_by) == grid and all(len(runs_of) == 1 for runs_of in loaded_by.values()), report
    # The pause: intervals it spanned got no run of their own and a later run loaded them. Which
    # ones exactly depends on when the scheduler saw the pause and the unpause (a CLI call takes
    # seconds on a loaded machine, and a run created just before the pause landed still runs).
    paused = [interval for interval in grid if paused_at <= interval[0] and interval[1] <= unpaused_at]
    recovered_after_pause = [interval for interval in paused if "(recovered)" in loaded_by[interval][0]]
    assert len(paused) >= 3 and recovered_after_pause, report
    assert len(runs) < len(grid), report
