"""Spark's Python daemon for a local master (``spark.python.daemon.module``): PySpark's own
(``pyspark.daemon``), with the load path imported before it forks its workers.

Each Python worker of a local master is forked from the daemon. With PySpark's own, every worker
imports the load path (botocore, requests, this package: about 0.5 CPU-second) at its first task;
imported once here, the forks share it. A fresh Airflow task starts a daemon of its own, so this
is paid once a task rather than once a worker. Nothing here may start a thread or open a
connection: the workers are forked from this process.

Runs on executors: imports ``core`` only, never Airflow.
"""

from __future__ import annotations

from pyspark import daemon

PRELOADED = (
    "airflow_provider_kinesis_doris.core.load",
    "airflow_provider_kinesis_doris.core.load_job",
    "airflow_provider_kinesis_doris.spark.source",
    "botocore.session",
)
"""What a worker's first task imports: the loader, requests under it, and botocore's session, which
``core.aws_clients`` imports when the worker builds its first client (0.34 CPU-s of the 0.5)."""


def preload() -> None:
    """Import :data:`PRELOADED` into this process, for the workers it forks."""
    import importlib

    for module in PRELOADED:
        importlib.import_module(module)


if __name__ == "__main__":
    preload()
    daemon.manager()
