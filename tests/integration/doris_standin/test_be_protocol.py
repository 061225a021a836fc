"""BE port wire behaviour: header phase before body, 100-continue, framing, auth, header
validation, result JSON format and the error log."""

from __future__ import annotations

import gzip
import http.client
import json
import re
import socket

import pytest
from doris_raw import DB, USER, RawDoris, basic

pytestmark = pytest.mark.integration

_RESULT_KEYS = [
    "TxnId", "Label", "Comment", "TwoPhaseCommit", "Status", "Message", "NumberTotalRows", "NumberLoadedRows",
    "NumberFilteredRows", "NumberUnselectedRows", "LoadBytes", "LoadTimeMs", "BeginTxnTimeMs",
    "StreamLoadPutTimeMs", "ReadDataTimeMs", "WriteDataTimeMs", "ReceiveDataTimeMs", "CommitAndPublishTimeMs",
]


def _send_headers_only(port: int, path: str, headers: dict[str, str]) -> bytes:
    """Send a PUT's headers (announcing a body) and return BE's first answer, sent before any
    body byte: either an interim ``100 Continue`` or a complete final response."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        lines = [f"PUT {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        received = b""
        while b"\r\n\r\n" not in received:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed without a reply after {received!r}"
            received += chunk
        head, _, rest = received.partition(b"\r\n\r\n")
        if head.startswith(b"HTTP/1.1 100"):
            return received
        length = int(re.search(rb"Content-Length: (\d+)", head).group(1))
        while len(rest) < length:
            chunk = sock.recv(65536)
            assert chunk, "connection closed mid-reply"
            rest += chunk
        return head + b"\r\n\r\n" + rest


def test_header_phase_failure_replies_without_100_continue_and_without_the_body(raw: RawDoris) -> None:
    answer = _send_headers_only(raw.server.be_port, f"/api/{DB}/missing/_stream_load", {
        "Authorization": basic(), "Expect": "100-continue", "Content-Length": "1000", "label": "hp_1"})
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert b"100 Continue" not in answer
    body = json.loads(answer.split(b"\r\n\r\n", 1)[1])
    assert body["Status"] == "Fail" and "table not found, tableName=missing" in body["Message"]


def test_successful_header_phase_sends_100_continue_before_reading(raw: RawDoris, dup_table: str) -> None:
    answer = _send_headers_only(raw.server.be_port, f"/api/{DB}/{dup_table}/_stream_load", {
        "Authorization": basic(), "Expect": "100-continue", "Content-Length": "8", "label": "hp_2"})
    assert answer.startswith(b"HTTP/1.1 100 Continue")


def test_result_is_pretty_json_with_keys_in_master_order(raw: RawDoris, dup_table: str) -> None:
    data = b"1\ta\t5\n"
    reply = raw.be("PUT", f"/api/{DB}/{dup_table}/_stream_load", data, **raw.load_headers(label="fmt_1"))
    assert reply.status == 200
    assert reply.body.startswith(b"{\n    \"TxnId\": ") and reply.body.endswith(b"}\n")
    body = reply.json()
    assert list(body) == _RESULT_KEYS
    assert body["TwoPhaseCommit"] == "false" and body["Status"] == "Success" and body["Message"] == "OK"
    assert body["TxnId"] > 0 and body["Label"] == "fmt_1"
    assert (body["NumberTotalRows"], body["NumberLoadedRows"], body["LoadBytes"]) == (1, 1, len(data))


def test_comment_is_echoed_and_missing_label_gets_a_uuid(raw: RawDoris, dup_table: str) -> None:
    body = raw.stream_load(dup_table, b"1\ta\t5\n", comment="hello")
    assert body["Comment"] == "hello"
    assert len(body["Label"]) == 36 and body["Label"].count("-") == 4


def test_result_is_gzipped_when_the_client_accepts_it(raw: RawDoris, dup_table: str) -> None:
    reply = raw.be("PUT", f"/api/{DB}/{dup_table}/_stream_load", b"1\ta\t5\n",
                   **raw.load_headers(**{"Accept-Encoding": "gzip"}))
    assert reply.headers["Content-Encoding"] == "gzip"
    assert json.loads(gzip.decompress(reply.body))["Status"] == "Success"


def test_chunked_body_is_loaded(raw: RawDoris, dup_table: str) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", raw.server.be_port, timeout=10)
    connection.request("PUT", f"/api/{DB}/{dup_table}/_stream_load",
                       body=iter([b"1\ta\t1\n", b"2\tb\t2\n"]), encode_chunked=True,
                       headers={**raw.load_headers(), "Transfer-Encoding": "chunked"})
    body = json.loads(connection.getresponse().read())
    connection.close()
    assert body["Status"] == "Success" and body["NumberLoadedRows"] == 2
    assert raw.rows(f"SELECT id, name FROM {dup_table} ORDER BY id") == [[1, "a"], [2, "b"]]


def test_both_content_length_and_chunked_is_refused(raw: RawDoris, dup_table: str) -> None:
    answer = _send_headers_only(raw.server.be_port, f"/api/{DB}/{dup_table}/_stream_load", {
        "Authorization": basic(), "Expect": "100-continue", "Content-Length": "5",
        "Transfer-Encoding": "chunked"})
    body = json.loads(answer.split(b"\r\n\r\n", 1)[1])
    assert body["Message"] == "[INVALID_ARGUMENT]please do not set both content_length and transfer-encoding"


def test_neither_content_length_nor_chunked_is_refused(raw: RawDoris, dup_table: str) -> None:
    answer = _send_headers_only(raw.server.be_port, f"/api/{DB}/{dup_table}/_stream_load",
                                {"Authorization": basic(), "Expect": "100-continue"})
    body = json.loads(answer.split(b"\r\n\r\n", 1)[1])
    assert body["Message"].startswith(
        "[INVALID_ARGUMENT]content_length is empty and transfer-encoding!=chunked")
    assert body["TxnId"] == -1


def test_be_requires_its_own_basic_auth(raw: RawDoris, dup_table: str) -> None:
    path = f"/api/{DB}/{dup_table}/_stream_load"
    missing = raw.be("PUT", path, b"1\ta\t1\n", Expect="100-continue").json()
    assert (missing["Status"], missing["Message"], missing["TxnId"]) == (
        "Fail", "[NOT_AUTHORIZED]no valid Basic authorization", -1)
    wrong = raw.be("PUT", path, b"1\ta\t1\n", Expect="100-continue", Authorization=basic(USER, "bad")).json()
    assert wrong["Status"] == "Fail" and wrong["Message"].startswith("[ANALYSIS_ERROR]")
    assert f"Access denied for user '{USER}@127.0.0.1'" in wrong["Message"]
    assert raw.rows(f"SELECT count(*) FROM {dup_table}") == [[0]]


@pytest.mark.parametrize("headers, fragment", [
    ({"label": "bad label!"}, "Label format error. regex: ^[-_A-Za-z0-9:]{1,128}$, label: bad label!"),
    ({"label": "x" * 129}, "Label format error"),
    ({"strict_mode": "yes"}, "[INVALID_ARGUMENT]Invalid strict mode format. Must be bool type"),
    ({"format": "xml"}, "[E-1101]unknown data format, format=xml"),
    ({"merge_type": "UPSERT"}, "[INVALID_ARGUMENT]Invalid merge type UPSERT"),
    ({"merge_type": "MERGE"}, "Excepted DELETE ON clause when merge type is MERGE."),
    ({"label": "l", "group_commit": "async_mode"}, "[INVALID_ARGUMENT]label and group_commit can't be set"),
    ({"columns": "id, name, amount, x = nosuchfn(id)"}, "Unknown function 'nosuchfn'"),
    ({"columns": "id, name, amount = ghost + 1"}, "Unknown column 'ghost'"),
])
def test_bad_headers_fail_with_doris_messages(raw: RawDoris, dup_table: str, headers: dict[str, str],
                                              fragment: str) -> None:
    body = raw.stream_load(dup_table, b"1\ta\t1\n", **headers)
    assert body["Status"] == "Fail"
    assert fragment in body["Message"]
    assert body["NumberLoadedRows"] == 0


def test_unknown_database_and_table(raw: RawDoris) -> None:
    assert "unknown database, database=nodb" in raw.stream_load("t", b"1", db="nodb")["Message"]
    assert "table not found, tableName=nope" in raw.stream_load("nope", b"1")["Message"]


def test_plan_error_aborts_the_begun_transaction_so_the_label_is_free(raw: RawDoris, dup_table: str) -> None:
    failed = raw.stream_load(dup_table, b"1\ta\t1\n", label="plan_1", where="ghost > 1")
    assert failed["Status"] == "Fail" and failed["TxnId"] > 0
    assert raw.load_state("plan_1") == "ABORTED"
    assert raw.stream_load(dup_table, b"1\ta\t1\n", label="plan_1")["Status"] == "Success"


def test_error_log_is_served_at_the_error_url(raw: RawDoris, dup_table: str) -> None:
    body = raw.stream_load(dup_table, b"1\ta\t1\nx\tb\t2\n", strict_mode="true")
    assert body["Status"] == "Fail" and body["Message"] == "[DATA_QUALITY_ERROR]too many filtered rows"
    assert body["FirstErrorMsg"].startswith("Reason: column(id) value is incorrect while strict mode is true")
    url = body["ErrorURL"]
    assert url.startswith(f"http://127.0.0.1:{raw.server.be_port}/api/_load_error_log?file=__shard_")
    log = raw.be("GET", url.split(str(raw.server.be_port), 1)[1])
    assert log.status == 200
    assert "src value is x" in log.body.decode() and "src line [x\tb\t2]" in log.body.decode()
    assert raw.be("GET", "/api/_load_error_log?file=../../etc/passwd").status == 404


def test_unknown_path_is_404(raw: RawDoris) -> None:
    assert raw.be("PUT", "/api/nothing_here", b"").status == 404
