"""Load a Kinesis stream into a Doris table every 10 minutes, exactly once.

One loader task per run, then an audit of what it loaded (every record of the interval in Doris
once, checked against the checkpoint table; it fails the run on any difference). Spark gives the
parallelism, and Airflow 2.11's ``dags backfill``
deadlocks on tasks mapped over an upstream XCom. The timetable gives every run a real data
interval on Airflow 3 too, where a plain cron schedule yields zero-length intervals.

It runs unchanged on the local stack (``make demo``) and in production: names come from the
environment with the demo's defaults, endpoints and credentials from the connections
``aws_default`` and ``doris_default``.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.providers.common.compat.sdk import DAG

from airflow_provider_kinesis_doris import InProcessRunner, MappingConfig, ReadConfig, SparkRunner
from airflow_provider_kinesis_doris.operators.audit import KinesisDorisAuditOperator
from airflow_provider_kinesis_doris.operators.kinesis_to_doris import KinesisToDorisOperator

try:
    from airflow.sdk import CronDataIntervalTimetable, DeltaDataIntervalTimetable
except ImportError:  # Airflow 2.11
    from airflow.timetables.interval import (  # type: ignore[no-redef]
        CronDataIntervalTimetable,
        DeltaDataIntervalTimetable,
    )


def _timetable() -> CronDataIntervalTimetable | DeltaDataIntervalTimetable:
    # KD_EXAMPLE_INTERVAL_SECONDS gives short fixed intervals (the local stack's tests and demo).
    seconds = os.environ.get("KD_EXAMPLE_INTERVAL_SECONDS")
    if seconds:
        return DeltaDataIntervalTimetable(timedelta(seconds=int(seconds)))
    return CronDataIntervalTimetable(os.environ.get("KD_EXAMPLE_CRON", "*/10 * * * *"), timezone="UTC")


with DAG(
    dag_id="kinesis_to_doris_example",
    description="Kinesis → Doris micro-batches, one data interval per run",
    schedule=_timetable(),
    start_date=datetime.fromisoformat(os.environ.get("KD_EXAMPLE_START", "2026-01-01T00:00:00+00:00")),
    end_date=datetime.fromisoformat(os.environ["KD_EXAMPLE_END"]) if os.environ.get("KD_EXAMPLE_END") else None,
    catchup=False,
    max_active_runs=int(os.environ.get("KD_EXAMPLE_MAX_ACTIVE_RUNS", "1")),
    default_args={"retries": 2, "retry_delay": timedelta(seconds=30)},
    tags=["kinesis", "doris", "example"],
) as dag:
    load = KinesisToDorisOperator(
        task_id="load_interval",
        stream_name=os.environ.get("KD_EXAMPLE_STREAM", "events"),
        doris_table=os.environ.get("KD_EXAMPLE_TABLE", "demo.events"),
        checkpoint_table=os.environ.get("KD_EXAMPLE_CHECKPOINT_TABLE", "kinesis_doris_checkpoints"),
        # Unset: <stream>.<database>.<table>. A new one with KD_EXAMPLE_TAKE_OVER_FROM naming the old
        # one goes on where that one stopped (README, "Moving to a new pipeline_id").
        pipeline_id=os.environ.get("KD_EXAMPLE_PIPELINE_ID") or None,
        # KD_EXAMPLE_SPARK_CONNECT_CONN_ID names a spark_connect connection: the job runs on that
        # Spark Connect server instead of in the task's process.
        runner=(
            SparkRunner(
                master=os.environ.get("KD_EXAMPLE_SPARK_MASTER", "local[2]"),
                spark_connect_conn_id=os.environ.get("KD_EXAMPLE_SPARK_CONNECT_CONN_ID") or None,
            )
            if os.environ.get("KD_EXAMPLE_USE_SPARK", "true").lower() == "true"
            # With more loader processes than one, the task's own child processes load the shards'
            # ranges side by side, each in this many lanes (docs/parameters.md).
            else InProcessRunner(
                processes=int(os.environ.get("KD_EXAMPLE_LOADER_PROCESSES", "1")),
                lanes=int(os.environ.get("KD_EXAMPLE_LANES", "8")),
            )
        ),
        mapping=MappingConfig(
            metadata_columns=("_kinesis_shard", "_kinesis_sequence", "_kinesis_arrival"),
            required_fields=("event_id",),
        ),
        read=ReadConfig(
            mode=os.environ.get("KD_EXAMPLE_READ_MODE", "polling"),
            take_over_from=os.environ.get("KD_EXAMPLE_TAKE_OVER_FROM") or None,
            seal_grace=timedelta(seconds=int(os.environ.get("KD_EXAMPLE_SEAL_GRACE_SECONDS", "60"))),
        ),
    )
    # The audit needs the three metadata columns above and reads through doris_default's query_port;
    # a difference it finds is not one a retry clears.
    load >> KinesisDorisAuditOperator(
        task_id="audit_interval",
        stream_name=load.stream_name,
        doris_table=load.doris_table,
        checkpoint_table=load.checkpoint_table,
        pipeline_id=load.pipeline_id,
        retries=0,
    )
