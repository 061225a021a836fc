"""The loader's table as its default outlet, decided when the DAG file is parsed (operators are
built in a child process, as a DAG processor builds them; see test_operator_arguments)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.airflow

BUILD = """
import json
from airflow.providers.common.compat.sdk import Asset
from airflow_provider_kinesis_doris.operators.kinesis_to_doris import KinesisToDorisOperator

def outlets(**arguments):
    arguments = {"doris_table": "sales.orders", **arguments}
    loader = KinesisToDorisOperator(task_id="load", stream_name="s", checkpoint_table="c", **arguments)
    return [(type(outlet).__name__, outlet.uri) for outlet in loader.outlets]

print(json.dumps({
    "default": outlets(),
    "other_connection": outlets(doris_conn_id="doris_eu"),
    "given": outlets(outlets=[Asset("s3://bucket/key")]),
    "none": outlets(outlets=[]),
    "templated": outlets(doris_table="{{ dag_run.conf['table'] }}"),
}))
"""


def test_the_table_is_the_default_outlet_unless_outlets_are_given_or_the_name_is_a_template() -> None:
    from airflow_provider_kinesis_doris.version_compat import AIRFLOW_V_3_0_PLUS

    built = subprocess.run([sys.executable, "-c", BUILD], capture_output=True, text=True, timeout=120, check=True)
    outlets = json.loads(built.stdout.strip().splitlines()[-1])

    kind = "Asset" if AIRFLOW_V_3_0_PLUS else "Dataset"
    assert outlets == {
        "default": [[kind, "doris://doris_default/sales/orders"]],
        "other_connection": [[kind, "doris://doris_eu/sales/orders"]],
        "given": [[kind, "s3://bucket/key"]],
        "none": [],
        "templated": [],
    }
