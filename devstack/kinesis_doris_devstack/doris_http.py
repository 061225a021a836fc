"""HTTP plumbing both of the Doris stand-in's HTTP ports share (:class:`StandInHandler`): Basic
auth, reading and draining bodies, replies, the routing of a ``PUT`` (Stream Load, 2PC), and the
server that hands each handler the cluster (:class:`StandInHTTPServer`).
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
import socket
import struct
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from kinesis_doris_devstack.quiet_server import QuietThreadingHTTPServer
from kinesis_doris_devstack.doris_cluster import Cluster
from kinesis_doris_devstack.doris_replies import compact_body

log = logging.getLogger(__name__)


_MAX_DRAIN_BYTES = 64 * 1024 * 1024
_DRAIN_IDLE_SECONDS = 0.2


# --- HTTP plumbing shared by both ports --------------------------------------------------------


class StandInHandler(BaseHTTPRequestHandler):
    """Common helpers; subclasses route requests."""

    protocol_version = "HTTP/1.1"
    server: StandInHTTPServer

    @property
    def cluster(self) -> Cluster:
        return self.server.cluster

    def handle_expect_100(self) -> bool:
        # Doris decides itself whether to send 100 Continue (only after a successful header phase).
        return True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature of the base class
        log.debug("%s %s", self.address_string(), format % args)

    def header(self, name: str) -> str | None:
        return self.headers.get(name)

    def lower_headers(self) -> dict[str, str]:
        return {k.lower(): v for k, v in self.headers.items()}

    def basic_auth(self) -> tuple[str, str] | None:
        """(user, password) from ``Authorization: Basic``, or None when absent or malformed."""
        value = self.header("Authorization") or ""
        scheme, _, encoded = value.partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        user, colon, password = decoded.partition(":")
        return (user, password) if colon else None

    def user_name(self) -> str:
        """The Basic-auth user ("" without one)."""
        return (self.basic_auth() or ("", ""))[0]

    def access_denied(self, user: str, password: str) -> str:
        return (f"Access denied for user '{user}@{self.client_address[0]}' "
                f"(using password: {'YES' if password else 'NO'})")

    def send_body(self, status: int, body: bytes, content_type: str | None,
                  headers: Mapping[str, str] | None = None) -> None:
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def send_json(self, body: Mapping[str, Any]) -> None:
        self.send_body(200, compact_body(body), "application/json")

    def has_body(self) -> bool:
        return self.header("Transfer-Encoding") is not None or int(self.header("Content-Length") or 0) > 0

    def send_early(self, status: int, body: bytes, content_type: str | None,
                   headers: Mapping[str, str] | None = None) -> None:
        """Answer without reading the body (Doris replies from the header phase), then close."""
        self.close_connection = True
        self.send_body(status, body, content_type, headers)
        self._drain_unread_body()

    def _drain_unread_body(self) -> None:
        """Swallow what a client that did not wait for ``100 Continue`` already sent, so it
        reads our reply instead of a connection reset (master FE's bounded drain)."""
        if not self.has_body():
            return
        remaining = min(int(self.header("Content-Length") or _MAX_DRAIN_BYTES), _MAX_DRAIN_BYTES)
        self.connection.settimeout(_DRAIN_IDLE_SECONDS)
        try:
            while remaining > 0:
                chunk = self.rfile.read1(min(remaining, 65536))
                if not chunk:
                    break
                remaining -= len(chunk)
        except OSError:
            pass

    def read_body(self) -> bytes | None:
        """The request body by Content-Length or chunked framing; None if the client sent less."""
        if (self.header("Transfer-Encoding") or "").lower() == "chunked":
            return self._read_chunked()
        expected = int(self.header("Content-Length") or 0)
        body = self.rfile.read(expected)
        return body if len(body) == expected else None

    def _read_chunked(self) -> bytes | None:
        parts: list[bytes] = []
        while True:
            size_line = self.rfile.readline(1024)
            try:
                size = int(size_line.split(b";")[0].strip(), 16)
            except ValueError:
                return None
            if size == 0:
                while self.rfile.readline(65536).strip():
                    pass  # trailers
                return b"".join(parts)
            chunk = self.rfile.read(size)
            if len(chunk) != size:
                return None
            parts.append(chunk)
            self.rfile.readline(3)

    def reset_connection(self) -> None:
        """Close the TCP connection with a reset and no reply."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        self.close_connection = True

    def do_PUT(self) -> None:
        """Stream Load and 2PC: the FE redirects both to a BE, the BE runs them."""
        path, _ = self.path_parts()
        if match := _STREAM_LOAD.match(path):
            self._stream_load(unquote(match.group(1)), unquote(match.group(2)))
        elif match := _TWO_PC.match(path):
            self._two_phase_commit(unquote(match.group(1)))
        else:
            self._not_found()

    def path_parts(self) -> tuple[str, dict[str, list[str]]]:
        split = urlsplit(self.path)
        return split.path, parse_qs(split.query, keep_blank_values=True)


class StandInHTTPServer(QuietThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type[StandInHandler], cluster: Cluster) -> None:
        self.cluster = cluster
        super().__init__(address, handler)


_STREAM_LOAD = re.compile(r"^/api/([^/]*)/([^/]*)/_stream_load$")
_TWO_PC = re.compile(r"^/api/([^/]*)(?:/([^/]*))?/_stream_load_2pc$")
