"""Intervals no DAG run covers, in a real Airflow run (``dag.test()``, what ``airflow dags test``
runs) on both majors: the operator reads the DAG's timetable and asks Airflow which intervals
have runs (the Task SDK on 3.x, the metadata database on 2.11), and loads the others first.

Runs under Airflow 3.x (``.venv``) and 2.11 (``.venv-af2``).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

from kinesis_doris_devstack.scenario import create_stream, event, now_ms, put_events, wait_past
from tests.airflow.test_operator_messages import INTERVAL_S, dags, run, stack  # noqa: F401 - fixtures

pytestmark = [pytest.mark.airflow, pytest.mark.integration]

STEP_MS = INTERVAL_S * 1000


@pytest.fixture
def returned(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """What the operator's ``execute`` returned (its XCom) in this test's runs (dag.test() runs
    tasks in this process on both majors)."""
    from airflow_provider_kinesis_doris.operators.kinesis_to_doris import KinesisToDorisOperator

    values: list[dict[str, Any]] = []
    execute = KinesisToDorisOperator.execute
    monkeypatch.setattr(KinesisToDorisOperator, "execute", lambda self, context: values.append(execute(self, context)) or values[-1])
    return values


def _at(epoch_ms: int) -> datetime:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=timezone.utc)


def _table_ids(doris_server: Any, table: str) -> list[int]:
    rows = doris_server.execute_sql("messages", f"SELECT event_id FROM {table}")
    return sorted(int(row[0]) for row in rows)


def test_the_run_after_a_pause_loads_the_intervals_no_run_covered(
    dags: Any, stack: dict[str, str], kinesis_client: Any, doris_server: Any, returned: list[dict[str, Any]]  # noqa: F811
) -> None:
    create_stream(kinesis_client, stack["stream"], 1)
    first_end = (now_ms() // STEP_MS + 1) * STEP_MS
    produced: list[int] = []
    # Records in four consecutive intervals: the first and the last get a DAG run, the two
    # between none (the DAG was paused with catchup=False).
    for k in range(4):
        wait_past(first_end + (k - 1) * STEP_MS)
        ids = list(range(k * 10, k * 10 + 3))
        put_events(kinesis_client, stack["stream"], [event(i) for i in ids])
        produced += ids
    last_end = first_end + 3 * STEP_MS
    wait_past(last_end)
    loaded = dags().load

    for end in (first_end, last_end):  # dags test <date>: the interval that ends at <date>
        assert "success" in str(run(loaded, _at(end)).state).lower()
    first, last = returned

    assert first["skipped_intervals"]["recovered"] == []
    recovered = last["skipped_intervals"]["recovered"]
    assert len(recovered) == 2, last["skipped_intervals"]
    assert recovered[0].startswith(f"[{_at(first_end).isoformat().replace('+00:00', 'Z')}, "), recovered
    assert [entry["loaded"] for entry in last["skipped_intervals"]["loaded"]] == [3, 3]
    assert _table_ids(doris_server, stack["table"]) == sorted(produced)
