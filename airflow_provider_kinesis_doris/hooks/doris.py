"""Airflow hook for Apache Doris: SQL over the FE's MySQL protocol port (a common.sql
``DbApiHook``), and the core Stream Load client the loader uses, from one ``doris`` connection.

Connection fields: host = FE host, port = FE HTTP port (8030), login/password, schema = default
database. Extras (declared once, in ``get_provider_info.DORIS_CONN_FIELDS``): ``query_port`` (the
FE's MySQL protocol port, 9030), ``https``, ``be_hosts``, ``allowed_redirect_hosts``,
``be_address_map``, ``label_keep_seconds``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cached_property, partial
from typing import TYPE_CHECKING, Any

import pymysql
from airflow.exceptions import AirflowNotFoundException
from airflow.providers.common.sql.hooks.sql import DbApiHook

from airflow_provider_kinesis_doris.core.audit import AuditReport, AuditTarget, PositionReader, audit
from airflow_provider_kinesis_doris.core.errors import ConfigurationError, KinesisDorisError
from airflow_provider_kinesis_doris.core.doris.client import DorisStreamLoadClient
from airflow_provider_kinesis_doris.core.doris.result import IdempotentLoadResult, SqlResult
from airflow_provider_kinesis_doris.core.doris.options import PrecommittedPolicy
from airflow_provider_kinesis_doris.core.doris.options import Body, StreamLoadOptions
from airflow_provider_kinesis_doris.core.doris.connection import (
    DEFAULT_FE_HTTP_PORT,
    DEFAULT_LABEL_KEEP_SECONDS,
    DEFAULT_QUERY_PORT,
    DorisConnectionConfig,
    join_host_port,
)
from airflow_provider_kinesis_doris.core.doris.result import LabelState, StreamLoadResult
from airflow_provider_kinesis_doris.core.doris.preflight import (
    DorisPreflightSettings,
    PreflightReport,
    deep_connection_test,
    doris_preflight,
)
from airflow_provider_kinesis_doris.core.doris.identifiers import qualified_name
from airflow_provider_kinesis_doris.core.mapping import dead_letter_ddl
from airflow_provider_kinesis_doris.get_provider_info import DORIS_CONN_FIELDS, get_provider_info

if TYPE_CHECKING:
    from airflow.providers.openlineage.sqlparser import DatabaseInfo

    from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
    from pymysql.connections import Connection as MySQLConnection
    from sqlalchemy.engine import URL, Engine


class DorisHook(DbApiHook):
    """SQL, Stream Load and label state on an Apache Doris cluster.

    Two ways to the FE, both from the one connection:

    - the MySQL protocol on the FE's ``query_port`` (extra, default 9030), through PyMySQL:
      :meth:`get_conn` and everything common.sql builds on it (``get_records``, ``get_first``,
      ``run``, ``SQLExecuteQueryOperator``, the check operators);
    - HTTP on the FE's ``http_port`` (the connection's port, 8030): :meth:`stream_load`,
      :meth:`load_idempotently`, :meth:`get_load_state` and :meth:`run_sql`, which the loader uses.

    .. seealso:: https://doris.apache.org/docs/data-operate/import/import-way/stream-load-manual

    :param doris_conn_id: the ``doris`` connection; defaults to ``doris_default``.
    """

    conn_name_attr = "doris_conn_id"
    default_conn_name = "doris_default"
    conn_type = "doris"
    hook_name = "Apache Doris (Stream Load)"
    supports_autocommit = True
    _placeholder = "%s"
    _test_connection_sql = "SELECT 1"

    def __init__(self, doris_conn_id: str = default_conn_name, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, doris_conn_id=doris_conn_id, **kwargs)
        self.doris_conn_id: str = getattr(self, self.conn_name_attr)
        # common.sql's ``hook_params={"schema": ...}``: a database other than the connection's.
        self._schema_override: str | None = kwargs.get("schema") or None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(doris_conn_id={self.doris_conn_id!r})"

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        """Extra fields of the connection form on Airflow < 3.2 (3.2+ reads ``conn-fields``)."""
        from flask_appbuilder.fieldwidgets import BS3TextFieldWidget
        from flask_babel import lazy_gettext
        from wtforms import BooleanField, IntegerField, StringField

        def widget(spec: Mapping[str, Any]) -> Any:
            label = lazy_gettext(spec["label"])
            types = spec["schema"]["type"]
            default = spec["schema"].get("default")
            if "boolean" in types:
                return BooleanField(label, description=spec["description"], default=default)
            if "integer" in types:
                return IntegerField(
                    label, description=spec["description"], default=default, widget=BS3TextFieldWidget()
                )
            return StringField(label, description=spec["description"], widget=BS3TextFieldWidget())

        return {name: widget(spec) for name, spec in DORIS_CONN_FIELDS.items()}

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Relabelled and hidden standard fields on Airflow < 3.2 (same values as the provider info)."""
        behaviour = _doris_connection_type()["ui-field-behaviour"]
        return {
            "hidden_fields": list(behaviour["hidden-fields"]),
            "relabeling": dict(behaviour["relabeling"]),
            "placeholders": dict(behaviour["placeholders"]),
        }

    # -- the HTTP side: the Stream Load client ----------------------------------------------------

    def connection_config(self) -> DorisConnectionConfig:
        """The core client configuration read from the connection.

        :raises ConfigurationError: Airflow has no connection ``doris_conn_id``.
        """
        try:
            conn = self.connection
        except AirflowNotFoundException:
            raise ConfigurationError(
                f"The Doris connection {self.doris_conn_id!r} does not exist in Airflow: add it (conn type doris: "
                "the FE's host and HTTP port, user, password) or set doris_conn_id to one that exists"
            ) from None
        extras = conn.extra_dejson
        return DorisConnectionConfig(
            host=self._host(),
            port=int(conn.port or DEFAULT_FE_HTTP_PORT),
            user=conn.login or "root",
            password=conn.password or "",
            https=_as_bool(_extra(extras, "https")),
            be_hosts=_as_list(_extra(extras, "be_hosts")),
            allowed_redirect_hosts=_as_list(_extra(extras, "allowed_redirect_hosts")),
            be_address_map=_as_mapping(self.doris_conn_id, _extra(extras, "be_address_map")),
            label_keep_seconds=int(_extra(extras, "label_keep_seconds") or DEFAULT_LABEL_KEEP_SECONDS),
        )

    def get_client(self) -> DorisStreamLoadClient:
        """A new core client for this connection (one per task or Spark partition)."""
        return DorisStreamLoadClient(self.connection_config())

    @cached_property
    def stream_load_client(self) -> DorisStreamLoadClient:
        """The hook's own Stream Load client, created on first use (:meth:`get_conn` is the
        MySQL protocol connection)."""
        return self.get_client()

    @cached_property
    def default_database(self) -> str | None:
        """The database a method called without ``database`` uses: the hook's ``schema``
        parameter, else the connection's schema."""
        return self._schema_override or self.connection.schema or None

    # -- the MySQL protocol side: common.sql ------------------------------------------------------

    @cached_property
    def query_port(self) -> int:
        """The FE's MySQL protocol port: the connection's ``query_port`` extra, default 9030."""
        value = _extra(self.connection.extra_dejson, "query_port")
        if value in (None, ""):
            return DEFAULT_QUERY_PORT
        try:
            port = int(value)
        except (TypeError, ValueError):
            port = 0
        if not 0 < port < 65536:
            raise ConfigurationError(
                f"query_port of connection {self.doris_conn_id!r} must be a port number (1..65535), got {value!r}"
            )
        return port

    @property
    def query_address(self) -> str:
        """``host:query_port`` of the FE's MySQL protocol port."""
        return join_host_port(self._host(), self.query_port)

    def get_conn(self) -> MySQLConnection:
        """A new PyMySQL connection to the FE's MySQL protocol port, as the connection's user,
        in its default database; the caller closes it.

        :raises pymysql.err.OperationalError: the FE refused or could not be reached; the message
            names the Airflow connection and the address (never the password).
        """
        conn = self.connection
        host, port = self._host(), self.query_port
        try:
            return pymysql.connect(
                host=host, port=port, user=conn.login or "root", password=conn.password or "",
                database=self.default_database, charset="utf8mb4",
            )  # fmt: skip
        except pymysql.err.OperationalError as exc:
            code, message = (*exc.args, None, "")[:2]
            where = f"Doris connection {self.doris_conn_id!r}, MySQL protocol at {self.query_address}"
            raise pymysql.err.OperationalError(code, f"{message} ({where})") from None

    def set_autocommit(self, conn: MySQLConnection, autocommit: bool) -> None:
        """PyMySQL's ``autocommit`` is a method, not the attribute DbApiHook assigns."""
        conn.autocommit(autocommit)

    def get_autocommit(self, conn: MySQLConnection) -> bool:
        return bool(conn.get_autocommit())

    @cached_property
    def dialect_name(self) -> str:
        return "mysql"

    @property
    def sqlalchemy_url(self) -> URL:
        """``mysql+pymysql://`` to the FE's query port (SQLAlchemy's MySQL dialect over PyMySQL)."""
        from sqlalchemy.engine import URL

        conn = self.connection
        return URL.create(
            "mysql+pymysql", username=conn.login or "root", password=conn.password or None, host=self._host(),
            port=self.query_port, database=self.default_database,
        )  # fmt: skip

    def get_uri(self) -> str:
        """The SQLAlchemy URI of :attr:`sqlalchemy_url`, password included (as every DbApiHook's)."""
        return self.sqlalchemy_url.render_as_string(hide_password=False)

    def get_sqlalchemy_engine(self, engine_kwargs: dict[str, Any] | None = None) -> Engine:
        """An engine on :attr:`sqlalchemy_url`; unlike DbApiHook's, it never logs the URL (whose
        text shows the password on SQLAlchemy 1.4)."""
        from sqlalchemy import create_engine

        return create_engine(self.sqlalchemy_url, **(engine_kwargs or {}))

    # -- OpenLineage (SQL operators on this connection) -------------------------------------------

    def get_openlineage_database_info(self, connection: Any) -> DatabaseInfo:
        """Tables are ``doris://<FE host>:<query_port>`` / ``<database>.<table>``, the names the
        loader gives its own output (``airflow_provider_kinesis_doris.lineage``), so lineage of SQL
        run on this connection joins the loads."""
        from airflow.providers.openlineage.sqlparser import DatabaseInfo

        return DatabaseInfo(
            scheme="doris",
            authority=self.query_address,
            information_schema_columns=["table_schema", "table_name", "column_name", "ordinal_position", "column_type"],
            information_schema_table_name="information_schema.columns",
            normalize_name_method=lambda name: name,
        )

    def get_openlineage_database_dialect(self, connection: Any) -> str:
        """Doris parses as MySQL."""
        return "mysql"

    def get_openlineage_default_schema(self) -> str | None:
        """None: names have two parts, database and table, as MySQL's."""
        return None

    # -- operations -----------------------------------------------------------------------------

    def stream_load(
        self,
        table: str,
        body: Body,
        *,
        label: str | None = None,
        options: StreamLoadOptions | None = None,
        database: str | None = None,
    ) -> StreamLoadResult:
        """Send one Stream Load; see :meth:`DorisStreamLoadClient.stream_load`.

        :param table: target table.
        :param body: the rows, as bytes or a ``StreamingBody``.
        :param label: the load's label.
        :param options: format and other headers.
        :param database: target database; the connection's schema by default.
        """
        client = self.stream_load_client
        return client.stream_load(self._database(database), table, body, label=label, options=options)

    def load_idempotently(
        self,
        table: str,
        label: str,
        body: Body,
        options: StreamLoadOptions | None = None,
        *,
        database: str | None = None,
        precommitted_policy: PrecommittedPolicy = PrecommittedPolicy.FAIL,
    ) -> IdempotentLoadResult:
        """Load exactly once under ``label``; see :meth:`DorisStreamLoadClient.load_idempotently`.

        :param table: target table.
        :param label: the chunk's label.
        :param body: the rows.
        :param options: format and other headers.
        :param database: target database; the connection's schema by default.
        :param precommitted_policy: what to do with a label left PRECOMMITTED.
        """
        return self.stream_load_client.load_idempotently(
            self._database(database), table, label, body, options, precommitted_policy=precommitted_policy
        )

    def get_load_state(self, label: str, *, database: str | None = None) -> LabelState:
        """The state of ``label``; see :meth:`DorisStreamLoadClient.get_load_state`.

        :param label: the label.
        :param database: the label's database; the connection's schema by default.
        """
        return self.stream_load_client.get_load_state(self._database(database), label)

    def run_sql(self, statement: str, *, database: str | None = None) -> SqlResult:
        """Run one statement through the FE's HTTP SQL endpoint (``POST /api/query``).

        The loader uses this path, not :meth:`get_conn`, so that a worker needs only the FE's
        HTTP port, which Stream Load needs anyway, and no MySQL port opened to it. The HTTP
        endpoint returns at most 1,000 rows of a query: for larger results, and for everything
        common.sql offers (``get_records``, ``run``, the SQL operators), use the MySQL protocol.

        :param statement: the SQL statement.
        :param database: default database; the connection's schema by default.
        """
        return self.stream_load_client.run_sql(self._database(database), statement)

    def column_types(self, database: str, table: str) -> list[tuple[str, str]]:
        """(name, Doris type) of each column of ``database.table``, from ``DESC`` (HTTP SQL path)."""
        described = self.run_sql(f"DESC {qualified_name(database, table)}", database=database)
        return [(str(row[0]), str(row[1])) for row in described.rows]

    def ensure_dead_letter_table(
        self, database: str, table: str, dead_letter_table: str, properties: Mapping[str, str] | None = None
    ) -> None:
        """Create ``database.dead_letter_table`` if missing, once ``database.table`` (the load's
        target, which the loader never creates) is known to exist.

        :param properties: the dead-letter table's ``PROPERTIES`` when it is created.
        :raises ConfigurationError: the target table does not exist, naming the tables the
            connection sees.
        """
        tables = {row[0] for row in self.run_sql("SHOW TABLES", database=database).rows}
        if table not in tables:
            raise ConfigurationError(
                f"Doris table {database}.{table} does not exist (the connection {self.doris_conn_id!r} sees "
                f"{sorted(tables)[:20]}); create it first"
            )
        if dead_letter_table not in tables:
            self.run_sql(dead_letter_ddl(database, dead_letter_table, properties), database=database)
            self.log.info("created dead-letter table %s.%s", database, dead_letter_table)

    def audit(
        self, store: CheckpointStore, target: AuditTarget, start_ms: int, end_ms: int,
        read_positions: PositionReader | None = None,
    ) -> AuditReport:  # fmt: skip
        """``core.audit.audit`` of ``[start_ms, end_ms)``, its SQL through the MySQL protocol
        (:meth:`get_records`: every row; the HTTP SQL endpoint stops at 1,000); ``read_positions``
        names the records Doris lacks."""
        return audit(store, self.get_records, target, start_ms, end_ms, read_positions)

    def preflight(self, settings: DorisPreflightSettings) -> PreflightReport:
        """Check what exactly-once assumes of this Doris for a pipeline's ``settings``: FE and BE
        configs, the table's group commit mode and columns, the user's privileges, the BEs loads
        are redirected to (``core.doris.preflight``), through the HTTP SQL endpoint as the loader's statements go.

        :param settings: the pipeline's settings (``DorisPreflightSettings.from_pipeline``).
        """
        run_sql = partial(self.run_sql, database=settings.database)
        return doris_preflight(run_sql, settings, self.stream_load_client.config)

    def test_connection(self, preflight: DorisPreflightSettings | None = None) -> tuple[bool, str]:
        """``SELECT 1`` over both ways to the FE, MySQL protocol first; says which one failed.

        :param preflight: deep mode: then also :meth:`preflight` with these settings, failing on a
            fatal item; the message lists every item that is not ok.
        """
        deep = None if preflight is None else partial(self.preflight, preflight)
        return deep_connection_test(self._test_both_ways(), deep, (KinesisDorisError,))

    def _test_both_ways(self) -> tuple[bool, str]:
        try:
            row = self.get_first(self._test_connection_sql)
        except (pymysql.err.Error, KinesisDorisError) as exc:
            return False, f"The MySQL protocol (query_port) failed: {_error_text(exc)}"
        if not row or str(row[0]) != "1":
            return False, f"The MySQL protocol at {self.query_address} failed: SELECT 1 returned {row!r}"
        config = self.stream_load_client.config
        try:
            result = self.run_sql(self._test_connection_sql)
        except KinesisDorisError as exc:
            return False, f"The MySQL protocol works; the HTTP SQL endpoint at {config.fe_address} failed: {exc}"
        if not result.rows or str(result.rows[0][0]) != "1":
            return False, f"The HTTP SQL endpoint at {config.fe_address} failed: SELECT 1 returned {result.rows!r}"
        return True, (
            f"Connected to Doris FE {self.query_address} (MySQL protocol) and {config.fe_address} (HTTP) "
            f"as {config.user}"
        )

    def _host(self) -> str:
        host = self.connection.host
        if not host:
            raise ConfigurationError(f"Connection {self.doris_conn_id!r} has no host (the Doris FE)")
        return host

    def _database(self, database: str | None) -> str:
        chosen = database or self.default_database
        if not chosen:
            raise ConfigurationError(
                f"No database given and connection {self.doris_conn_id!r} has no schema (default database)"
            )
        return chosen


def _doris_connection_type() -> dict[str, Any]:
    entries = get_provider_info()["connection-types"]
    return next(entry for entry in entries if entry["connection-type"] == "doris")


def _error_text(exc: BaseException) -> str:
    """PyMySQL's ``(code, message)`` as ``message (code)``; other errors as they are."""
    if isinstance(exc, pymysql.err.Error) and len(exc.args) == 2:
        return f"{exc.args[1]} (MySQL error {exc.args[0]})"
    return str(exc)


def _extra(extras: Mapping[str, Any], name: str) -> Any:
    # Airflow stores form fields under the plain name; older forms used the prefixed one.
    value = extras.get(name)
    return extras.get(f"extra__doris__{name}") if value in (None, "") else value


def _as_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def _as_list(value: Any) -> tuple[str, ...]:
    if not value:
        return ()
    items = value.split(",") if isinstance(value, str) else value
    return tuple(str(item).strip() for item in items if str(item).strip())


def _as_mapping(conn_id: str, value: Any) -> dict[str, str]:
    if not value:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ConfigurationError(f"be_address_map of connection {conn_id!r} is not valid JSON") from None
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"be_address_map of connection {conn_id!r} must be a JSON object")
    return {str(key): str(target) for key, target in value.items()}
