"""The schedule of the example DAG changes and changes back, with no DAG written by hand: from
2-second intervals to 6-second ones whose first interval starts 2 seconds after the last 2-second
one ended, then back to 2 seconds. The span between the two schedules is loaded once by the first
run of the new schedule, as an interval of its own, and reported; every record is in Doris once.
(The same as a cron of 1 minute changed to one of 5 minutes, at the local stack's pace.)"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from tests.e2e.conftest import DB, aligned_grid, events_until, load_example_dag, run_dag_test

pytestmark = [pytest.mark.airflow, pytest.mark.e2e]


def _load(interval_end_ms: int) -> dict:
    dag_run = run_dag_test(load_example_dag(), datetime.fromtimestamp(interval_end_ms / 1000, tz=timezone.utc))
    assert str(dag_run.state) in ("success", "DagRunState.SUCCESS"), dag_run.state
    (load,) = [ti for ti in dag_run.get_task_instances() if ti.task_id == "load_interval"]
    return load.xcom_pull(task_ids="load_interval")


def test_a_schedule_changed_and_changed_back_loads_every_record_once(example, monkeypatch, kinesis_client, doris_server) -> None:
    monkeypatch.setenv("KD_EXAMPLE_USE_SPARK", "false")
    b0, b1, b2 = aligned_grid(2)
    new_start = b2 + 2_000  # the 6-second schedule's first interval: [b2 + 2 s, b2 + 8 s)
    last_end = new_start + 8_000  # then 2 seconds again: [b2 + 8 s, b2 + 10 s)
    produced = events_until(kinesis_client, example["stream"], b0, last_end)

    _load(b1)
    _load(b2)
    monkeypatch.setenv("KD_EXAMPLE_INTERVAL_SECONDS", "6")
    changed = _load(new_start + 6_000)
    monkeypatch.setenv("KD_EXAMPLE_INTERVAL_SECONDS", "2")
    back = _load(last_end)

    bridge = f"({b2}, {new_start})"
    assert [entry.endswith(bridge) for entry in changed["skipped_intervals"]["recovered"]] == [True], changed
    assert back["skipped_intervals"]["recovered"] == [], back
    rows = doris_server.execute_sql(DB, f"SELECT event_id FROM {example['table']}")
    assert sorted(int(row[0]) for row in rows) == sorted(produced) and len(produced) > 40
