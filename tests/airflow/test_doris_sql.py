"""SQL on Doris through common.sql: ``DorisHook`` as a ``DbApiHook`` over the FE's MySQL protocol
port, against the stand-in's MySQL port with real PyMySQL; and an Airflow run (``dag.test()``) of
``SQLExecuteQueryOperator`` and the check operators on ``doris_default``.

Runs under Airflow 3.x (``.venv``) and 2.11 (``.venv-af2``).
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pymysql
import pytest

from airflow_provider_kinesis_doris.core.doris.options import StreamLoadOptions
from tests.conftest import DORIS_PASSWORD, dag_file_in_a_bundle, use_local_stack_connections

pytestmark = [pytest.mark.airflow, pytest.mark.integration]

DB = "kd_sql"
UNREACHABLE = "http://127.0.0.1:9"  # Kinesis and DynamoDB: these tests never call them
_names = itertools.count()

DAG_FILE = '''
import os
from datetime import datetime, timezone

from airflow.providers.common.compat.sdk import DAG
from airflow.providers.common.sql.operators.sql import (
    SQLCheckOperator,
    SQLExecuteQueryOperator,
    SQLValueCheckOperator,
)

TABLE = os.environ.get("KD_SQL_TABLE", "good")

with DAG(dag_id="kd_sql_checks", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         catchup=False) as dag:
    rows = SQLExecuteQueryOperator(task_id="rows", conn_id="doris_default",
                                   sql=f"SELECT id, v FROM {TABLE} ORDER BY id")
    no_missing_values = SQLCheckOperator(
        task_id="no_missing_values", conn_id="doris_default",
        sql=f"SELECT COUNT(*) > 0, SUM(CASE WHEN v IS NULL THEN 1 ELSE 0 END) = 0 FROM {TABLE}",
    )
    three_rows = SQLValueCheckOperator(task_id="three_rows", conn_id="doris_default",
                                       sql=f"SELECT COUNT(*) FROM {TABLE}", pass_value=3)
    rows >> no_missing_values >> three_rows
'''


@pytest.fixture(scope="module")
def tables(doris_server: Any) -> Any:
    """``good`` (3 complete rows), ``bad`` (3 rows, one without ``v``) and ``big`` (1,500 rows),
    loaded through Stream Load."""
    from airflow_provider_kinesis_doris.core.doris.client import DorisStreamLoadClient
    from airflow_provider_kinesis_doris.core.doris.connection import DorisConnectionConfig
    from tests.conftest import DORIS_USER

    doris_server.execute_sql("", f"CREATE DATABASE IF NOT EXISTS {DB}")
    client = DorisStreamLoadClient(DorisConnectionConfig(host="127.0.0.1", port=doris_server.fe_port,
                                                         user=DORIS_USER, password=DORIS_PASSWORD))
    contents = {
        "good": [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}, {"id": 3, "v": "c"}],
        "bad": [{"id": 1, "v": "a"}, {"id": 2, "v": None}, {"id": 3, "v": "c"}],
        "big": [{"id": i, "v": f"v{i}"} for i in range(1500)],
    }
    for table, rows in contents.items():
        doris_server.execute_sql(DB, f"CREATE TABLE IF NOT EXISTS {table} (id INT NOT NULL, v VARCHAR(8)) "
                                     "DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 1")
        body = "".join(json.dumps(row) + "\n" for row in rows).encode()
        client.stream_load(DB, table, body, label=f"kd_sql_{table}", options=StreamLoadOptions.json_lines())
    return doris_server


@pytest.fixture
def doris_default(tables: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``doris_default`` on the stand-in, as the local stack's connections set it."""
    use_local_stack_connections(monkeypatch, UNREACHABLE, UNREACHABLE, tables, DB)
    return tables


def set_password(monkeypatch: pytest.MonkeyPatch, password: str) -> None:
    conn = json.loads(os.environ["AIRFLOW_CONN_DORIS_DEFAULT"])
    monkeypatch.setenv("AIRFLOW_CONN_DORIS_DEFAULT", json.dumps({**conn, "password": password}))


def make_hook(**kwargs: Any):  # type: ignore[no-untyped-def]
    from airflow_provider_kinesis_doris.hooks.doris import DorisHook

    return DorisHook(**kwargs)


# --- the hook ------------------------------------------------------------------------------------


def test_the_hook_is_a_dbapi_hook_on_the_query_port(doris_default: Any) -> None:
    from airflow.providers.common.compat.sdk import BaseHook
    from airflow.providers.common.sql.hooks.sql import DbApiHook

    hook = BaseHook.get_connection("doris_default").get_hook()
    assert isinstance(hook, DbApiHook) and type(hook).__name__ == "DorisHook"
    assert hook.query_port == doris_default.query_port != doris_default.fe_port
    assert (hook.placeholder, hook.supports_autocommit, hook.dialect_name) == ("%s", True, "mysql")
    with hook.get_conn() as connection:
        assert isinstance(connection, pymysql.connections.Connection)
        assert (connection.port, connection.db) == (doris_default.query_port, DB.encode())


def test_get_records_get_first_and_run_read_through_mysql(doris_default: Any) -> None:
    from airflow.providers.common.sql.hooks.handlers import fetch_all_handler

    hook = make_hook()
    assert [tuple(row) for row in hook.get_records("SELECT id, v FROM good ORDER BY id")] == [
        (1, "a"), (2, "b"), (3, "c")]  # fmt: skip
    assert tuple(hook.get_first("SELECT COUNT(*), MAX(v) FROM good")) == (3, "c")
    assert tuple(hook.get_first("SELECT v FROM good WHERE id = %s", parameters=(2,))) == ("b",)
    results = hook.run(["SELECT COUNT(*) FROM good", "SELECT COUNT(*) FROM bad WHERE v IS NULL"],
                       handler=fetch_all_handler)
    assert [[tuple(row) for row in result] for result in results] == [[(3,)], [(1,)]]
    assert [column[0] for column in hook.last_description] == ["COUNT(*)"]


def test_mysql_returns_every_row_where_the_http_sql_path_stops_at_1000(doris_default: Any) -> None:
    hook = make_hook()
    rows = hook.get_records("SELECT id FROM big ORDER BY id")
    assert [row[0] for row in rows] == list(range(1500))
    assert len(hook.run_sql("SELECT id FROM big").rows) == 1000  # the loader's HTTP path


def test_statements_run_over_mysql_and_http_see_one_database(doris_default: Any) -> None:
    hook = make_hook()
    hook.run("CREATE TABLE made_over_mysql (id INT) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 1")
    try:
        assert ("made_over_mysql",) in {tuple(row) for row in hook.run_sql("SHOW TABLES").rows}
        assert ("made_over_mysql",) in {tuple(row) for row in hook.get_records("SHOW TABLES")}
    finally:
        hook.run("DROP TABLE made_over_mysql")
    assert ("made_over_mysql",) not in {tuple(row) for row in hook.get_records("SHOW TABLES")}


def test_a_schema_hook_parameter_picks_another_database(doris_default: Any) -> None:
    doris_default.execute_sql("", "CREATE DATABASE IF NOT EXISTS kd_sql_other")
    hook = make_hook(schema="kd_sql_other")
    assert tuple(hook.get_first("SELECT DATABASE()")) == ("kd_sql_other",)
    assert hook.get_records("SHOW TABLES") in ((), [])


def test_a_wrong_password_fails_naming_the_connection_not_the_password(
    doris_default: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = "wrong-" + DORIS_PASSWORD
    set_password(monkeypatch, wrong)
    with pytest.raises(pymysql.err.OperationalError) as denied:
        make_hook().get_records("SELECT 1")
    code, message = denied.value.args
    assert code == 1045 and "Access denied" in message
    assert f"Doris connection 'doris_default', MySQL protocol at 127.0.0.1:{doris_default.query_port}" in message
    assert wrong not in str(denied.value) and DORIS_PASSWORD not in str(denied.value)


def test_a_bad_query_port_is_a_configuration_error_naming_the_connection(
    doris_default: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_kinesis_doris.core.errors import ConfigurationError

    conn = json.loads(os.environ["AIRFLOW_CONN_DORIS_DEFAULT"])
    monkeypatch.setenv("AIRFLOW_CONN_DORIS_DEFAULT", json.dumps({**conn, "extra": {"query_port": "mysql"}}))
    with pytest.raises(ConfigurationError, match="query_port of connection 'doris_default'.*'mysql'"):
        make_hook().get_conn()


def test_the_sqlalchemy_engine_speaks_mysql_to_the_query_port(doris_default: Any) -> None:
    from sqlalchemy import text

    hook = make_hook()
    url = hook.sqlalchemy_url
    assert (url.drivername, url.host, url.port, url.database) == ("mysql+pymysql", "127.0.0.1",
                                                                  doris_default.query_port, DB)
    assert DORIS_PASSWORD not in repr(url)
    engine = hook.get_sqlalchemy_engine()
    try:
        with engine.connect() as connection:
            assert connection.execute(text("SELECT COUNT(*) FROM good")).scalar() == 3
    finally:
        engine.dispose()


# --- an Airflow run ------------------------------------------------------------------------------


@pytest.fixture
def outcomes(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What each SQL task's ``execute`` returned or raised in this test's runs, by task id
    (``dag.test()`` runs tasks in this process on both majors)."""
    from airflow.providers.common.sql.operators import sql

    seen: dict[str, Any] = {}
    for operator in (sql.SQLExecuteQueryOperator, sql.SQLCheckOperator, sql.SQLValueCheckOperator):
        def recording(self: Any, context: Any, _execute: Any = operator.execute) -> Any:
            try:
                seen[self.task_id] = _execute(self, context)
            except BaseException as exc:
                seen[self.task_id] = exc
                raise
            return seen[self.task_id]

        monkeypatch.setattr(operator, "execute", recording)
    return seen


@pytest.fixture
def run_sql_dag(airflow_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Runs ``DAG_FILE`` (loaded afresh, after the test set its environment) once; the DagRun."""
    path = dag_file_in_a_bundle(monkeypatch, tmp_path / "bundle", "kd-sql", "kd_sql.py", DAG_FILE)

    def run(table: str) -> Any:
        from airflow_provider_kinesis_doris.version_compat import AIRFLOW_V_3_0_PLUS

        monkeypatch.setenv("KD_SQL_TABLE", table)
        spec = importlib.util.spec_from_file_location(f"kd_sql_{next(_names)}", path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        date = datetime.now(timezone.utc) - timedelta(days=1, microseconds=next(_names))
        return module.dag.test(logical_date=date) if AIRFLOW_V_3_0_PLUS else module.dag.test(execution_date=date)

    return run


def _state(dag_run: Any) -> str:
    return str(dag_run.state).lower().rsplit(".", 1)[-1]


def test_a_dag_queries_doris_and_its_checks_pass_on_good_data(
    doris_default: Any, run_sql_dag: Any, outcomes: dict[str, Any]
) -> None:
    dag_run = run_sql_dag("good")
    assert _state(dag_run) == "success", outcomes
    assert [tuple(row) for row in outcomes["rows"]] == [(1, "a"), (2, "b"), (3, "c")]
    assert set(outcomes) == {"rows", "no_missing_values", "three_rows"}
    assert not any(isinstance(outcome, BaseException) for outcome in outcomes.values())


def test_the_check_fails_the_run_on_bad_data(
    doris_default: Any, run_sql_dag: Any, outcomes: dict[str, Any]
) -> None:
    dag_run = run_sql_dag("bad")
    assert _state(dag_run) == "failed"
    assert [tuple(row) for row in outcomes["rows"]] == [(1, "a"), (2, None), (3, "c")]
    failure = outcomes["no_missing_values"]
    assert type(failure).__name__ == "AirflowException" and "Test failed" in str(failure)
    assert "three_rows" not in outcomes  # upstream failed: never ran


def test_a_wrong_password_fails_the_task_naming_the_connection(
    doris_default: Any, run_sql_dag: Any, outcomes: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    wrong = "wrong-" + DORIS_PASSWORD
    set_password(monkeypatch, wrong)
    dag_run = run_sql_dag("good")
    assert _state(dag_run) == "failed"
    failure = outcomes["rows"]
    assert isinstance(failure, pymysql.err.OperationalError)
    assert "Access denied" in str(failure) and "Doris connection 'doris_default'" in str(failure)
    captured = capsys.readouterr()
    for text in (str(failure), captured.out, captured.err):
        assert wrong not in text and DORIS_PASSWORD not in text

