"""The example DAG, run by Airflow itself (``dag.test()``) on the local stack: three consecutive
intervals, then the same three again, load every record exactly once — on Airflow 3.x and 2.11."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from airflow_provider_kinesis_doris.core.stores.dynamodb import dynamo_store
from kinesis_doris_devstack.scenario import event, put_events, wait_past
from tests.e2e.conftest import CHECKPOINT_TABLE, DB, aligned_grid, events_per_interval, load_example_dag, run_dag_test

pytestmark = [pytest.mark.airflow, pytest.mark.e2e, pytest.mark.spark]


def test_three_intervals_then_replays_load_exactly_once(example, kinesis_client, dynamodb_client, doris_server) -> None:
    bounds, produced = events_per_interval(kinesis_client, example["stream"], 3, 30)
    dag = load_example_dag()

    for _ in range(2):  # the second pass replays every interval
        for end in bounds[1:]:
            dag_run = run_dag_test(dag, datetime.fromtimestamp(end / 1000, tz=timezone.utc))
            assert str(dag_run.state) in ("success", "DagRunState.SUCCESS"), dag_run.state

    rows = doris_server.execute_sql(DB, f"SELECT event_id FROM {example['table']} ORDER BY event_id")
    assert [row[0] for row in rows] == sorted(produced)
    store = dynamo_store(dynamodb_client, CHECKPOINT_TABLE, example["pipeline_id"])
    shards = store.ledger.list_shard_checkpoints()
    assert len(shards) == 2
    assert {shard.high_water_mark.instant_ms for shard in shards} == {bounds[3]}


@pytest.mark.parametrize("loader_processes", [1, 2], ids=["lanes in the task", "loader processes"])
def test_a_task_killed_mid_load_and_retried_loads_exactly_once(
    example, monkeypatch, kinesis_client, doris_server, loader_processes: int
) -> None:  # type: ignore[no-untyped-def]
    """SIGKILL the Airflow task process while a Stream Load is in flight (the stand-in holds the
    load for a while, then commits it anyway); with two loader processes (one per shard) they end
    with it. The retry resolves the label and loads the rest: every record once."""
    import contextlib
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    monkeypatch.setenv("KD_EXAMPLE_USE_SPARK", "false")  # kill one process, not a JVM tree
    monkeypatch.setenv("KD_EXAMPLE_LOADER_PROCESSES", str(loader_processes))
    if loader_processes > 1:
        monkeypatch.setenv("KD_EXAMPLE_LANES", "1")  # two shards, two processes
    bounds = aligned_grid(1)
    wait_past(bounds[0])
    put_events(kinesis_client, example["stream"], [event(e) for e in range(40)])
    wait_past(bounds[1])
    end = datetime.fromtimestamp(bounds[1] / 1000, tz=timezone.utc)
    # Each loader process's load is held (one per shard), so both are loading when the task dies.
    doris_server.inject_fault("slow", count=loader_processes, seconds=6)
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}"}
    attempt = subprocess.Popen(
        [sys.executable, "-m", "airflow", "dags", "test", "kinesis_to_doris_example", end.isoformat()],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while doris_server.pending_faults() and time.monotonic() < deadline:  # the slow loads have begun
        assert attempt.poll() is None, "the first attempt ended before its load was in flight"
        time.sleep(0.05)
    assert doris_server.pending_faults() == 0
    # The loader processes are the fork server's children (core.loader_processes).
    loaders = [c for c in psutil.Process(attempt.pid).children(recursive=True)
               if "forkserver" in " ".join(c.cmdline()) and "forkserver" in " ".join(c.parent().cmdline())]  # fmt: skip
    assert len(loaders) == (2 if loader_processes > 1 else 0), loaders
    # The task's process alone: its loader processes end with it, sending nothing more.
    os.kill(attempt.pid, signal.SIGKILL)
    attempt.wait()
    _, alive = psutil.wait_procs(loaders, timeout=3)  # the held loads have 6 s to go
    alive = [p for p in alive if _running(p)]  # a zombie has ended; pid 1 of a container may not reap it
    with contextlib.suppress(ProcessLookupError):  # whatever else the run started, if any is left
        os.killpg(attempt.pid, signal.SIGKILL)
    assert alive == [], f"loader processes outlived the task: {alive}"

    dag_run = run_dag_test(load_example_dag(), end)

    assert str(dag_run.state) in ("success", "DagRunState.SUCCESS"), dag_run.state
    rows = doris_server.execute_sql(DB, f"SELECT event_id FROM {example['table']} ORDER BY event_id")
    assert [row[0] for row in rows] == list(range(40))


def test_efo_loads_the_example_stream_exactly_once_and_polling_replays_of_it_load_nothing(
    example, monkeypatch, kinesis_client, dynamodb_endpoint, doris_server, efo_server
) -> None:
    """``ReadConfig(mode="efo")`` through the whole product: the task registers the consumer, Spark's
    executors read through SubscribeToShard (the devstack's server in front of kinesis-mock, which
    the AWS connection points at), and replays of the same intervals in polling mode add nothing."""
    from tests.conftest import use_local_stack_connections

    use_local_stack_connections(monkeypatch, efo_server.endpoint, dynamodb_endpoint, doris_server, DB)
    bounds, produced = events_per_interval(kinesis_client, example["stream"], 2, 20)

    for mode in ("efo", "polling"):
        monkeypatch.setenv("KD_EXAMPLE_READ_MODE", mode)
        dag = load_example_dag()
        for end in bounds[1:]:
            dag_run = run_dag_test(dag, datetime.fromtimestamp(end / 1000, tz=timezone.utc))
            assert str(dag_run.state) in ("success", "DagRunState.SUCCESS"), (mode, dag_run.state)
        if mode == "efo":
            assert efo_server.subscribe_calls >= 2, "the executors read through the consumer"
            subscribed = efo_server.subscribe_calls

    assert efo_server.subscribe_calls == subscribed, "the polling replays subscribed to nothing"
    rows = doris_server.execute_sql(DB, f"SELECT event_id FROM {example['table']} ORDER BY event_id")
    assert [row[0] for row in rows] == sorted(produced)
    stream_arn = kinesis_client.describe_stream_summary(StreamName=example["stream"])["StreamDescriptionSummary"]["StreamARN"]
    consumers = kinesis_client.list_stream_consumers(StreamARN=stream_arn)["Consumers"]
    assert [(c["ConsumerName"], c["ConsumerStatus"]) for c in consumers] == [(f"kinesis-doris-{example['pipeline_id']}", "ACTIVE")]


def _running(process) -> bool:  # type: ignore[no-untyped-def]
    import psutil

    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
