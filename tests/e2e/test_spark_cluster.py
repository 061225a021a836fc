"""The load job submitted with spark-submit, through the apache-spark provider's ``spark``
connection, to a standalone Spark cluster on loopback gives the same result as the in-process
run. The cluster requires ``spark.authenticate`` (the secret is the connection's password) and
encrypts its RPC; its executors run a Python without Airflow, in folders of their own, read
the credentials only from what spark-submit shipped, and read Kinesis through enhanced fan-out
(the local run polls: same rows, dead letters and summary). No secret ever shows on a process command
line (I8). A Python worker killed in the middle of a range (a real executor loss) makes Spark run
the task again within the job, and the range still loads exactly once."""

from __future__ import annotations

import itertools
import os
import signal
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyspark
import pytest

from airflow_provider_kinesis_doris.core.stores.dynamodb import dynamo_store
from airflow_provider_kinesis_doris.core.report import RangeReport
from airflow_provider_kinesis_doris.core.load_job import LoadJob
from airflow_provider_kinesis_doris.core.settings import AwsSettings, Credentials
from airflow_provider_kinesis_doris.core.pipeline import Runner, run_interval
from airflow_provider_kinesis_doris.core.mapping import RecordMapping
from airflow_provider_kinesis_doris.core.kinesis.consumer import ensure_consumer
from airflow_provider_kinesis_doris.operators.spark_connections import LoadJobSubmitter
from airflow_provider_kinesis_doris.spark.runner import SparkSettings, run_spark_job
from airflow_provider_kinesis_doris.testing.builders import local_pipeline_config
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


def processes() -> dict[int, tuple[int, str]]:
    """The process table: pid → (parent pid, command line)."""
    table = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                command_line = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                # The parent is the field after the state, which follows the name in parentheses.
                parent = int((proc / "stat").read_text().rpartition(")")[2].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
            table[int(proc.name)] = (parent, command_line)
    return table


class CommandLines:
    """Samples every process's command line while a job runs."""

    def __init__(self) -> None:
        self.seen: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.seen.update((pid, command_line) for pid, (_, command_line) in processes().items())
            self._stop.wait(0.05)

    def __enter__(self) -> CommandLines:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture
def submitter(spark_cluster, monkeypatch) -> LoadJobSubmitter:  # type: ignore[no-untyped-def]
    """Submits to the cluster through the ``spark_cluster`` connection, as the operator does."""
    assert EXECUTOR_PYTHON.exists(), "run `make install`: the executor environment .venv-spark is missing"
    host, port = spark_cluster[0].endpoint.removeprefix("spark://").split(":")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CLUSTER", f"spark://:{SPARK_AUTH_SECRET}@{host}:{port}")
    # spark-submit from PATH, as SparkSubmitHook runs it: pip's pyspark puts it beside this Python.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SPARK_HOME", str(Path(pyspark.__file__).parent))
    return LoadJobSubmitter("spark_cluster")


def on_spark(settings: SparkSettings) -> Runner:
    return lambda job, credentials: run_spark_job(job, credentials, settings)


def on_the_cluster(submitter: LoadJobSubmitter, conf: Mapping[str, str]) -> Runner:
    """Submits the job to the cluster; its executors run the Python of .venv-spark, without Airflow."""
    return on_spark(SparkSettings(submitter=submitter, auth_secret=submitter.auth_secret, python=str(EXECUTOR_PYTHON), conf=conf))


def load_interval(  # type: ignore[no-untyped-def]
    doris_server, kinesis_client, dynamodb_client, stream: str, table: str, start: int, end: int, aws: AwsSettings,
    runner: Runner, **pipeline: Any,
):
    """Create ``table`` and its dead-letter table in Doris, run ``[start, end)`` of ``stream`` into
    them with ``runner``, and return the result, the rows (event id, shard, sequence) and the dead
    letters' reasons. ``pipeline``: settings of the pipeline other than its defaults here."""
    doris_server.execute_sql("", f"CREATE DATABASE IF NOT EXISTS {DB}")
    doris_server.execute_sql(DB, events_table_ddl(table))
    doris_server.execute_sql(DB, f"CREATE TABLE {table}_dl (stream_name VARCHAR(128), shard_id VARCHAR(64), "
                                 "sequence_number VARCHAR(64), sub_sequence_number INT, arrival_ms BIGINT, "
                                 "partition_key VARCHAR(256), reason STRING, payload_base64 STRING) "
                                 "DUPLICATE KEY(stream_name) DISTRIBUTED BY HASH(shard_id) BUCKETS 1")  # fmt: skip
    config = replace(local_pipeline_config(
        stream, DB, table, doris_port=doris_server.fe_port, doris_user=DORIS_USER,
        kinesis_endpoint=aws.kinesis_endpoint_url, dynamodb_endpoint=aws.dynamodb_endpoint_url,
        pipeline_id=f"{stream}.{table}", checkpoint_table="cluster_checkpoints", dead_letter_table=f"{table}_dl",
        chunk_max_rows=20,
        mapping=RecordMapping(metadata_columns=("_kinesis_shard", "_kinesis_sequence"), required_fields=("event_id",)),
    ), **pipeline)  # fmt: skip
    store = dynamo_store(dynamodb_client, config.checkpoint_table, config.pipeline_id)
    store.items.create_table_if_missing()
    credentials = Credentials(doris_password=DORIS_PASSWORD, aws_access_key_id="testing", aws_secret_access_key=AWS_SECRET)
    result = run_interval(
        config, start, end, kinesis=kinesis_client, store=store, credentials=credentials,
        runner=runner,
    )  # fmt: skip
    rows = doris_server.execute_sql(DB, f"SELECT event_id, _kinesis_shard, _kinesis_sequence FROM {table} ORDER BY event_id")
    dead = doris_server.execute_sql(DB, f"SELECT reason FROM {table}_dl")
    return result, rows, dead


def test_submitted_job_on_a_cluster_matches_the_in_process_run(
    spark_cluster, submitter, kinesis_client, dynamodb_client, kinesis_mock_endpoint, dynamodb_endpoint, doris_server,
    efo_server,
) -> None:
    stream = f"cluster-e2e-{next(_names)}-{now_ms()}"
    create_stream(kinesis_client, stream, 3)
    start = now_ms()
    wait_past(start)
    results = put_events(kinesis_client, stream, [event(i) for i in range(90)])
    results += put_events(kinesis_client, stream, [{"user_id": "bad"}])  # no event_id: dead letter
    end = sealed_end(kinesis_client, stream, results)
    polling = AwsSettings("us-east-1", kinesis_mock_endpoint, dynamodb_endpoint)

    def load(table: str, runner: Runner, aws: AwsSettings, consumer: str | None = None):  # type: ignore[no-untyped-def]
        result, rows, dead = load_interval(
            doris_server, kinesis_client, dynamodb_client, stream, table, start, end, aws, runner, efo_consumer_arn=consumer
        )  # fmt: skip
        return result.summary(), rows, dead

    local_summary, local_rows, local_dead = load("events_local", on_spark(SparkSettings(master="local[2]")), polling)
    master, worker = spark_cluster
    # The cluster's executors read through enhanced fan-out; the local run polled.
    consumer = ensure_consumer(kinesis_client, stream, "cluster-e2e")
    with CommandLines() as command_lines:
        cluster_summary, cluster_rows, cluster_dead = load(
            "events_cluster", on_the_cluster(submitter, ENCRYPTED), replace(polling, kinesis_endpoint_url=efo_server.endpoint),
            consumer,
        )  # fmt: skip
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
    """The summary without what depends on the pipeline id (labels, ids) or on when the run
    committed (a shard's lag is measured from its high-water mark to the commit)."""
    shards = {shard: {k: v for k, v in entry.items() if k not in ("labels", "lag_ms")} for shard, entry in summary["shards"].items()}
    return {"loaded": summary["loaded"], "dead_lettered": summary["dead_lettered"], "shards": shards}


HOLD_SECONDS = 6.0
"""How long the stand-in holds the second chunk's load, during which the test kills the loader:
long enough to find the worker and kill it; the retried task waits out the rest on that label."""


def task_workers() -> list[int]:
    """PIDs of the Python workers that run tasks on executors: an executor's ``pyspark.daemon``
    forks one per task, with the daemon's command line. (The driver has daemons of its own, which
    plan the data source's partitions.)"""
    table = processes()

    def parent_runs(pid: int, needle: str) -> bool:
        return needle in table.get(table.get(pid, (0, ""))[0], (0, ""))[1]

    return sorted(
        pid for pid, (parent, command_line) in table.items()
        if "pyspark.daemon" in command_line and parent_runs(pid, "pyspark.daemon")
        and parent_runs(parent, "CoarseGrainedExecutorBackend")
    )  # fmt: skip


def test_a_python_worker_killed_mid_range_is_rerun_by_spark_and_loads_exactly_once(
    spark_cluster, submitter, kinesis_client, dynamodb_client, kinesis_mock_endpoint, dynamodb_endpoint, doris_server,
) -> None:
    """A real executor loss: the Python worker loading a range this run planned (``fresh``: its
    loader does not read the chunk log) is SIGKILLed once the range's first chunk (rows and dead
    letter) is VISIBLE, while the stand-in holds the second chunk's Stream Load. Spark runs the
    task again within the same job (``spark.task.maxFailures``), so the new attempt gets the same
    job, ``fresh`` included, and meets what the killed one left: chunks loaded, an intent whose
    load is still running. Every record is in Doris once, the dead letter once, the run is green."""
    stream, table = f"cluster-kill-{next(_names)}-{now_ms()}", "events_killed"
    (shard,) = create_stream(kinesis_client, stream, 1)
    start = now_ms()
    wait_past(start)
    # The dead letter in the first chunk, so the killed attempt has loaded both of its labels.
    results = put_events(kinesis_client, stream, [event(0), {"user_id": "bad"}, *(event(i) for i in range(1, 40))])
    end = sealed_end(kinesis_client, stream, results)
    worker_work = spark_cluster[1].log_path.parent / "worker-work"
    earlier_apps = set(worker_work.glob("app-*"))
    # The first chunk's two loads (rows, dead letter) pass; the second chunk's is held.
    doris_server.inject_fault("slow", count=2, seconds=0)
    doris_server.inject_fault("slow", count=1, seconds=HOLD_SECONDS)

    run_ended = threading.Event()

    def kill_the_loader() -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        while doris_server.pending_faults() and not run_ended.wait(0.02):
            pass
        assert not doris_server.pending_faults(), "the run ended before its loader reached the second chunk"
        visible = doris_server.execute_sql(DB, f"SELECT event_id FROM {table}"), doris_server.execute_sql(DB, f"SELECT reason FROM {table}_dl")
        workers = task_workers()
        assert len(workers) == 1, f"one task runs, one Python worker expected: {workers} in {processes()}"
        os.kill(workers[0], signal.SIGKILL)
        return visible

    jobs: list[LoadJob] = []
    # One retry is all it takes (the default on a cluster is 4).
    cluster = on_the_cluster(submitter, {**ENCRYPTED, "spark.task.maxFailures": "2"})

    def runner(job: LoadJob, credentials: Credentials) -> Sequence[RangeReport]:
        jobs.append(job)
        return cluster(job, credentials)

    try:
        with ThreadPoolExecutor(max_workers=1) as killer:
            killed = killer.submit(kill_the_loader)
            try:
                result, rows, dead = load_interval(
                    doris_server, kinesis_client, dynamodb_client, stream, table, start, end,
                    AwsSettings("us-east-1", kinesis_mock_endpoint, dynamodb_endpoint), runner,
                    chunk_max_rows=4,
                )  # fmt: skip
            finally:
                run_ended.set()
            rows_at_kill, dead_at_kill = killed.result()
    finally:
        doris_server.clear_faults()

    assert jobs[0].fresh == {0}, "the range was planned by this run: its loader skips the chunk log"
    assert sorted(row[0] for row in rows_at_kill) == [0, 1, 2] and len(dead_at_kill) == 1, "killed after the first chunk only"
    (app,) = set(worker_work.glob("app-*")) - earlier_apps
    executor_log = "".join(path.read_text(errors="replace") for path in app.glob("*/stderr"))
    assert "Python worker exited unexpectedly" in executor_log, "the task did not fail with its killed worker"
    assert "Running task 0.1 in stage" in executor_log, "Spark did not run the task again in the same job"

    assert [row[0] for row in rows] == list(range(40)), "every record exactly once"
    assert len(dead) == 1, "the dead letter exactly once"
    summary = result.summary()
    entry = summary["shards"][shard]
    assert summary["loaded"] + summary["already_loaded"]["rows"] == 40
    # The report is the second attempt's: it found what the killed one had loaded.
    assert summary["already_loaded"]["dead_letters"] == 1 and summary["dead_lettered"] == 0
    assert entry["chunks"] == 11 and entry["chunks_already_loaded"] >= 1
    assert result.commit is not None and entry["high_water_mark"] is not None, "the run committed"
