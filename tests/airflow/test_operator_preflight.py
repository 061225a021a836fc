"""The operator checks the Doris deployment before a pipeline's first load and whenever its
settings change, in a real Airflow run (``dag.test()``) on the local stack: a fatal item fails the
task before anything is planned; settings that passed are not checked again.

Runs under Airflow 3.x (``.venv``) and 2.11 (``.venv-af2``).
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import logging
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from kinesis_doris_devstack.scenario import create_stream, event, events_table_ddl, now_ms, put_events, wait_past
from tests.conftest import dag_file_in_a_bundle, events_table_on_local_stack, use_local_stack_connections
from tests.preflight_items import AWS_BROKEN_ITEMS, DORIS_BROKEN_ITEMS, flagged_checks

pytestmark = [pytest.mark.airflow, pytest.mark.integration]

DB = "preflight_op"
CHECKPOINT_TABLE = "preflight_checkpoints"
INTERVAL_S = 5
_names = itertools.count()

DAG_FILE = '''
import os
from datetime import datetime, timedelta, timezone

from airflow.providers.common.compat.sdk import DAG

from airflow_provider_kinesis_doris import InProcessRunner, MappingConfig, ReadConfig
from airflow_provider_kinesis_doris.operators.kinesis_to_doris import KinesisToDorisOperator

try:
    from airflow.sdk import DeltaDataIntervalTimetable
except ImportError:
    from airflow.timetables.interval import DeltaDataIntervalTimetable

with DAG(
    dag_id="kd_preflight",
    schedule=DeltaDataIntervalTimetable(timedelta(seconds={interval_s})),
    start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    catchup=False,
) as load:
    KinesisToDorisOperator(
        task_id="load",
        stream_name=os.environ["KD_PREFLIGHT_STREAM"],
        doris_table=os.environ["KD_PREFLIGHT_TABLE"],
        checkpoint_table=os.environ.get("KD_PREFLIGHT_CHECKPOINTS", "{checkpoint_table}"),
        mapping=MappingConfig(metadata_columns=os.environ["KD_PREFLIGHT_METADATA"].split(",")),
        read=ReadConfig(seal_grace=timedelta(0)),
        runner=InProcessRunner(),
    )
'''.replace("{interval_s}", str(INTERVAL_S)).replace("{checkpoint_table}", CHECKPOINT_TABLE)


@pytest.fixture
def stack(airflow_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kinesis_mock_endpoint: str,
          dynamodb_endpoint: str, doris_server: Any) -> dict[str, Any]:  # fmt: skip
    n = next(_names)
    stream, table = f"preflight-{n}-{datetime.now().strftime('%H%M%S%f')}", f"events_{n}"
    events_table_on_local_stack(monkeypatch, kinesis_mock_endpoint, dynamodb_endpoint, doris_server, DB, table)
    monkeypatch.setenv("KD_PREFLIGHT_STREAM", stream)
    monkeypatch.setenv("KD_PREFLIGHT_TABLE", f"{DB}.{table}")
    monkeypatch.setenv("KD_PREFLIGHT_METADATA", "_kinesis_shard,_kinesis_sequence")
    path = dag_file_in_a_bundle(monkeypatch, tmp_path / "bundle", "kd-preflight", "kd_preflight.py", DAG_FILE)
    return {"stream": stream, "table": table, "path": path, "pipeline_id": f"{stream}.{DB}.{table}"}


def load_dag(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"kd_preflight_{next(_names)}", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.load


def run(stack: dict[str, Any], logical_date: datetime) -> Any:
    from airflow_provider_kinesis_doris.version_compat import AIRFLOW_V_3_0_PLUS

    dag = load_dag(stack["path"])
    return dag.test(logical_date=logical_date) if AIRFLOW_V_3_0_PLUS else dag.test(execution_date=logical_date)


def sealed_interval_end() -> datetime:
    end_ms = (now_ms() // (INTERVAL_S * 1000)) * INTERVAL_S * 1000
    wait_past(end_ms)
    return datetime.fromtimestamp(end_ms / 1000, tz=timezone.utc)


def passed_digest(dynamodb_client: Any, pipeline_id: str, table: str = CHECKPOINT_TABLE) -> str | None:
    from airflow_provider_kinesis_doris.core.stores.dynamodb import dynamo_store

    return dynamo_store(dynamodb_client, table, pipeline_id).preflight.passed_preflight_digest()


def test_a_metadata_column_the_table_lacks_fails_the_task_before_anything_is_planned(
    stack: dict[str, Any], failures: list[BaseException], monkeypatch: pytest.MonkeyPatch, dynamodb_client: Any
) -> None:
    # The stream does not exist either: had the task planned, listing its shards would have failed.
    monkeypatch.setenv("KD_PREFLIGHT_METADATA", "_kinesis_shard,_kinesis_partition_key")

    dag_run = run(stack, sealed_interval_end())

    assert "failed" in str(dag_run.state).lower() and len(failures) == 1
    message = str(failures[0])
    assert message.startswith("The Doris or AWS deployment breaks what exactly-once assumes; nothing was planned or "
                              "loaded. Doris and AWS preflight at 20"), message
    assert f"[FATAL] table columns: {DB}.{stack['table']} lacks the metadata columns ['_kinesis_partition_key']" in message
    assert f"Fix: ALTER TABLE {DB}.{stack['table']} ADD COLUMN" in message
    assert f"[FATAL] stream retention: stream {stack['stream']} does not exist." in message  # the AWS half
    assert passed_digest(dynamodb_client, stack["pipeline_id"]) is None


def test_settings_that_passed_are_not_checked_again_until_they_change(
    stack: dict[str, Any], failures: list[BaseException], monkeypatch: pytest.MonkeyPatch, kinesis_client: Any,
    dynamodb_client: Any, doris_server: Any, dynamodb_endpoint: str, kinesis_mock_endpoint: str,
) -> None:  # fmt: skip
    create_stream(kinesis_client, stack["stream"], 1)
    put_events(kinesis_client, stack["stream"], [event(i) for i in range(3)])
    assert "success" in str(run(stack, sealed_interval_end()).state).lower(), failures
    first = passed_digest(dynamodb_client, stack["pipeline_id"])
    assert first is not None

    doris_server.set_be_config("wait_internal_group_commit_finish", True)
    try:
        # Same settings: not checked again, so the broken BE goes unnoticed by design.
        assert "success" in str(run(stack, sealed_interval_end()).state).lower(), failures
        # Another label_keep_seconds: the settings changed, the deployment is checked again.
        connection = json.loads(os.environ["AIRFLOW_CONN_DORIS_DEFAULT"])
        connection["extra"]["label_keep_seconds"] = 40000
        monkeypatch.setenv("AIRFLOW_CONN_DORIS_DEFAULT", json.dumps(connection))
        assert "failed" in str(run(stack, sealed_interval_end()).state).lower()
    finally:
        doris_server.set_be_config("wait_internal_group_commit_finish", False)
    [failure] = failures
    assert "[FATAL] group commit:" in str(failure) and "wait_internal_group_commit_finish = true" in str(failure)
    assert passed_digest(dynamodb_client, stack["pipeline_id"]) == first


def test_a_label_window_doris_keeps_shorter_fails_the_task_before_anything_is_planned(
    stack: dict[str, Any], failures: list[BaseException], kinesis_client: Any, doris_server: Any
) -> None:
    create_stream(kinesis_client, stack["stream"], 1)
    doris_server.set_fe_config("streaming_label_keep_max_second", 600)
    try:
        dag_run = run(stack, sealed_interval_end())
    finally:
        doris_server.set_fe_config("streaming_label_keep_max_second", 43200)  # the stand-in is the session's

    assert "failed" in str(dag_run.state).lower() and len(failures) == 1
    message = str(failures[0])
    assert "[FATAL] label window: " in message and "streaming_label_keep_max_second 600 s" in message
    assert "set label_keep_seconds of the Doris connection to 600 or less" in message


FATAL_ITEMS = sorted(
    [("doris", check) for check, (fatal, _) in DORIS_BROKEN_ITEMS.items() if fatal]
    + [("aws", check) for check, (fatal, _) in AWS_BROKEN_ITEMS.items() if fatal]
)


WARNING_ITEMS = sorted(
    [("doris", check) for check, (fatal, _) in DORIS_BROKEN_ITEMS.items() if not fatal]
    + [("aws", check) for check, (fatal, _) in AWS_BROKEN_ITEMS.items() if not fatal]
)


@pytest.fixture
def deployment(
    airflow_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kinesis_mock_endpoint: str,
    dynamodb_endpoint: str, own_doris_server: Any, aws_deployment: Any, kinesis_client: Any, dynamodb_client: Any,
) -> Any:  # fmt: skip
    """A deployment every item passes on (a stand-in of its own, the checkpoint table with
    point-in-time recovery) and the DAG file of a loader on it; ``break_item(half, check)``
    breaks one item and returns the settings the task then checks."""
    own_doris_server.execute_sql("", f"CREATE DATABASE {DB}")
    own_doris_server.execute_sql(DB, events_table_ddl("events"))
    use_local_stack_connections(monkeypatch, kinesis_mock_endpoint, dynamodb_endpoint, own_doris_server, DB)

    def break_item(half: str, check: str) -> Any:
        settings = aws_deployment
        if half == "doris":
            DORIS_BROKEN_ITEMS[check][1](own_doris_server, DB, "events")
        else:
            settings = AWS_BROKEN_ITEMS[check][1](aws_deployment, kinesis_client, dynamodb_client)
        monkeypatch.setenv("KD_PREFLIGHT_STREAM", settings.stream_name)
        monkeypatch.setenv("KD_PREFLIGHT_CHECKPOINTS", settings.checkpoint_table)
        monkeypatch.setenv("KD_PREFLIGHT_TABLE", f"{DB}.events")
        monkeypatch.setenv("KD_PREFLIGHT_METADATA", "_kinesis_shard,_kinesis_sequence")
        path = dag_file_in_a_bundle(monkeypatch, tmp_path / "bundle", "kd-preflight", "kd_preflight.py", DAG_FILE)
        return {"path": path, "settings": settings}

    return break_item


@pytest.mark.parametrize(("half", "check"), FATAL_ITEMS)
def test_each_fatal_item_fails_the_task_naming_only_that_item(
    deployment: Any, failures: list[BaseException], half: str, check: str
) -> None:
    """With one fatal item broken the task fails before planning, naming it."""
    dag_run = run(deployment(half, check), sealed_interval_end())

    assert "failed" in str(dag_run.state).lower() and len(failures) == 1
    assert flagged_checks(str(failures[0]).split(":", 1)[1]) == [f"[FATAL] {check}"], str(failures[0])


@pytest.mark.parametrize(("half", "check"), WARNING_ITEMS)
def test_each_warning_item_is_reported_by_the_task_and_does_not_stop_its_preflight(
    deployment: Any, monkeypatch: pytest.MonkeyPatch, dynamodb_client: Any, half: str, check: str
) -> None:
    """With one item broken that does not break exactly-once, the task's preflight names that
    item alone and lets the run go on: the settings are recorded as checked. (The run itself may
    then fail for the same cause, e.g. without the load privilege; that is the load's business.)"""
    from airflow_provider_kinesis_doris.operators import loader_preflight

    reports: list[Any] = []
    report_of = loader_preflight.preflight_report

    def recording(*args: Any) -> Any:
        reports.append(report_of(*args))
        return reports[-1]

    monkeypatch.setattr(loader_preflight, "preflight_report", recording)
    dag = deployment(half, check)

    run(dag, sealed_interval_end())

    [report] = reports
    assert flagged_checks("\n".join(item.line() for item in report.items)) == [f"[wrong] {check}"], report.text()
    assert [item.check for item in report.warnings if item.status.value == "wrong"] == [check]
    settings = dag["settings"]
    assert passed_digest(dynamodb_client, f"{settings.stream_name}.{DB}.events", settings.checkpoint_table)


def test_a_be_the_client_may_not_follow_is_a_logged_warning_then_the_load_fails_at_its_redirect(
    stack: dict[str, Any], failures: list[BaseException], kinesis_client: Any, doris_server: Any,
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """Not fatal: the task goes on, and its load is refused before a row reaches Doris, as the
    warning said it would be."""
    create_stream(kinesis_client, stack["stream"], 1)
    # Put early in an interval: an interval's end passing between the put and the reading of the
    # clock made the run load the quiet interval after the events', green (a fresh clone, loaded).
    wait_past((now_ms() // (INTERVAL_S * 1000) + 1) * INTERVAL_S * 1000)
    put_events(kinesis_client, stack["stream"], [event(i) for i in range(3)])
    end_ms = (now_ms() // (INTERVAL_S * 1000) + 1) * INTERVAL_S * 1000  # the interval holding the events
    wait_past(end_ms)
    doris_server.advertise_be_host("be-1.doris.invalid")
    try:
        with caplog.at_level(logging.WARNING):
            dag_run = run(stack, datetime.fromtimestamp(end_ms / 1000, tz=timezone.utc))
    finally:
        doris_server.advertise_be_host("127.0.0.1")  # the stand-in is the session's
    # Airflow 2 logs through logging (caplog); Airflow 3's structlog writes to the console.
    log = caplog.text + capfd.readouterr().out
    assert "Preflight: [wrong] BE redirects: the FE redirects Stream Loads to the BEs ['be-1.doris.invalid:" in log
    assert "failed" in str(dag_run.state).lower() and len(failures) == 1
    assert "be-1.doris.invalid" in str(failures[0]) and "not allowed to receive credentials" in str(failures[0])
    assert doris_server.execute_sql(DB, f"SELECT COUNT(*) FROM {stack['table']}") == [(0,)]


def test_a_label_window_the_loader_may_not_read_is_in_the_tasks_xcom(
    stack: dict[str, Any], kinesis_client: Any, doris_server: Any
) -> None:
    """The least-privilege loader (LOAD and CREATE, no ADMIN): the label window is not verifiable,
    a warning in the task log only; the run that made the preflight now returns it too."""
    create_stream(kinesis_client, stack["stream"], 1)
    doris_server.set_grants({DB: ["Load_priv", "Create_priv", "Select_priv"]})
    try:
        dag_run = run(stack, sealed_interval_end())
    finally:
        doris_server.set_grants({"*": ["Node_priv", "Admin_priv"]})  # the stand-in is shared by the session's tests

    assert "success" in str(dag_run.state).lower(), dag_run.state
    (load,) = [ti for ti in dag_run.get_task_instances() if ti.task_id == "load"]
    returned = load.xcom_pull(task_ids="load")
    assert any(line.startswith("[not verifiable] label window:") for line in returned["preflight"]), returned
