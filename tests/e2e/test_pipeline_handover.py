"""A new pipeline_id takes over from the old one through the example DAG, with no DAG written by
hand: the old pipeline loads two intervals, the DAG's settings change (``pipeline_id``, and
``ReadConfig(take_over_from=...)`` naming the old one) and its next run, one interval later,
starts where the old pipeline stopped: the interval between is loaded once, as a skipped one, and
reported; every record is in Doris once. (The old pipeline's runs past its end are refused:
``tests/faults/test_handover.py``, where a refused run costs no retry delays.)"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from tests.e2e.conftest import DB, aligned_grid, events_until, load_example_dag, run_dag_test

pytestmark = [pytest.mark.airflow, pytest.mark.e2e]


def _loaded(interval_end_ms: int) -> dict:
    dag_run = run_dag_test(load_example_dag(), datetime.fromtimestamp(interval_end_ms / 1000, tz=timezone.utc))
    (load,) = [ti for ti in dag_run.get_task_instances() if ti.task_id == "load_interval"]
    assert str(dag_run.state) in ("success", "DagRunState.SUCCESS"), dag_run.state
    return load.xcom_pull(task_ids="load_interval")


def test_a_new_pipeline_id_takes_over_where_the_old_one_stopped(example, monkeypatch, kinesis_client, doris_server) -> None:
    monkeypatch.setenv("KD_EXAMPLE_USE_SPARK", "false")
    b0, b1, b2, b3, b4, b5 = aligned_grid(5)
    produced = events_until(kinesis_client, example["stream"], b0, b5)

    _loaded(b1)
    _loaded(b2)
    monkeypatch.setenv("KD_EXAMPLE_PIPELINE_ID", "events-v2")
    monkeypatch.setenv("KD_EXAMPLE_TAKE_OVER_FROM", example["pipeline_id"])
    first = _loaded(b4)  # nothing ran [b2, b3): the new pipeline's catch-up loads it
    monkeypatch.delenv("KD_EXAMPLE_TAKE_OVER_FROM")  # recorded with the handover
    _loaded(b5)

    assert [entry.endswith(f"({b2}, {b3})") for entry in first["skipped_intervals"]["recovered"]] == [True], first
    rows = doris_server.execute_sql(DB, f"SELECT event_id FROM {example['table']}")
    assert sorted(int(row[0]) for row in rows) == sorted(produced) and len(produced) > 30
