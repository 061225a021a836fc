"""The example DAG with ``SparkRunner(spark_connect_conn_id=...)``, run by Airflow (``dag.test()``)
against the Spark Connect server PySpark ships, on loopback: two intervals, then the same two again,
load every record exactly once, as the local and standalone runs do. The server requires a token,
which only the ``spark_connect`` connection carries; its Python workers run the executor
environment (.venv-spark: the provider without Airflow), as a real server's would."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import datetime, timezone

import pytest

from airflow_provider_kinesis_doris.core.stores.dynamodb import dynamo_store
from kinesis_doris_devstack.stack import ServiceProcess, start_spark_connect_server
from tests.conftest import DORIS_PASSWORD, REPO_ROOT
from tests.e2e.conftest import CHECKPOINT_TABLE, DB, events_per_interval, load_example_dag, run_dag_test
from tests.e2e.test_spark_cluster import processes

pytestmark = [pytest.mark.airflow, pytest.mark.e2e, pytest.mark.spark]

EXECUTOR_PYTHON = REPO_ROOT / ".venv-spark" / "bin" / "python"
TOKEN = "connect-test-token"
CONN_ID = "spark_connect_e2e"


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    assert EXECUTOR_PYTHON.exists(), "run `make install`: the executor environment .venv-spark is missing"
    server = start_spark_connect_server(tmp_path_factory.mktemp("connect"), python=str(EXECUTOR_PYTHON), token=TOKEN)
    try:
        yield server
    finally:
        server.stop()


def descendants(pid: int) -> dict[int, str]:
    """The processes under ``pid``: pid → command line."""
    table = processes()
    found: dict[int, str] = {}
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for child, (its_parent, command_line) in table.items():
            if its_parent == parent and child not in found:
                found[child] = command_line
                frontier.append(child)
    return found


def test_the_example_dag_through_spark_connect_loads_exactly_once(
    connect_server, example, monkeypatch, recwarn, kinesis_client, dynamodb_client, doris_server
) -> None:
    from pyspark.sql import SparkSession as LocalSession
    from pyspark.sql.connect.session import SparkSession

    # A local session kept by an earlier job of this process, as the runner keeps one (and as a
    # make test worker had when PySpark's general builder refused the Connect session beside it).
    local = (
        LocalSession.builder.master("local[1]")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    # "localhost": Spark's client sends a token without TLS only over a local channel.
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(
        {"conn_type": "spark_connect", "host": "localhost", "port": connect_server.extra["port"], "password": TOKEN}
    ))  # fmt: skip
    monkeypatch.setenv("KD_EXAMPLE_SPARK_CONNECT_CONN_ID", CONN_ID)
    bounds, produced = events_per_interval(kinesis_client, example["stream"], 2, 20)
    dag = load_example_dag()

    for _ in range(2):  # the second pass replays every interval
        for end in bounds[1:]:
            dag_run = run_dag_test(dag, datetime.fromtimestamp(end / 1000, tz=timezone.utc))
            assert str(dag_run.state) in ("success", "DagRunState.SUCCESS"), dag_run.state

    # Each run ended its session: this process's exit calls no server (PySpark's client would
    # retry a gone one for minutes), and the server keeps no run's credentials file.
    assert SparkSession.getActiveSession() is None and SparkSession._get_default_session() is None
    # PySpark's mark of the process as Spark Connect's went with it: a local session may start
    # here again, and child processes do not inherit the mark.
    assert "SPARK_CONNECT_MODE_ENABLED" not in os.environ
    assert local.range(3).count() == 3
    # The server's static settings are its own: the session asked to change none of them.
    refused = [str(warning.message) for warning in recwarn if "spark." in str(warning.message)]
    assert not refused, refused
    rows = doris_server.execute_sql(DB, f"SELECT event_id FROM {example['table']} ORDER BY event_id")
    assert [row[0] for row in rows] == sorted(produced)
    store = dynamo_store(dynamodb_client, CHECKPOINT_TABLE, example["pipeline_id"])
    shards = store.ledger.list_shard_checkpoints()
    assert len(shards) == 2
    assert {shard.high_water_mark.instant_ms for shard in shards} == {bounds[2]}
    # The server's Python workers (kept for reuse) ran the job: the executor environment's Python,
    # started by the server, not by this process.
    workers = [line for line in descendants(connect_server.pid).values() if "pyspark.daemon" in line]
    assert workers and all(str(EXECUTOR_PYTHON) in line for line in workers), descendants(connect_server.pid)
    assert DORIS_PASSWORD not in connect_server.log_path.read_text(errors="replace")
