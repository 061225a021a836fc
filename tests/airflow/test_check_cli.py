"""``python -m airflow_provider_kinesis_doris check <dag_id> <task_id>`` against the Doris stand-in,
kinesis-mock and moto: the DAG comes from the DagBag, the task checks both halves with its own
connections, and the exit code says whether an item is fatal.

The first test runs it in a subprocess, as a user does; the others call its ``main`` in this
process with the same arguments and environment (a subprocess costs an Airflow start-up, ~25 s on
2 busy cores, and this file ran 16 of them). Runs under Airflow 3.x and 2.11 (the floors).
"""

from __future__ import annotations

import io
import itertools
import json
import os
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_kinesis_doris.__main__ import main
from kinesis_doris_devstack.scenario import create_stream, event, events_table_ddl, put_records
from tests.conftest import REPO_ROOT, events_table_on_local_stack, use_local_stack_connections
from tests.preflight_items import AWS_BROKEN_ITEMS, DORIS_BROKEN_ITEMS, flagged_checks

pytestmark = [pytest.mark.airflow, pytest.mark.integration]

DB = "check_cli"
_names = itertools.count()

DAG_FILE = """
import os
from datetime import datetime, timedelta, timezone

from airflow.providers.common.compat.sdk import DAG

from airflow_provider_kinesis_doris import InProcessRunner, MappingConfig, StateConfig
from airflow_provider_kinesis_doris.operators.kinesis_to_doris import KinesisToDorisOperator

try:
    from airflow.sdk import CronDataIntervalTimetable, CronTriggerTimetable, DeltaDataIntervalTimetable
except ImportError:  # Airflow 2.11
    from airflow.timetables.interval import CronDataIntervalTimetable, DeltaDataIntervalTimetable
    from airflow.timetables.trigger import CronTriggerTimetable

SCHEDULES = {
    "none": lambda: None,
    "cron": lambda: CronDataIntervalTimetable("*/10 * * * *", timezone="UTC"),
    "delta": lambda: DeltaDataIntervalTimetable(timedelta(minutes=10)),
    "cron trigger": lambda: CronTriggerTimetable("*/10 * * * *", timezone="UTC", interval=timedelta(minutes=10)),
}

with DAG(dag_id="kd_check", schedule=SCHEDULES[os.environ.get("KD_CHECK_SCHEDULE", "none")](),
         start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)):
    KinesisToDorisOperator(
        task_id="load",
        stream_name=os.environ["KD_CHECK_STREAM"],
        doris_table=os.environ["KD_CHECK_TABLE"],
        checkpoint_table=os.environ["KD_CHECK_CHECKPOINTS"],
        mapping=MappingConfig(metadata_columns=os.environ["KD_CHECK_METADATA"].split(","),
                              unmatched_fields=os.environ.get("KD_CHECK_UNMATCHED", "report")),
        runner=InProcessRunner(),
        state=StateConfig(require_label_window_check=os.environ.get("KD_CHECK_STRICT") == "1"),
    )
"""


@pytest.fixture
def deployment(airflow_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kinesis_client: Any,
               kinesis_mock_endpoint: str, dynamodb_endpoint: str, doris_server: Any) -> Path:  # fmt: skip
    """A stream, a Doris table with the shard and sequence columns, and a DAG file loading one
    into the other; the connections and names in the environment the subprocess inherits."""
    n = f"{next(_names)}-{datetime.now():%H%M%S%f}"
    stream, table = f"check-cli-{n}", f"events_{n.replace('-', '_')}"
    create_stream(kinesis_client, stream, 1)
    events_table_on_local_stack(monkeypatch, kinesis_mock_endpoint, dynamodb_endpoint, doris_server, DB, table)
    monkeypatch.setenv("KD_CHECK_STREAM", stream)
    monkeypatch.setenv("KD_CHECK_TABLE", f"{DB}.{table}")
    monkeypatch.setenv("KD_CHECK_METADATA", "_kinesis_shard,_kinesis_sequence")
    monkeypatch.setenv("KD_CHECK_CHECKPOINTS", "check_cli_checkpoints")
    path = tmp_path / "kd_check.py"
    path.write_text(DAG_FILE)
    return path


def check_as_a_user_runs_it(dag_file: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "airflow_provider_kinesis_doris", "check", *arguments, "--subdir", str(dag_file)],
        capture_output=True, text=True, timeout=300, cwd=REPO_ROOT, env=dict(os.environ),
    )  # fmt: skip


def check(dag_file: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    """The same command through ``main`` in this process: its exit code and what it printed."""
    argv = ["check", *arguments, "--subdir", str(dag_file)]
    stdout, stderr = io.StringIO(), io.StringIO()
    with redirect_stdout(stdout), redirect_stderr(stderr):
        code = main(argv)
    return subprocess.CompletedProcess(argv, code, stdout.getvalue(), stderr.getvalue())


def test_a_deployment_that_passes_exits_0_and_lists_both_halves(deployment: Path) -> None:
    ran = check_as_a_user_runs_it(deployment, "kd_check", "load")

    assert ran.returncode == 0, ran.stdout + ran.stderr[-3000:]
    assert "kd_check.load: Doris and AWS preflight at 20" in ran.stdout
    assert "0 fatal" in ran.stdout and "[FATAL]" not in ran.stdout
    assert "[ok] table columns:" in ran.stdout and "[ok] checkpoint table:" in ran.stdout
    assert "[ok] stream retention: retention 24 h" in ran.stdout
    assert "[wrong] checkpoint table recovery: the first run creates check_cli_checkpoints without" in ran.stdout
    assert "[not verifiable] record fields: no record arrived in the last hour on stream check-cli-" in ran.stdout
    assert ran.stdout.rstrip().endswith("kd_check.load passes")


@pytest.mark.parametrize("schedule", ["cron", "delta", "cron trigger"])
def test_the_check_renders_every_timetable_of_the_readme(
    deployment: Path, monkeypatch: pytest.MonkeyPatch, schedule: str
) -> None:
    """Before, the check crashed on cron timetables (``AttributeError: 'datetime.datetime' object
    has no attribute 'in_timezone'``, exit 2): they infer a manual run's interval with pendulum."""
    monkeypatch.setenv("KD_CHECK_SCHEDULE", schedule)

    ran = check(deployment, "kd_check", "load", "--logical-date", "2026-03-01T00:10:00+00:00")

    assert ran.returncode == 0, ran.stdout + ran.stderr[-3000:]
    assert ran.stdout.rstrip().endswith("kd_check.load passes")


def test_a_metadata_column_the_table_lacks_exits_1_naming_it_and_the_fix(
    deployment: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KD_CHECK_METADATA", "_kinesis_shard,_kinesis_partition_key")

    ran = check(deployment, "kd_check", "load")

    assert ran.returncode == 1, ran.stdout + ran.stderr[-3000:]
    assert "lacks the metadata columns ['_kinesis_partition_key']" in ran.stdout
    assert "[FATAL] table columns:" in ran.stdout and "Fix: ALTER TABLE" in ran.stdout
    assert "kd_check.load fails: the task would fail before planning anything" in ran.stdout


RENAMED_DDL = """CREATE TABLE `{table}` (
    event_id BIGINT NOT NULL,
    user_id VARCHAR(32) NULL,
    amount INT NULL,
    event_time BIGINT NULL,
    _kinesis_shard VARCHAR(64) NULL,
    _kinesis_sequence VARCHAR(80) NULL
) DUPLICATE KEY(event_id)
DISTRIBUTED BY HASH(event_id) BUCKETS 1
PROPERTIES ("replication_num" = "1")"""


def put_events(kinesis_client: Any, **fields: Any) -> None:
    """Five events of the stream ``deployment`` made, each with ``fields`` besides its own."""
    stream = os.environ["KD_CHECK_STREAM"]
    put_records(kinesis_client, stream, [(f"k{i}", json.dumps({**event(i), **fields}).encode()) for i in range(5)])


def checkpoint_items(dynamodb_client: Any) -> int:
    """Items of the DAG's checkpoint table, 0 when no run created it."""
    try:
        return int(dynamodb_client.scan(TableName=os.environ["KD_CHECK_CHECKPOINTS"], Select="COUNT")["Count"])
    except dynamodb_client.exceptions.ResourceNotFoundException:
        return 0


@pytest.mark.parametrize(("unmatched_fields", "exit_code", "level"), [("report", 0, "wrong"), ("fail", 1, "FATAL")])
def test_a_field_the_table_has_no_column_for_is_named_before_anything_loads(
    deployment: Path, doris_server: Any, kinesis_client: Any, dynamodb_client: Any, monkeypatch: pytest.MonkeyPatch,
    unmatched_fields: str, exit_code: int, level: str,
) -> None:  # fmt: skip
    """The records carry ``ts`` where the table has ``event_time``: a run loads the column NULL
    (or, with ``unmatched_fields="fail"``, refuses the chunk) and said so only after it ran; the
    check said nothing of the records."""
    table = f"{os.environ['KD_CHECK_TABLE'].partition('.')[2]}_renamed"
    doris_server.execute_sql(DB, RENAMED_DDL.format(table=table))
    monkeypatch.setenv("KD_CHECK_TABLE", f"{DB}.{table}")
    monkeypatch.setenv("KD_CHECK_CHECKPOINTS", f"check_cli_{table}")
    monkeypatch.setenv("KD_CHECK_UNMATCHED", unmatched_fields)
    put_events(kinesis_client, ts=1767225600000)

    ran = check(deployment, "kd_check", "load")

    assert ran.returncode == exit_code, ran.stdout + ran.stderr[-3000:]
    fields = next(line for line in ran.stdout.splitlines() if line.startswith(f"[{level}] record fields:"))
    assert "5 records of the last hour (open shards read: 1)" in fields
    assert "no column of the table takes (Doris drops them): ['ts']" in fields
    assert "columns no record filled: ['event_time']" in fields
    assert "Fix: Rename the column or the field (a transform can), or add the column" in fields
    if unmatched_fields == "fail":
        assert "kd_check.load fails: the task would send nothing of a chunk holding such records" in ran.stdout
    assert doris_server.execute_sql(DB, f"SELECT COUNT(*) FROM {table}") == [(0,)]
    assert checkpoint_items(dynamodb_client) == 0


def test_records_the_table_takes_whole_pass_the_fields_item(
    deployment: Path, kinesis_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KD_CHECK_METADATA", "_kinesis_shard,_kinesis_sequence,_kinesis_arrival")
    monkeypatch.setenv("KD_CHECK_UNMATCHED", "fail")
    put_events(kinesis_client)

    ran = check(deployment, "kd_check", "load")

    assert ran.returncode == 0, ran.stdout + ran.stderr[-3000:]
    assert "[ok] record fields: 5 records of the last hour (open shards read: 1)" in ran.stdout
    assert "fill every column and hold no member without one" in ran.stdout
    assert not [flagged for flagged in flagged_checks(ran.stdout) if flagged.endswith("record fields")], ran.stdout


def test_an_unknown_task_exits_2_naming_the_tasks_there_are(deployment: Path) -> None:
    ran = check(deployment, "kd_check", "nope")

    assert ran.returncode == 2
    assert "DAG 'kd_check' has no task 'nope' (it has ['load'])" in ran.stderr


@pytest.mark.parametrize(
    ("check_name", "config", "broken", "kept"),
    [
        ("label window", "fe", ("streaming_label_keep_max_second", 600), ("streaming_label_keep_max_second", 43200)),
        ("group commit", "be", ("wait_internal_group_commit_finish", True), ("wait_internal_group_commit_finish", False)),
    ],
)
def test_a_fatal_doris_setting_exits_1_naming_the_item(
    deployment: Path, doris_server: Any, check_name: str, config: str, broken: tuple[str, Any], kept: tuple[str, Any]
) -> None:
    set_config = doris_server.set_fe_config if config == "fe" else doris_server.set_be_config
    set_config(*broken)
    try:
        ran = check(deployment, "kd_check", "load")
    finally:
        set_config(*kept)  # the stand-in is shared by the session's tests

    assert ran.returncode == 1, ran.stdout + ran.stderr[-3000:]
    assert f"[FATAL] {check_name}:" in ran.stdout
    assert "kd_check.load fails: the task would fail before planning anything" in ran.stdout


def test_a_label_window_a_least_privilege_user_cannot_read_exits_3_or_with_the_strict_setting_1(
    deployment: Path, doris_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loader docs/production.md recommends holds LOAD and CREATE only: the FE configs need
    ADMIN, so the label window is not verifiable. It exited 0, and the task ran green on a Doris
    with a 60 s window."""
    doris_server.set_grants({DB: ["Load_priv", "Create_priv", "Select_priv"]})
    try:
        lenient = check(deployment, "kd_check", "load")
        monkeypatch.setenv("KD_CHECK_STRICT", "1")
        strict = check(deployment, "kd_check", "load")
    finally:
        doris_server.set_grants({"*": ["Node_priv", "Admin_priv"]})  # the stand-in is shared by the session's tests

    assert lenient.returncode == 3, lenient.stdout + lenient.stderr[-3000:]
    assert "[not verifiable] label window:" in lenient.stdout
    assert "passes, but Doris's label window could not be read: only the run-time canary checks it" in lenient.stdout
    assert strict.returncode == 1, strict.stdout + strict.stderr[-3000:]
    assert "[FATAL] label window:" in strict.stdout and "require_label_window_check is set" in strict.stdout


def test_a_stream_that_does_not_exist_exits_1(deployment: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KD_CHECK_STREAM", "check-cli-no-such-stream")

    ran = check(deployment, "kd_check", "load")

    assert ran.returncode == 1, ran.stdout + ran.stderr[-3000:]
    assert "[FATAL] stream retention: stream check-cli-no-such-stream does not exist." in ran.stdout


@pytest.fixture
def own_deployment(airflow_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, aws_deployment: Any,
                   kinesis_mock_endpoint: str, dynamodb_endpoint: str, own_doris_server: Any) -> Path:  # fmt: skip
    """The DAG file of ``deployment`` on a deployment every item passes and the test may break:
    a stand-in of its own, and a checkpoint table with point-in-time recovery."""
    own_doris_server.execute_sql("", f"CREATE DATABASE {DB}")
    own_doris_server.execute_sql(DB, events_table_ddl("events"))
    use_local_stack_connections(monkeypatch, kinesis_mock_endpoint, dynamodb_endpoint, own_doris_server, DB)
    monkeypatch.setenv("KD_CHECK_STREAM", aws_deployment.stream_name)
    monkeypatch.setenv("KD_CHECK_TABLE", f"{DB}.events")
    monkeypatch.setenv("KD_CHECK_METADATA", "_kinesis_shard,_kinesis_sequence")
    monkeypatch.setenv("KD_CHECK_CHECKPOINTS", aws_deployment.checkpoint_table)
    path = tmp_path / "kd_check.py"
    path.write_text(DAG_FILE)
    return path


def check_here(dag_file: Path) -> tuple[int, str]:
    ran = check(dag_file, "kd_check", "load")
    return ran.returncode, ran.stdout + ran.stderr


def assert_passes(code: int, output: str) -> None:
    assert code == 0 and not flagged_checks(output), output
    assert "\nkd_check.load passes\n" in output, output  # the verdict, stderr (warnings) after it


@pytest.mark.parametrize("check_name", sorted(DORIS_BROKEN_ITEMS))
def test_each_doris_item_passes_then_fails_as_its_deployment_breaks(
    own_deployment: Path, own_doris_server: Any, check_name: str
) -> None:
    fatal, breaks = DORIS_BROKEN_ITEMS[check_name]
    assert_passes(*check_here(own_deployment))

    breaks(own_doris_server, DB, "events")
    code, output = check_here(own_deployment)

    assert code == (1 if fatal else 0), output
    assert flagged_checks(output) == [f"[{'FATAL' if fatal else 'wrong'}] {check_name}"], output


@pytest.mark.parametrize("check_name", sorted(AWS_BROKEN_ITEMS))
def test_each_aws_item_passes_then_fails_as_its_deployment_breaks(
    own_deployment: Path, aws_deployment: Any, kinesis_client: Any, dynamodb_client: Any,
    monkeypatch: pytest.MonkeyPatch, check_name: str,
) -> None:  # fmt: skip
    fatal, breaks = AWS_BROKEN_ITEMS[check_name]
    assert_passes(*check_here(own_deployment))

    broken = breaks(aws_deployment, kinesis_client, dynamodb_client)
    monkeypatch.setenv("KD_CHECK_STREAM", broken.stream_name)
    monkeypatch.setenv("KD_CHECK_CHECKPOINTS", broken.checkpoint_table)
    code, output = check_here(own_deployment)

    assert code == (1 if fatal else 0), output
    assert flagged_checks(output) == [f"[{'FATAL' if fatal else 'wrong'}] {check_name}"], output


TEMPLATED_DAG_FILE = DAG_FILE.replace(
    'stream_name=os.environ["KD_CHECK_STREAM"]', 'stream_name="{{ var.value.kd_check_stream }}"'
).replace('doris_table=os.environ["KD_CHECK_TABLE"]', 'doris_table="' + DB + '.events_{{ ds_nodash }}"')


@pytest.mark.parametrize("logical_date", ["2026-03-04T06:00:00+00:00", None])
def test_templated_arguments_are_checked_as_the_run_at_the_logical_date_renders_them(
    own_deployment: Path, own_doris_server: Any, aws_deployment: Any, monkeypatch: pytest.MonkeyPatch,
    logical_date: str | None,
) -> None:  # fmt: skip
    day = (datetime.fromisoformat(logical_date) if logical_date else datetime.now(timezone.utc)).strftime("%Y%m%d")
    own_doris_server.execute_sql(DB, events_table_ddl(f"events_{day}"))
    monkeypatch.setenv("AIRFLOW_VAR_KD_CHECK_STREAM", aws_deployment.stream_name)
    own_deployment.write_text(TEMPLATED_DAG_FILE)
    dated = ["--logical-date", logical_date] if logical_date else []

    ran = check(own_deployment, "kd_check", "load", *dated)
    output = ran.stdout + ran.stderr

    assert_passes(ran.returncode, output)
    assert f"[ok] table columns: {DB}.events_{day} has every metadata column" in output
    assert "[ok] stream retention: retention 24 h" in output
