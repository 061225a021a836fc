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
from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.operators.kinesis_to_doris import KinesisToDorisOperator

def build(**arguments):
    try:
        loader = KinesisToDorisOperator(task_id="load", stream_name="s", doris_table="d.t", checkpoint_table="c", **arguments)
    except ConfigurationError as error:
        return "ConfigurationError: " + str(error)
    return loader.driver_concurrency

print(json.dumps([build(), build(driver_concurrency=32)] + [build(driver_concurrency=bad) for bad in (0, -1, 2.5, "8")]))
"""


def test_driver_concurrency_defaults_to_the_bounded_pool_and_a_bad_one_fails_the_parse_naming_it() -> None:
    built = subprocess.run([sys.executable, "-c", BUILD], capture_output=True, text=True, timeout=120, check=True)

    default, larger, *refused = json.loads(built.stdout.strip().splitlines()[-1])

    assert (default, larger) == (8, 32)
    assert refused == [
        f"ConfigurationError: driver_concurrency must be a whole number of at least 1, got {bad!r}"
        for bad in (0, -1, 2.5, "8")
    ]


BUILD_CHOICES = """
import json
from airflow_provider_kinesis_doris.operators.kinesis_to_doris import KinesisToDorisOperator

def build(**arguments):
    try:
        loader = KinesisToDorisOperator(task_id="load", stream_name="s", doris_table="d.t", checkpoint_table="c", **arguments)
    except Exception as error:
        return type(error).__name__ + ": " + str(error)
    return [loader.executor_credentials, loader.aws_hook.verify, loader.aws_hook.config.retries]

print(json.dumps([
    build(executor_credentials="arn:aws:iam::123456789012:role/etl", verify=False, botocore_config={"retries": {"mode": "adaptive"}}),
    build(executor_credentials="instance_role"),
    build(spark_conn_id="spark_default", spark_connect_conn_id="spark_connect_default"),
    build(read_mode="fanout"),
]))
"""


def test_credentials_client_settings_spark_connections_and_read_mode_are_checked_when_the_dag_is_parsed() -> None:
    built = subprocess.run([sys.executable, "-c", BUILD_CHOICES], capture_output=True, text=True, timeout=120, check=True)

    role, bad_mode, both_connections, bad_read_mode = json.loads(built.stdout.strip().splitlines()[-1])

    assert role == ["arn:aws:iam::123456789012:role/etl", False, {"mode": "adaptive"}]
    assert bad_mode.startswith("ConfigurationError: ") and "'instance_role'" in bad_mode and "default_chain" in bad_mode
    assert both_connections == (
        "ConfigurationError: Give spark_conn_id (spark-submit) or spark_connect_conn_id (Spark Connect), not both"
    )
    assert bad_read_mode == "ConfigurationError: read_mode must be one of 'polling', 'efo', got 'fanout'"


BUILD_DECODERS = """
import json
from airflow_provider_kinesis_doris.operators.kinesis_to_doris import KinesisToDorisOperator

def build(**arguments):
    arguments.setdefault("doris_table", "d.t")
    try:
        loader = KinesisToDorisOperator(task_id="load", stream_name="s", checkpoint_table="c", **arguments)
    except Exception as error:
        return type(error).__name__ + ": " + str(error)
    return loader.decoder

print(json.dumps([
    build(),
    build(decoder="gzip+json", load_options={"format": "json", "strict_mode": False}),
    build(decoder="csv", load_options={"format": "{{ params.format }}"}),
    build(decoder="csv", load_options={"format": "csv", "column_separator": ","}),
    build(decoder="gzip+json", load_options={"strip_outer_array": True}),
    build(load_options={"read_json_by_line": "false"}),
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
        "ConfigurationError: load_options format='csv' contradicts the body: with decoder='csv' the loader sends "
        "every row as a line of JSON"
    ), csv_format
    assert outer_array.startswith("ConfigurationError: load_options strip_outer_array=True contradicts the body: "
                                  "with decoder='gzip+json'"), outer_array  # fmt: skip
    assert by_line.startswith("ConfigurationError: load_options read_json_by_line='false' contradicts the body: "
                              "with decoder='json'"), by_line  # fmt: skip
    assert unknown == (
        "ConfigurationError: decoder must be one of ['json', 'gzip+json', 'csv'] or 'package.module:function', "
        "got 'gzip'"
    )
    assert hostile_table.startswith(
        "ConfigurationError: doris_table 'd.t; DROP TABLE x', its table: 't; DROP TABLE x' is not a valid Doris name"
    ), hostile_table
    assert hostile_dead_letter.startswith(
        "ConfigurationError: dead_letter_table: 't/*x*/' is not a valid Doris name"
    ), hostile_dead_letter


# Each bad value, and what the error must say about it (after "<parameter> must be ").
BAD_LITERALS: dict[str, tuple[str, str]] = {
    "seal_grace": ("5", "a datetime.timedelta of zero or more, got 5"),
    "waiting_warn_after": ("timedelta(seconds=-1)", "a datetime.timedelta of zero or more"),
    "initial_position": ("'LATEST'", "one of 'INTERVAL', 'TRIM_HORIZON', got 'LATEST'"),
    "max_bad_record_ratio": ("'0.1'", "a number from 0 to 1, got '0.1'"),
    "chunk_max_rows": ("0", "a whole number of at least 1, got 0"),
    "chunk_max_bytes": ("1.5e6", "a whole number of at least 1, got 1500000.0"),
    "in_process_max_records": ("-1", "a whole number of at least 0, got -1"),
    "max_skipped_intervals": ("True", "a whole number of at least 1, got True"),
    "parallelism": ("0", "None or a whole number of at least 1, got 0"),
    "use_spark": ("1", "one of True, False, 'auto', got 1"),
    "metadata_columns": ("'_kinesis_shard'", "a list or tuple of strings, got '_kinesis_shard'"),
    "required_fields": ("['id', 2]", "a list or tuple of strings, got ['id', 2]"),
    "relaxed_order": ("'yes'", "True or False, got 'yes'"),
    "deferrable": ("None", "True or False, got None"),
    "verify": ("1", "None, True, False or a CA bundle's path, got 1"),
    "region_name": ("''", "None or a non-empty string, got ''"),
    "executor_credentials": ("None", "a non-empty string, got None"),
    "dead_letter_table_properties": ("{'replication_num': 1}", "None or a dict of strings to strings"),
    "botocore_config": ("'adaptive'", "None or a dict with string keys, got 'adaptive'"),
    "transform": ("len", "None or a non-empty string, got <built-in function len>"),
    "spark_conf": ("['spark.ui.enabled=false']", "None or a dict with string keys, got ['spark.ui.enabled=false']"),
}

BUILD_BAD_LITERALS = """
import json, sys
from datetime import timedelta
from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.operators.kinesis_to_doris import KinesisToDorisOperator

errors = {}
for name, value in json.loads(sys.argv[1]).items():
    try:
        KinesisToDorisOperator(task_id="load", stream_name="s", doris_table="d.t", checkpoint_table="c", **{name: eval(value)})
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


def test_every_argument_of_the_loader_has_a_check_at_parse_time_or_after_rendering() -> None:
    import inspect

    from airflow_provider_kinesis_doris.operators.kinesis_to_doris import KinesisToDorisOperator
    from airflow_provider_kinesis_doris.operators.loader_arguments import PARSE_TIME_CHECKS, RENDERED_CHECKS

    parameters = set(inspect.signature(KinesisToDorisOperator.__init__).parameters) - {"self", "kwargs"}
    checked_elsewhere = {"decoder"}  # check_decoder names it, with the decoders it knows

    assert set(RENDERED_CHECKS) <= set(KinesisToDorisOperator.template_fields)
    assert set(PARSE_TIME_CHECKS) | set(RENDERED_CHECKS) | checked_elsewhere == parameters


RENDER = """
import json
import jinja2
from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.operators.kinesis_to_doris import KinesisToDorisOperator

def render(**arguments):
    arguments = {"stream_name": "s", "doris_table": "d.t", "checkpoint_table": "c", **arguments}
    loader = KinesisToDorisOperator(task_id="load", **arguments)
    try:
        loader.render_template_fields({"params": {"stream": "", "table": "d.t"}}, jinja2.Environment())
    except ConfigurationError as error:
        return "ConfigurationError: " + str(error)
    return [loader.stream_name, loader.doris_table]

print(json.dumps([
    render(doris_table="{{ params.table }}"),
    render(stream_name="{{ params.stream }}"),
    render(load_headers={"timeout": 5}),
]))
"""


def test_templated_arguments_are_checked_once_rendered_naming_the_argument() -> None:
    built = subprocess.run([sys.executable, "-c", RENDER], capture_output=True, text=True, timeout=120, check=True)

    rendered, empty_stream, header_number = json.loads(built.stdout.strip().splitlines()[-1])

    assert rendered == ["s", "d.t"]
    assert empty_stream == "ConfigurationError: stream_name must be a non-empty string, got ''"
    assert header_number == (
        "ConfigurationError: load_headers must be None or a dict of strings to strings, got {'timeout': 5}"
    )

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
