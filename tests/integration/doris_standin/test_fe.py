"""FE port: auth envelope, Expect, group_commit, 307 Location, 2PC redirect, get_load_state,
the SQL endpoint and the test-only fault endpoint."""

from __future__ import annotations

import json
import socket
from urllib.parse import unquote, urlsplit

import pytest

from doris_raw import DB, PASSWORD, USER, RawDoris, basic

pytestmark = pytest.mark.integration


def test_stream_load_without_auth_gets_401_envelope_with_http_200(raw: RawDoris) -> None:
    reply = raw.fe("PUT", f"/api/{DB}/events/_stream_load", b"1", Expect="100-continue")
    assert reply.status == 200
    assert reply.json() == {"msg": "Unauthorized", "code": 401, "data": "Need auth information.", "count": 0}


def test_wrong_password_names_user_and_client_ip_but_not_the_password(raw: RawDoris) -> None:
    reply = raw.fe("PUT", f"/api/{DB}/events/_stream_load", b"1", Expect="100-continue",
                   Authorization=basic(USER, "wrong"))
    body = reply.json()
    assert body["code"] == 401 and body["msg"] == "Unauthorized"
    assert body["data"] == f"Access denied for user '{USER}@127.0.0.1' (using password: YES)"
    assert "wrong" not in reply.body.decode()


def test_missing_expect_header_is_a_failed_rest_base_result(raw: RawDoris) -> None:
    reply = raw.fe("PUT", f"/api/{DB}/events/_stream_load", b"1", Authorization=basic())
    assert reply.status == 200
    assert reply.json() == {"status": "FAILED", "msg": "There is no 100-continue header"}


def test_invalid_group_commit_is_refused_before_auth(raw: RawDoris) -> None:
    reply = raw.fe("PUT", f"/api/{DB}/events/_stream_load", b"1", group_commit="fast_mode")
    body = reply.json()
    assert body["status"] == "FAILED"
    assert body["msg"].startswith("Header `group_commit` can only be")


@pytest.mark.parametrize("path, message", [
    ("/api//events/_stream_load", "No database selected."),
    (f"/api/{DB}//_stream_load", "No table selected."),
])
def test_empty_db_or_table_is_refused(raw: RawDoris, path: str, message: str) -> None:
    reply = raw.fe("PUT", path, b"1", **raw.load_headers())
    assert reply.json() == {"status": "FAILED", "msg": message}


def test_redirect_points_at_be_with_userinfo_and_keeps_path_and_query(raw: RawDoris) -> None:
    reply = raw.fe("PUT", f"/api/{DB}/events/_stream_load?x=1&y=a%20b", b"1,2", **raw.load_headers())
    assert reply.status == 307
    location = urlsplit(reply.headers["Location"])
    assert location.scheme == "http"
    assert (location.hostname, location.port) == ("127.0.0.1", raw.server.be_port)
    assert (unquote(location.username or ""), unquote(location.password or "")) == (USER, PASSWORD)
    assert location.path == f"/api/{DB}/events/_stream_load"
    assert location.query == "x=1&y=a%20b"


def test_fe_does_not_check_that_the_table_exists(raw: RawDoris) -> None:
    reply = raw.fe("PUT", f"/api/{DB}/no_such_table/_stream_load", b"1", **raw.load_headers())
    assert reply.status == 307


def test_two_phase_commit_endpoint_is_redirected_too(raw: RawDoris) -> None:
    for path in (f"/api/{DB}/_stream_load_2pc", f"/api/{DB}/events/_stream_load_2pc"):
        reply = raw.fe("PUT", path, b"", Authorization=basic(), txn_id="7", txn_operation="commit")
        assert reply.status == 307
        assert urlsplit(reply.headers["Location"]).path == path


@pytest.mark.parametrize("headers, message", [
    ({"txn_operation": "commit"}, "No transaction id or label selected."),
    ({"txn_id": "7"}, "No transaction operation('commit' or 'abort') selected."),
])
def test_two_phase_commit_needs_id_and_operation(
        raw: RawDoris, headers: dict[str, str], message: str) -> None:
    reply = raw.fe("PUT", f"/api/{DB}/_stream_load_2pc", b"", Authorization=basic(), **headers)
    assert reply.json() == {"status": "FAILED", "msg": message}


def test_get_load_state_envelopes(raw: RawDoris) -> None:
    missing = raw.fe("GET", f"/api/{DB}/get_load_state", Authorization=basic()).json()
    assert missing == {"msg": "Bad Request", "code": 403, "data": "No label selected", "count": 0}
    unknown_db = raw.fe("GET", "/api/nodb/get_load_state?label=a", Authorization=basic()).json()
    assert unknown_db["code"] == 1 and unknown_db["msg"] == "Error" and "nodb" in unknown_db["data"]
    assert raw.fe("GET", f"/api/{DB}/get_load_state?label=never_used", Authorization=basic()).json() == {
        "msg": "success", "code": 0, "data": "UNKNOWN", "count": 0}
    no_auth = raw.fe("GET", f"/api/{DB}/get_load_state?label=a").json()
    assert no_auth["code"] == 401


def test_get_load_state_reports_visible_after_a_load(raw: RawDoris, dup_table: str) -> None:
    assert raw.stream_load(dup_table, b"1\ta\t2\n", label="state_1")["Status"] == "Success"
    assert raw.load_state("state_1") == "VISIBLE"


def test_sql_endpoint_exec_status_and_result_set_shapes(raw: RawDoris) -> None:
    created = raw.sql("CREATE TABLE t (k INT, v VARCHAR(10)) DUPLICATE KEY(k) "
                      "DISTRIBUTED BY HASH(k) BUCKETS AUTO")
    assert created["code"] == 0 and created["msg"] == "success" and created["count"] == 0
    assert created["data"]["type"] == "exec_status" and created["data"]["status"] == {}
    assert isinstance(created["data"]["time"], int)
    result = raw.sql("SELECT count(*) AS n FROM t")
    assert result["data"]["type"] == "result_set"
    assert result["data"]["meta"] == [{"name": "n", "type": "BIGINT"}]
    assert result["data"]["data"] == [[0]]


def test_sql_endpoint_streams_without_the_stream_header(raw: RawDoris) -> None:
    reply = raw.fe("POST", f"/api/query/default_cluster/{DB}", json.dumps({"stmt": "SHOW TABLES"}).encode(),
                   Authorization=basic())
    body = reply.json()
    assert list(body) == ["data", "msg", "code"]
    assert body["data"]["type"] == "result_set" and body["code"] == 0
    assert b"\n    " in reply.body  # the streaming writer indents


def test_sql_endpoint_errors(raw: RawDoris) -> None:
    missing = raw.fe("POST", f"/api/query/default_cluster/{DB}", b"{}", Authorization=basic(),
                     **{"X-Doris-Stream": "false"}).json()
    assert missing == {
        "msg": "Bad Request", "code": 403, "data": "Missing statement request body", "count": 0}
    failed = raw.sql("SELECT * FROM nowhere")
    assert failed["code"] == 1 and failed["msg"] == "Error"
    assert failed["data"].startswith("Failed to execute sql: ") and "nowhere" in failed["data"]
    unknown_db = raw.sql("SELECT 1", db="ghost")
    assert unknown_db["code"] == 1 and "Unknown database 'ghost'" in unknown_db["data"]


def test_create_database_through_information_schema(raw: RawDoris) -> None:
    assert raw.sql("CREATE DATABASE IF NOT EXISTS other", db="information_schema")["code"] == 0
    assert ["other"] in raw.rows("SHOW DATABASES", db="information_schema")


def test_fault_endpoint_adds_and_clears_faults(raw: RawDoris, dup_table: str) -> None:
    bad = raw.fe("POST", "/_test/faults", json.dumps({"kind": "nope"}).encode(), Authorization=basic()).json()
    assert bad["code"] == 403 and "nope" in bad["data"]
    unauthorized = raw.fe("POST", "/_test/faults", json.dumps({"kind": "http_500"}).encode()).json()
    assert unauthorized["code"] == 401
    added = raw.fe("POST", "/_test/faults", json.dumps({"kind": "http_500", "count": 2}).encode(),
                   Authorization=basic()).json()
    assert added["code"] == 0
    assert raw.fe("DELETE", "/_test/faults", Authorization=basic()).json()["code"] == 0
    assert raw.stream_load(dup_table, b"1\ta\t1\n")["Status"] == "Success"


def test_redirect_dead_be_points_at_a_closed_port(raw: RawDoris, dup_table: str) -> None:
    raw.server.inject_fault("redirect_dead_be")
    reply = raw.fe("PUT", f"/api/{DB}/{dup_table}/_stream_load", b"1\ta\t1\n", **raw.load_headers())
    location = urlsplit(reply.headers["Location"])
    assert reply.status == 307 and location.port != raw.server.be_port
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", location.port), timeout=2).close()
    assert raw.stream_load(dup_table, b"1\ta\t1\n")["Status"] == "Success"  # count=1 is used up
