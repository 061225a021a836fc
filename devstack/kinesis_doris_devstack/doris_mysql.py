"""The Doris stand-in's MySQL protocol port (Doris FE ``query_port``, 9030 in a real cluster).

`mysql-mimic <https://github.com/kelsin/mysql-mimic>`_ speaks the wire protocol; every statement
it does not answer itself goes to the same SQL engine as the FE's HTTP SQL endpoint
(:func:`kinesis_doris_devstack.doris_statements.execute_statement`, through ``Cluster.execute_sql``),
without the HTTP endpoint's row limit.

What mysql-mimic answers itself, as a MySQL server would: ``SET`` (session variables,
``SET NAMES``, ``SET autocommit``), ``SELECT`` without ``FROM`` (``SELECT 1``,
``SELECT @@version_comment``, ``SELECT DATABASE()``), ``USE`` (checked against the stand-in's
databases here), ``BEGIN``/``COMMIT``/``ROLLBACK`` (no-ops: the stand-in has no SQL transactions)
and ``SHOW VARIABLES/STATUS/WARNINGS/ERRORS``. Everything else (``SHOW TABLES``, ``DESC``, DDL,
``SELECT ... FROM``) is the engine's.

The server runs an asyncio loop in one background thread; :meth:`DorisMysqlServer.stop` closes
the listening socket, ends every open session and joins the thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any

from mysql_mimic import IdentityProvider, MysqlServer, NativePasswordAuthPlugin, Session, User
from mysql_mimic.auth import AuthInfo, Forbidden
from mysql_mimic.connection import Connection
from mysql_mimic.errors import ErrorCode, MysqlError
from mysql_mimic.session import Query
from mysql_mimic.variables import SYSTEM_VARIABLES, GlobalVariables, SessionVariables
from sqlglot import expressions as exp
from sqlglot.errors import ParseError

from kinesis_doris_devstack.doris_schema import INFORMATION_SCHEMA, DorisSqlError, StatementResult

log = logging.getLogger(__name__)
# mysql-mimic logs every connection at INFO; the HTTP ports of the stand-in log requests at DEBUG.
logging.getLogger("mysql_mimic").setLevel(logging.WARNING)

# What a Doris FE reports (Doris says it is MySQL 5.7.99); clients print version_comment.
_VARIABLES = {
    **SYSTEM_VARIABLES,
    "version": (str, "5.7.99", False),
    "version_comment": (str, "Doris version doris-standin (kinesis_doris_devstack)", False),
}
_MIMIC_SHOWS = ("VARIABLES", "STATUS", "WARNINGS", "ERRORS")  # the rest: the engine's
_BAD_DB_ERROR = 1049
_STOP_TIMEOUT_SECONDS = 10.0

# (user, db, statement) -> result; raises DorisSqlError. ``_Cluster.execute_sql`` with no row limit.
Execute = Callable[[str, str, str], StatementResult]
# user -> the password it logs in with, None for no such user.
PasswordOf = Callable[[str], str | None]


class _StandInPassword(NativePasswordAuthPlugin):
    """``mysql_native_password`` against the stand-in's users, refusing as Doris does:
    ``Access denied for user '<user>' (using password: YES|NO)``, also for an unknown user."""

    async def auth(self, auth_info: AuthInfo | None = None) -> AsyncGenerator[Any, AuthInfo]:
        inner = super().auth(auth_info)
        decision = await inner.__anext__()
        info = auth_info
        while True:
            if isinstance(decision, Forbidden) and info is not None:
                using = "YES" if info.data else "NO"
                yield Forbidden(f"Access denied for user '{info.username}' (using password: {using})")
                return
            reply = yield decision
            if reply is None:  # Success or Forbidden: the connection reads no further
                return
            info = reply
            decision = await inner.asend(reply)


class _StandInIdentities(IdentityProvider):
    """The users as they are at login: ``CREATE USER`` / ``DROP USER`` take effect at once."""

    def __init__(self, password_of: PasswordOf) -> None:
        self._password_of = password_of
        # An unknown user gets a hash no password matches, so it is refused like a wrong password.
        self._nobody = NativePasswordAuthPlugin.create_auth_string("\0no such user\0")

    def get_plugins(self) -> Sequence[_StandInPassword]:
        return [_StandInPassword()]

    async def get_user(self, username: str) -> User | None:
        password = self._password_of(username)
        if password is None:
            auth_string: str | None = self._nobody
        else:
            auth_string = NativePasswordAuthPlugin.create_auth_string(password) if password else None
        return User(name=username, auth_string=auth_string, auth_plugin=_StandInPassword.name)


class _DorisSession(Session):
    """One client session; statements mysql-mimic does not answer go to the stand-in's engine."""

    def __init__(self, execute: Execute, has_database: Callable[[str], bool], open_sessions: set[_DorisSession]) -> None:
        super().__init__(SessionVariables(GlobalVariables(_VARIABLES)))
        self._execute = execute
        self._has_database = has_database
        self._open_sessions = open_sessions
        self._several = False
        # Answered here: SET, static SELECTs, USE, a few SHOWs, transaction statements. Not
        # mysql-mimic's DESCRIBE and INFORMATION_SCHEMA emulation: the engine answers those.
        self.middlewares = [
            self._set_var_middleware,
            self._set_middleware,
            self._static_query_middleware,
            self._use_middleware,
            self._show_middleware,
            self._begin_middleware,
            self._commit_middleware,
            self._rollback_middleware,
        ]

    async def init(self, connection: Connection) -> None:
        await super().init(connection)
        self._open_sessions.add(self)

    async def close(self) -> None:
        self._open_sessions.discard(self)
        await super().close()

    async def handle_query(self, sql: str, attrs: dict[str, str]) -> Any:
        if self.username is None:  # mysql-mimic reads commands even after a refused login
            raise MysqlError("Access denied: not logged in", code=ErrorCode.ACCESS_DENIED_ERROR)
        return await super().handle_query(sql, attrs)

    def _parse(self, sql: str) -> list[exp.Expression]:
        try:
            statements = super()._parse(sql)
        except ParseError:  # Doris syntax sqlglot does not know: the engine judges it
            statements = [exp.Command(this=sql)]
        self._several = len(statements) > 1
        return statements

    async def use(self, database: str) -> None:
        if database != INFORMATION_SCHEMA and not await asyncio.to_thread(self._has_database, database):
            raise MysqlError(f"Unknown database '{database}'", code=_BAD_DB_ERROR)  # type: ignore[arg-type]
        self.database = database

    async def _show_middleware(self, q: Query) -> Any:
        if not isinstance(q.expression, exp.Show):
            return await q.next()
        if q.expression.name.upper() in _MIMIC_SHOWS:
            return await self._show(q.expression)
        return await self._run(self._statement(q.expression, q.sql))

    async def query(self, expression: exp.Expression, sql: str, attrs: dict[str, str]) -> Any:
        return await self._run(self._statement(expression, sql))

    def _statement(self, expression: exp.Expression, sql: str) -> str:
        """The client's own text, or sqlglot's rendering of one statement of several."""
        return expression.sql(dialect="mysql") if self._several else sql

    async def _run(self, statement: str) -> Any:
        try:
            result = await asyncio.to_thread(self._execute, self.username or "", self.database or "", statement)
        except DorisSqlError as error:
            # Doris's FE words its analysis errors like this on the MySQL port too.
            raise MysqlError(f"errCode = 2, detailMessage = {error}", code=error.errcode) from None  # type: ignore[arg-type]
        if result.kind != "result_set":
            return [], []
        return list(result.rows), list(result.columns)


class DorisMysqlServer:
    """The MySQL protocol port of one stand-in, served from a background thread.

    :param execute: runs one statement of a user in a session database ("" for none), with no row limit.
    :param has_database: whether a database exists (``USE``).
    :param password_of: the password of a user, None for no such user (asked at every login).
    :param host: address to bind (keep it on loopback).
    :param port: port to bind; 0 picks a free one (read :attr:`port` after :meth:`start`).
    """

    def __init__(self, execute: Execute, has_database: Callable[[str], bool], password_of: PasswordOf,
                 host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self._sessions: set[_DorisSession] = set()
        self._server = MysqlServer(session_factory=lambda: _DorisSession(execute, has_database, self._sessions),
                                   identity_provider=_StandInIdentities(password_of))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"DorisMysqlServer(host={self.host!r}, port={self.port})"

    def start(self) -> DorisMysqlServer:
        """Bind the port and serve; returns once it listens."""
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="doris-standin-mysql", daemon=True)
        thread.start()
        self._loop, self._thread = loop, thread
        try:
            started = asyncio.run_coroutine_threadsafe(self._server.start_server(host=self.host, port=self.port), loop)
            started.result(timeout=_STOP_TIMEOUT_SECONDS)
        except BaseException:
            self.stop()
            raise
        self.port = int(self._server.sockets()[0].getsockname()[1])
        thread.name = f"doris-standin-mysql-{self.port}"
        return self

    def stop(self) -> None:
        """Close the port, end open sessions, wait for running statements and the thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if loop.is_running():
            try:
                asyncio.run_coroutine_threadsafe(self._close(), loop).result(timeout=_STOP_TIMEOUT_SECONDS)
            finally:
                loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=_STOP_TIMEOUT_SECONDS)
        if not thread.is_alive():
            loop.close()
        else:
            log.warning("the stand-in's MySQL port thread did not stop within %ss", _STOP_TIMEOUT_SECONDS)
        self._loop, self._thread = None, None

    async def _close(self) -> None:
        self._server.close()
        for session in list(self._sessions):
            session.connection.kill()  # the client reads "Session was killed"
        clients = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        if clients:
            _, unfinished = await asyncio.wait(clients, timeout=_STOP_TIMEOUT_SECONDS / 2)
            for task in unfinished:  # still in the handshake
                task.cancel()
            await asyncio.gather(*unfinished, return_exceptions=True)
        await self._server.wait_closed()
        await asyncio.get_running_loop().shutdown_default_executor()

    def __enter__(self) -> DorisMysqlServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
