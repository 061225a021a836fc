"""What a Spark run costs beyond its ranges at 16 to 1,000 shards: the fixed cost of issue 37.

For each shard count: a new pipeline loads its first interval in process (what only a shard's
first interval costs is not Spark's), then a recurring interval with records in every shard is
loaded by ``spark.runner.run_spark_job`` on ``local[2]``, once with one Spark partition per range
(the default) and once with ``parallelism`` partitions. Per run: the runner's wall seconds, the
seconds its ranges took (each range's own ``seconds``, divided by the two task slots), what is
left (``fixed_s``: session, planning, task scheduling, Python workers) and the CPU seconds of this
process's tree (this process, the JVM, the Python workers), which the other processes on a
2-core machine do not inflate the way they do wall time.

The JVM is started once before the first count (a fresh Airflow task pays that too:
``benchmarks.run``'s ``spark_cold_start``); the AWS model is not in this path, as Spark's Python
workers make their AWS calls in their own processes.

    python -m benchmarks.spark_shards --shards 16,64,256 --parallelism 8
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from airflow_provider_kinesis_doris.core.load_job import LoadJob
from airflow_provider_kinesis_doris.core.load import run_here
from airflow_provider_kinesis_doris.core.pipeline import PipelineConfig, run_interval
from airflow_provider_kinesis_doris.core.report import RangeReport
from airflow_provider_kinesis_doris.core.settings import Credentials
from airflow_provider_kinesis_doris.core.stores.dynamodb import dynamo_store
from airflow_provider_kinesis_doris.spark.runner import SparkSettings, run_spark_job
from benchmarks.run import SPARK_MASTER, Stack, connect, cpu_seconds
from benchmarks.shards import _fresh_pipeline, put_per_shard
from kinesis_doris_devstack.scenario import wait_past
from kinesis_doris_devstack.stack import LocalStack

log = logging.getLogger("benchmark.spark_shards")

TASK_SLOTS = 2
"""Ranges ``local[2]`` loads at once."""


def measure(
    stack: Stack, services: Mapping[str, int], shards: int, records_per_shard: int, interval_ms: int,
    parallelism: int,
) -> dict[str, Any]:  # fmt: skip
    config = _fresh_pipeline(stack, f"spark-{shards}-{int(time.time())}", shards)
    start = _next_start(interval_ms)
    put_per_shard(stack.kinesis, config.stream_name, records_per_shard)
    _run(stack, config, start, start + interval_ms, run_here, services)
    line: dict[str, Any] = {"shards": shards, "spark_master": SPARK_MASTER}
    for name, partitions in (("per_range", None), (f"parallelism_{parallelism}", parallelism)):
        begin = _next_start(interval_ms)
        produced = put_per_shard(stack.kinesis, config.stream_name, records_per_shard)
        _run(stack, config, start + interval_ms, begin, run_here, services)  # the intervals in between
        run = _run(stack, replace(config, parallelism=partitions), begin, begin + interval_ms, _spark, services)
        if run["records"] != produced:
            raise RuntimeError(f"{shards} shards: Spark loaded {run['records']} of {produced} records")
        line |= {f"{name}_{key}": value for key, value in run.items() if key != "records"}
        start = begin
    stack.kinesis.delete_stream(StreamName=config.stream_name)  # kinesis-mock's shard limit counts every stream
    return line


def _next_start(interval_ms: int) -> int:
    start = (int(time.time() * 1000) // interval_ms + 1) * interval_ms
    wait_past(start)
    return start


_timings: dict[str, float] = {}


def _spark(job: LoadJob, credentials: Credentials) -> list[RangeReport]:
    started = time.perf_counter()
    reports = run_spark_job(job, credentials, SparkSettings(master=SPARK_MASTER))
    _timings["runner_s"] = time.perf_counter() - started
    _timings["ranges_s"] = sum(report.seconds for report in reports)
    _timings["partitions"] = len(job.groups)
    return reports


def _run(stack: Stack, config: PipelineConfig, start: int, end: int, runner: Any, services: Mapping[str, int]) -> dict[str, Any]:
    store = dynamo_store(stack.dynamodb, config.checkpoint_table, config.pipeline_id)
    wait_past(end + 1_000)
    credentials = Credentials(doris_password=stack.password, aws_access_key_id="local", aws_secret_access_key="local")
    _timings.clear()
    cpu_before = cpu_seconds(services)["loader"]
    started = time.perf_counter()
    result = run_interval(replace(config, prune=False), start, end, kinesis=stack.kinesis, store=store,
                          credentials=credentials, runner=runner)  # fmt: skip
    seconds = time.perf_counter() - started
    figures: dict[str, Any] = {"records": result.summary()["records"], "interval_s": round(seconds, 2),
                               "loader_cpu_s": round(cpu_seconds(services)["loader"] - cpu_before, 2)}  # fmt: skip
    if _timings:
        in_ranges = _timings["ranges_s"] / TASK_SLOTS
        figures |= {"partitions": _timings["partitions"], "runner_s": round(_timings["runner_s"], 2),
                    "ranges_s": round(in_ranges, 2), "fixed_s": round(_timings["runner_s"] - in_ranges, 2)}  # fmt: skip
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", default="16,64,256", help="comma-separated shard counts")
    parser.add_argument("--records-per-shard", type=int, default=5, help="records put into each shard per interval")
    parser.add_argument("--interval-s", type=int, default=10, help="interval length in seconds")
    parser.add_argument("--parallelism", type=int, default=8, help="Spark partitions of the second run")
    parser.add_argument("--json-out", type=Path, default=None, help="also write every JSON line here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log.setLevel(logging.INFO)
    counts = [int(count) for count in args.shards.split(",")]
    lines: list[dict[str, Any]] = []
    state_dir = Path(tempfile.mkdtemp(prefix="kinesis-doris-bench-spark-"))
    with LocalStack(state_dir, ["kinesis_mock", "dynamodb", "doris"], kinesis_shard_limit=max(500, 2 * max(counts) + 10)) as local:
        stack = connect(local, "kinesis_mock")
        services = {name: service.pid for name, service in local.running.items()}
        try:
            warm = _fresh_pipeline(stack, "spark-jvm-start", 1)
            run_spark_job(LoadJob(warm, (), ()), Credentials(doris_password=stack.password), SparkSettings(master=SPARK_MASTER))
            for shards in counts:
                log.info("%d shards ...", shards)
                lines.append(measure(stack, services, shards, args.records_per_shard, args.interval_s * 1000, args.parallelism))
                print(json.dumps(lines[-1], sort_keys=True), flush=True)
        finally:
            stack.doris.close()
    if args.json_out:
        args.json_out.write_text("".join(json.dumps(line, sort_keys=True) + "\n" for line in lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
