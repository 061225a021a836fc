"""Fixtures of the Airflow end-to-end tests: the example DAG's environment on the local stack."""

from __future__ import annotations

import fcntl
import importlib.util
import itertools
import os
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pytest

from kinesis_doris_devstack.scenario import create_stream, event, now_ms, put_events, wait_past
from tests.conftest import REPO_ROOT, events_table_on_local_stack

# Runs under Airflow's scheduler: scheduled runs on one-minute intervals (about 14 minutes a
# setting) and a DAG paused for three intervals (4-8 minutes on 2 busy cores, most of it the
# services' start-up and the intervals' wall time). make proof runs them; make test's
# tests/airflow/test_operator_skipped_intervals.py takes the paused DAG's runs in process.
SCHEDULER_RUNS = ["test_scheduled_runs.py", "test_paused_dag.py"]
collect_ignore = [] if os.environ.get("KD_PROOF_SCHEDULER") else SCHEDULER_RUNS

DB = "e2e"
INTERVAL_S = 2
CHECKPOINT_TABLE = "e2e_checkpoints"
_names = itertools.count()


@pytest.fixture
def one_airflow_scheduler_at_a_time() -> Iterator[None]:
    """Held while a test runs Airflow's scheduler on short intervals (the backfill test and
    make proof's scheduler runs): in parallel xdist workers, two of them load the machine until the scheduler lags
    behind their intervals. A lock file of this checkout, so other checkouts' runs are not held."""
    with open(REPO_ROOT / ".pytest-airflow-scheduler.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.fixture
def example(monkeypatch, airflow_db, kinesis_client, kinesis_mock_endpoint, dynamodb_endpoint, doris_server):  # type: ignore[no-untyped-def]
    """Connections and names for the example DAG, as a user would set them in the environment."""
    n = next(_names)
    stream, table = f"e2e-dag-{n}-{datetime.now().strftime('%H%M%S%f')}", f"events_{n}"
    create_stream(kinesis_client, stream, 2)
    events_table_on_local_stack(monkeypatch, kinesis_mock_endpoint, dynamodb_endpoint, doris_server, DB, table)
    env = {
        "KD_EXAMPLE_STREAM": stream,
        "KD_EXAMPLE_TABLE": f"{DB}.{table}",
        "KD_EXAMPLE_CHECKPOINT_TABLE": CHECKPOINT_TABLE,
        "KD_EXAMPLE_INTERVAL_SECONDS": str(INTERVAL_S),
        "KD_EXAMPLE_SEAL_GRACE_SECONDS": "0",
        "KD_EXAMPLE_SPARK_MASTER": "local[2]",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return {"stream": stream, "table": table, "pipeline_id": f"{stream}.{DB}.{table}"}


def load_example_dag():  # type: ignore[no-untyped-def]
    """Import the DAG file afresh, so it reads this test's environment."""
    path = REPO_ROOT / "dags" / "kinesis_to_doris_example.py"
    spec = importlib.util.spec_from_file_location(f"kd_example_{next(_names)}", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.dag


def run_dag_test(dag, interval_end: datetime):  # type: ignore[no-untyped-def]
    """One manual run whose data interval is [interval_end - INTERVAL_S, interval_end)."""
    from airflow_provider_kinesis_doris.version_compat import AIRFLOW_V_3_0_PLUS

    if AIRFLOW_V_3_0_PLUS:
        return dag.test(logical_date=interval_end)
    return dag.test(execution_date=interval_end)


def aligned_grid(count: int) -> list[int]:
    """Interval bounds (epoch ms) on the DAG's grid, starting just ahead of now."""
    now_s = int(datetime.now(timezone.utc).timestamp())
    first = (now_s // INTERVAL_S + 1) * INTERVAL_S
    return [(first + i * INTERVAL_S) * 1000 for i in range(count + 1)]


def events_until(kinesis_client: Any, stream: str, start_ms: int, end_ms: int) -> list[int]:
    """Put 4 events every half second from ``start_ms`` until just before ``end_ms`` (ids 0, 1,
    ...), then wait until ``end_ms`` has passed; returns the ids."""
    produced: list[int] = []
    wait_past(start_ms)
    while now_ms() < end_ms - 300:
        ids = list(range(len(produced), len(produced) + 4))
        put_events(kinesis_client, stream, [event(i) for i in ids])
        produced.extend(ids)
        threading.Event().wait(0.5)
    wait_past(end_ms)
    return produced


def events_per_interval(kinesis_client: Any, stream: str, intervals: int, per_interval: int) -> tuple[list[int], list[int]]:
    """Put ``per_interval`` events into each of ``intervals`` intervals on the DAG's grid (ids
    ``i * 1000 + n``), waiting until the last one has passed; returns the bounds and the ids."""
    bounds = aligned_grid(intervals)
    produced: list[int] = []
    for i in range(intervals):
        wait_past(bounds[i])
        ids = list(range(i * 1000, i * 1000 + per_interval))
        put_events(kinesis_client, stream, [event(e) for e in ids])
        produced += ids
    wait_past(bounds[intervals])
    return bounds, produced
