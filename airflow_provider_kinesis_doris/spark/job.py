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

from airflow_provider_kinesis_doris.core.load_job import LoadJob
from airflow_provider_kinesis_doris.core.report import RangeReport

log = logging.getLogger(__name__)


def run_job(spark: object, job: LoadJob, partitions: int | None = None) -> list[RangeReport]:
    """Run ``job`` on ``spark`` (a SparkSession): one partition per range group, or its groups
    dealt into at most ``partitions``, each loading its groups in lanes."""
    from airflow_provider_kinesis_doris.spark.source import PARTITIONS_OPTION, SOURCE_NAME, KinesisToDorisSource

    spark.dataSource.register(KinesisToDorisSource)  # type: ignore[attr-defined]
    reader = spark.read.format(SOURCE_NAME).option("job", job.to_json())  # type: ignore[attr-defined]
    if partitions is not None:
        reader = reader.option(PARTITIONS_OPTION, str(partitions))
    rows = reader.load().collect()
    return sorted((RangeReport.from_json(row.report) for row in rows), key=lambda r: (r.shard_id, r.interval_start_ms))


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
