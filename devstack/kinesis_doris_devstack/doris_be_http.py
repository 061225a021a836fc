"""The BE HTTP port of the Doris stand-in (:class:`BackendHandler`): Stream Load (header phase,
transaction, the row path of ``doris_loads``, the reply), two-phase commit, the error logs of
rejected rows, ``/api/health`` and ``/api/update_config``.
"""

from __future__ import annotations

import gzip
import json
import logging
import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

from kinesis_doris_devstack.doris_load_options import LoadError, LoadOptions, parse_load_options, parse_put_options
from kinesis_doris_devstack.doris_loads import LoadOutcome, LoadPlan, plan_load, run_load
from kinesis_doris_devstack.doris_schema import DorisSqlError
from kinesis_doris_devstack.doris_txn import LabelAlreadyExists, TxnError
from kinesis_doris_devstack.doris_faults import Fault
from kinesis_doris_devstack.doris_http import StandInHandler
from kinesis_doris_devstack.doris_replies import LoadReply, ms_since, pretty_body

log = logging.getLogger(__name__)


GROUP_COMMIT_MODES = ("async_mode", "sync_mode", "off_mode")
_LIBEVENT_CONTENT_TYPE = "text/html; charset=ISO-8859-1"


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


class BackendHandler(StandInHandler):
    """BE (``webserver_port``): runs stream loads, 2PC operations, serves error logs."""

    def do_GET(self) -> None:
        path, query = self.path_parts()
        if path == "/api/_load_error_log":
            self._error_log((query.get("file") or [""])[0])
        elif path == "/api/health":
            self.send_body(200, pretty_body({"status": "OK", "msg": "To Be Added"}), "application/json")
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
        body = pretty_body(reply.body())
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
        if group_commit and group_commit.lower() not in GROUP_COMMIT_MODES:
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
        reply.begin_ms = ms_since(started)

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
        context.reply.put_ms = ms_since(started)

    def _body_phase(self, context: _LoadContext) -> None:
        reply, plan = context.reply, context.plan
        assert plan is not None
        started = time.monotonic()
        body = self.read_body()
        reply.read_ms = ms_since(started)
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
        reply.write_ms = ms_since(started)
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
        reply.commit_ms = 0 if reply.two_phase_commit else ms_since(started)
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
        self.send_body(200, pretty_body({"status": status, "msg": msg}), _LIBEVENT_CONTENT_TYPE)
