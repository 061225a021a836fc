"""The audit operator in a real Airflow run (``dag.test()``) downstream of the loader: it passes
on what the loader loaded, pushes its summary, and fails the task naming a row loaded twice.

Runs under Airflow 3.x (``.venv``) and 2.11 (``.venv-af2``).
"""

from __future__ import annotations

import importlib.util
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_kinesis_doris.core.doris.client import DorisStreamLoadClient
from airflow_provider_kinesis_doris.core.doris.connection import DorisConnectionConfig
from airflow_provider_kinesis_doris.core.doris.options import StreamLoadOptions
from kinesis_doris_devstack.scenario import create_stream, event, put_events, put_records, wait_past
from tests.airflow.test_operator_messages import next_interval_end, run
from tests.conftest import DORIS_PASSWORD, DORIS_USER, dag_file_in_a_bundle, events_table_on_local_stack

pytestmark = [pytest.mark.airflow, pytest.mark.integration]

DB = "audited"
INTERVAL_S = 5

DAG_FILE = '''
import os
from datetime import datetime, timedelta, timezone

from airflow.providers.common.compat.sdk import DAG

from airflow_provider_kinesis_doris.operators.audit import KinesisDorisAuditOperator
from airflow_provider_kinesis_doris import InProcessRunner, MappingConfig, ReadConfig
from airflow_provider_kinesis_doris.operators.kinesis_to_doris import KinesisToDorisOperator

try:
    from airflow.sdk import DeltaDataIntervalTimetable
except ImportError:
    from airflow.timetables.interval import DeltaDataIntervalTimetable

PIPELINE = dict(stream_name=os.environ["KD_AUDIT_STREAM"], doris_table=os.environ["KD_AUDIT_TABLE"],
                checkpoint_table="audit_checkpoints")

with DAG(dag_id="kd_audited", schedule=DeltaDataIntervalTimetable(timedelta(seconds=5)),
         start_date=datetime(2026, 1, 1, tzinfo=timezone.utc), catchup=False) as audited:
    load = KinesisToDorisOperator(
        task_id="load", read=ReadConfig(seal_grace=timedelta(0)), runner=InProcessRunner(),
        mapping=MappingConfig(required_fields=["event_id"],
                              metadata_columns=["_kinesis_shard", "_kinesis_sequence", "_kinesis_arrival"],
                              dead_letter_table_properties={"replication_num": "1"}),
        **PIPELINE,
    )
    load >> KinesisDorisAuditOperator(task_id="audit", **PIPELINE)
'''


@pytest.fixture
def audited(airflow_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kinesis_client: Any,
            kinesis_mock_endpoint: str, dynamodb_endpoint: str, doris_server: Any) -> dict[str, Any]:  # fmt: skip
    """The DAG (loader, then audit) on a new stream and table; what the audit returned or raised."""
    from airflow_provider_kinesis_doris.operators.audit import KinesisDorisAuditOperator

    stamp = datetime.now().strftime("%H%M%S%f")
    stream, table = f"audited-{stamp}", f"events_{stamp}"
    create_stream(kinesis_client, stream, 2)
    events_table_on_local_stack(monkeypatch, kinesis_mock_endpoint, dynamodb_endpoint, doris_server, DB, table)
    monkeypatch.setenv("KD_AUDIT_STREAM", stream)
    monkeypatch.setenv("KD_AUDIT_TABLE", f"{DB}.{table}")
    outcomes: list[Any] = []
    execute = KinesisDorisAuditOperator.execute

    def recording(self: Any, context: Any) -> Any:
        try:
            outcomes.append(execute(self, context))
        except BaseException as exc:
            outcomes.append(exc)
            raise
        return outcomes[-1]

    monkeypatch.setattr(KinesisDorisAuditOperator, "execute", recording)
    path = dag_file_in_a_bundle(monkeypatch, tmp_path / "bundle", "kd-audited", "kd_audited.py", DAG_FILE)
    spec = importlib.util.spec_from_file_location(f"kd_audited_{stamp}", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return {"dag": module.audited, "stream": stream, "table": table, "outcomes": outcomes}


def test_the_audit_passes_after_the_loader_then_names_a_row_loaded_twice_and_a_record_lost(
    audited: dict[str, Any], kinesis_client: Any, doris_server: Any
) -> None:
    # A whole interval ahead: put near its end, the last record's arrival stamp (kinesis-mock's
    # clock, on a loaded machine later than ours) fell into the next interval.
    wait_past(next_interval_end())
    end_ms = next_interval_end()
    put_events(kinesis_client, audited["stream"], [event(i) for i in range(12)])
    put_records(kinesis_client, audited["stream"], [("k", b"not json")])
    wait_past(end_ms)
    logical_date = datetime.fromtimestamp(end_ms / 1000, tz=timezone.utc)

    assert "success" in str(run(audited["dag"], logical_date).state).lower()
    (passed,) = audited["outcomes"]
    assert passed["ok"] and passed["rows_found"] == passed["rows_held"] == 12 and passed["dead_letters_held"] == 1

    # Event 4 loaded twice, and another record of its shard gone: the shard's row count agrees.
    columns = ("event_id", "user_id", "amount", "_kinesis_shard", "_kinesis_sequence", "_kinesis_arrival")
    rows = [dict(zip(columns, row)) for row in doris_server.execute_sql(DB, f"SELECT {', '.join(columns)} FROM {audited['table']}")]
    (copy,) = [row for row in rows if row["event_id"] == 4]
    gone = next(row for row in rows if row["_kinesis_shard"] == copy["_kinesis_shard"] and row["event_id"] != 4)
    doris_server.execute_sql(DB, f"TRUNCATE TABLE {audited['table']}")
    config = DorisConnectionConfig(host="127.0.0.1", port=doris_server.fe_port, user=DORIS_USER, password=DORIS_PASSWORD)
    body = b"\n".join(json.dumps(row).encode() for row in [*(row for row in rows if row is not gone), copy])
    with DorisStreamLoadClient(config) as client:
        client.load_idempotently(DB, audited["table"], "changed-by-hand", body, StreamLoadOptions.json_lines())

    assert "failed" in str(run(audited["dag"], logical_date).state).lower()
    failure = audited["outcomes"][-1]
    assert type(failure).__name__ == "AirflowException", repr(failure)
    assert f"shard {copy['_kinesis_shard']} sequence {copy['_kinesis_sequence']} is there 2 times" in str(failure)
    # The lost record by its position, read again from Kinesis through the task's AWS connection.
    assert f"records loaded are missing from the table: {gone['_kinesis_sequence']}" in str(failure)


def test_the_audit_covers_the_intervals_its_runs_loader_caught_up(
    audited: dict[str, Any], kinesis_client: Any, doris_server: Any
) -> None:
    """Airflow never runs the middle interval; the next run's loader loads it first. The audit of
    that run covered its own interval only, so the caught-up one went unaudited."""
    wait_past(next_interval_end())
    bounds = [next_interval_end() + i * 5_000 for i in range(3)]
    for i, end_ms in enumerate(bounds):
        put_events(kinesis_client, audited["stream"], [event(i * 100 + j) for j in range(4)])
        wait_past(end_ms)
    for end_ms in (bounds[0], bounds[2]):  # the run of the middle interval never happens
        assert "success" in str(run(audited["dag"], datetime.fromtimestamp(end_ms / 1000, tz=timezone.utc)).state).lower()

    first, last = audited["outcomes"]
    assert first["ok"] and first["rows_found"] == 4
    assert last["ok"] and last["span"].startswith(f"[{datetime.fromtimestamp(bounds[0] / 1000, tz=timezone.utc):%Y-%m-%dT%H:%M:%S}")
    assert last["rows_found"] == last["rows_held"] == 8, "its own interval and the one its loader caught up"


def test_the_loaders_xcom_names_a_field_the_table_has_no_column_for(audited: dict[str, Any], kinesis_client: Any) -> None:
    """``amt`` for ``amount``: Doris drops the member, every row's amount is NULL; the run says so."""
    from kinesis_doris_devstack.scenario import put_records

    wait_past(next_interval_end())
    end_ms = next_interval_end()
    put_records(kinesis_client, audited["stream"], [("k", json.dumps({"event_id": 1, "user_id": "u", "amt": 5}).encode())])
    wait_past(end_ms)

    dag_run = run(audited["dag"], datetime.fromtimestamp(end_ms / 1000, tz=timezone.utc))

    (load,) = [ti for ti in dag_run.get_task_instances() if ti.task_id == "load"]
    returned = load.xcom_pull(task_ids="load")
    assert returned["unmatched_fields"] == {"members_without_column": ["amt"], "columns_without_member": ["amount"]}
