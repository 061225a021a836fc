"""The load job submitted with spark-submit, through the apache-spark provider's ``spark``
connection, to a standalone Spark cluster on loopback gives the same result as the in-process
run. The cluster requires ``spark.authenticate`` (the secret is the connection's password) and
encrypts its RPC; its executors run a Python without Airflow, in folders of their own, read
the credentials only from what spark-submit shipped, and read Kinesis through enhanced fan-out
(the local run polls: same rows, dead letters and summary). No secret ever shows on a process command
line (I8)."""

from __future__ import annotations

import itertools
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest

from airflow_provider_kinesis_doris.core.stores.dynamodb import DynamoCheckpointStore
from airflow_provider_kinesis_doris.core.chunks import ChunkLimits
from airflow_provider_kinesis_doris.core.load_job import AwsSettings, Credentials
from airflow_provider_kinesis_doris.core.pipeline import PipelineConfig, run_interval
from airflow_provider_kinesis_doris.core.doris.options import StreamLoadOptions
from airflow_provider_kinesis_doris.core.doris.connection import DorisConnectionConfig
from airflow_provider_kinesis_doris.core.mapping import RecordMapping
from airflow_provider_kinesis_doris.core.kinesis.consumer import ensure_consumer
from airflow_provider_kinesis_doris.operators.spark_connections import LoadJobSubmitter
from airflow_provider_kinesis_doris.spark.runner import SparkSettings, run_spark_job
from kinesis_doris_devstack.scenario import create_stream, event, events_table_ddl, now_ms, put_events, sealed_end, wait_past
from kinesis_doris_devstack.stack import ServiceProcess, start_spark_cluster
from tests.conftest import DORIS_PASSWORD, DORIS_USER, REPO_ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.integration]

DB = "cluster_e2e"
EXECUTOR_PYTHON = REPO_ROOT / ".venv-spark" / "bin" / "python"
AWS_SECRET = "cluster-test-aws-secret-key"
SPARK_AUTH_SECRET = "cluster-test-spark-auth-secret"
ENCRYPTED = {"spark.network.crypto.enabled": "true", "spark.io.encryption.enabled": "true"}
_names = itertools.count()


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ServiceProcess]]:
    services = start_spark_cluster(tmp_path_factory.mktemp("spark"), auth_secret=SPARK_AUTH_SECRET)
    try:
        yield services
    finally:
        for service in reversed(services):
            service.stop()


class CommandLines:
    """Samples every process's command line while a job runs."""

    def __init__(self) -> None:
        self.seen: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            for proc in Path("/proc").iterdir():
                if proc.name.isdigit():
                    try:
                        self.seen[int(proc.name)] = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    except OSError:
                        continue
            self._stop.wait(0.05)

    def __enter__(self) -> CommandLines:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()


def test_submitted_job_on_a_cluster_matches_the_in_process_run(
    spark_cluster, monkeypatch, kinesis_client, dynamodb_client, kinesis_mock_endpoint, dynamodb_endpoint, doris_server,
    efo_server,
) -> None:
    assert EXECUTOR_PYTHON.exists(), "run `make install`: the executor environment .venv-spark is missing"
    stream = f"cluster-e2e-{next(_names)}-{now_ms()}"
    create_stream(kinesis_client, stream, 3)
    start = now_ms()
    wait_past(start)
    results = put_events(kinesis_client, stream, [event(i) for i in range(90)])
    results += put_events(kinesis_client, stream, [{"user_id": "bad"}])  # no event_id: dead letter
    end = sealed_end(kinesis_client, stream, results)
    doris_server.execute_sql("", f"CREATE DATABASE IF NOT EXISTS {DB}")
    credentials = Credentials(doris_password=DORIS_PASSWORD, aws_access_key_id="testing", aws_secret_access_key=AWS_SECRET)

    def load(table: str, settings: SparkSettings, consumer: str | None = None):  # type: ignore[no-untyped-def]
        doris_server.execute_sql(DB, events_table_ddl(table))
        doris_server.execute_sql(DB, f"CREATE TABLE {table}_dl (stream_name VARCHAR(128), shard_id VARCHAR(64), "
                                     "sequence_number VARCHAR(64), sub_sequence_number INT, arrival_ms BIGINT, "
                                     "partition_key VARCHAR(256), reason STRING, payload_base64 STRING) "
                                     "DUPLICATE KEY(stream_name) DISTRIBUTED BY HASH(shard_id) BUCKETS 1")  # fmt: skip
        config = PipelineConfig(
            pipeline_id=f"{stream}.{table}", stream_name=stream, checkpoint_table="cluster_checkpoints",
            doris_database=DB, doris_table=table, dead_letter_table=f"{table}_dl",
            doris=DorisConnectionConfig(host="127.0.0.1", port=doris_server.fe_port, user=DORIS_USER),
            aws=AwsSettings("us-east-1", efo_server.endpoint if consumer else kinesis_mock_endpoint, dynamodb_endpoint),
            efo_consumer_arn=consumer,
            load_options=StreamLoadOptions.json_lines(), chunk_limits=ChunkLimits(max_rows=20),
            mapping=RecordMapping(metadata_columns=("_kinesis_shard", "_kinesis_sequence"), required_fields=("event_id",)),
        )  # fmt: skip
        store = DynamoCheckpointStore(dynamodb_client, config.checkpoint_table, config.pipeline_id)
        store.create_table_if_missing()
        result = run_interval(
            config, start, end, kinesis=kinesis_client, store=store, credentials=credentials,
            runner=lambda job, creds: run_spark_job(job, creds, settings),
        )  # fmt: skip
        rows = doris_server.execute_sql(DB, f"SELECT event_id, _kinesis_shard, _kinesis_sequence FROM {table} ORDER BY event_id")
        dead = doris_server.execute_sql(DB, f"SELECT reason FROM {table}_dl")
        return result.summary(), rows, dead

    local_summary, local_rows, local_dead = load("events_local", SparkSettings(master="local[2]"))
    master, worker = spark_cluster
    host, port = master.endpoint.removeprefix("spark://").split(":")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CLUSTER", f"spark://:{SPARK_AUTH_SECRET}@{host}:{port}")
    # spark-submit from PATH, as SparkSubmitHook runs it: pip's pyspark puts it beside this Python.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SPARK_HOME", str(Path(pyspark.__file__).parent))
    submitter = LoadJobSubmitter("spark_cluster")
    # The cluster's executors read through enhanced fan-out; the local run polled.
    consumer = ensure_consumer(kinesis_client, stream, "cluster-e2e")
    with CommandLines() as command_lines:
        cluster_summary, cluster_rows, cluster_dead = load("events_cluster", SparkSettings(
            submitter=submitter, auth_secret=submitter.auth_secret, python=str(EXECUTOR_PYTHON), conf=ENCRYPTED,
        ), consumer)  # fmt: skip
    assert efo_server.subscribe_calls >= 3, "the executors subscribed to every shard"

    assert [row[0] for row in cluster_rows] == list(range(90))
    assert cluster_rows == local_rows and len(cluster_dead) == len(local_dead) == 1
    assert cluster_summary["loaded"] == local_summary["loaded"] == 90
    assert replace_labels(cluster_summary) == replace_labels(local_summary)
    submitted = [line for line in command_lines.seen.values() if "spark" in line.lower()]
    assert any("SparkSubmit" in line or "spark-submit" in line for line in submitted)
    assert any(str(EXECUTOR_PYTHON) in line for line in command_lines.seen.values()), "executors ran another Python"
    for line in command_lines.seen.values():
        assert DORIS_PASSWORD not in line and AWS_SECRET not in line and SPARK_AUTH_SECRET not in line
    assert "authentication enabled" in master.log_path.read_text(), "the cluster did not require authentication"
    # The executors ran in the worker's own folders, where only spark-submit's --files put the credentials.
    shipped = list((worker.log_path.parent / "worker-work").glob("app-*/*/credentials-*.json"))
    assert shipped, "spark-submit shipped no credentials file to the executors"


def replace_labels(summary: dict) -> dict:
    """The summary without what depends on the pipeline id (labels, ids)."""
    shards = {shard: {k: v for k, v in entry.items() if k not in ("labels",)} for shard, entry in summary["shards"].items()}
    return {"loaded": summary["loaded"], "dead_lettered": summary["dead_lettered"], "shards": shards}
