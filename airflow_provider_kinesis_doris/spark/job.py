"""The Spark job: load the ranges of a ``LoadJob`` and return one report per range.

In-process (``run_job(spark, job)``) or submitted::

    spark-submit --master spark://host:7077 -m ... \\
        $(python -c 'import airflow_provider_kinesis_doris.spark.job as j; print(j.__file__)') \\
        --job-file /path/job.json --report-file /path/reports.json

The job file holds no secret; the credentials file it names is 0600 and is never on a command
line. Never imports Airflow: Spark executors on a cluster have none.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from typing import Any

from airflow_provider_kinesis_doris.core.load_job import LoadJob
from airflow_provider_kinesis_doris.core.report import RangeReport

log = logging.getLogger(__name__)


def run_job(spark: object, job: LoadJob, partitions: int | None = None, *, connected: bool = False) -> list[RangeReport]:
    """Run ``job`` on ``spark`` (a SparkSession): one partition per range group, or its groups
    dealt into at most ``partitions``, each loading its groups in lanes.

    A classic session runs an RDD of the partitions' groups; a Spark Connect session
    (``connected``), which has no RDDs, reads the job's data source. The data source costs a fresh
    task 6–8 s more (Spark plans it in Python processes of its own, and its workers import pyarrow
    to hand rows back as Arrow batches; docs/benchmarks.md), which a Connect server's warm
    workers do not pay again."""
    rows = _through_data_source(spark, job, partitions) if connected else _through_rdd(spark, job, partitions)
    return sorted((RangeReport.from_json(report) for _, report in rows), key=lambda r: (r.shard_id, r.interval_start_ms))


def _through_rdd(spark: Any, job: LoadJob, partitions: int | None) -> list[tuple[str, str]]:
    from airflow_provider_kinesis_doris.spark.source import load_partition

    shares = job.binned(partitions) if partitions is not None else [[group] for group in job.partition_groups()]
    # A job without ranges still runs one task, as the data source reads one partition of None: a
    # fresh task's start is then the benchmark's whole start, its first Python worker included.
    shares = shares or [[]]
    job_json = job.to_json()
    return spark.sparkContext.parallelize(shares, len(shares)).mapPartitions(
        lambda partition: (row for groups in partition for row in load_partition(job_json, groups))
    ).collect()


def _through_data_source(spark: Any, job: LoadJob, partitions: int | None) -> list[tuple[str, str]]:
    from airflow_provider_kinesis_doris.spark.source import PARTITIONS_OPTION, SOURCE_NAME, KinesisToDorisSource

    spark.dataSource.register(KinesisToDorisSource)
    reader = spark.read.format(SOURCE_NAME).option("job", job.to_json())
    if partitions is not None:
        reader = reader.option(PARTITIONS_OPTION, str(partitions))
    return [(row.range_id, row.report) for row in reader.load().collect()]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Load planned Kinesis ranges into Doris (spark-submit entry point)")
    parser.add_argument("--job-file", required=True, help="LoadJob JSON written by the operator")
    parser.add_argument("--report-file", required=True, help="where to write the range reports (JSON list)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from pyspark.sql import SparkSession

    with open(args.job_file) as handle:
        job = LoadJob.from_json(handle.read())
    spark = SparkSession.builder.appName(f"kinesis-to-doris:{job.pipeline.pipeline_id}").getOrCreate()
    try:
        reports = run_job(spark, job)
    finally:
        spark.stop()
    with open(args.report_file, "w") as handle:
        json.dump([json.loads(report.to_json()) for report in reports], handle)
    log.info("loaded %d ranges", len(reports))
    return 0


if __name__ == "__main__":
    sys.exit(main())
