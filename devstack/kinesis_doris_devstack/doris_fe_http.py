"""The FE HTTP port of the Doris stand-in (:class:`FrontendHandler`): authentication, Stream Load
and 2PC redirected (``307``) to a BE, ``get_load_state``, ``/api/health``, the SQL endpoint
(``/api/query``), and the tests' fault endpoint (``/_test/faults``).
"""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from kinesis_doris_devstack.doris_schema import DorisSqlError, StatementResult
from kinesis_doris_devstack.doris_txn import TxnError
from kinesis_doris_devstack.doris_be_http import GROUP_COMMIT_MODES
from kinesis_doris_devstack.doris_http import StandInHandler
from kinesis_doris_devstack.doris_replies import compact_body, fe_envelope, fe_failed, ms_since


_SQL_FAILURE = "Failed to execute sql: errCode = 2, detailMessage = "


_LOAD_STATE = re.compile(r"^/api/([^/]*)/get_load_state$")
_QUERY = re.compile(r"^/api/query/([^/]*)/([^/]*)$")


# --- FE -------------------------------------------------------------------------------------


class FrontendHandler(StandInHandler):
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
        self.send_early(404, compact_body(body), "application/json")

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
        self.send_early(200, compact_body(body), "application/json")

    def _stream_load(self, db: str, table: str) -> None:
        group_commit = self.header("group_commit")
        if group_commit is not None and group_commit.lower() not in GROUP_COMMIT_MODES:
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
        data = _statement_data(result, ms_since(started))
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


def _closed_port(host: str) -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])
