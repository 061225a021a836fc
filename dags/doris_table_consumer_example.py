"""Runs after each load of the example's Doris table: the loader declares the table as its outlet
(an Asset on Airflow 3, a Dataset on 2.11), and this DAG is scheduled on it.

The query goes through the ``doris_default`` connection's MySQL-protocol port (``DorisHook`` is a
common.sql ``DbApiHook``), so the SQL operators of ``apache-airflow-providers-common-sql`` work as
they do on any database.
"""

from __future__ import annotations

import os
from datetime import datetime

from airflow.providers.common.compat.sdk import DAG
from airflow.providers.common.sql.operators.sql import SQLCheckOperator

from airflow_provider_kinesis_doris.assets.doris import doris_table_asset
from airflow_provider_kinesis_doris.core.doris.identifiers import qualified_name

TABLE = os.environ.get("KD_EXAMPLE_TABLE", "demo.events")

with DAG(
    dag_id="doris_table_consumer_example",
    description="Checks the example's Doris table after each load",
    schedule=[doris_table_asset(TABLE)],
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["doris", "example"],
) as dag:
    SQLCheckOperator(
        task_id="table_has_rows",
        conn_id="doris_default",
        sql=f"SELECT COUNT(*) FROM {qualified_name(*TABLE.split('.', 1))}",
    )
