"""The Stream Load client fails closed: a success-shaped probe reply is never the load's result,
and a load that provably never reached Doris says so (``definitely_not_loaded``), against real
HTTP on loopback: a closed port, the stand-in, and a server that answers every request with 200."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from airflow_provider_kinesis_doris.core.errors import PermanentStreamLoadError, RetryableStreamLoadError
from airflow_provider_kinesis_doris.core.doris.client import DorisStreamLoadClient
from airflow_provider_kinesis_doris.core.doris.options import StreamLoadOptions
from airflow_provider_kinesis_doris.core.doris.connection import DorisConnectionConfig, RetryPolicy

from tests.conftest import DORIS_PASSWORD, DORIS_USER

FAST = RetryPolicy(max_attempts=2, initial_backoff_seconds=0.01, max_backoff_seconds=0.02)
BODY = b'{"event_id": 1}\n'


class _SuccessToEverything(BaseHTTPRequestHandler):
    """A proxy or wrong server: 200 with a success-shaped body for every request."""

    bodies: list[int] = []

    def do_PUT(self) -> None:  # noqa: N802 - http.server's naming
        length = int(self.headers.get("Content-Length") or 0)
        self.bodies.append(len(self.rfile.read(length)) if length else 0)
        payload = b'{"status": "OK", "msg": "Success"}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def success_server() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SuccessToEverything)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_a_success_shaped_reply_to_the_probe_is_never_taken_for_the_load(success_server: ThreadingHTTPServer) -> None:
    """repro_probe_success: LOADED/VISIBLE was returned though the body was never sent."""
    config = DorisConnectionConfig(host="127.0.0.1", port=success_server.server_address[1], user="u")
    client = DorisStreamLoadClient(config, retry_policy=FAST)

    with pytest.raises(PermanentStreamLoadError, match="answered the Stream Load probe with a success"):
        client.load_idempotently("db", "t", "kd:x:1:abc", BODY, StreamLoadOptions.json_lines())

    assert _SuccessToEverything.bodies and set(_SuccessToEverything.bodies) == {0}, "no load body was sent"


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_load_to_an_unreachable_doris_is_definitely_not_loaded() -> None:
    client = DorisStreamLoadClient(DorisConnectionConfig(host="127.0.0.1", port=_closed_port()), retry_policy=FAST)

    with pytest.raises(RetryableStreamLoadError) as raised:
        client.load_idempotently("db", "t", "kd:x:1:abc", BODY, StreamLoadOptions.json_lines())

    assert raised.value.definitely_not_loaded


def test_a_definite_fail_from_doris_frees_the_label_and_says_so(doris_server) -> None:  # type: ignore[no-untyped-def]
    """A row the strict load filters: Doris answers Status Fail with a TxnId (the transaction is
    aborted), and the label loads again afterwards."""
    doris_server.execute_sql("", "CREATE DATABASE IF NOT EXISTS failclosed")
    doris_server.execute_sql(
        "failclosed",
        "CREATE TABLE t (a INT NOT NULL) DUPLICATE KEY(a) DISTRIBUTED BY HASH(a) BUCKETS 1 "
        "PROPERTIES ('replication_num'='1')",
    )
    config = DorisConnectionConfig(host="127.0.0.1", port=doris_server.fe_port, user=DORIS_USER, password=DORIS_PASSWORD)
    client = DorisStreamLoadClient(config, retry_policy=FAST)

    with pytest.raises(PermanentStreamLoadError, match="too many filtered rows") as raised:
        client.load_idempotently("failclosed", "t", "kd:x:2:abc", b'{"a": "x"}\n', StreamLoadOptions.json_lines(strict_mode=True))
    assert raised.value.definitely_not_loaded

    again = client.load_idempotently("failclosed", "t", "kd:x:2:abc", b'{"a": 7}\n', StreamLoadOptions.json_lines())
    assert again.result is not None and again.result.number_loaded_rows == 1
