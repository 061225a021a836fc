"""Spark's Python daemon for the shard benchmark's Spark runner (``benchmarks.shards --runner spark``).

Spark starts this module (``spark.python.daemon.module``) instead of the product's
(``airflow_provider_kinesis_doris/spark/daemon.py``): it imports what the product's does, counts the
range groups' calls and, under the AWS model, runs them through a model of its own
(``benchmarks.shards._in_spark_workers``), then serves as PySpark's own daemon, whose forked
workers inherit that. Spark's Python workers are processes of their own, which the driver's
botocore hook never reaches.
"""

from __future__ import annotations

import json
import os

from pyspark import daemon

from airflow_provider_kinesis_doris.spark.daemon import preload
from benchmarks.shards import SPARK_WORKERS_ENV, _in_spark_workers

if __name__ == "__main__":
    preload()
    _in_spark_workers(json.loads(os.environ[SPARK_WORKERS_ENV]))
    daemon.manager()
