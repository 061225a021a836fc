"""The pipeline's arguments, declared once on ``KinesisPipelineBaseOperator`` and taken by the
loader, the audit, the rebalance operator and the reshard sensor through ``**kwargs``: Airflow
reads them as each operator's own (missing, unknown, ``default_args``, ``.partial()``), templates
and serializes them, and each is checked once, naming it.

The DAGs are built in a child process, as a DAG processor builds them (see
test_operator_arguments). Runs under Airflow 3.x (``.venv``) and 2.11 (``.venv-af2``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

pytestmark = pytest.mark.airflow

OPERATORS = """
from datetime import datetime
from airflow.providers.common.compat.sdk import DAG
from airflow_provider_kinesis_doris.operators.audit import KinesisDorisAuditOperator
from airflow_provider_kinesis_doris.operators.kinesis_to_doris import KinesisToDorisOperator
from airflow_provider_kinesis_doris import ReadConfig
from airflow_provider_kinesis_doris.operators.rebalance import KinesisShardRebalanceOperator
from airflow_provider_kinesis_doris.sensors.kinesis_reshard import KinesisReshardSensor

PIPELINE = {"stream_name": "orders", "checkpoint_table": "kd"}
"""


def _run(script: str) -> Any:
    """The JSON the script prints last."""
    done = subprocess.run([sys.executable, "-c", OPERATORS + script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


SERIALIZE = """
import json
try:
    from airflow.serialization.serialized_objects import DagSerialization
except ImportError:  # Airflow 2.11
    from airflow.serialization.serialized_objects import SerializedDAG as DagSerialization

with DAG("kd_serialized", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
    KinesisToDorisOperator(task_id="load", doris_table="shop.orders", aws_conn_id="aws_orders",
                           doris_conn_id="doris_eu", region_name="eu-west-2", **PIPELINE)
    KinesisToDorisOperator(task_id="defaults", doris_table="shop.orders", **PIPELINE)

serialized = json.loads(json.dumps(DagSerialization.to_dict(dag)))
tasks = {task.get("__var", task)["task_id"]: task.get("__var", task) for task in serialized["dag"]["tasks"]}
names = ("aws_conn_id", "doris_conn_id", "region_name", "stream_name")
rebuilt = DagSerialization.from_dict(serialized).get_task("load")
print(json.dumps({
    "stored": {name: tasks["load"].get(name) for name in names},
    "rebuilt": {name: getattr(rebuilt, name, None) for name in names},
    "template_fields": list(rebuilt.template_fields),
}))
"""


def test_a_serialized_dag_keeps_the_loaders_non_default_connection_ids() -> None:
    # The pipeline page reads a loader's connections from the serialized DAG, not from the file.
    serialized = _run(SERIALIZE)

    expected = {"aws_conn_id": "aws_orders", "doris_conn_id": "doris_eu", "region_name": "eu-west-2",
                "stream_name": "orders"}  # fmt: skip
    assert serialized["stored"] == expected
    assert serialized["rebuilt"] == expected
    assert {"aws_conn_id", "doris_conn_id", "region_name", "verify", "botocore_config"} <= set(
        serialized["template_fields"]
    )


AIRFLOW_READS_THEM = """
import json

def error(build):
    try:
        build()
    except Exception as exc:
        return type(exc).__name__ + ": " + str(exc).splitlines()[0]

with DAG("kd_arguments", schedule=None, start_date=datetime(2026, 1, 1),
         default_args={"aws_conn_id": "aws_from_defaults", "region_name": "eu-west-1"}) as dag:
    tasks = [
        KinesisToDorisOperator(task_id="load", doris_table="shop.orders", **PIPELINE),
        KinesisDorisAuditOperator(task_id="audit", doris_table="shop.orders", **PIPELINE),
        KinesisShardRebalanceOperator(task_id="rebalance", partitions=2, **PIPELINE),
        KinesisReshardSensor(task_id="watch", **PIPELINE),
    ]
    mapped = KinesisShardRebalanceOperator.partial(task_id="mapped", checkpoint_table="kd", partitions=2).expand(
        stream_name=["a", "b"]
    )

print(json.dumps({
    "defaults": [[task.aws_conn_id, task.region_name] for task in tasks],
    "mapped": sorted(mapped.expand_input.value),
    "missing": error(lambda: KinesisReshardSensor(task_id="w1", checkpoint_table="kd")),
    "missing_table": error(lambda: KinesisDorisAuditOperator(task_id="a1", **PIPELINE)),
    "unknown": error(lambda: KinesisReshardSensor(task_id="w2", stream_nam="orders", **PIPELINE)),
    "unknown_partial": error(lambda: KinesisShardRebalanceOperator.partial(task_id="p", stream_nam="orders")),
    "verify": error(lambda: KinesisShardRebalanceOperator(task_id="r1", partitions=1, verify=1, **PIPELINE)),
    "empty_stream": error(lambda: KinesisReshardSensor(task_id="w3", stream_name="", checkpoint_table="kd")),
    "deferrable": error(lambda: KinesisReshardSensor(task_id="w4", deferrable="yes", **PIPELINE)),
    "since": error(lambda: KinesisDorisAuditOperator(task_id="a2", doris_table="shop.orders", since="yesterday",
                                                     **PIPELINE)),
    "audit_dead_letters": error(lambda: KinesisDorisAuditOperator(task_id="a3", doris_table="shop.orders",
                                                                  audit_dead_letters="no", **PIPELINE)),
    "bucket_id": error(lambda: KinesisToDorisOperator(task_id="l2", doris_table="shop.orders",
                                                      **{**PIPELINE, "pipeline_id": "orders#1"})),
    "bucket_take_over": error(lambda: KinesisToDorisOperator(task_id="l4", doris_table="shop.orders",
                                                             read=ReadConfig(take_over_from="orders#1"), **PIPELINE)),
    "hash_id": KinesisToDorisOperator(task_id="l3", doris_table="shop.orders",
                                      **{**PIPELINE, "pipeline_id": "orders#eu"}).pipeline_id,
}))
"""


def test_airflow_reads_the_pipeline_arguments_as_each_operators_own_and_a_bad_literal_fails_the_parse() -> None:
    read = _run(AIRFLOW_READS_THEM)

    assert read["defaults"] == [["aws_from_defaults", "eu-west-1"]] * 4
    assert read["mapped"] == ["stream_name"]
    assert read["missing"].endswith("missing keyword argument 'stream_name'"), read["missing"]
    assert read["missing_table"].endswith("missing keyword argument 'doris_table'"), read["missing_table"]
    assert "Invalid arguments were passed to KinesisReshardSensor" in read["unknown"], read["unknown"]
    assert read["unknown_partial"].endswith("unexpected keyword argument 'stream_nam'"), read["unknown_partial"]
    assert read["verify"] == "ConfigurationError: verify must be None, True, False or a CA bundle's path, got 1"
    # A pipeline's items are keyed <pipeline_id>#<bucket>: orders#1 is bucket 1 of pipeline orders.
    assert read["bucket_id"] == (
        "ConfigurationError: pipeline_id must be an id that does not end in '#' and digits ('orders#1' is bucket 1 "
        "of pipeline 'orders' in the checkpoint table): use another separator, e.g. 'orders-1', got 'orders#1'"
    )
    assert read["bucket_take_over"].startswith(
        "ConfigurationError: read.take_over_from must be an id that does not end in '#' and digits ('orders#1' is bucket 1"
    ), read["bucket_take_over"]
    assert read["hash_id"] == "orders#eu"
    assert read["empty_stream"] == "ConfigurationError: stream_name must be a non-empty string, got ''"
    assert read["deferrable"] == "ConfigurationError: deferrable must be True or False, got 'yes'"
    assert read["since"] == (
        "ConfigurationError: since must be None, a datetime or ISO 8601 text (e.g. '2026-01-01T00:00:00+00:00'), "
        "got 'yesterday'"
    )
    assert read["audit_dead_letters"] == "ConfigurationError: audit_dead_letters must be True or False, got 'no'"


RENDERED = """
import json
import jinja2

PARAMS = {"conn": "aws_orders", "empty": "", "since": "2026-01-02T00:00:00+00:00", "bad_since": "soon"}

def render(task):
    try:
        task.render_template_fields({"params": PARAMS}, jinja2.Environment())
    except Exception as exc:
        return type(exc).__name__ + ": " + str(exc)
    return "rendered"

watch = KinesisReshardSensor(task_id="w", aws_conn_id="{{ params.conn }}", verify="{{ params.empty }}", **PIPELINE)
empty = KinesisReshardSensor(task_id="e", aws_conn_id="{{ params.empty }}", **PIPELINE)
audit = KinesisDorisAuditOperator(task_id="a", doris_table="shop.orders", since="{{ params.since }}",
                                  doris_conn_id="{{ params.conn }}", **PIPELINE)
bad_since = KinesisDorisAuditOperator(task_id="b", doris_table="shop.orders", since="{{ params.bad_since }}", **PIPELINE)
loader = KinesisToDorisOperator(task_id="l", doris_table="shop.orders", doris_conn_id="{{ params.empty }}", **PIPELINE)

print(json.dumps({
    "watch": [render(watch), watch.aws_conn_id, watch.verify, watch.aws_hook.aws_conn_id],
    "empty": render(empty),
    "audit": [render(audit), audit.since, audit.doris_conn_id],
    "bad_since": render(bad_since),
    "loader": [loader.outlets, render(loader)],
}))
"""


def test_a_templated_pipeline_argument_is_rendered_and_checked_once_rendered_naming_it() -> None:
    rendered = _run(RENDERED)

    # verify="" is a CA bundle path to botocore: the check lets any text through.
    assert rendered["watch"] == ["rendered", "aws_orders", "", "aws_orders"]
    assert rendered["empty"] == "ConfigurationError: aws_conn_id must be None or a non-empty string, got ''"
    assert rendered["audit"] == ["rendered", "2026-01-02T00:00:00+00:00", "aws_orders"]
    assert rendered["bad_since"].startswith("ConfigurationError: since must be None, a datetime or ISO 8601 text")
    # A templated connection cannot name the table's asset when the DAG is parsed.
    assert rendered["loader"] == [[], "ConfigurationError: doris_conn_id must be a non-empty string, got ''"]


def test_each_class_the_runner_parameter_takes_has_its_kind() -> None:
    from airflow_provider_kinesis_doris.config import GROUPS
    from airflow_provider_kinesis_doris.operators.loader_setup import RUNNER_KINDS

    assert set(RUNNER_KINDS) == set(GROUPS["runner"])


def test_the_loader_processes_find_the_plans_cuts_only_where_the_runner_has_more_than_one() -> None:
    from airflow_provider_kinesis_doris.config import InProcessRunner, SparkOrInProcess, SparkRunner
    from airflow_provider_kinesis_doris.operators.loader_setup import cut_finder

    finders = {
        name: cut_finder(runner)
        for name, runner in {
            "one process": InProcessRunner(processes=1), "three": InProcessRunner(processes=3, lanes=2),
            "auto, one": SparkOrInProcess(), "auto, four": SparkOrInProcess(in_process=InProcessRunner(processes=4)),
            # A local master's cores find the cuts (the Spark job uses them only after the plan);
            # a cluster's are not the task's.
            "spark, local[3]": SparkRunner(master="local[3]"), "spark, local[1]": SparkRunner(master="local[1]"),
            "spark, submitted": SparkRunner(master="local[3]", spark_conn_id="spark_default"),
            "spark, connect": SparkRunner(spark_connect_conn_id="spark_connect_default"),
        }.items()
    }  # fmt: skip
    assert [name for name, finder in finders.items() if finder is None] == [
        "one process", "auto, one", "spark, local[1]", "spark, submitted", "spark, connect"
    ]
    assert finders["three"].keywords == {"processes": 3, "lanes": 2}  # type: ignore[union-attr]
    assert finders["auto, four"].keywords == {"processes": 4, "lanes": InProcessRunner().lanes}  # type: ignore[union-attr]
    assert finders["spark, local[3]"].keywords == {"processes": 3, "lanes": InProcessRunner().lanes}  # type: ignore[union-attr]
