"""Storage of the Doris stand-in (:class:`Storage`): databases and tables in SQLite, the Doris
functions SQLite is taught, and SELECTs answered by SQLite over the stored rows (their row limit
and its warning, :func:`truncation_message`). The schema model is ``doris_schema``, the DDL
``doris_ddl``, the statement dispatcher ``doris_statements``.

Each Doris database is one SQLite file ``<root>/<db>.sqlite3``. A table ``t`` is stored in the
physical table ``__tbl_t`` (its columns plus Doris's hidden ``__DORIS_SEQUENCE_COL__`` and
``__DORIS_DELETE_SIGN__``) and shown through the view ``t``, so ``SELECT *`` returns exactly the
declared columns, as in Doris. Everything here runs under the caller's lock (``Storage.lock``).
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kinesis_doris_devstack.doris_ddl import CreateTable, build_schema
from kinesis_doris_devstack.doris_schema import (
    DELETE_SIGN_COLUMN,
    DUP_KEYS,
    DorisSqlError,
    INFORMATION_SCHEMA,
    SEQUENCE_COLUMN,
    StatementResult,
    TableSchema,
)


_NAME_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
_FIRST_DB_ID = 10001

log = logging.getLogger(__name__)


# --- storage -----------------------------------------------------------------------------------


def quote_identifier(name: str) -> str:
    """A name as a SQLite identifier."""
    return '"' + name.replace('"', '""') + '"'


def physical_table(name: str) -> str:
    """SQLite table holding a Doris table's rows (with the hidden columns)."""
    return f"__tbl_{name}"


def _is_database_name(name: str) -> bool:
    return bool(_NAME_PATTERN.match(name))


class Storage:
    """Doris databases as SQLite files under ``root``; callers hold ``lock`` around every call.

    :param root: directory of the database files (created if missing).
    :param bootstrap_ddl: SQLite statements run on every database file when opened (the
        transaction manager's bookkeeping tables).
    :param durable: fsync commits (a ``--data-dir`` server) or not (a throw-away temp dir).
    """

    def __init__(self, root: Path, bootstrap_ddl: Sequence[str] = (), durable: bool = True) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.lock = threading.RLock()
        self._bootstrap_ddl = tuple(bootstrap_ddl)
        self._durable = durable
        self._connections: dict[str, sqlite3.Connection] = {}
        for path in sorted(self.root.glob("*.sqlite3")):
            self._open(path.stem)

    def close(self) -> None:
        with self.lock:
            for connection in self._connections.values():
                connection.close()
            self._connections.clear()

    # databases

    def database_names(self) -> list[str]:
        return sorted(self._connections)

    def has_database(self, db: str) -> bool:
        return db in self._connections

    def connection(self, db: str) -> sqlite3.Connection:
        """The SQLite connection of a Doris database; :class:`DorisSqlError` if unknown."""
        try:
            return self._connections[db]
        except KeyError:
            raise DorisSqlError(f"Unknown database '{db}'", 1049) from None

    def database_id(self, db: str) -> int:
        row = self.connection(db).execute("SELECT value FROM __doris_meta WHERE key = 'db_id'").fetchone()
        return int(row[0])

    def create_database(self, db: str, if_not_exists: bool) -> None:
        if not _is_database_name(db) or db == INFORMATION_SCHEMA:
            raise DorisSqlError(f"Incorrect database name '{db}'", 1102)
        if self.has_database(db):
            if if_not_exists:
                return
            raise DorisSqlError(f"Can't create database '{db}'; database exists", 1007)
        next_id = max([_FIRST_DB_ID - 1, *(self.database_id(name) for name in self._connections)]) + 1
        connection = self._open(db)
        with transaction(connection):
            connection.execute("INSERT INTO __doris_meta VALUES ('db_id', ?)", (str(next_id),))

    def drop_database(self, db: str, if_exists: bool) -> None:
        if not self.has_database(db):
            if if_exists:
                return
            raise DorisSqlError(f"Can't drop database '{db}'; database doesn't exist", 1008)
        self._connections.pop(db).close()
        for other in self._connections.values():
            if db in {row[1] for row in other.execute("PRAGMA database_list")}:
                other.execute("DETACH DATABASE " + quote_identifier(db))
        for suffix in ("", "-wal", "-shm", "-journal"):
            self._path(db).with_name(self._path(db).name + suffix).unlink(missing_ok=True)

    def _path(self, db: str) -> Path:
        return self.root / f"{db}.sqlite3"

    def _open(self, db: str) -> sqlite3.Connection:
        connection = sqlite3.connect(self._path(db), check_same_thread=False, isolation_level=None)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute(f"PRAGMA synchronous={'NORMAL' if self._durable else 'OFF'}")
        connection.execute("CREATE TABLE IF NOT EXISTS __doris_meta (key TEXT PRIMARY KEY, value TEXT)")
        connection.execute(
            "CREATE TABLE IF NOT EXISTS __doris_tables (name TEXT PRIMARY KEY, schema_json TEXT NOT NULL)"
        )
        for statement in self._bootstrap_ddl:
            connection.execute(statement)
        for name, (arity, function) in _DORIS_FUNCTIONS.items():
            connection.create_function(name, arity, function, deterministic=True)
        self._connections[db] = connection
        return connection

    # tables

    def table_names(self, db: str) -> list[str]:
        rows = self.connection(db).execute("SELECT name FROM __doris_tables ORDER BY name").fetchall()
        return [r[0] for r in rows]

    def table_schema(self, db: str, table: str) -> TableSchema | None:
        row = self.connection(db).execute(
            "SELECT schema_json FROM __doris_tables WHERE name = ?", (table,)
        ).fetchone()
        return TableSchema.from_json(row[0]) if row else None

    def create_table(self, db: str, statement: CreateTable) -> None:
        connection = self.connection(db)
        if self.table_schema(db, statement.name) is not None:
            if statement.if_not_exists:
                return
            raise DorisSqlError(f"Table '{statement.name}' already exists", 1050)
        schema = build_schema(statement, table_id=self._next_table_id())
        column_sql = [f"{quote_identifier(c.name)} {c.type.sqlite_type}" for c in schema.columns]
        hidden = [f"{quote_identifier(DELETE_SIGN_COLUMN)} INTEGER NOT NULL DEFAULT 0"]
        if schema.sequence_type:
            hidden.insert(0, f"{quote_identifier(SEQUENCE_COLUMN)} {schema.sequence_type.sqlite_type}")
        physical = quote_identifier(physical_table(schema.name))
        visible = ", ".join(quote_identifier(c.name) for c in schema.columns)
        with transaction(connection):
            connection.execute(f"CREATE TABLE {physical} ({', '.join(column_sql + hidden)})")
            if schema.keys_type != DUP_KEYS:
                keys = ", ".join(quote_identifier(c.name) for c in schema.key_columns)
                connection.execute(f"CREATE INDEX {quote_identifier('__idx_' + schema.name)} ON {physical} ({keys})")
            connection.execute(
                f"CREATE VIEW {quote_identifier(schema.name)} AS SELECT {visible} FROM {physical} "
                f"WHERE {quote_identifier(DELETE_SIGN_COLUMN)} = 0"
            )
            connection.execute("INSERT INTO __doris_tables VALUES (?, ?)", (schema.name, schema.to_json()))

    def _next_table_id(self) -> int:
        ids = [
            TableSchema.from_json(row[0]).table_id
            for db in self._connections
            for row in self._connections[db].execute("SELECT schema_json FROM __doris_tables")
        ]
        return max([_FIRST_DB_ID + 1000, *ids]) + 1

    def drop_table(self, db: str, table: str, if_exists: bool) -> None:
        connection = self.connection(db)
        if self.table_schema(db, table) is None:
            if if_exists:
                return
            raise DorisSqlError(f"Unknown table '{table}'", 1051)
        with transaction(connection):
            connection.execute(f"DROP VIEW {quote_identifier(table)}")
            connection.execute(f"DROP TABLE {quote_identifier(physical_table(table))}")
            connection.execute("DELETE FROM __doris_tables WHERE name = ?", (table,))

    def truncate_table(self, db: str, table: str) -> None:
        connection = self.connection(db)
        if self.table_schema(db, table) is None:
            raise DorisSqlError(f"Unknown table '{table}'", 1051)
        with transaction(connection):
            connection.execute(f"DELETE FROM {quote_identifier(physical_table(table))}")

    # queries

    def select(self, db: str, sql: str, limit: int | None) -> StatementResult:
        """Run a read-only SQL query with ``db`` as the current database; ``limit`` None: every row."""
        connection = self.connection(db)
        attached = self._attach_referenced_databases(connection, sql)
        connection.execute("PRAGMA query_only = 1")
        try:
            cursor = connection.execute(_sqlite_spelling(sql))
            fetched = cursor.fetchall() if limit is None else cursor.fetchmany(limit + 1)
            rows = tuple(tuple(r) for r in fetched)
            columns = tuple(d[0] for d in cursor.description or ())
            cursor.close()
        except sqlite3.Error as exc:
            raise DorisSqlError(str(exc)) from exc
        finally:
            connection.execute("PRAGMA query_only = 0")
            # Attached only for this query: a database file attached to a connection stays locked
            # against the other connections' writes (a later load or DDL got "database is locked").
            for name in attached:
                connection.execute("DETACH DATABASE " + quote_identifier(name))
        truncated = False
        if limit is not None and len(rows) > limit:
            rows, truncated = rows[:limit], True
            log.warning(truncation_message(db, sql, limit))
        return StatementResult("result_set", columns, _result_types(rows, len(columns)), rows, truncated)

    def _attach_referenced_databases(self, connection: sqlite3.Connection, sql: str) -> list[str]:
        """Attach the databases ``sql`` names (``db.table``); the names attached."""
        present = {row[1] for row in connection.execute("PRAGMA database_list")}
        attached = []
        for word in set(re.findall(r"`?([A-Za-z][A-Za-z0-9_-]*)`?\s*\.", sql)):
            # the current database too: `db.table` must resolve although it is SQLite's "main"
            if word not in present and self.has_database(word):
                connection.execute("ATTACH DATABASE ? AS " + quote_identifier(word), (str(self._path(word)),))
                attached.append(word)
        return attached


def _from_unixtime(seconds: int | float | None) -> str | None:
    """Doris's ``FROM_UNIXTIME(seconds)`` in the stand-in's only time zone, UTC."""
    if seconds is None:
        return None
    return datetime.fromtimestamp(int(seconds), tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _from_base64(text: str | None) -> str | None:
    """Doris's ``FROM_BASE64``: the decoded text, NULL for input that is not base64."""
    try:
        return None if text is None else base64.b64decode(text, validate=True).decode("utf-8", "replace")
    except binascii.Error:
        return None


def substring_index(text: str | None, delimiter: str | None, count: int | None) -> str | None:
    """Doris's ``SUBSTRING_INDEX``: before the ``count``-th delimiter from the left, or (a
    negative count) after the ``count``-th from the right; the whole text when there are fewer;
    ``''`` for a count of 0 or an empty delimiter; NULL in, NULL out."""
    if text is None or delimiter is None or count is None:
        return None
    if count == 0 or not delimiter:
        return ""
    parts = text.split(delimiter)
    return delimiter.join(parts[:count]) if count > 0 else delimiter.join(parts[count:])


def left(text: str | None, length: int | None) -> str | None:
    """Doris's ``LEFT``: the first ``length`` characters, ``''`` for a length below 1."""
    if text is None or length is None:
        return None
    return text[:max(int(length), 0)]


def right(text: str | None, length: int | None) -> str | None:
    """Doris's ``RIGHT``: the last ``length`` characters, ``''`` for a length below 1."""
    if text is None or length is None:
        return None
    return text[len(text) - min(max(int(length), 0), len(text)):]


# The Doris functions the documented queries use that SQLite lacks, by name and argument count.
_DORIS_FUNCTIONS: dict[str, tuple[int, Any]] = {
    "FROM_UNIXTIME": (1, _from_unixtime),
    "FROM_BASE64": (1, _from_base64),
    "SUBSTRING_INDEX": (3, substring_index),
    "DORIS_LEFT": (2, left),
    "DORIS_RIGHT": (2, right),
}
# String literals and backticked names, where a ``DIV`` is text, not the operator.
_QUOTED = re.compile(r"""('(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*"|`[^`]*`)""")


# Doris syntax SQLite reads otherwise: ``a DIV b`` is SQLite's ``a / b`` (which truncates integers
# alike); ``LEFT(`` / ``RIGHT(`` are join keywords to SQLite, so the functions go by other names.
_SQLITE_SPELLINGS = ((re.compile(r"\bDIV\b", re.I), "/"), (re.compile(r"\b(LEFT|RIGHT)(\s*\()", re.I), r"DORIS_\1\2"))


def _sqlite_spelling(sql: str) -> str:
    """The query as SQLite reads it (outside quotes)."""
    parts = _QUOTED.split(sql)
    return "".join(part if index % 2 else _respelled(part) for index, part in enumerate(parts))


def _respelled(text: str) -> str:
    for pattern, replacement in _SQLITE_SPELLINGS:
        text = pattern.sub(replacement, text)
    return text


def _result_types(rows: Sequence[tuple[Any, ...]], width: int) -> tuple[str, ...]:
    """Column type names for the result meta, guessed from the first non-NULL value."""
    names = []
    for index in range(width):
        sample = next((row[index] for row in rows if row[index] is not None), None)
        names.append(
            "BIGINT" if isinstance(sample, int) else "DOUBLE" if isinstance(sample, float)
            else "NULL_TYPE" if sample is None else "VARCHAR"
        )
    return tuple(names)


@contextmanager
def transaction(connection: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One SQLite transaction (connections run in autocommit mode otherwise)."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        yield connection
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")


def truncation_message(db: str, sql: str, limit: int) -> str:
    """What the stand-in logs when a query matched more rows than it returns."""
    statement = " ".join(sql.split())
    statement = statement if len(statement) <= 200 else statement[:197] + "..."
    return (
        f"Doris stand-in: the query in database {db!r} matched more than {limit} rows; only the first {limit} "
        f"are returned (truncated). Ask for more with \"limit\" in the SQL endpoint's request body (default "
        f"1000), or count with SELECT COUNT(*): {statement}"
    )
