"""One-shot set-up of the Docker Compose demo, run by the ``kd-init`` service; safe to run again.

Waits until Doris has a live backend, creates the database, the example table and its
dead-letter table, and the Kinesis stream. Names come from the KD_EXAMPLE_* variables the example
DAGs read; endpoints and credentials from the connections ``aws_default`` and ``doris_default``.
"""

from __future__ import annotations

import os
import time

from airflow.providers.amazon.aws.hooks.kinesis import KinesisHook

from airflow_provider_kinesis_doris.core.errors import KinesisDorisError
from airflow_provider_kinesis_doris.core.mapping import dead_letter_ddl
from airflow_provider_kinesis_doris.hooks.doris import DorisHook
from kinesis_doris_devstack.scenario import create_stream, events_table_ddl

# Any database serves for statements that need none (SHOW BACKENDS, CREATE DATABASE).
SYSTEM_DATABASE = "information_schema"
# The operator creates a missing dead-letter table with the cluster's default of 3 replicas,
# which a single backend cannot hold; created here first, with one.
SINGLE_REPLICA = '\nPROPERTIES ("replication_num" = "1")'


def wait_for_backend(doris: DorisHook, timeout_seconds: float) -> None:
    """Return once ``SHOW BACKENDS`` lists a live backend; the BE registers itself at start-up."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        try:
            backends = doris.run_sql("SHOW BACKENDS", database=SYSTEM_DATABASE)
            alive = backends.columns.index("Alive")
            if any(str(row[alive]).lower() in ("true", "1") for row in backends.rows):
                return
            status = f"no live backend yet: {backends.rows!r}"
        except KinesisDorisError as exc:
            status = str(exc)
        if time.monotonic() > deadline:
            raise TimeoutError(f"Doris has no live backend after {timeout_seconds:.0f}s ({status})")
        print(f"waiting for a Doris backend: {status}", flush=True)
        time.sleep(5)


def create_doris_tables(doris: DorisHook, qualified_table: str) -> None:
    database, _, table = qualified_table.partition(".")
    doris.run_sql(f"CREATE DATABASE IF NOT EXISTS `{database}`", database=SYSTEM_DATABASE)
    doris.run_sql(events_table_ddl(table), database=database)
    doris.run_sql(dead_letter_ddl(database, f"{table}_dead_letter") + SINGLE_REPLICA, database=database)
    print(f"Doris tables {database}.{table} and {database}.{table}_dead_letter are ready", flush=True)


def create_kinesis_stream(stream: str, shards: int) -> None:
    kinesis = KinesisHook(aws_conn_id="aws_default").conn
    try:
        kinesis.describe_stream_summary(StreamName=stream)
        print(f"Kinesis stream {stream} exists", flush=True)
    except kinesis.exceptions.ResourceNotFoundException:
        shard_ids = create_stream(kinesis, stream, shards)
        print(f"Kinesis stream {stream} created with shards {shard_ids}", flush=True)


def main() -> None:
    doris = DorisHook(doris_conn_id="doris_default")
    wait_for_backend(doris, timeout_seconds=float(os.environ.get("KD_INIT_TIMEOUT_SECONDS", "600")))
    create_doris_tables(doris, os.environ.get("KD_EXAMPLE_TABLE", "demo.events"))
    create_kinesis_stream(
        os.environ.get("KD_EXAMPLE_STREAM", "events"), int(os.environ.get("KD_EXAMPLE_SHARDS", "4"))
    )


if __name__ == "__main__":
    main()
