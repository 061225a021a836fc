"""A local Spark master loads a job of many ranges in a few partitions per core: each partition
costs a Python worker's task start and its own clients (docs/benchmarks.md, "Spark's cost per
partition")."""

from __future__ import annotations

import pytest

from airflow_provider_kinesis_doris.spark import runner as spark_runner
from airflow_provider_kinesis_doris.spark.runner import SparkSettings, run_spark_job
from kinesis_doris_devstack.scenario import event, sealed_interval

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _tasks_of_the_last_spark_job() -> int:
    from pyspark.sql import SparkSession

    tracker = SparkSession.builder.getOrCreate().sparkContext.statusTracker()
    last = max(tracker.getJobIdsForGroup(None))
    return sum(tracker.getStageInfo(stage).numTasks for stage in tracker.getJobInfo(last).stageIds)


def test_a_local_master_joins_the_ranges_into_a_few_partitions_per_core(world, kinesis_client, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(spark_runner, "TASKS_PER_LOCAL_CORE", 1)
    ids = list(range(20))
    start, end, _ = sealed_interval(kinesis_client, world["stream"], [event(i) for i in ids])
    partitions: list[int] = []

    def local_spark(job, credentials):  # type: ignore[no-untyped-def]
        partitions.append(len(job.groups))
        return run_spark_job(job, credentials, SparkSettings(master="local[1]"))

    world["run"](start, end, runner=local_spark)

    assert partitions == [2], "the planner gave each shard's range a partition of its own"
    assert _tasks_of_the_last_spark_job() == 1
    assert [row[0] for row in world["rows"]()] == ids


_WORKER_LOOK = """
import json, os, sys
from pyspark.sql import SparkSession
from airflow_provider_kinesis_doris.spark.runner import SparkSettings, _session_conf

os.environ["PYSPARK_PYTHON"] = sys.executable
builder = SparkSession.builder.master("local[1]")
for key, value in _session_conf(SparkSettings(master="local[1]")).items():
    builder = builder.config(key, value)

def look(_):
    import os, sys
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as handle:
        parent = handle.read().replace(b"\\0", b" ").decode()
    yield parent, sorted(sys.modules)

print(json.dumps(builder.getOrCreate().sparkContext.parallelize([0], 1).mapPartitions(look).collect()))
"""


def test_a_local_masters_python_workers_are_forked_with_the_load_path_imported(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A fresh task's Python workers do not each import botocore, requests and the loader (about
    0.5 CPU-second a worker): the product's daemon imported them before it forked the worker. In a
    process of its own: a session's daemon is chosen when its JVM starts."""
    import json
    import subprocess
    import sys

    from airflow_provider_kinesis_doris.spark.daemon import PRELOADED

    completed = subprocess.run(  # noqa: S603 - a fixed script
        [sys.executable, "-c", _WORKER_LOOK], capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    [(parent, imported)] = json.loads(completed.stdout.splitlines()[-1])
    assert "-m airflow_provider_kinesis_doris.spark.daemon" in parent, parent
    # What a worker's first task imports was there before the task: the loader and botocore's client.
    assert {*PRELOADED, "botocore.client", "requests"} <= set(imported)
