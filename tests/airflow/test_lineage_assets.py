"""Names the loader gives its stream and tables: the table's Asset (Dataset on 2.11), the URI
normaliser Airflow calls for ``doris://``, the OpenLineage datasets, and the metric names."""

from __future__ import annotations

import json
import subprocess
import sys
from urllib.parse import urlsplit

import pytest

from airflow_provider_kinesis_doris.assets.doris import (
    convert_asset_to_openlineage,
    doris_table_asset,
    sanitize_uri,
)
from airflow_provider_kinesis_doris.lineage import kinesis_dataset, loader_lineage
from airflow_provider_kinesis_doris.metrics import METRICS, _names
from airflow_provider_kinesis_doris.version_compat import AIRFLOW_V_3_0_PLUS

pytestmark = pytest.mark.airflow

ARN = "arn:aws:kinesis:eu-west-1:123456789012:stream/clicks"


@pytest.fixture
def doris_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_DORIS_DEFAULT", '{"conn_type": "doris", "host": "fe.internal", "port": 8030, '
                       '"login": "loader", "password": "not-in-lineage", "extra": {"query_port": 9031}}')  # fmt: skip


def test_the_table_asset_is_named_by_connection_database_and_table() -> None:
    asset = doris_table_asset("sales.orders", conn_id="doris_eu")

    assert asset.uri == "doris://doris_eu/sales/orders"
    assert type(asset).__name__ == ("Asset" if AIRFLOW_V_3_0_PLUS else "Dataset")
    with pytest.raises(ValueError, match="'database.table'"):
        doris_table_asset("orders")


@pytest.mark.parametrize(
    ("uri", "error"),
    [
        ("doris:///sales/orders", "name the doris connection"),
        ("doris://doris_default/sales", "end in /<database>/<table>"),
        ("doris://doris_default/sales/orders/extra", "end in /<database>/<table>"),
        ("doris://doris_default/sales/orders?x=1", "no query or fragment"),
    ],
)
def test_the_uri_normaliser_refuses_uris_that_name_no_table(uri: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        sanitize_uri(urlsplit(uri))


def test_the_uri_normaliser_drops_a_trailing_slash() -> None:
    assert sanitize_uri(urlsplit("doris://doris_default/sales/orders/")).geturl() == "doris://doris_default/sales/orders"


def test_a_stream_is_named_by_its_arn_split_before_the_resource() -> None:
    dataset = kinesis_dataset(ARN, records=5)

    assert (dataset.namespace, dataset.name) == ("arn:aws:kinesis:eu-west-1:123456789012", "stream/clicks")
    assert f"{dataset.namespace}:{dataset.name}" == ARN
    assert dataset.inputFacets["inputStatistics"].rowCount == 5
    with pytest.raises(ValueError, match="Not a Kinesis stream ARN"):
        kinesis_dataset("arn:aws:sqs:eu-west-1:123456789012:queue")


def test_lineage_names_the_fe_query_port_and_lists_the_dead_letter_table_only_when_it_got_rows(doris_connection) -> None:
    def lineage(dead_lettered: int):  # type: ignore[no-untyped-def]
        return loader_lineage(
            stream_arn=ARN, doris_conn_id="doris_default", database="sales", table="orders",
            dead_letter_table="orders_dead_letter", totals={"records": 7, "loaded": 6, "dead_lettered": dead_lettered},
            columns=[("order_id", "BIGINT"), ("amount", "DECIMAL(10,2)")],
        )  # fmt: skip

    clean, dirty = lineage(0), lineage(1)

    assert [(d.namespace, d.name) for d in clean.outputs] == [("doris://fe.internal:9031", "sales.orders")]
    assert clean.outputs[0].outputFacets["outputStatistics"].rowCount == 6
    assert [(f.name, f.type) for f in clean.outputs[0].facets["schema"].fields] == [
        ("order_id", "BIGINT"), ("amount", "DECIMAL(10,2)")
    ]
    assert [d.name for d in dirty.outputs] == ["sales.orders", "sales.orders_dead_letter"]
    assert dirty.outputs[1].outputFacets["outputStatistics"].rowCount == 1
    assert "not-in-lineage" not in repr(dirty)


def test_intervals_no_run_covered_count_and_are_named_in_a_run_facet(doris_connection) -> None:
    recovered = "[2026-01-01T00:10:00Z, 2026-01-01T00:20:00Z) (1767226200000, 1767226800000)"
    totals = {
        "records": 7, "loaded": 6, "dead_lettered": 0,
        "skipped_intervals": {"recovered": [recovered], "left_for_next_run": {"count": 2},
                              "loaded": [{"interval": recovered, "records": 4, "loaded": 3, "dead_lettered": 1}]},
    }  # fmt: skip
    lineage = loader_lineage(stream_arn=ARN, doris_conn_id="doris_default", database="sales", table="orders",
                             dead_letter_table="orders_dead_letter", totals=totals)  # fmt: skip

    assert lineage.inputs[0].inputFacets["inputStatistics"].rowCount == 11
    assert [o.outputFacets["outputStatistics"].rowCount for o in lineage.outputs] == [9, 1]
    facet = lineage.run_facets["kinesisDorisSkippedIntervals"]
    assert (facet.recovered, facet.leftForNextRun) == ([recovered], 2)
    assert loader_lineage(stream_arn=ARN, doris_conn_id="doris_default", database="sales", table="orders",
                          dead_letter_table="orders_dead_letter", totals={"loaded": 1}).run_facets == {}  # fmt: skip


def test_before_a_run_the_lineage_has_the_datasets_without_counts(doris_connection) -> None:
    lineage = loader_lineage(stream_arn=ARN, doris_conn_id="doris_default", database="sales", table="orders",
                             dead_letter_table="orders_dead_letter")  # fmt: skip

    assert lineage.inputs[0].inputFacets == {}
    assert [d.outputFacets for d in lineage.outputs] == [{}]


def test_the_asset_converts_to_the_same_openlineage_dataset_as_the_loader_output(doris_connection) -> None:
    converted = convert_asset_to_openlineage(doris_table_asset("sales.orders"), None)
    output = loader_lineage(stream_arn=ARN, doris_conn_id="doris_default", database="sales", table="orders",
                            dead_letter_table="d").outputs[0]  # fmt: skip

    assert (converted.namespace, converted.name) == (output.namespace, output.name)


def test_metric_names_carry_the_pipeline_for_plain_statsd_and_tags_for_the_others() -> None:
    tagged, named = _names("shard_lag_ms", "events stream.db.table", "shardId-000000000001")

    assert tagged == ("kinesis_doris.shard_lag_ms", {"pipeline_id": "events stream.db.table", "shard_id": "shardId-000000000001"})
    assert named == ("kinesis_doris.shard_lag_ms.events_stream.db.table.shardId-000000000001", {})
    assert set(METRICS) >= {"records_read", "rows_loaded", "dead_lettered", "chunks_retried", "shard_lag_ms", "shards_waiting"}


def test_airflow_normalises_doris_uris_with_the_providers_handler() -> None:
    from airflow.providers.common.compat.sdk import Asset

    assert Asset("doris://doris_default/sales/orders/").uri == "doris://doris_default/sales/orders"
    if AIRFLOW_V_3_0_PLUS:
        with pytest.raises(ValueError, match="end in /<database>/<table>"):
            Asset("doris://doris_default/sales")
    else:  # 2.11 warns about a URI its normaliser refuses, unless strict_dataset_uri_validation
        with pytest.warns(UserWarning, match="end in /<database>/<table>"):
            Asset("doris://doris_default/sales")


SQL_LINEAGE = """
import json
from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator

operator = SQLExecuteQueryOperator(task_id="q", conn_id="doris_default", sql="INSERT INTO sales.daily SELECT * FROM sales.orders")
lineage = operator.get_openlineage_facets_on_start()
print(json.dumps({"inputs": [[d.namespace, d.name] for d in lineage.inputs],
                  "outputs": [[d.namespace, d.name] for d in lineage.outputs]}))
"""


def test_sql_operators_on_the_connection_name_tables_as_the_loader_does(doris_connection) -> None:
    built = subprocess.run([sys.executable, "-c", SQL_LINEAGE], capture_output=True, text=True, timeout=120, check=True)
    lineage = json.loads(built.stdout.strip().splitlines()[-1])
    loader_output = loader_lineage(stream_arn=ARN, doris_conn_id="doris_default", database="sales", table="orders",
                                   dead_letter_table="d").outputs[0]  # fmt: skip

    assert lineage == {
        "inputs": [[loader_output.namespace, "sales.orders"]],
        "outputs": [[loader_output.namespace, "sales.daily"]],
    }
