"""The stand-in's MySQL protocol port (Doris FE ``query_port``), through a real client (PyMySQL):
the same storage and SQL engine as the HTTP SQL endpoint, without its 1,000-row limit, and the
same user and password."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest
from doris_raw import DB, EVENTS_DDL, PASSWORD, USER, RawDoris

from kinesis_doris_devstack.doris_server import DorisServer

pytestmark = pytest.mark.integration


def connect(doris: DorisServer, database: str | None = DB, **overrides: object) -> pymysql.connections.Connection:
    options = {"host": "127.0.0.1", "port": doris.query_port, "user": USER, "password": PASSWORD,
               "database": database, "connect_timeout": 5, **overrides}
    return pymysql.connect(**options)  # type: ignore[arg-type]


@pytest.fixture
def mysql(doris: DorisServer) -> Iterator[pymysql.cursors.Cursor]:
    connection = connect(doris)
    with connection, connection.cursor() as cursor:
        yield cursor


def test_the_query_port_is_its_own_loopback_port(doris: DorisServer) -> None:
    assert doris.query_port not in (0, doris.fe_port, doris.be_port)
    assert f"query_port={doris.query_port}" in repr(doris)


def test_ddl_over_mysql_and_rows_loaded_over_http_meet_in_one_storage(
    doris: DorisServer, raw: RawDoris, mysql: pymysql.cursors.Cursor
) -> None:
    mysql.execute(EVENTS_DDL)
    raw.stream_load("events", b"1,a,10\n2,b,20\n", column_separator=",")
    mysql.execute("SELECT id, name, amount FROM events ORDER BY id")
    assert mysql.fetchall() == ((1, "a", 10), (2, "b", 20))
    assert [d[0] for d in mysql.description] == ["id", "name", "amount"]
    mysql.execute("SHOW TABLES")
    assert mysql.fetchall() == (("events",),)
    assert [d[0] for d in mysql.description] == [f"Tables_in_{DB}"]
    mysql.execute("DESC events")
    assert [row[:3] for row in mysql.fetchall()] == [("id", "BIGINT", "No"), ("name", "VARCHAR(8)", "Yes"),
                                                      ("amount", "INT", "Yes")]
    assert raw.rows("SELECT COUNT(*) FROM events") == [[2]]


def test_a_query_returns_every_row_where_http_stops_at_1000(
    doris: DorisServer, raw: RawDoris, mysql: pymysql.cursors.Cursor
) -> None:
    doris.execute_sql(DB, EVENTS_DDL)
    raw.stream_load("events", b"".join(b"%d,n,%d\n" % (i, i) for i in range(1500)), column_separator=",")
    mysql.execute("SELECT id FROM events ORDER BY id")
    assert [row[0] for row in mysql.fetchall()] == list(range(1500))
    assert len(raw.rows("SELECT id FROM events")) == 1000


def test_what_a_client_sends_on_connect_and_around_statements(mysql: pymysql.cursors.Cursor) -> None:
    connection = mysql.connection
    connection.autocommit(True)
    connection.autocommit(False)
    connection.ping(reconnect=False)
    for statement in ("SET NAMES utf8mb4", "SET autocommit = 1", "BEGIN", "COMMIT", "ROLLBACK"):
        mysql.execute(statement)
    connection.commit()
    mysql.execute("SELECT @@version_comment LIMIT 1")
    assert "Doris" in mysql.fetchone()[0]
    mysql.execute("SELECT VERSION()")
    assert mysql.fetchone() == ("5.7.99",)
    mysql.execute("SELECT 1")
    assert mysql.fetchone() == (1,)
    mysql.execute("SELECT DATABASE()")
    assert mysql.fetchone() == (DB,)


def test_use_and_a_connection_without_database(doris: DorisServer) -> None:
    with connect(doris, database=None) as connection, connection.cursor() as cursor:
        with pytest.raises(pymysql.err.OperationalError) as no_db:
            cursor.execute("SELECT COUNT(*) FROM events")
        assert no_db.value.args[0] == 1046 and "No database selected" in no_db.value.args[1]
        with pytest.raises(pymysql.err.OperationalError) as unknown:
            cursor.execute("USE nowhere")
        assert unknown.value.args == (1049, "Unknown database 'nowhere'")
        cursor.execute(f"USE {DB}")
        cursor.execute("SHOW TABLES")
        assert cursor.fetchall() == ()


def test_errors_come_back_as_doris_words_them_with_its_codes(mysql: pymysql.cursors.Cursor) -> None:
    with pytest.raises(pymysql.err.OperationalError) as missing:
        mysql.execute("DROP TABLE nope")
    assert missing.value.args == (1051, "errCode = 2, detailMessage = Unknown table 'nope'")
    with pytest.raises(pymysql.err.ProgrammingError) as syntax:
        mysql.execute("SHOW")
    assert syntax.value.args[0] == 1064
    mysql.execute("SELECT 2")  # the session survives its errors
    assert mysql.fetchone() == (2,)


@pytest.mark.parametrize(
    ("user", "password", "using"),
    [(USER, "wrong-" + PASSWORD, "YES"), (USER, "", "NO"), ("intruder", PASSWORD, "YES")],
)
def test_only_the_stand_in_user_with_its_password_logs_in(
    doris: DorisServer, user: str, password: str, using: str
) -> None:
    with pytest.raises(pymysql.err.OperationalError) as denied:
        connect(doris, user=user, password=password)
    assert denied.value.args == (1045, f"Access denied for user '{user}' (using password: {using})")
    assert PASSWORD not in str(denied.value)


def test_stop_ends_open_sessions_and_leaves_no_thread() -> None:
    server = DorisServer(user=USER, password=PASSWORD).start()
    server.execute_sql("", f"CREATE DATABASE {DB}")
    connection = connect(server)
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    port = server.query_port
    names = {f"doris-standin-mysql-{port}", f"doris-standin-{server.fe_port}", f"doris-standin-{server.be_port}"}
    assert names <= {t.name for t in threading.enumerate()}
    server.stop()
    assert not names & {t.name for t in threading.enumerate()}
    with pytest.raises(pymysql.err.OperationalError):
        connection.cursor().execute("SELECT 1")
    with pytest.raises(pymysql.err.OperationalError):
        pymysql.connect(host="127.0.0.1", port=port, user=USER, password=PASSWORD, connect_timeout=2)


def test_the_local_stack_starts_the_query_port_with_the_stand_in(tmp_path: Path) -> None:
    from kinesis_doris_devstack.stack import LocalStack

    with LocalStack(tmp_path, services=["doris"]) as stack:
        doris = stack.running["doris"].extra
        assert json.loads(stack.endpoints_file.read_text())["doris"]["query_port"] == doris["query_port"]
        with pymysql.connect(host="127.0.0.1", port=int(doris["query_port"]), user=str(doris["user"]),
                             password=str(doris["password"]), connect_timeout=5) as connection:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
                assert cursor.fetchone() == (1,)
    with pytest.raises(pymysql.err.OperationalError):  # stopped with the stand-in's process
        pymysql.connect(host="127.0.0.1", port=int(doris["query_port"]), connect_timeout=2)
