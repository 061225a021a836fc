"""A Stream Load compatible local Doris stand-in: an FE port that authenticates and answers
``307`` to a BE port, a BE port that runs the load, and the FE's MySQL protocol port
(``query_port``, :mod:`kinesis_doris_devstack.doris_mysql`), all backed by SQLite.

Behaviour follows Doris's Stream Load wire behaviour as ``docs/doris.md`` describes it; what is
and is not emulated is listed in ``docs/doris-standin.md``. Use it in-process::

    with DorisServer(password="secret") as doris:
        doris.execute_sql("", "CREATE DATABASE demo")
        ...  # PUT http://127.0.0.1:<doris.fe_port>/api/demo/<table>/_stream_load

or as a process: ``python -m kinesis_doris_devstack.doris_server --fe-port 0``
prints one JSON line ``{"fe_port": ..., "be_port": ..., "query_port": ..., "pid": ...}`` once it
listens.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import gzip
import json
import logging
import os
import re
import signal
import socket
import struct
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, parse_qsl, quote, unquote, urlsplit

from kinesis_doris_devstack.doris_admin import FrontendAdmin, Session
from kinesis_doris_devstack.doris_dml import execute_dml
from kinesis_doris_devstack.doris_mysql import DorisMysqlServer
from kinesis_doris_devstack.quiet_server import QuietThreadingHTTPServer
from kinesis_doris_devstack.doris_load_options import LoadError, LoadOptions, parse_load_options, parse_put_options
from kinesis_doris_devstack.doris_loads import LoadOutcome, LoadPlan, plan_load, run_load
from kinesis_doris_devstack.doris_sql import (
    INFORMATION_SCHEMA,
    DorisSqlError,
    StatementResult,
    Storage,
    execute_statement,
)
from kinesis_doris_devstack.doris_txn import (
    TXN_BOOTSTRAP_DDL,
    LabelAlreadyExists,
    TxnError,
    TxnManager,
)

log = logging.getLogger(__name__)

FAULT_KINDS = (
    "publish_timeout",
    "http_500",
    "reset_before_commit",
    "reset_after_commit",
    "too_many_versions",
    "running_txn_limit",
    "slow",
    "redirect_dead_be",
)
_FE_FAULTS = ("redirect_dead_be",)
_GROUP_COMMIT_MODES = ("async_mode", "sync_mode", "off_mode")
_LIBEVENT_CONTENT_TYPE = "text/html; charset=ISO-8859-1"
_MAX_DRAIN_BYTES = 64 * 1024 * 1024
_DRAIN_IDLE_SECONDS = 0.2
_RUNNING_TXN_LIMIT = 1000
_TOO_MANY_VERSIONS = (
    "failed to init rowset builder. version count: 2001, exceed limit: 2000, tablet: {tablet}. "
    "Please reduce the frequency of loading data or adjust the max_tablet_version_num or "
    "time_series_max_tablet_version_num in be.conf to a larger value."
)
_FE_DETAIL = "TStatus: errCode = 2, detailMessage = "
# FrontendServiceImpl.checkPasswordAndPrivs (begin_txn, 2PC): the PrivPredicate's toString in the text.
_NO_LOAD_PRIVILEGE = ("Access denied; you need (at least one of) the (priv predicate: OR, Admin_priv Load_priv ) "
                      "privilege(s) for this operation")
_SQL_FAILURE = "Failed to execute sql: errCode = 2, detailMessage = "


# --- fault injection -------------------------------------------------------------------------


@dataclass
class Fault:
    """An injected fault: affects the next ``remaining`` stream loads."""

    kind: str
    remaining: int
    params: dict[str, Any] = field(default_factory=dict)


class FaultInjector:
    """FIFO of injected faults. A stream load takes at most one BE fault when it reaches BE;
    ``redirect_dead_be`` is taken by FE when it redirects a stream load."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []

    def add(self, kind: str, count: int = 1, **params: Any) -> None:
        """Queue a fault; :class:`ValueError` names a bad kind, count or parameter."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; expected one of {', '.join(FAULT_KINDS)}")
        if not isinstance(count, int) or count < 1:
            raise ValueError(f"fault count must be a positive integer, got {count!r}")
        if kind == "slow" and not isinstance(params.get("seconds"), (int, float)):
            raise ValueError("fault 'slow' needs a numeric 'seconds' parameter")
        with self._lock:
            self._faults.append(Fault(kind, count, dict(params)))

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def pending(self) -> int:
        """Uses of queued faults not taken yet."""
        with self._lock:
            return sum(fault.remaining for fault in self._faults)

    def take(self, at_fe: bool) -> Fault | None:
        """Consume one use of the oldest fault that acts at FE (``at_fe``) or at BE."""
        with self._lock:
            for fault in self._faults:
                if (fault.kind in _FE_FAULTS) == at_fe:
                    fault.remaining -= 1
                    if fault.remaining == 0:
                        self._faults.remove(fault)
                    return Fault(fault.kind, 1, fault.params)
        return None


# --- response bodies -------------------------------------------------------------------------


def fe_envelope(msg: str, code: int, data: Any) -> dict[str, Any]:
    """FE ``ResponseBody``."""
    return {"msg": msg, "code": code, "data": data, "count": 0}


def fe_failed(msg: str) -> dict[str, Any]:
    """FE legacy ``RestBaseResult``."""
    return {"status": "FAILED", "msg": msg}


@dataclass
class LoadReply:
    """The BE load result, filled in as the load progresses."""

    label: str
    comment: str = ""
    two_phase_commit: bool = False
    txn_id: int = -1
    status: str = "Fail"
    message: str = "OK"
    existing_job_status: str | None = None
    total: int = 0
    loaded: int = 0
    filtered: int = 0
    unselected: int = 0
    load_bytes: int = 0
    started: float = field(default_factory=time.monotonic)
    begin_ms: int = 0
    put_ms: int = 0
    read_ms: int = 0
    write_ms: int = 0
    commit_ms: int = 0
    error_url: str | None = None
    first_error: str | None = None

    def fail(self, message: str) -> LoadReply:
        self.status, self.message, self.loaded = "Fail", message, 0
        return self

    def body(self) -> dict[str, Any]:
        """Keys in master's order; optional keys only when set, as Doris omits them."""
        result: dict[str, Any] = {
            "TxnId": self.txn_id,
            "Label": self.label,
            "Comment": self.comment,
            "TwoPhaseCommit": "true" if self.two_phase_commit else "false",
            "Status": self.status,
        }
        if self.existing_job_status is not None:
            result["ExistingJobStatus"] = self.existing_job_status
        result.update({
            "Message": self.message,
            "NumberTotalRows": self.total,
            "NumberLoadedRows": self.loaded,
            "NumberFilteredRows": self.filtered,
            "NumberUnselectedRows": self.unselected,
            "LoadBytes": self.load_bytes,
            "LoadTimeMs": int((time.monotonic() - self.started) * 1000),
            "BeginTxnTimeMs": self.begin_ms,
            "StreamLoadPutTimeMs": self.put_ms,
            "ReadDataTimeMs": self.read_ms,
            "WriteDataTimeMs": self.write_ms,
            "ReceiveDataTimeMs": self.read_ms,
            "CommitAndPublishTimeMs": self.commit_ms,
        })
        if self.error_url is not None:
            result["ErrorURL"] = self.error_url
        if self.first_error is not None:
            result["FirstErrorMsg"] = self.first_error
        return result


def _elapsed_ms(since: float) -> int:
    return int((time.monotonic() - since) * 1000)


def _pretty(body: Mapping[str, Any]) -> bytes:
    """BE bodies: pretty-printed with 4 spaces and a trailing newline."""
    return (json.dumps(body, indent=4) + "\n").encode("utf-8")


def _compact(body: Mapping[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":"), default=str).encode("utf-8")


# --- the shared state of one stand-in ---------------------------------------------------------


class _Cluster:
    """What both ports share: credentials, storage, transactions, faults and error logs."""

    def __init__(self, user: str, password: str, root: Path, durable: bool,
                 label_keep_seconds: float, precommit_timeout_seconds: float) -> None:
        self.storage = Storage(root, TXN_BOOTSTRAP_DDL, durable=durable)
        self.txns = TxnManager(self.storage, label_keep_seconds, precommit_timeout_seconds)
        self.txns.abort_orphans()
        self.faults = FaultInjector()
        self.admin = FrontendAdmin(user, password, on_fe_config=self._apply_fe_config, fe_configs={
            "streaming_label_keep_max_second": int(label_keep_seconds),
            "stream_load_default_precommit_timeout_second": int(precommit_timeout_seconds),
        })
        self.error_log_dir = root / "error_log"
        self.stopping = threading.Event()
        self.be_host = "127.0.0.1"
        self.be_port = 0

    def _apply_fe_config(self, key: str, value: str) -> None:
        """The FE configs the stand-in models take effect when set (``ADMIN SET FRONTEND CONFIG``
        or :meth:`DorisServer.set_fe_config`); the others are only shown."""
        if key == "streaming_label_keep_max_second":
            self.txns.set_windows(label_keep_seconds=float(value))
        elif key == "stream_load_default_precommit_timeout_second":
            self.txns.set_windows(precommit_timeout_seconds=float(value))

    def session(self, user: str, remote_ip: str = "127.0.0.1") -> Session:
        """A statement's runner: ``user`` from ``remote_ip``."""
        return Session(self.admin, user, remote_ip)

    def has_database(self, db: str) -> bool:
        with self.storage.lock:
            return self.storage.has_database(db)

    def execute_unlimited(self, user: str, db: str, stmt: str) -> StatementResult:
        """A statement of ``user`` on the MySQL port, which has no row limit."""
        return self.execute_sql(db, stmt, None, self.session(user))

    def credentials_valid(self, user: str, password: str) -> bool:
        return self.admin.authenticate(user, password)

    def write_error_log(self, lines: list[str]) -> str:
        """Store the rejected rows of a load; returns the ``file`` parameter of its ErrorURL."""
        name = f"__shard_{uuid.uuid4().int % 10}/error_log_insert_stmt_{uuid.uuid4().hex}"
        path = self.error_log_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        return name

    def read_error_log(self, name: str) -> str | None:
        path = (self.error_log_dir / name).resolve()
        if self.error_log_dir.resolve() not in path.parents or not path.is_file():
            return None
        return path.read_text(encoding="utf-8")

    def error_url(self, name: str) -> str:
        return f"http://{self.be_host}:{self.be_port}/api/_load_error_log?file={quote(name)}"

    def execute_sql(self, db: str, stmt: str, limit: int | None = 10000, session: Session | None = None) -> StatementResult:
        """Run a statement of ``session`` (default: the in-process API's, unchecked) with ``db`` as the session
        database, which must exist (as when FE's SQL endpoint opens its connection); "" means no
        database; ``limit`` None: every row."""
        runner = session or Session(self.admin, self.admin.user, unchecked=True)
        with self.storage.lock:
            self.txns.sweep()
            if db and db != INFORMATION_SCHEMA and not self.storage.has_database(db):
                raise DorisSqlError(f"Unknown database '{db}'", 1049)
            administrative = self.admin.execute(stmt, (self.be_host, self.be_port), runner)
            if administrative is not None:
                return administrative
            written = execute_dml(self.storage, self.txns, runner, db, stmt,
                                  lambda lines: self.error_url(self.write_error_log(lines)))
            if written is not None:
                return written
            return execute_statement(self.storage, db, stmt, runner, limit)


# --- HTTP plumbing shared by both ports --------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    """Common helpers; subclasses route requests."""

    protocol_version = "HTTP/1.1"
    server: _StandInHTTPServer

    @property
    def cluster(self) -> _Cluster:
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
        self.send_body(200, _compact(body), "application/json")

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


class _StandInHTTPServer(QuietThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type[_Handler], cluster: _Cluster) -> None:
        self.cluster = cluster
        super().__init__(address, handler)


_STREAM_LOAD = re.compile(r"^/api/([^/]*)/([^/]*)/_stream_load$")
_TWO_PC = re.compile(r"^/api/([^/]*)(?:/([^/]*))?/_stream_load_2pc$")
_LOAD_STATE = re.compile(r"^/api/([^/]*)/get_load_state$")
_QUERY = re.compile(r"^/api/query/([^/]*)/([^/]*)$")


# --- FE -------------------------------------------------------------------------------------


class _FrontendHandler(_Handler):
    """FE (``http_port``): authenticates, redirects loads to BE, answers state and SQL."""

    def do_GET(self) -> None:
        path, query = self.path_parts()
        if match := _LOAD_STATE.match(path):
            self._load_state(unquote(match.group(1)), query)
        elif path == "/api/health":
            self.send_json(fe_envelope("success", 0, {"online_backend_num": 1, "total_backend_num": 1}))
        else:
            self._not_found()

    def do_POST(self) -> None:
        path, _ = self.path_parts()
        if match := _QUERY.match(path):
            self._query(unquote(match.group(2)))
        elif path == "/_test/faults":
            self._add_fault()
        else:
            self._not_found()

    def do_DELETE(self) -> None:
        path, _ = self.path_parts()
        if path == "/_test/faults" and self._authenticated():
            self.cluster.faults.clear()
            self.send_json(fe_envelope("success", 0, "faults cleared"))
        elif path != "/_test/faults":
            self._not_found()

    def _not_found(self) -> None:
        body = fe_envelope("Not Found", 404, f"no handler for {urlsplit(self.path).path}")
        self.send_early(404, _compact(body), "application/json")

    def _authenticated(self) -> bool:
        """Check Basic auth; on failure answer the 401 envelope and return False."""
        credentials = self.basic_auth()
        if credentials is None:
            data = "Need auth information."
        elif not self.cluster.credentials_valid(*credentials):
            data = self.access_denied(*credentials)
        else:
            return True
        self._reply_early(fe_envelope("Unauthorized", 401, data))
        return False

    def _reply_early(self, body: Mapping[str, Any]) -> None:
        self.send_early(200, _compact(body), "application/json")

    def _stream_load(self, db: str, table: str) -> None:
        group_commit = self.header("group_commit")
        if group_commit is not None and group_commit.lower() not in _GROUP_COMMIT_MODES:
            self._reply_early(fe_failed(
                "Header `group_commit` can only be `sync_mode`, `async_mode` or `off_mode`."))
            return
        if not self._authenticated():
            return
        if self.header("Expect") is None:
            self._reply_early(fe_failed("There is no 100-continue header"))
        elif not db:
            self._reply_early(fe_failed("No database selected."))
        elif not table:
            self._reply_early(fe_failed("No table selected."))
        elif not self.cluster.admin.holds(self.user_name(), "Load_priv", db, table):
            # LoadAction checks the table privilege (checkTblAuth(..., PrivPredicate.LOAD)) before it
            # redirects: UnauthorizedException, the 401 envelope with HTTP 200.
            self._reply_early(fe_envelope(
                "Unauthorized", 401, "Access denied; you need (at least one of) the LOAD privilege(s) for this operation"))
        else:
            self._redirect_to_backend(dead=self.cluster.faults.take(at_fe=True) is not None)

    def _two_phase_commit(self, db: str) -> None:
        if not self._authenticated():
            return
        if not db:
            self._reply_early(fe_failed("No database selected."))
        elif not (self.header("txn_id") or self.header("label")):
            self._reply_early(fe_failed("No transaction id or label selected."))
        elif not self.header("txn_operation"):
            self._reply_early(fe_failed("No transaction operation('commit' or 'abort') selected."))
        else:
            self._redirect_to_backend(dead=False)

    def _redirect_to_backend(self, dead: bool) -> None:
        """307 to BE with the caller's credentials as URL userinfo, path and query kept."""
        user, password = self.basic_auth() or ("", "")
        port = _closed_port(self.cluster.be_host) if dead else self.cluster.be_port
        userinfo = f"{quote(user, safe='')}:{quote(password, safe='')}"
        location = f"http://{userinfo}@{self.cluster.be_host}:{port}{self.path}"
        self.send_early(307, b"", None, {"Location": location})

    def _load_state(self, db: str, query: Mapping[str, list[str]]) -> None:
        if not self._authenticated():
            return
        label = (query.get("label") or [""])[0]
        if not label:
            self.send_json(fe_envelope("Bad Request", 403, "No label selected"))
            return
        try:
            state = self.cluster.txns.label_state(db, label)
        except TxnError as error:
            self.send_json(fe_envelope("Error", 1, str(error)))
            return
        self.send_json(fe_envelope("success", 0, state))

    def _query(self, db: str) -> None:
        """``POST /api/query/{ns}/{db}``: one statement, answered like StatementSubmitter."""
        if not self._authenticated():
            return
        request = self._json_body()
        stmt = request.get("stmt") if isinstance(request, dict) else None
        if not isinstance(stmt, str) or not stmt.strip():
            self.send_json(fe_envelope("Bad Request", 403, "Missing statement request body"))
            return
        limit = request.get("limit", 1000)
        started = time.monotonic()
        try:
            row_limit = limit if isinstance(limit, int) and limit > 0 else 1000
            session = self.cluster.session(self.user_name(), self.client_address[0])
            result = self.cluster.execute_sql(db, stmt, row_limit, session)
        except DorisSqlError as error:
            self.send_json(fe_envelope("Error", 1, f"{_SQL_FAILURE}{error}"))
            return
        data = _statement_data(result, _elapsed_ms(started))
        if (self.header("X-Doris-Stream") or "").lower() == "false":
            self.send_json(fe_envelope("success", 0, data))
        elif result.kind == "result_set":
            self._send_streamed({"data": data, "msg": "success", "code": 0})
        else:
            self._send_streamed({"msg": "success", "code": 0, "data": data})

    def _send_streamed(self, body: Mapping[str, Any]) -> None:
        # the streaming writer of newer FEs: pretty JSON without "count"
        text = json.dumps(body, indent=4, default=str)
        self.send_body(200, text.encode("utf-8"), "application/json;charset=utf-8")

    def _json_body(self) -> Any:
        body = self.read_body() or b""
        try:
            return json.loads(body or b"{}")
        except ValueError:
            return None

    def _add_fault(self) -> None:
        if not self._authenticated():
            return
        request = self._json_body()
        if not isinstance(request, dict):
            self.send_json(fe_envelope("Bad Request", 403, "body must be a JSON object"))
            return
        params = {k: v for k, v in request.items() if k not in ("kind", "count")}
        try:
            self.cluster.faults.add(str(request.get("kind")), request.get("count", 1), **params)
        except ValueError as error:
            self.send_json(fe_envelope("Bad Request", 403, str(error)))
            return
        self.send_json(fe_envelope("success", 0, "fault added"))


def _statement_data(result: StatementResult, elapsed_ms: int) -> dict[str, Any]:
    """``data`` of a SQL endpoint reply, as StatementSubmitter builds it."""
    if result.kind == "exec_status":
        return {"type": "exec_status", "status": {}, "time": elapsed_ms}
    meta = [{"name": name, "type": type_name} for name, type_name in zip(result.columns, result.types)]
    rows = [list(row) for row in result.rows]
    return {"type": "result_set", "meta": meta, "data": rows, "time": elapsed_ms}


_STOULL_PREFIX = re.compile(r"\s*([+-]?\d+)")
_UINT64_LIMIT = 2**64


def _stoull(text: str) -> int | None:
    """``std::stoull`` as BE applies it to ``txn_id``: leading blanks and digits are read, the rest
    ignored; no digits or an out-of-range value fail (``None``). A negative value wraps as C++
    does and is read back as the signed ``int64`` BE stores."""
    match = _STOULL_PREFIX.match(text)
    if match is None:
        return None
    value = int(match.group(1))
    if abs(value) >= _UINT64_LIMIT:
        return None
    unsigned = value % _UINT64_LIMIT
    return unsigned - _UINT64_LIMIT if unsigned >= 2**63 else unsigned


def _closed_port(host: str) -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


# --- BE -------------------------------------------------------------------------------------


class _HeaderPhaseFailed(Exception):
    """The load ends before its body is read; the reply is ready."""


@dataclass
class _LoadContext:
    db: str
    table: str
    reply: LoadReply
    options: LoadOptions | None = None
    plan: LoadPlan | None = None
    fault: Fault | None = None


class _BackendHandler(_Handler):
    """BE (``webserver_port``): runs stream loads, 2PC operations, serves error logs."""

    def do_GET(self) -> None:
        path, query = self.path_parts()
        if path == "/api/_load_error_log":
            self._error_log((query.get("file") or [""])[0])
        elif path == "/api/health":
            self.send_body(200, _pretty({"status": "OK", "msg": "To Be Added"}), "application/json")
        else:
            self._not_found()

    def do_POST(self) -> None:
        path, _ = self.path_parts()
        if path == "/api/update_config":
            self._update_config()
        else:
            self._not_found()

    def _update_config(self) -> None:
        """``POST /api/update_config?key=value[&persist=true]`` (config_action.cpp): no auth
        unless BE's ``enable_all_http_auth``; the parameters in key order (BE's params map)."""
        self.close_connection = self.has_body()
        params = sorted(parse_qsl(urlsplit(self.path).query, keep_blank_values=True))
        results = self.cluster.admin.update_be_config(params)
        self.send_body(200, json.dumps(results, indent=4).encode("utf-8"), "application/json")

    def _not_found(self) -> None:
        self.send_early(404, b"Not Found", "text/plain")

    def _error_log(self, name: str) -> None:
        text = self.cluster.read_error_log(name) if name else None
        if text is None:
            self.send_body(404, b"Not Found", "text/plain")
        else:
            self.send_body(200, text.encode("utf-8"), "text/plain; charset=utf-8")

    def _send_load_reply(self, reply: LoadReply, early: bool = False) -> None:
        body = _pretty(reply.body())
        headers = {}
        if "gzip" in (self.header("Accept-Encoding") or ""):
            body, headers = gzip.compress(body), {"Content-Encoding": "gzip"}
        # Doris sets no Content-Type itself; this is libevent's default.
        send = self.send_early if early else self.send_body
        send(200, body, _LIBEVENT_CONTENT_TYPE, headers)

    # stream load

    def _stream_load(self, db: str, table: str) -> None:
        headers = self.lower_headers()
        context = _LoadContext(db, table, LoadReply(label=headers.get("label") or str(uuid.uuid4()),
                                                    comment=headers.get("comment", "")))
        context.fault = self.cluster.faults.take(at_fe=False)
        if context.fault is not None and context.fault.kind == "http_500":
            self.send_early(500, b"Internal Server Error", "text/plain")
            return
        try:
            self._header_phase(context, headers)
        except _HeaderPhaseFailed:
            self._send_load_reply(context.reply, early=True)
            return
        except Exception as error:  # a stand-in bug must still end the load like Doris would
            log.exception("stream load %s failed in the header phase", context.reply.label)
            self.cluster.txns.abort(context.db, context.reply.txn_id, "internal error")
            self._send_load_reply(context.reply.fail(f"[INTERNAL_ERROR]{error}"), early=True)
            return
        if (self.header("Expect") or "").lower() == "100-continue":
            self.send_response_only(100)
            self.end_headers()
        try:
            self._body_phase(context)
        except (ConnectionError, TimeoutError):
            self.cluster.txns.abort(context.db, context.reply.txn_id, "client went away")
            raise
        except Exception as error:
            log.exception("stream load %s failed", context.reply.label)
            self._abort_and_reply(context, f"[INTERNAL_ERROR]{error}")

    def _header_phase(self, context: _LoadContext, headers: Mapping[str, str]) -> None:
        reply = context.reply
        credentials = self.basic_auth()
        if credentials is None:
            raise self._failed(reply, "[NOT_AUTHORIZED]no valid Basic authorization")
        group_commit = headers.get("group_commit", "")
        if headers.get("label") and group_commit and group_commit.lower() != "off_mode":
            raise self._failed(
                reply, "[INVALID_ARGUMENT]label and group_commit can't be set at the same time")
        if group_commit and group_commit.lower() not in _GROUP_COMMIT_MODES:
            raise self._failed(
                reply, "[INVALID_ARGUMENT]group_commit can only be [async_mode, sync_mode, off_mode]")
        if group_commit and group_commit.lower() != "off_mode":
            raise self._failed(
                reply, "[NOT_IMPLEMENTED_ERROR]group commit is not emulated by the Doris stand-in")
        try:
            context.options = parse_load_options(headers)
        except LoadError as error:
            raise self._failed(reply, str(error)) from None
        reply.two_phase_commit = context.options.two_phase_commit
        self._check_framing(reply, headers)
        if not self.cluster.credentials_valid(*credentials):
            raise self._failed(reply, f"[ANALYSIS_ERROR]{_FE_DETAIL}{self.access_denied(*credentials)}")
        if not self.cluster.admin.holds(credentials[0], "Load_priv", context.db, context.table):
            raise self._failed(reply, f"[ANALYSIS_ERROR]{_FE_DETAIL}{_NO_LOAD_PRIVILEGE}")
        self._begin(context)
        self._plan(context, headers)

    def _failed(self, reply: LoadReply, message: str) -> _HeaderPhaseFailed:
        reply.fail(message)
        return _HeaderPhaseFailed(message)

    def _check_framing(self, reply: LoadReply, headers: Mapping[str, str]) -> None:
        chunked = headers.get("transfer-encoding", "").lower() == "chunked"
        has_length = "content-length" in headers
        if not chunked and not has_length:
            raise self._failed(reply, "[INVALID_ARGUMENT]content_length is empty and "
                                      "transfer-encoding!=chunked, please set content_length or "
                                      "transfer-encoding=chunked")
        if chunked and has_length:
            raise self._failed(
                reply, "[INVALID_ARGUMENT]please do not set both content_length and transfer-encoding")

    def _begin(self, context: _LoadContext) -> None:
        reply, options = context.reply, context.options
        assert options is not None
        started = time.monotonic()
        if context.fault is not None and context.fault.kind == "running_txn_limit":
            storage = self.cluster.storage
            db_id = storage.database_id(context.db) if storage.has_database(context.db) else 0
            raise self._failed(reply, f"[ANALYSIS_ERROR]{_FE_DETAIL}current running txns on db {db_id} is "
                                      f"{_RUNNING_TXN_LIMIT}, larger than limit {_RUNNING_TXN_LIMIT}")
        try:
            txns = self.cluster.txns
            reply.txn_id = txns.begin(context.db, context.table, reply.label, options.timeout_seconds)
        except LabelAlreadyExists as error:
            reply.fail(f"[{error.code}]{error}")
            reply.status, reply.existing_job_status = "Label Already Exists", error.existing_job_status
            raise _HeaderPhaseFailed(str(error)) from None
        except TxnError as error:
            raise self._failed(reply, f"[{error.code}]{error}") from None
        reply.begin_ms = _elapsed_ms(started)

    def _plan(self, context: _LoadContext, headers: Mapping[str, str]) -> None:
        started = time.monotonic()
        assert context.options is not None
        try:
            context.options = parse_put_options(headers, context.options)
            with self.cluster.storage.lock:
                schema = self.cluster.storage.table_schema(context.db, context.table)
            if schema is None:  # dropped since begin
                raise LoadError("NOT_FOUND", f"TStatus: errCode = 7, detailMessage = table not found, "
                                             f"tableName={context.table}")
            context.plan = plan_load(context.options, schema)
        except LoadError as error:
            self.cluster.txns.abort(context.db, context.reply.txn_id, str(error))
            raise self._failed(context.reply, str(error)) from None
        context.reply.put_ms = _elapsed_ms(started)

    def _body_phase(self, context: _LoadContext) -> None:
        reply, plan = context.reply, context.plan
        assert plan is not None
        started = time.monotonic()
        body = self.read_body()
        reply.read_ms = _elapsed_ms(started)
        if body is None:
            self._abort_and_reply(context, "[NETWORK_ERROR]receive body don't equal with body bytes")
            return
        reply.load_bytes = len(body)
        fault = context.fault.kind if context.fault is not None else None
        if context.fault is not None and fault == "slow":
            self.cluster.stopping.wait(float(context.fault.params["seconds"]))
        started = time.monotonic()
        try:
            outcome = run_load(plan, body)
        except LoadError as error:
            self._abort_and_reply(context, str(error))
            return
        reply.write_ms = _elapsed_ms(started)
        self._count(reply, outcome)
        if outcome.too_many_filtered(plan.options.max_filter_ratio):
            reply.first_error = outcome.error_lines[0] if outcome.error_lines else None
            self._abort_and_reply(context, "[DATA_QUALITY_ERROR]too many filtered rows")
        elif fault == "too_many_versions":
            message = "[E-235]" + _TOO_MANY_VERSIONS.format(tablet=plan.schema.table_id + 1)
            self._abort_and_reply(context, message)
        elif fault == "reset_before_commit":
            self.cluster.txns.abort(context.db, reply.txn_id, "connection reset before commit")
            self.reset_connection()
        else:
            self._commit(context, outcome, fault)

    def _count(self, reply: LoadReply, outcome: LoadOutcome) -> None:
        reply.total, reply.filtered, reply.unselected = outcome.total, outcome.filtered, outcome.unselected
        reply.loaded = len(outcome.rows)
        if outcome.error_lines:
            reply.error_url = self.cluster.error_url(self.cluster.write_error_log(outcome.error_lines))

    def _commit(self, context: _LoadContext, outcome: LoadOutcome, fault: str | None) -> None:
        reply, txns = context.reply, self.cluster.txns
        started = time.monotonic()
        try:
            if reply.two_phase_commit:
                txns.precommit(context.db, reply.txn_id, outcome.rows)
            elif context.fault is not None and fault == "publish_timeout":
                delay = float(context.fault.params.get("visible_after_seconds", 1.0))
                txns.commit_publish_later(context.db, reply.txn_id, outcome.rows, delay)
                reply.status, reply.message = "Publish Timeout", (
                    "[PUBLISH_TIMEOUT]transaction commit successfully, BUT data will be visible later")
            else:
                txns.commit(context.db, reply.txn_id, outcome.rows)
        except (TxnError, DorisSqlError) as error:
            self._abort_and_reply(context, f"[{getattr(error, 'code', 'INTERNAL_ERROR')}]{error}")
            return
        if fault == "reset_after_commit":
            self.reset_connection()
            return
        if reply.status != "Publish Timeout":
            reply.status, reply.message = "Success", "OK"
        reply.commit_ms = 0 if reply.two_phase_commit else _elapsed_ms(started)
        self._send_load_reply(reply)

    def _abort_and_reply(self, context: _LoadContext, message: str) -> None:
        self.cluster.txns.abort(context.db, context.reply.txn_id, message)
        self._send_load_reply(context.reply.fail(message))

    # two-phase commit

    def _two_phase_commit(self, db: str) -> None:
        """BE ``StreamLoad2PCAction::handle``: the txn_id is converted first, then the operation is
        checked, both failing with ``Status::InternalError``; credentials are checked by FE."""
        self.close_connection = self.has_body()  # a 2PC request carries no body worth reading
        operation = self.header("txn_operation") or ""
        raw_txn_id, label = self.header("txn_id") or None, self.header("label") or None
        txn_id = _stoull(raw_txn_id) if raw_txn_id is not None else None
        if raw_txn_id is not None and txn_id is None:
            self._send_2pc("INTERNAL_ERROR", f"convert txn_id [{raw_txn_id}] failed, reason=stoull")
            return
        if operation not in ("commit", "abort"):
            self._send_2pc("INTERNAL_ERROR", "transaction operation should be 'commit' or 'abort'")
            return
        credentials = self.basic_auth()
        if credentials is None:
            self._send_2pc("NOT_AUTHORIZED", "no valid Basic authorization")
            return
        if not self.cluster.credentials_valid(*credentials):
            self._send_2pc("ANALYSIS_ERROR", _FE_DETAIL + self.access_denied(*credentials))
            return
        try:
            self.cluster.txns.commit_or_abort(db, operation, txn_id, label,
                                              authorize=lambda table: self._require_load(credentials[0], db, table))
        except (TxnError, DorisSqlError) as error:
            self._send_2pc(getattr(error, "code", "INTERNAL_ERROR"), str(error))
            return
        # BE builds the message from whichever ids the request carried, label first.
        named = [f"label [{label}]"] if label is not None else []
        named += [f"transaction [{raw_txn_id}]"] if raw_txn_id is not None else []
        self._send_2pc("Success", f"{' '.join(named)} {operation} successfully.")

    def _require_load(self, user: str, db: str, table: str) -> None:
        if not self.cluster.admin.holds(user, "Load_priv", db, table):
            raise TxnError("ANALYSIS_ERROR", f"{_FE_DETAIL}{_NO_LOAD_PRIVILEGE}")

    def _send_2pc(self, status: str, msg: str) -> None:
        self.send_body(200, _pretty({"status": status, "msg": msg}), _LIBEVENT_CONTENT_TYPE)


# --- public API -----------------------------------------------------------------------------


class DorisServer:
    """A local Doris stand-in with an FE and a BE HTTP port and the FE's MySQL protocol port.

    :param host: address every port binds to (keep it on loopback).
    :param fe_port: FE HTTP port; 0 picks a free one (read :attr:`fe_port` after :meth:`start`).
    :param be_port: BE HTTP port; 0 picks a free one.
    :param query_port: FE MySQL protocol port (Doris ``query_port``); 0 picks a free one.
    :param user: the one user that may log in.
    :param password: its password.
    :param data_dir: directory of the SQLite files; data and labels survive restarts. None keeps
        everything in a temporary directory removed by :meth:`stop`.
    :param label_keep_seconds: how long finished labels are remembered (Doris
        ``streaming_label_keep_max_second``, 12 h).
    :param precommit_timeout_seconds: when PRECOMMITTED 2PC transactions are aborted.
    :param be_advertised_host: host written into FE redirects and ErrorURLs (default ``host``).
    """

    def __init__(self, host: str = "127.0.0.1", fe_port: int = 0, be_port: int = 0,
                 user: str = "root", password: str = "", data_dir: str | None = None,
                 label_keep_seconds: float = 43200, precommit_timeout_seconds: float = 3600,
                 be_advertised_host: str | None = None, query_port: int = 0) -> None:
        self.host = host
        self.fe_port = fe_port
        self.be_port = be_port
        self.query_port = query_port
        self._user = user
        self._password = password
        self._data_dir = data_dir
        self._label_keep_seconds = label_keep_seconds
        self._precommit_timeout_seconds = precommit_timeout_seconds
        self._be_advertised_host = be_advertised_host or host
        self._temp_dir: tempfile.TemporaryDirectory[str] | None = None
        self._cluster: _Cluster | None = None
        self._servers: list[_StandInHTTPServer] = []
        self._threads: list[threading.Thread] = []
        self._mysql: DorisMysqlServer | None = None

    def __repr__(self) -> str:
        return (f"DorisServer(host={self.host!r}, fe_port={self.fe_port}, be_port={self.be_port}, "
                f"query_port={self.query_port}, user={self._user!r})")

    @property
    def fe_url(self) -> str:
        return f"http://{self.host}:{self.fe_port}"

    def start(self) -> DorisServer:
        """Bind the three ports and serve in background threads."""
        if self._data_dir is None:
            self._temp_dir = tempfile.TemporaryDirectory(prefix="doris-standin-")
            root, durable = Path(self._temp_dir.name), False
        else:
            root, durable = Path(self._data_dir), True
        cluster = _Cluster(self._user, self._password, root, durable,
                           self._label_keep_seconds, self._precommit_timeout_seconds)
        self._cluster = cluster
        self._mysql = DorisMysqlServer(cluster.execute_unlimited, cluster.has_database, cluster.admin.password_of,
                                       self.host, self.query_port)
        try:
            self.query_port = self._mysql.start().port
        except BaseException:
            self.stop()
            raise
        backend = _StandInHTTPServer((self.host, self.be_port), _BackendHandler, cluster)
        frontend = _StandInHTTPServer((self.host, self.fe_port), _FrontendHandler, cluster)
        self._servers = [backend, frontend]
        self.be_port, self.fe_port = backend.server_address[1], frontend.server_address[1]
        cluster.be_host, cluster.be_port = self._be_advertised_host, self.be_port
        for server in self._servers:
            thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                                      name=f"doris-standin-{server.server_address[1]}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        """Stop serving, wake sleeping (``slow``) loads, close storage, remove a temp dir."""
        if self._cluster is not None:
            self._cluster.stopping.set()
        if self._mysql is not None:
            self._mysql.stop()
        for server in self._servers:
            server.shutdown()
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        if self._cluster is not None:
            self._cluster.storage.close()
        if self._temp_dir is not None:
            self._temp_dir.cleanup()
        self._servers, self._threads, self._cluster, self._temp_dir = [], [], None, None
        self._mysql = None

    def __enter__(self) -> DorisServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _running(self) -> _Cluster:
        if self._cluster is None:
            raise RuntimeError("DorisServer is not started")
        return self._cluster

    def inject_fault(self, kind: str, count: int = 1, **params: Any) -> None:
        """Make the next ``count`` stream loads fail as ``kind`` (see :data:`FAULT_KINDS`).

        :param kind: fault kind, e.g. ``publish_timeout`` or ``slow``.
        :param count: how many stream loads it affects.
        :param params: ``seconds`` for ``slow``; ``visible_after_seconds`` for ``publish_timeout``.
        :raises ValueError: unknown kind, bad count or missing parameter.
        """
        self._running().faults.add(kind, count, **params)

    def clear_faults(self) -> None:
        """Drop every pending fault."""
        self._running().faults.clear()

    def pending_faults(self) -> int:
        """How many stream loads queued faults would still affect (0: every fault struck)."""
        return self._running().faults.pending()

    def applied_row_count(self, db: str, table: str) -> int:
        """Rows committed loads applied to ``db.table`` since start, one per row per load: shows
        a load applied twice even on a UNIQUE KEY table, whose rows hide it.

        :param db: the database.
        :param table: the table.
        """
        return self._running().txns.applied_row_count(db, table)

    def set_fe_config(self, key: str, value: object) -> None:
        """Set an FE config as ``ADMIN SET FRONTEND CONFIG`` does; ``ADMIN SHOW FRONTEND CONFIG``
        answers it. ``streaming_label_keep_max_second`` and
        ``stream_load_default_precommit_timeout_second`` also take effect on the transactions;
        the others (``label_num_threshold``, ``max_running_txn_num_per_db``...) are only shown.
        """
        self._running().admin.set_fe_config(key, value)

    def set_be_config(self, key: str, value: object) -> None:
        """Set a BE config that ``SHOW BACKEND CONFIG`` answers (shown only: the stand-in's BE
        does not change behaviour, e.g. ``wait_internal_group_commit_finish``)."""
        self._running().admin.set_be_config(key, value)

    def advertise_be_host(self, host: str) -> None:
        """Make the FE advertise its BE as ``host`` from now on, as a BE registered under a name the
        client does not know: in redirects, ErrorURLs and ``SHOW BACKENDS``."""
        self._running().be_host = host

    def set_grants(self, grants: Mapping[str, Iterable[str]], user: str | None = None) -> None:
        """Give ``user`` (default: the stand-in's first user) exactly these privileges, by level
        (``"*"``, ``"db"``, ``"db.table"``), as ``GRANT`` would and ``SHOW GRANTS`` prints them.
        Statements, loads and 2PC operations are checked against them as Doris checks them."""
        self._running().admin.set_grants(grants, user)

    def execute_sql(self, db: str, stmt: str) -> list[tuple[Any, ...]]:
        """Run one statement of the SQL subset in-process, as the stand-in's first user but not
        checked against privileges (the test's own way in); rows for queries, [] otherwise.

        :param db: current database ("" for none, e.g. for CREATE DATABASE).
        :param stmt: the statement.
        :raises DorisSqlError: the statement fails as Doris would refuse it.
        """
        return list(self._running().execute_sql(db, stmt).rows)


# --- CLI ------------------------------------------------------------------------------------


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Stream Load compatible local Doris stand-in")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--fe-port", type=int, default=0)
    parser.add_argument("--be-port", type=int, default=0)
    parser.add_argument("--query-port", type=int, default=0, help="the MySQL protocol port (Doris query_port)")
    parser.add_argument("--user", default="root")
    parser.add_argument("--password", default=None,
                        help="default: env DORIS_STANDIN_PASSWORD, else empty")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--label-keep-seconds", type=float, default=43200)
    parser.add_argument("--precommit-timeout-seconds", type=float, default=3600)
    parser.add_argument("--be-advertised-host", default=None)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM/SIGINT; print the ports as one JSON line once listening."""
    args = _parse_args(argv)
    password = args.password if args.password is not None else os.environ.get("DORIS_STANDIN_PASSWORD", "")
    server = DorisServer(args.host, args.fe_port, args.be_port, args.user, password, args.data_dir,
                         args.label_keep_seconds, args.precommit_timeout_seconds, args.be_advertised_host,
                         args.query_port)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    server.start()
    try:
        announcement = {"fe_port": server.fe_port, "be_port": server.be_port, "query_port": server.query_port,
                        "pid": os.getpid()}
        print(json.dumps(announcement), flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
