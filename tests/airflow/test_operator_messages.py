"""The operator's failure messages, as a user sees them in a real Airflow run (``dag.test()``):
a zero-length interval names the timetables that give real ones on this Airflow major, and a
failure of no known type names the step that failed (planning, the load with or without Spark,
the commit) instead of blaming Spark for everything.

Runs under Airflow 3.x (``.venv``) and 2.11 (``.venv-af2``).
"""

from __future__ import annotations

import importlib.util
import base64
import itertools
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from kinesis_doris_devstack.scenario import (
    create_stream,
    event,
    now_ms,
    put_events,
    put_records,
    wait_past,
)
from tests.conftest import dag_file_in_a_bundle, events_table_on_local_stack, use_local_stack_connections

pytestmark = [pytest.mark.airflow]

DB = "messages"
CHECKPOINT_TABLE = "messages_checkpoints"
INTERVAL_S = 5
_names = itertools.count()

# One file in a DAG bundle of its own (Airflow 3's dag.test() runs only DAGs it finds in a bundle).
DAG_FILE = '''
import os
from datetime import datetime, timedelta, timezone

from airflow.providers.common.compat.sdk import DAG

from airflow_provider_kinesis_doris import (
    InProcessRunner, MappingConfig, ReadConfig, SparkOrInProcess, SparkRunner, StateConfig,
)
from airflow_provider_kinesis_doris.operators.kinesis_to_doris import KinesisToDorisOperator
from airflow_provider_kinesis_doris.version_compat import AIRFLOW_V_3_0_PLUS

try:
    from airflow.sdk import DeltaDataIntervalTimetable
except ImportError:
    from airflow.timetables.interval import DeltaDataIntervalTimetable

if AIRFLOW_V_3_0_PLUS:
    ZERO_LENGTH = timedelta(minutes=10)  # a DeltaTriggerTimetable on Airflow 3
else:
    from airflow.timetables.trigger import DeltaTriggerTimetable

    ZERO_LENGTH = DeltaTriggerTimetable(timedelta(minutes=10))  # a timedelta is a data interval on 2.11

START = datetime(2026, 1, 1, tzinfo=timezone.utc)

with DAG(dag_id="kd_messages_zero_length", schedule=ZERO_LENGTH, start_date=START, catchup=False) as zero_length:
    KinesisToDorisOperator(task_id="load", stream_name="s", doris_table="d.t", checkpoint_table="c")

with DAG(
    dag_id="kd_messages_load",
    schedule=DeltaDataIntervalTimetable(timedelta(seconds={interval_s})),
    start_date=START,
    catchup=False,
) as load:
    KinesisToDorisOperator(
        task_id="load",
        stream_name=os.environ.get("KD_MESSAGES_STREAM", "s"),
        doris_table=os.environ.get("KD_MESSAGES_TABLE", "d.t"),
        checkpoint_table=os.environ.get("KD_MESSAGES_CHECKPOINT_TABLE", "{checkpoint_table}"),
        state=StateConfig(create_checkpoint_table=os.environ.get("KD_MESSAGES_CREATE_CHECKPOINT_TABLE", "true") == "true"),
        runner={"true": SparkRunner(master="local[2]"), "false": InProcessRunner()}.get(
            os.environ.get("KD_MESSAGES_USE_SPARK", "false"), SparkOrInProcess(spark=SparkRunner(master="local[2]"))
        ),
        mapping=MappingConfig(transform=os.environ.get("KD_MESSAGES_TRANSFORM") or None,
                              decoder=os.environ.get("KD_MESSAGES_DECODER", "json")),
        executor_credentials=os.environ.get("KD_MESSAGES_EXECUTOR_CREDENTIALS", "driver"),
        aws_conn_id=os.environ.get("KD_MESSAGES_AWS_CONN_ID", "aws_default"),
        doris_conn_id=os.environ.get("KD_MESSAGES_DORIS_CONN_ID", "doris_default"),
        read=ReadConfig(seal_grace=timedelta(0), mode=os.environ.get("KD_MESSAGES_READ_MODE", "polling"),
                        efo_consumer_name=os.environ.get("KD_MESSAGES_EFO_CONSUMER") or None),
    )
'''.replace("{interval_s}", str(INTERVAL_S)).replace("{checkpoint_table}", CHECKPOINT_TABLE)


@pytest.fixture
def dags(airflow_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Loads ``DAG_FILE`` (after the test has set its environment) from a folder added to
    Airflow's DAG bundles; returns the module."""
    path = dag_file_in_a_bundle(monkeypatch, tmp_path / "bundle", "kd-messages", "kd_messages.py", DAG_FILE)

    def load() -> Any:
        spec = importlib.util.spec_from_file_location(f"kd_messages_{next(_names)}", path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        return module

    return load


@pytest.fixture
def stack(monkeypatch: pytest.MonkeyPatch, kinesis_client: Any, kinesis_mock_endpoint: str,
          dynamodb_endpoint: str, doris_server: Any) -> dict[str, str]:  # fmt: skip
    """Connections to the local stack and a Doris table; the stream is the test's to create."""
    n = next(_names)
    stream, table = f"messages-{n}-{datetime.now().strftime('%H%M%S%f')}", f"events_{n}"
    events_table_on_local_stack(monkeypatch, kinesis_mock_endpoint, dynamodb_endpoint, doris_server, DB, table)
    monkeypatch.setenv("KD_MESSAGES_STREAM", stream)
    monkeypatch.setenv("KD_MESSAGES_TABLE", f"{DB}.{table}")
    return {"stream": stream, "table": table}


def run(dag: Any, logical_date: datetime) -> Any:
    """``airflow dags test <dag> <date>``: the run loads the interval that ends at ``logical_date``."""
    from airflow_provider_kinesis_doris.version_compat import AIRFLOW_V_3_0_PLUS

    if AIRFLOW_V_3_0_PLUS:
        return dag.test(logical_date=logical_date)
    return dag.test(execution_date=logical_date)


def failed_with(dag_run: Any, failures: list[BaseException]) -> str:
    """The message the failed task raised."""
    assert "failed" in str(dag_run.state).lower(), dag_run.state
    assert len(failures) == 1, failures
    assert type(failures[0]).__name__ == "AirflowException", repr(failures[0])
    return str(failures[0])


def sealed_interval_end() -> datetime:
    """The end of an interval on the DAG's grid that is already over."""
    end_ms = (now_ms() // (INTERVAL_S * 1000)) * INTERVAL_S * 1000
    wait_past(end_ms)
    return datetime.fromtimestamp(end_ms / 1000, tz=timezone.utc)


def next_interval_end() -> int:
    """Epoch ms of the end of the interval under way."""
    return (now_ms() // (INTERVAL_S * 1000) + 1) * INTERVAL_S * 1000


# --- zero-length intervals -------------------------------------------------------------------------


def test_a_zero_length_interval_names_the_timetables_that_give_real_intervals(dags: Any, failures: list[BaseException]) -> None:
    from airflow_provider_kinesis_doris.version_compat import AIRFLOW_V_3_0_PLUS

    message = failed_with(run(dags().zero_length, datetime(2026, 1, 1, 0, 30, tzinfo=timezone.utc)), failures)

    assert message.startswith(
        "KinesisToDorisOperator needs a non-empty data interval [data_interval_start, data_interval_end), "
        "got [2026-01-01 00:30:00+00:00, 2026-01-01 00:30:00+00:00) from the DAG's DeltaTriggerTimetable. "
    ), message
    assert (
        'Give the DAG a data-interval timetable: schedule=DeltaDataIntervalTimetable(timedelta(minutes=10)) or '
        'schedule=CronDataIntervalTimetable("*/10 * * * *", timezone="UTC"), both from '
    ) in message
    if AIRFLOW_V_3_0_PLUS:
        assert (
            "On Airflow 3 a cron string gives a CronTriggerTimetable and schedule=timedelta(...) a "
            'DeltaTriggerTimetable: both make zero-length intervals, as do schedule=None, "@once" and "@continuous".'
        ) in message
        assert "both from airflow.sdk." in message
    else:
        assert (
            "On Airflow 2.11 a timedelta or cron string gives DeltaDataIntervalTimetable or "
            "CronDataIntervalTimetable (cron only while [scheduler] create_cron_data_intervals is True); "
            'CronTriggerTimetable and DeltaTriggerTimetable without interval=, schedule=None, "@once" and '
            '"@continuous" make zero-length intervals.'
        ) in message
        assert "both from airflow.timetables.interval." in message
    assert message.endswith(
        'See the README, "Schedules and dates" '
        "(https://github.com/airflow-provider-kinesis-doris/airflow-provider-kinesis-doris#schedules-and-dates)."
    ), message


# --- shards waiting for their parents ----------------------------------------------------------------


def test_shards_waiting_names_the_backfill_commands_of_both_majors_for_the_intervals_the_parents_lack() -> None:
    from datetime import timedelta

    from airflow_provider_kinesis_doris.core.errors import ShardsWaiting
    from airflow_provider_kinesis_doris.operators.loader_messages import explain_waiting

    # The parents lack [00:00, 00:20) of 10-minute intervals: two runs, which may never have existed.
    start_ms = int(datetime(2026, 1, 1, tzinfo=timezone.utc).timestamp() * 1000)
    waiting = ShardsWaiting("shard c waits for p", waiting={"c": ("p",)}, result=None, lacking=(start_ms, start_ms + 1_200_000))

    message = explain_waiting(waiting, "events_to_doris", timedelta(minutes=10))

    assert message.startswith("ShardsWaiting: shard c waits for p — Everything else of the interval is loaded."), message
    assert (
        "on Airflow 2.11 `airflow dags backfill -s 2026-01-01T00:00:00+00:00 -e 2026-01-01T00:10:00+00:00 "
        "events_to_doris`, on Airflow 3 `airflow backfill create --dag-id events_to_doris --from-date "
        "2026-01-01T00:00:00+00:00 --to-date 2026-01-01T00:10:00+00:00` (dates are interval starts, both inclusive)"
    ) in message
    assert "where a run of one exists and failed, clear it instead" in message


def test_intervals_skipped_is_named_as_such_not_as_a_failed_load() -> None:
    from airflow_provider_kinesis_doris.core.errors import IntervalsSkipped
    from airflow_provider_kinesis_doris.operators.loader_messages import run_failure

    backlog = IntervalsSkipped("Pipeline p: 12 interval(s) that no DAG run covered are left for later runs", intervals=())

    message = str(run_failure(backlog, "p", "the load in the task's process (InProcessRunner)"))

    assert message.startswith("IntervalsSkipped: Pipeline p: 12 interval(s) that no DAG run covered"), message
    assert "this run loaded and committed its own interval first" in message and "failed" not in message


def test_a_pending_handover_says_the_retry_goes_on() -> None:
    from airflow_provider_kinesis_doris.core.errors import HandoverPending
    from airflow_provider_kinesis_doris.operators.loader_messages import run_failure

    pending = HandoverPending("Pipeline new is taking over from pipeline old: interval [..) waits")

    message = str(run_failure(pending, "old", "the load in the task's process (InProcessRunner)"))

    assert message.startswith("HandoverPending: Pipeline new is taking over from pipeline old"), message
    assert "The task's retry goes on" in message and "failed" not in message


# --- the step that failed ----------------------------------------------------------------------------


@pytest.mark.integration
def test_a_missing_stream_is_named_by_the_preflight_and_not_blamed_on_spark(dags: Any, stack: dict[str, str], failures: list[BaseException]) -> None:
    # The stream does not exist: the preflight says so before anything is planned, read or loaded.
    message = failed_with(run(dags().load, sealed_interval_end()), failures)

    assert message.startswith("The Doris or AWS deployment breaks what exactly-once assumes; nothing was planned or loaded."), message
    assert f"stream {stack['stream']} does not exist" in message
    assert "Spark" not in message


@pytest.mark.parametrize(
    ("variable", "conn_id", "named"),
    [("KD_MESSAGES_AWS_CONN_ID", "aws_prod", "The AWS connection 'aws_prod' does not exist in Airflow"),
     ("KD_MESSAGES_DORIS_CONN_ID", "doris_prod", "The Doris connection 'doris_prod' does not exist in Airflow")],
)
def test_a_connection_airflow_does_not_have_is_named_before_anything_runs(
    dags: Any, stack: dict[str, str], monkeypatch: pytest.MonkeyPatch, failures: list[BaseException],
    variable: str, conn_id: str, named: str,
) -> None:  # fmt: skip
    # A wrong aws_conn_id failed with boto3's "NoRegionError: You must specify a region." (or, with a
    # region in the environment, went on with boto3's default credentials); the connection's name
    # was only in an earlier warning.
    monkeypatch.setenv(variable, conn_id)

    message = failed_with(run(dags().load, sealed_interval_end()), failures)

    assert message.startswith("The operator's settings are invalid; nothing was planned or loaded: "), message
    assert named in message


@pytest.mark.integration
def test_a_missing_checkpoint_table_the_operator_may_not_create_is_named_with_its_region_and_both_fixes(
    dags: Any, stack: dict[str, str], kinesis_client: Any, monkeypatch: pytest.MonkeyPatch, failures: list[BaseException]
) -> None:
    # It said: Planning the interval failed ... ResourceNotFoundException ... GetItem.
    create_stream(kinesis_client, stack["stream"], 1)
    monkeypatch.setenv("KD_MESSAGES_CHECKPOINT_TABLE", f"never_created_{stack['table']}")
    monkeypatch.setenv("KD_MESSAGES_CREATE_CHECKPOINT_TABLE", "false")

    message = failed_with(run(dags().load, sealed_interval_end()), failures)

    assert message.startswith("The Doris or AWS deployment breaks what exactly-once assumes; nothing was planned or loaded."), message
    table = f"never_created_{stack['table']}"
    assert f"DynamoDB table {table} does not exist in region us-east-1 and create_checkpoint_table is False." in message
    assert f"create {table} in us-east-1 with key pk (HASH, S), sk (RANGE, S)" in message
    assert "or set state=StateConfig(create_checkpoint_table=True) to have the first run create it." in message
    assert "GetItem" not in message


@pytest.mark.integration
def test_an_aws_error_before_planning_names_the_step(
    dags: Any, kinesis_mock_endpoint: str, doris_server: Any, monkeypatch: pytest.MonkeyPatch,
    failures: list[BaseException],
) -> None:
    # One endpoint_url for every service: DynamoDB's DescribeTable reaches the Kinesis emulator. It
    # gave a bare botocore ClientError, without the step the README promises.
    doris_server.execute_sql("", f"CREATE DATABASE IF NOT EXISTS {DB}")
    use_local_stack_connections(monkeypatch, kinesis_mock_endpoint, kinesis_mock_endpoint, doris_server, DB)

    message = failed_with(run(dags().load, sealed_interval_end()), failures)

    assert message.startswith(
        "Checking the deployment before planning failed (the checkpoint table, the Doris and AWS preflight, the "
        "Doris tables); nothing was planned or loaded: "
    ), message
    assert "DescribeTable" in message


@pytest.mark.integration
def test_a_failed_load_without_spark_says_it_ran_in_the_task(
    dags: Any, stack: dict[str, str], kinesis_client: Any, monkeypatch: pytest.MonkeyPatch, failures: list[BaseException]
) -> None:
    from airflow_provider_kinesis_doris.core import load

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the range group could not be loaded")

    monkeypatch.setattr(load, "load_range_group", broken)
    end = _interval_with_records(kinesis_client, stack["stream"])

    message = failed_with(run(dags().load, end), failures)

    assert message == (
        "The load in the task's process (InProcessRunner) failed: RuntimeError: the range group could not be loaded"
    ), message


@pytest.mark.integration
def test_a_failed_spark_job_names_spark_and_its_master(
    dags: Any, stack: dict[str, str], kinesis_client: Any, monkeypatch: pytest.MonkeyPatch, failures: list[BaseException]
) -> None:
    from airflow_provider_kinesis_doris.spark import runner

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("spark-submit to local[2] failed with exit code 1; see the log above")

    monkeypatch.setattr(runner, "run_spark_job", broken)  # the operator imports it when it loads
    monkeypatch.setenv("KD_MESSAGES_USE_SPARK", "true")
    end = _interval_with_records(kinesis_client, stack["stream"])

    message = failed_with(run(dags().load, end), failures)

    assert message == (
        "The Spark load job (master local[2]) failed: RuntimeError: spark-submit to local[2] failed with exit "
        "code 1; see the log above"
    ), message


@pytest.mark.integration
def test_a_failed_commit_says_the_rows_are_in_doris(
    dags: Any, stack: dict[str, str], kinesis_client: Any, monkeypatch: pytest.MonkeyPatch, failures: list[BaseException]
) -> None:
    from airflow_provider_kinesis_doris.core.stores.range_book import RangeBook

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("DynamoDB is unavailable")

    monkeypatch.setattr(RangeBook, "mark_ranges_loaded", broken)
    create_stream(kinesis_client, stack["stream"], 1)
    # An interval without records, after the stream was created, commits its (empty) range
    # without starting a runner.
    end_ms = next_interval_end() + INTERVAL_S * 1000
    wait_past(end_ms)
    message = failed_with(run(dags().load, datetime.fromtimestamp(end_ms / 1000, tz=timezone.utc)), failures)

    assert message == (
        "Committing the loaded ranges failed (marking them loaded and moving the checkpoints); the rows are in "
        "Doris, and a rerun of this task commits them without loading them twice: RuntimeError: DynamoDB is "
        "unavailable"
    ), message


def _interval_with_records(kinesis_client: Any, stream: str) -> datetime:
    """Create the stream, put records into the interval under way, wait for its end; the end."""
    create_stream(kinesis_client, stream, 1)
    end_ms = next_interval_end()
    put_events(kinesis_client, stream, [event(i) for i in range(5)])
    if now_ms() >= end_ms:  # the records arrived after the interval: use the next one
        end_ms = next_interval_end()
        put_events(kinesis_client, stream, [event(i) for i in range(5, 10)])
    wait_past(end_ms)
    return datetime.fromtimestamp(end_ms / 1000, tz=timezone.utc)


# --- the user transform, in both runners ----------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize("use_spark", [False, True], ids=["in-task", "spark"])
def test_both_runners_apply_the_transform_and_dead_letter_what_it_rejects(
    dags: Any, stack: dict[str, str], kinesis_client: Any, doris_server: Any, monkeypatch: pytest.MonkeyPatch,
    use_spark: bool,
) -> None:  # fmt: skip
    monkeypatch.setenv("KD_MESSAGES_TRANSFORM", "kinesis_doris_devstack.scenario:prefix_user")
    monkeypatch.setenv("KD_MESSAGES_USE_SPARK", str(use_spark).lower())
    end = _records_in_one_interval(kinesis_client, stack["stream"], [event(i) for i in range(6)] + [event(6, amount=-5)])

    dag_run = run(dags().load, end)

    assert "success" in str(dag_run.state).lower(), dag_run.state
    rows = doris_server.execute_sql(DB, f"SELECT event_id, user_id FROM {stack['table']} ORDER BY event_id")
    assert [tuple(row) for row in rows] == [(i, f"tx-user-{i % 17}") for i in range(6)]
    dead = doris_server.execute_sql(DB, f"SELECT reason, payload_base64 FROM {stack['table']}_dead_letter")
    assert [(reason, json.loads(base64.b64decode(payload))["event_id"]) for reason, payload in dead] == [
        ("transform rejected the record", 6)
    ]


@pytest.mark.integration
def test_a_transform_that_does_not_import_fails_before_planning(
    dags: Any, stack: dict[str, str], kinesis_client: Any, failures: list[BaseException], monkeypatch: pytest.MonkeyPatch
) -> None:  # fmt: skip
    monkeypatch.setenv("KD_MESSAGES_TRANSFORM", "kd_no_such_module:prefix")
    end = _interval_with_records(kinesis_client, stack["stream"])

    message = failed_with(run(dags().load, end), failures)

    assert message == (
        "The operator's settings are invalid; nothing was planned or loaded: Cannot import transform "
        "'kd_no_such_module:prefix': ModuleNotFoundError: No module named 'kd_no_such_module'"
    ), message


@pytest.mark.integration
def test_spark_without_a_usable_java_fails_before_planning_and_says_what_to_install(
    dags: Any, stack: dict[str, str], kinesis_client: Any, dynamodb_client: Any, failures: list[BaseException],
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:  # fmt: skip
    from airflow_provider_kinesis_doris.core.stores.dynamodb import dynamo_store

    java = tmp_path / "jdk11" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\necho 'openjdk version \"11.0.2\" 2019-01-15' >&2\n")
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(java.parents[1]))
    monkeypatch.setenv("KD_MESSAGES_USE_SPARK", "true")
    end = _interval_with_records(kinesis_client, stack["stream"])

    message = failed_with(run(dags().load, end), failures)

    assert message == (
        "The operator's settings are invalid; nothing was planned or loaded: Loading with Spark needs Java 17+; "
        f"{java} (from JAVA_HOME={java.parents[1]}) is Java 11: install the provider with its spark extra "
        "(pip install 'airflow-provider-kinesis-doris[spark]') and a Java 17+ runtime, or load without Spark "
        "(runner=InProcessRunner(), or SparkOrInProcess() for small intervals)"
    ), message
    store = dynamo_store(dynamodb_client, CHECKPOINT_TABLE, f"{stack['stream']}.{DB}.{stack['table']}")
    store.items.create_table_if_missing()  # a no-op if the run had made it
    assert store.ledger.list_shard_checkpoints() == []  # not even the shards were registered


@pytest.mark.integration
def test_auto_loads_a_small_interval_in_the_task_and_says_why_in_xcom(
    dags: Any, stack: dict[str, str], kinesis_client: Any, doris_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:  # fmt: skip
    from airflow_provider_kinesis_doris.operators.kinesis_to_doris import KinesisToDorisOperator

    returned: list[Any] = []
    execute = KinesisToDorisOperator.execute
    monkeypatch.setattr(KinesisToDorisOperator, "execute", lambda self, context: returned.append(execute(self, context)) or returned[-1])
    monkeypatch.setenv("KD_MESSAGES_USE_SPARK", "auto")
    end = _records_in_one_interval(kinesis_client, stack["stream"], [event(i) for i in range(4)])

    dag_run = run(dags().load, end)

    assert "success" in str(dag_run.state).lower(), dag_run.state
    (xcom,) = returned
    # One shard without a loaded interval: counted at 1,000 records/s over the 5-second interval.
    assert xcom["runner"] == {
        "runner": "in_process", "estimated_records": INTERVAL_S * 1_000, "ranges": 1, "ranges_at_write_limit": 1,
        "max_records": 500_000,
    }  # fmt: skip
    assert xcom["loaded"] == 4
    assert len(doris_server.execute_sql(DB, f"SELECT event_id FROM {stack['table']}")) == 4


# --- rows Doris refuses, in both runners ----------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize("use_spark", [False, True], ids=["in-task", "spark"])
def test_both_runners_dead_letter_poison_pills_with_their_reason_and_load_the_rest(
    dags: Any, stack: dict[str, str], kinesis_client: Any, doris_server: Any, monkeypatch: pytest.MonkeyPatch,
    use_spark: bool,
) -> None:  # fmt: skip
    """Issue 21's cases in one interval: a record nested 100,000 levels deep, a word in the NOT NULL
    key column, a word in an INT column (strict mode is on by default), amid good records."""
    monkeypatch.setenv("KD_MESSAGES_USE_SPARK", str(use_spark).lower())
    deep = b'{"event_id": 9, "nested": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    payloads = [event(1), {**event(3), "event_id": "three"}, event(4), {**event(5), "amount": "many"}, deep, event(6)]
    end = _records_in_one_interval(kinesis_client, stack["stream"], payloads)

    dag_run = run(dags().load, end)

    assert "success" in str(dag_run.state).lower(), dag_run.state
    rows = doris_server.execute_sql(DB, f"SELECT event_id FROM {stack['table']} ORDER BY event_id")
    assert [row[0] for row in rows] == [1, 4, 6]
    dead = doris_server.execute_sql(DB, f"SELECT reason, payload_base64 FROM {stack['table']}_dead_letter")
    assert sorted((reason, base64.b64decode(payload)[:26]) for reason, payload in dead) == [
        ("column(amount) value is incorrect while strict mode is true, src value is many", b'{"event_id": 5, "user_id":'),
        ("column(event_id) value is incorrect while strict mode is true, src value is three",
         b'{"event_id": "three", "use'),
        ("payload nests more than 256 arrays/objects deep (at byte 281)", b'{"event_id": 9, "nested": '),
    ]


def test_csv_records_take_their_field_names_from_the_tables_columns(
    dags: Any, stack: dict[str, str], kinesis_client: Any, doris_server: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """decoder="csv" without load_options["columns"]: the operator reads the table's columns
    with DESC; a record of two lines is two rows, a line with too few fields a dead letter."""
    table = f"csv_{stack['table']}"
    doris_server.execute_sql(DB, f"CREATE TABLE {table} (event_id BIGINT, user_id VARCHAR(32), amount INT) "
                                 "DUPLICATE KEY(event_id) DISTRIBUTED BY HASH(event_id) BUCKETS 1")  # fmt: skip
    monkeypatch.setenv("KD_MESSAGES_TABLE", f"{DB}.{table}")
    monkeypatch.setenv("KD_MESSAGES_DECODER", "csv")
    end = _records_in_one_interval(kinesis_client, stack["stream"], [b"1,u1,10\n2,\"u,2\",20", b"3,u3", b"4,\\N,40"])

    dag_run = run(dags().load, end)

    assert "success" in str(dag_run.state).lower(), dag_run.state
    rows = doris_server.execute_sql(DB, f"SELECT event_id, user_id, amount FROM {table} ORDER BY event_id")
    assert [tuple(row) for row in rows] == [(1, "u1", 10), (2, "u,2", 20), (4, None, 40)]
    dead = doris_server.execute_sql(DB, f"SELECT payload_base64 FROM {table}_dead_letter")
    assert [base64.b64decode(payload) for (payload,) in dead] == [b"3,u3"]


def _records_in_one_interval(kinesis_client: Any, stream: str, payloads: list[dict[str, Any] | bytes]) -> datetime:
    """Create the stream and put ``payloads`` (events, or raw bytes) into one interval, from its
    start, in order; its end, once over."""
    create_stream(kinesis_client, stream, 1)
    wait_past(next_interval_end())
    end_ms = next_interval_end()
    put_records(kinesis_client, stream, [("k", p if isinstance(p, bytes) else json.dumps(p).encode()) for p in payloads])
    assert now_ms() < end_ms, "the records must arrive inside one interval"
    wait_past(end_ms)
    return datetime.fromtimestamp(end_ms / 1000, tz=timezone.utc)


@pytest.mark.integration
def test_loaders_assume_the_executor_role_with_their_own_credentials(
    dags: Any, stack: dict[str, str], kinesis_client: Any, doris_server: Any, moto_sts: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    import os

    from tests.conftest import assumed_roles

    role = f"arn:aws:iam::123456789012:role/loaders-{next(_names)}"
    monkeypatch.setenv("KD_MESSAGES_EXECUTOR_CREDENTIALS", role)
    end = _records_in_one_interval(kinesis_client, stack["stream"], [event(i) for i in range(4)])

    dag_run = run(dags().load, end)

    assert "success" in str(dag_run.state).lower(), dag_run.state
    assert len(doris_server.execute_sql(DB, f"SELECT event_id FROM {stack['table']}")) == 4
    sessions = assumed_roles(moto_sts, role)
    # The loaders ran in this process (InProcessRunner) and assumed the role once for the process.
    assert [entry["session_name"] for entry in sessions] == [f"kinesis-doris-{os.getpid()}"]


@pytest.mark.integration
def test_a_consumer_kinesis_would_refuse_fails_before_planning_naming_it(
    dags: Any, stack: dict[str, str], kinesis_client: Any, failures: list[BaseException], monkeypatch: pytest.MonkeyPatch
) -> None:  # fmt: skip
    monkeypatch.setenv("KD_MESSAGES_READ_MODE", "efo")
    monkeypatch.setenv("KD_MESSAGES_EFO_CONSUMER", "orders to doris")
    end = _interval_with_records(kinesis_client, stack["stream"])

    message = failed_with(run(dags().load, end), failures)

    assert message == (
        "Registering the stream consumer 'orders to doris' for read.mode='efo' failed; nothing was planned or loaded: "
        "ConfigurationError: efo_consumer_name must be 1-128 of [a-zA-Z0-9_.-], got 'orders to doris'"
    ), message
