"""The loader in an Airflow deployment's ecosystem, run by ``airflow dags test`` as a deployment
runs it: OpenLineage events through the openlineage provider's file transport, metrics through
Airflow's ``Stats`` to a statsd listener on loopback, and (Airflow 3) the table's Asset queueing
the downstream example DAG."""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from kinesis_doris_devstack.scenario import event, put_events, wait_past
from tests.e2e.airflow_services import airflow_cli
from tests.e2e.conftest import DB, aligned_grid

from airflow_provider_kinesis_doris.version_compat import AIRFLOW_V_3_0_PLUS

pytestmark = [pytest.mark.airflow, pytest.mark.e2e, pytest.mark.integration]

DAG_ID = "kinesis_to_doris_example"
CONSUMER_DAG_ID = "doris_table_consumer_example"
KINESIS_MOCK_ACCOUNT = "000000000000"


def _events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _iso(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=timezone.utc).isoformat()


def test_a_run_reports_lineage_metrics_and_its_table_asset(example, kinesis_client, doris_server, statsd, tmp_path) -> None:
    bounds = aligned_grid(1)
    wait_past(bounds[0])
    put_events(kinesis_client, example["stream"], [event(i) for i in range(20)] + [{"user_id": "no-event-id", "amount": 1}])
    wait_past(bounds[1])
    lineage_file = tmp_path / "openlineage.jsonl"
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "KD_EXAMPLE_USE_SPARK": "false",
        "AIRFLOW__METRICS__STATSD_ON": "True",
        "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
        "AIRFLOW__METRICS__STATSD_PORT": str(statsd.port),
        "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "kd-e2e",
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(lineage_file), "append": True}),
    }
    # Parses the DAG files into the metadata DB, as a deployment's DAG processor does: the
    # Asset and the consumer DAG scheduled on it must be known there (2.11's `dags test` does not sync).
    airflow_cli("dags", "reserialize", env=env)
    doris_server.inject_fault("http_500")  # one Stream Load is retried under its label
    airflow_cli("dags", "test", DAG_ID, _iso(bounds[1]), env=env)

    rows = doris_server.execute_sql(DB, f"SELECT COUNT(*) FROM {example['table']}")
    assert rows[0][0] == 20
    table = f"{DB}.{example['table']}"

    # OpenLineage: the stream in, the table and its dead-letter table out, with counts and schema.
    events = [e for e in _events(lineage_file) if e["job"]["name"] == f"{DAG_ID}.load_interval"]
    by_type = {e["eventType"]: e for e in events}
    assert {"START", "COMPLETE"} <= set(by_type), [e["eventType"] for e in events]
    stream = {"namespace": f"arn:aws:kinesis:us-east-1:{KINESIS_MOCK_ACCOUNT}", "name": f"stream/{example['stream']}"}
    doris = f"doris://127.0.0.1:{doris_server.query_port}"
    start, complete = by_type["START"], by_type["COMPLETE"]
    assert [{"namespace": d["namespace"], "name": d["name"]} for d in start["inputs"]] == [stream]
    assert [(d["namespace"], d["name"]) for d in start["outputs"]] == [(doris, table)]
    (source,) = complete["inputs"]
    assert {"namespace": source["namespace"], "name": source["name"]} == stream
    assert source["inputFacets"]["inputStatistics"]["rowCount"] == 21
    outputs = {d["name"]: d for d in complete["outputs"]}
    assert set(outputs) == {table, f"{table}_dead_letter"}
    assert all(d["namespace"] == doris for d in outputs.values())
    assert outputs[table]["outputFacets"]["outputStatistics"]["rowCount"] == 20
    assert outputs[f"{table}_dead_letter"]["outputFacets"]["outputStatistics"]["rowCount"] == 1
    fields = {f["name"]: f["type"] for f in outputs[table]["facets"]["schema"]["fields"]}
    assert {"event_id", "user_id", "amount", "_kinesis_sequence"} <= set(fields)

    # Metrics: the run's counts, under the tagless names plain statsd keeps.
    pipeline = example["pipeline_id"].replace("/", "_")
    assert sum(statsd.values(f"airflow.kinesis_doris.records_read.{pipeline}", "c")) == 21
    assert sum(statsd.values(f"airflow.kinesis_doris.rows_loaded.{pipeline}", "c")) == 20
    assert sum(statsd.values(f"airflow.kinesis_doris.dead_lettered.{pipeline}", "c")) == 1
    assert sum(statsd.values(f"airflow.kinesis_doris.chunks_loaded.{pipeline}", "c")) >= 1
    assert sum(statsd.values(f"airflow.kinesis_doris.chunks_retried.{pipeline}", "c")) == 1
    assert statsd.values(f"airflow.kinesis_doris.shards_waiting.{pipeline}", "g") == [0]
    assert len(statsd.values(f"airflow.kinesis_doris.max_lag_ms.{pipeline}", "g")) == 1
    assert len(statsd.values(f"airflow.kinesis_doris.shard_lag_ms.{pipeline}.shardId-000000000000", "g")) == 1

    # The table's Asset: an event for this load, and the downstream DAG queued on it.
    uri = f"doris://doris_default/{DB}/{example['table']}"
    from airflow.utils.session import create_session

    if AIRFLOW_V_3_0_PLUS:
        from airflow.models.asset import AssetDagRunQueue as Queue, AssetEvent as Event, AssetModel as Model
    else:
        from airflow.models.dataset import DatasetDagRunQueue as Queue, DatasetEvent as Event, DatasetModel as Model

    with create_session() as session:
        asset = session.query(Model).filter(Model.uri == uri).one()
        events_of_asset = session.query(Event).filter(_asset_id(Event) == asset.id).count()
        queued = [entry.target_dag_id for entry in session.query(Queue).filter(_asset_id(Queue) == asset.id)]
    assert events_of_asset == 1
    assert queued == [CONSUMER_DAG_ID]
    # The downstream DAG's check runs over the connection's MySQL protocol port and passes (an
    # earlier test's scheduler may have run it already: only the new run counts).
    from airflow.models.dagrun import DagRun

    def consumer_runs() -> dict[str, str]:
        with create_session() as session:
            return {run.run_id: run.state for run in session.query(DagRun).filter(DagRun.dag_id == CONSUMER_DAG_ID)}

    before = consumer_runs()
    airflow_cli("dags", "test", CONSUMER_DAG_ID, env=env)
    assert [state for run_id, state in consumer_runs().items() if run_id not in before] == ["success"]


def _asset_id(model):  # type: ignore[no-untyped-def]
    return model.asset_id if AIRFLOW_V_3_0_PLUS else model.dataset_id
