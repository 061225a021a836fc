"""The example DAG, run by Airflow itself (``dag.test()``) on the local stack: three consecutive
intervals, then the same three again, load every record exactly once — on Airflow 3.x and 2.11."""

from __future__ import annotations

import importlib.util
import itertools
import json
from datetime import datetime, timezone

import pytest

from airflow_provider_kinesis_doris.core.checkpoints import DynamoCheckpointStore
from airflow_provider_kinesis_doris.testing.scenario import create_stream, event, events_table_ddl, put_events, wait_past
from tests.conftest import DORIS_PASSWORD, DORIS_USER, REPO_ROOT

pytestmark = [pytest.mark.airflow, pytest.mark.e2e, pytest.mark.spark]

DB = "e2e"
INTERVAL_S = 2
CHECKPOINT_TABLE = "e2e_checkpoints"
_names = itertools.count()


@pytest.fixture
def example(monkeypatch, airflow_db, kinesis_client, kinesis_mock_endpoint, dynamodb_endpoint, doris_server):  # type: ignore[no-untyped-def]
    """Connections and names for the example DAG, as a user would set them in the environment."""
    n = next(_names)
    stream, table = f"e2e-dag-{n}-{datetime.now().strftime('%H%M%S%f')}", f"events_{n}"
    create_stream(kinesis_client, stream, 2)
    doris_server.execute_sql("", f"CREATE DATABASE IF NOT EXISTS {DB}")
    doris_server.execute_sql(DB, events_table_ddl(table))
    aws_extra = {"region_name": "us-east-1", "endpoint_url": kinesis_mock_endpoint,
                 "service_config": {"dynamodb": {"endpoint_url": dynamodb_endpoint}}}  # fmt: skip
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps(
        {"conn_type": "aws", "login": "testing", "password": "testing-secret-key", "extra": aws_extra}))  # fmt: skip
    monkeypatch.setenv("AIRFLOW_CONN_DORIS_DEFAULT", json.dumps(
        {"conn_type": "doris", "host": "127.0.0.1", "port": doris_server.fe_port, "login": DORIS_USER,
         "password": DORIS_PASSWORD, "schema": DB}))  # fmt: skip
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


def test_three_intervals_then_replays_load_exactly_once(example, kinesis_client, dynamodb_client, doris_server) -> None:
    bounds = aligned_grid(3)
    produced: list[int] = []
    for i in range(3):
        wait_past(bounds[i])
        ids = list(range(i * 1000, i * 1000 + 30))
        put_events(kinesis_client, example["stream"], [event(e) for e in ids])
        produced += ids
    wait_past(bounds[3])
    dag = load_example_dag()

    for _ in range(2):  # the second pass replays every interval
        for end in bounds[1:]:
            dag_run = run_dag_test(dag, datetime.fromtimestamp(end / 1000, tz=timezone.utc))
            assert str(dag_run.state) in ("success", "DagRunState.SUCCESS"), dag_run.state

    rows = doris_server.execute_sql(DB, f"SELECT event_id FROM {example['table']} ORDER BY event_id")
    assert [row[0] for row in rows] == sorted(produced)
    store = DynamoCheckpointStore(dynamodb_client, CHECKPOINT_TABLE, example["pipeline_id"])
    shards = store.list_shard_checkpoints()
    assert len(shards) == 2
    assert {shard.high_water_mark.instant_ms for shard in shards} == {bounds[3]}
