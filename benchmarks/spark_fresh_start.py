"""A fresh process's first Spark job, as a fresh Airflow task runs it: the shard benchmark's
``spark_cold_start_s_<shape>`` (``benchmarks.shards.fresh_task_spark_start``).

Reads ``{"job": LoadJob JSON, "credentials": {...}, "master": "local[N]"}`` from standard input
(the credentials never on a command line), runs the job (one without ranges) with the product's
own Spark settings, whose Python workers start from PySpark's own daemon, and prints
``{"seconds": ...}``: the JVM, the session, the data source's registration and the first Python
workers, which the benchmark's own process pays once with a daemon of its own that counts calls.
"""

from __future__ import annotations

import json
import sys
import time

from airflow_provider_kinesis_doris.core.load_job import LoadJob
from airflow_provider_kinesis_doris.core.settings import Credentials
from airflow_provider_kinesis_doris.spark.runner import SparkSettings, run_spark_job

if __name__ == "__main__":
    asked = json.loads(sys.stdin.read())
    job, credentials = LoadJob.from_json(asked["job"]), Credentials(**asked["credentials"])
    started = time.perf_counter()
    run_spark_job(job, credentials, SparkSettings(master=asked["master"]))
    print(json.dumps({"seconds": round(time.perf_counter() - started, 2)}))
