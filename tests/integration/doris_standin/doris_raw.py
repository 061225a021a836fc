"""Raw HTTP speaker for the Doris stand-in conformance suite: plain ``http.client``, deliberately
not ``requests`` and not our Stream Load client, so the server is checked against the wire."""

from __future__ import annotations

import base64
import http.client
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from kinesis_doris_devstack.doris_server import DorisServer

USER, PASSWORD = "loader", "s3cret-pw"
DB = "demo"
EVENTS_DDL = (
    "CREATE TABLE events (id BIGINT NOT NULL, name VARCHAR(8), amount INT) DUPLICATE KEY(id) "
    "DISTRIBUTED BY HASH(id) BUCKETS 1 PROPERTIES ('replication_num' = '1')"
)


def basic(user: str = USER, password: str = PASSWORD) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@dataclass
class Reply:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class RawDoris:
    """Speaks to the stand-in's FE and BE ports with plain ``http.client``."""

    def __init__(self, server: DorisServer) -> None:
        self.server = server

    def request(self, port: int, method: str, path: str, body: bytes | None = None,
                headers: Mapping[str, str] | None = None) -> Reply:
        connection = http.client.HTTPConnection(self.server.host, port, timeout=10)
        try:
            connection.request(method, path, body=body, headers=dict(headers or {}))
            response = connection.getresponse()
            return Reply(response.status, response.headers, response.read())
        finally:
            connection.close()

    def fe(self, method: str, path: str, body: bytes | None = None, **headers: str) -> Reply:
        return self.request(self.server.fe_port, method, path, body, headers)

    def be(self, method: str, path: str, body: bytes | None = None, **headers: str) -> Reply:
        return self.request(self.server.be_port, method, path, body, headers)

    @staticmethod
    def load_headers(**headers: str) -> dict[str, str]:
        return {"Authorization": basic(), "Expect": "100-continue", **headers}

    def stream_load(self, table: str, body: bytes, db: str = DB, **headers: str) -> dict[str, Any]:
        """FE → 307 → BE, following the redirect by hand as a Doris client must."""
        sent = self.load_headers(**headers)
        redirect = self.request(self.server.fe_port, "PUT", f"/api/{db}/{table}/_stream_load", body, sent)
        assert redirect.status == 307, redirect.body
        target = urlsplit(redirect.headers["Location"])
        path = target.path + (f"?{target.query}" if target.query else "")
        reply = self.request(target.port or 80, "PUT", path, body, sent)
        assert reply.status == 200
        assert reply.body.endswith(b"\n")
        return reply.json()

    def sql(self, stmt: str, db: str = DB, authorization: str | None = None) -> dict[str, Any]:
        """The SQL endpoint's envelope; ``authorization`` (``basic(user, password)``) runs it as another user."""
        headers = {"X-Doris-Stream": "false", "Content-Type": "application/json"}
        reply = self.fe("POST", f"/api/query/default_cluster/{db}", json.dumps({"stmt": stmt}).encode(),
                        Authorization=authorization or basic(), **headers)
        assert reply.status == 200
        return reply.json()

    def rows(self, stmt: str, db: str = DB) -> list[list[Any]]:
        envelope = self.sql(stmt, db)
        assert envelope["code"] == 0, envelope
        return envelope["data"]["data"]

    def load_state(self, label: str, db: str = DB) -> str:
        envelope = self.fe("GET", f"/api/{db}/get_load_state?label={label}", Authorization=basic()).json()
        assert envelope["code"] == 0, envelope
        return envelope["data"]

    def two_pc(self, operation: str, db: str = DB, via_fe: bool = True, **ids: str) -> dict[str, Any]:
        headers = {"Authorization": basic(), "txn_operation": operation, **ids}
        port = self.server.fe_port
        path = f"/api/{db}/_stream_load_2pc"
        if via_fe:
            redirect = self.request(port, "PUT", path, b"", headers)
            assert redirect.status == 307, redirect.body
            target = urlsplit(redirect.headers["Location"])
            port, path = target.port or 80, target.path
        reply = self.request(port if via_fe else self.server.be_port, "PUT", path, b"", headers)
        assert reply.status == 200 and reply.body.endswith(b"\n")
        return reply.json()


def start_server(**kwargs: Any) -> DorisServer:
    """A started stand-in with the suite's credentials."""
    return DorisServer(user=USER, password=PASSWORD, **kwargs).start()


@contextmanager
def events_server(**settings: Any) -> Iterator[RawDoris]:
    """A stand-in started with ``settings``, holding database ``DB`` and its ``events`` table,
    stopped on the way out."""
    server = start_server(**settings)
    try:
        server.execute_sql("", f"CREATE DATABASE IF NOT EXISTS {DB}")
        server.execute_sql(DB, EVENTS_DDL)
        yield RawDoris(server)
    finally:
        server.stop()
