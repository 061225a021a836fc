"""Arguments the loader checks when the DAG file is parsed, before any run.

The operators are built in a child process, as a DAG processor builds them: building one in the
test process outside a DAG would set up Airflow's ORM before the suite's metadata DB fixtures do.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.airflow

BUILD = """
import json
from airflow_provider_kinesis_doris import StateConfig
from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.operators.kinesis_to_doris import KinesisToDorisOperator

def build(**arguments):
    try:
        loader = KinesisToDorisOperator(task_id="load", stream_name="s", doris_table="d.t", checkpoint_table="c",
                                        state=StateConfig(**arguments))
    except ConfigurationError as error:
        return "ConfigurationError: " + str(error)
    return loader.state.driver_concurrency

print(json.dumps([build(), build(driver_concurrency=32)] + [build(driver_concurrency=bad) for bad in (0, -1, 2.5, "8")]))
"""


def test_driver_concurrency_defaults_to_the_bounded_pool_and_a_bad_one_fails_the_parse_naming_it() -> None:
    built = subprocess.run([sys.executable, "-c", BUILD], capture_output=True, text=True, timeout=120, check=True)

    default, larger, *refused = json.loads(built.stdout.strip().splitlines()[-1])

    assert (default, larger) == (8, 32)
    assert refused == [
        f"ConfigurationError: state.driver_concurrency must be a whole number of at least 1, got {bad!r}"
        for bad in (0, -1, 2.5, "8")
    ]


BUILD_CHOICES = """
import json
from airflow_provider_kinesis_doris import ReadConfig, SparkRunner
from airflow_provider_kinesis_doris.operators.kinesis_to_doris import KinesisToDorisOperator

def build(**arguments):
    try:
        loader = KinesisToDorisOperator(task_id="load", stream_name="s", doris_table="d.t", checkpoint_table="c", **arguments)
    except Exception as error:
        return type(error).__name__ + ": " + str(error)
    return [loader.executor_credentials, loader.aws_hook.verify, loader.aws_hook.config.retries]

def group(make):
    try:
        make()
    except Exception as error:
        return type(error).__name__ + ": " + str(error)

print(json.dumps([
    build(executor_credentials="arn:aws:iam::123456789012:role/etl", verify=False, botocore_config={"retries": {"mode": "adaptive"}}),
    build(executor_credentials="instance_role"),
    group(lambda: SparkRunner(spark_conn_id="spark_default", spark_connect_conn_id="spark_connect_default")),
    group(lambda: ReadConfig(mode="fanout")),
    build(read={"mode": "efo"}),
    group(lambda: SparkRunner(master="spark://127.0.0.1:7077")),
    [group(lambda: SparkRunner(master="spark://127.0.0.1:7077", spark_conn_id="spark_default")),
     group(lambda: SparkRunner(master="{{ params.master }}"))],
]))
"""


def test_credentials_client_settings_spark_connections_spark_master_and_read_mode_are_checked_when_the_dag_is_parsed() -> None:
    built = subprocess.run([sys.executable, "-c", BUILD_CHOICES], capture_output=True, text=True, timeout=120, check=True)

    role, bad_mode, both_connections, bad_read_mode, read_as_dict, cluster_master, accepted = json.loads(
        built.stdout.strip().splitlines()[-1]
    )

    assert role == ["arn:aws:iam::123456789012:role/etl", False, {"mode": "adaptive"}]
    assert bad_mode.startswith("ConfigurationError: ") and "'instance_role'" in bad_mode and "default_chain" in bad_mode
    assert both_connections == (
        "ConfigurationError: Give runner.spark_conn_id (spark-submit) or runner.spark_connect_conn_id (Spark "
        "Connect), not both"
    )
    assert bad_read_mode == "ConfigurationError: read.mode must be one of 'polling', 'efo', got 'fanout'"
    assert read_as_dict == "ConfigurationError: read must be a ReadConfig, got {'mode': 'efo'}"
    # Before, a cluster master without a connection was refused only when the run started Spark,
    # under the name spark_master.
    assert cluster_master.startswith("ConfigurationError: runner.master 'spark://127.0.0.1:7077': Spark in the "
                                     "task's process runs in local mode only"), cluster_master
    assert accepted == [None, None], "a connection's master is the connection's; a template is checked rendered"


BUILD_DECODERS = """
import json
from airflow_provider_kinesis_doris import LoadConfig, MappingConfig
from airflow_provider_kinesis_doris.operators.kinesis_to_doris import KinesisToDorisOperator

def build(doris_table="d.t", options=None, **mapping):
    try:
        loader = KinesisToDorisOperator(task_id="load", stream_name="s", checkpoint_table="c", doris_table=doris_table,
                                        mapping=MappingConfig(**mapping), load=LoadConfig(options=options or {}))
    except Exception as error:
        return type(error).__name__ + ": " + str(error)
    return loader.mapping.decoder

print(json.dumps([
    build(),
    build(decoder="gzip+json", options={"format": "json", "strict_mode": False}),
    build(decoder="csv", options={"format": "{{ params.format }}"}),
    build(decoder="csv", options={"format": "csv", "column_separator": ","}),
    build(decoder="gzip+json", options={"strip_outer_array": True}),
    build(options={"read_json_by_line": "false"}),
    build(decoder="gzip"),
    build(doris_table="d.t; DROP TABLE x"),
    build(dead_letter_table="t/*x*/"),
    build(doris_table="{{ dag_run.conf['table'] }}", dead_letter_table="{{ dag_run.conf['dl'] }}"),
]))
"""


def test_decoders_and_load_options_that_contradict_the_json_body_are_checked_when_the_dag_is_parsed() -> None:
    built = subprocess.run([sys.executable, "-c", BUILD_DECODERS], capture_output=True, text=True, timeout=120, check=True)

    (default, gzip_json, templated, csv_format, outer_array, by_line, unknown, hostile_table, hostile_dead_letter,
     templated_names) = json.loads(built.stdout.strip().splitlines()[-1])  # fmt: skip

    assert (default, gzip_json, templated, templated_names) == ("json", "gzip+json", "csv", "json")
    assert csv_format.startswith(
        "ConfigurationError: load.options format='csv' contradicts the body: with decoder='csv' the loader sends "
        "every row as a line of JSON"
    ), csv_format
    assert outer_array.startswith("ConfigurationError: load.options strip_outer_array=True contradicts the body: "
                                  "with decoder='gzip+json'"), outer_array  # fmt: skip
    assert by_line.startswith("ConfigurationError: load.options read_json_by_line='false' contradicts the body: "
                              "with decoder='json'"), by_line  # fmt: skip
    assert unknown == (
        "ConfigurationError: decoder must be one of ['json', 'gzip+json', 'csv'] or 'package.module:function', "
        "got 'gzip'"
    )
    assert hostile_table.startswith(
        "ConfigurationError: doris_table 'd.t; DROP TABLE x', its table: 't; DROP TABLE x' is not a valid Doris name"
    ), hostile_table
    assert hostile_dead_letter.startswith(
        "ConfigurationError: mapping.dead_letter_table: 't/*x*/' is not a valid Doris name"
    ), hostile_dead_letter


# Each bad value, and what the error must say about it (after "<parameter> must be ").
BAD_LITERALS: dict[str, tuple[str, str]] = {
    "read.seal_grace": ("5", "a datetime.timedelta of zero or more, got 5"),
    "read.waiting_warn_after": ("timedelta(seconds=-1)", "a datetime.timedelta of zero or more"),
    "read.initial_position": ("'LATEST'", "one of 'INTERVAL', 'TRIM_HORIZON', got 'LATEST'"),
    "read.relaxed_order": ("'yes'", "True or False, got 'yes'"),
    "load.max_bad_record_ratio": ("'0.1'", "a number from 0 to 1, got '0.1'"),
    "load.chunk_max_rows": ("0", "a whole number of at least 1, got 0"),
    "load.chunk_max_bytes": ("1.5e6", "a whole number of at least 1, got 1500000.0"),
    "load.headers": ("{'timeout': 5}", "None or a dict of strings to strings, got {'timeout': 5}"),
    "runner.max_records": ("-1", "a whole number of at least 0, got -1"),
    "runner.parallelism": ("0", "None or a whole number of at least 1, got 0"),
    "runner.conf": ("['spark.ui.enabled=false']", "None or a dict of strings to strings, got ['spark.ui.enabled=false']"),
    "runner.lanes": ("0", "a whole number of at least 1, got 0"),
    "state.max_skipped_intervals": ("True", "a whole number of at least 1, got True"),
    "state.prune": ("None", "True or False, got None"),
    "mapping.metadata_columns": ("'_kinesis_shard'", "a list or tuple of strings, got '_kinesis_shard'"),
    "mapping.required_fields": ("['id', 2]", "a list or tuple of strings, got ['id', 2]"),
    "mapping.dead_letter_table_properties": ("{'replication_num': 1}", "None or a dict of strings to strings"),
    "mapping.transform": ("len", "None or a non-empty string, got <built-in function len>"),
    "deferrable": ("None", "True or False, got None"),
    "verify": ("1", "None, True, False or a CA bundle's path, got 1"),
    "region_name": ("''", "None or a non-empty string, got ''"),
    "executor_credentials": ("None", "'driver' (the connection's credentials"),
    "botocore_config": ("'adaptive'", "None or a dict with string keys, got 'adaptive'"),
}

BUILD_BAD_LITERALS = """
import json, sys
from datetime import timedelta
from airflow_provider_kinesis_doris import InProcessRunner, LoadConfig, MappingConfig, ReadConfig, SparkOrInProcess, SparkRunner, StateConfig
from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.operators.kinesis_to_doris import KinesisToDorisOperator

GROUPS = {"read": ReadConfig, "load": LoadConfig, "state": StateConfig, "mapping": MappingConfig}
RUNNERS = {"max_records": SparkOrInProcess, "parallelism": SparkRunner, "conf": SparkRunner, "lanes": InProcessRunner}

def build(name, value):
    group, _, field = name.partition(".")
    if not field:
        return KinesisToDorisOperator(task_id="load", stream_name="s", doris_table="d.t", checkpoint_table="c", **{name: value})
    kind = RUNNERS[field] if group == "runner" else GROUPS[group]
    return KinesisToDorisOperator(task_id="load", stream_name="s", doris_table="d.t", checkpoint_table="c",
                                  **{group: kind(**{field: value})})

errors = {}
for name, value in json.loads(sys.argv[1]).items():
    try:
        build(name, eval(value))
    except ConfigurationError as error:
        errors[name] = str(error)
    else:
        errors[name] = "built"
print(json.dumps(errors))
"""


def test_each_bad_literal_argument_fails_the_parse_naming_the_argument_and_what_it_must_be() -> None:
    bad_values = {name: value for name, (value, _) in BAD_LITERALS.items()}
    built = subprocess.run(
        [sys.executable, "-c", BUILD_BAD_LITERALS, json.dumps(bad_values)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip

    errors = json.loads(built.stdout.strip().splitlines()[-1])

    for name, (_, expected) in BAD_LITERALS.items():
        assert errors[name].startswith(f"{name} must be {expected}"), (name, errors[name])


def test_every_argument_and_every_group_field_has_a_check() -> None:
    import inspect

    from airflow_provider_kinesis_doris.config import GROUPS, group_field_names
    from airflow_provider_kinesis_doris.operators.kinesis_to_doris import KinesisToDorisOperator
    from airflow_provider_kinesis_doris.operators.loader_arguments import LOADER_ARGUMENT_CHECKS
    from airflow_provider_kinesis_doris.operators.pipeline_arguments import KinesisPipelineBaseOperator

    parameters = {name for cls in (KinesisPipelineBaseOperator, KinesisToDorisOperator)
                  for name in inspect.signature(cls.__init__).parameters} - {"self", "kwargs"}  # fmt: skip

    checks = [KinesisToDorisOperator.pipeline_argument_checks, LOADER_ARGUMENT_CHECKS, GROUPS]
    assert sum(len(names) for names in checks) == len(parameters), "an argument with two checks"
    assert set().union(*checks) == parameters
    for kinds in GROUPS.values():
        for kind in kinds:
            nested = {"spark", "in_process"} if kind.__name__ == "SparkOrInProcess" else set()
            assert set(kind.checks) | nested == set(group_field_names(kind)), kind
            assert set(kind.template_fields) <= set(group_field_names(kind)), kind


RENDER = """
import json
import jinja2
from airflow_provider_kinesis_doris import LoadConfig, MappingConfig, ReadConfig, SparkOrInProcess, SparkRunner
from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.operators.kinesis_to_doris import KinesisToDorisOperator

PARAMS = {"stream": "", "table": "d.t", "dl": "t_dl", "master": "local[3]", "consumer": "c1", "tz": "UTC",
          "where": "id > 0", "memory": "2g"}

def render(**arguments):
    arguments = {"stream_name": "s", "doris_table": "d.t", "checkpoint_table": "c", **arguments}
    loader = KinesisToDorisOperator(task_id="load", **arguments)
    try:
        loader.render_template_fields({"params": PARAMS}, jinja2.Environment())
    except ConfigurationError as error:
        return "ConfigurationError: " + str(error)
    return [loader.stream_name, loader.doris_table]

grouped = KinesisToDorisOperator(
    task_id="grouped", stream_name="s", doris_table="d.t", checkpoint_table="c",
    runner=SparkOrInProcess(spark=SparkRunner(master="{{ params.master }}",
                                              conf={"spark.executor.memory": "{{ params.memory }}"})),
    mapping=MappingConfig(dead_letter_table="{{ params.dl }}"),
    read=ReadConfig(efo_consumer_name="{{ params.consumer }}"),
    load=LoadConfig(options={"where": "{{ params.where }}"}, headers={"timezone": "{{ params.tz }}"}),
)
grouped.render_template_fields({"params": PARAMS}, jinja2.Environment())

print(json.dumps([
    render(doris_table="{{ params.table }}"),
    render(stream_name="{{ params.stream }}"),
    render(mapping=MappingConfig(dead_letter_table="{{ params.stream }}")),
    [grouped.runner.spark.master, grouped.runner.spark.conf, grouped.mapping.dead_letter_table,
     grouped.read.efo_consumer_name, grouped.load.options, grouped.load.headers],
]))
"""


def test_templated_arguments_and_group_fields_are_rendered_and_checked_once_rendered_naming_them() -> None:
    built = subprocess.run([sys.executable, "-c", RENDER], capture_output=True, text=True, timeout=120, check=True)

    rendered, empty_stream, empty_dead_letter, grouped = json.loads(built.stdout.strip().splitlines()[-1])

    assert rendered == ["s", "d.t"]
    assert empty_stream == "ConfigurationError: stream_name must be a non-empty string, got ''"
    assert empty_dead_letter == "ConfigurationError: mapping.dead_letter_table must be None or a non-empty string, got ''"
    assert grouped == [
        "local[3]", {"spark.executor.memory": "2g"}, "t_dl", "c1", {"where": "id > 0"}, {"timezone": "UTC"}
    ]

REFUSE_BARE_TABLE = """
from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.operators.kinesis_to_doris import KinesisToDorisOperator

try:
    KinesisToDorisOperator(task_id="load", stream_name="s", doris_table="orders", checkpoint_table="c")._table_names()
except ConfigurationError as error:
    print(error)
"""


def test_a_table_name_without_its_database_is_refused_saying_what_the_connections_schema_is_for() -> None:
    done = subprocess.run([sys.executable, "-c", REFUSE_BARE_TABLE], capture_output=True, text=True, timeout=120)

    assert done.stdout.strip().splitlines()[-1] == (
        "doris_table must name the database and the table, as 'database.table' (e.g. 'analytics.orders'), got "
        "'orders'. The Doris connection's schema is only the default database of SQL run through DorisHook and the "
        "SQL operators; the loader takes its database from doris_table."
    ), done.stderr[-2000:]
