"""Storage and SQL subset of the Doris stand-in: table schemas, the DDL Doris users write, and
SELECTs answered by SQLite over the stored rows.

Each Doris database is one SQLite file ``<root>/<db>.sqlite3``. A table ``t`` is stored in the
physical table ``__tbl_t`` (its columns plus Doris's hidden ``__DORIS_SEQUENCE_COL__`` and
``__DORIS_DELETE_SIGN__``) and shown through the view ``t``, so ``SELECT *`` returns exactly the
declared columns, as in Doris. Everything here runs under the caller's lock (``Storage.lock``).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol

import sqlglot
from sqlglot import expressions as exp

SEQUENCE_COLUMN = "__DORIS_SEQUENCE_COL__"
DELETE_SIGN_COLUMN = "__DORIS_DELETE_SIGN__"
INFORMATION_SCHEMA = "information_schema"
DUP_KEYS, UNIQUE_KEYS, AGG_KEYS = "DUP_KEYS", "UNIQUE_KEYS", "AGG_KEYS"
AGGREGATE_FUNCTIONS = ("SUM", "MAX", "MIN", "REPLACE", "REPLACE_IF_NOT_NULL")
_NAME_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
_FIRST_DB_ID = 10001

log = logging.getLogger(__name__)

# Doris type name -> (canonical name, SQLite column type giving the right affinity)
_TYPES: dict[str, tuple[str, str]] = {
    "TINYINT": ("TINYINT", "INTEGER"),
    "SMALLINT": ("SMALLINT", "INTEGER"),
    "INT": ("INT", "INTEGER"),
    "INTEGER": ("INT", "INTEGER"),
    "BIGINT": ("BIGINT", "INTEGER"),
    "LARGEINT": ("LARGEINT", "NUMERIC"),
    "FLOAT": ("FLOAT", "REAL"),
    "DOUBLE": ("DOUBLE", "REAL"),
    "DECIMAL": ("DECIMAL", "NUMERIC"),
    "DECIMALV3": ("DECIMAL", "NUMERIC"),
    "CHAR": ("CHAR", "TEXT"),
    "VARCHAR": ("VARCHAR", "TEXT"),
    "STRING": ("STRING", "TEXT"),
    "TEXT": ("STRING", "TEXT"),
    "DATE": ("DATE", "TEXT"),
    "DATEV2": ("DATE", "TEXT"),
    "DATETIME": ("DATETIME", "TEXT"),
    "DATETIMEV2": ("DATETIME", "TEXT"),
    "BOOLEAN": ("BOOLEAN", "INTEGER"),
    "BOOL": ("BOOLEAN", "INTEGER"),
    "JSON": ("JSON", "TEXT"),
    "JSONB": ("JSON", "TEXT"),
}
_SEQUENCE_TYPES = ("TINYINT", "SMALLINT", "INT", "BIGINT", "LARGEINT", "DATE", "DATETIME")


class DorisSqlError(Exception):
    """A statement failed the way Doris would refuse it; ``str()`` is Doris's detail message."""

    def __init__(self, message: str, errcode: int = 1105) -> None:
        super().__init__(message)
        self.errcode = errcode


# --- privileges ----------------------------------------------------------------------------------


class Grantee(Protocol):
    """Who runs a statement (``doris_admin.Session``): the checks Doris makes before running it."""

    @property
    def user(self) -> str: ...

    @property
    def remote_ip(self) -> str: ...

    def holds(self, privilege: str, db: str = "", table: str = "") -> bool:
        """``privilege`` (``Select_priv``...) globally, on ``db`` or on ``db.table``, or Admin_priv."""
        ...

    def sees(self, db: str, table: str = "") -> bool:
        """``PrivPredicate.SHOW``: any table privilege on the table (or within the database)."""
        ...


def access_denied(privileges: str) -> DorisSqlError:
    """``ErrorCode.ERR_SPECIFIC_ACCESS_DENIED_ERROR`` (1227) with the privileges the statement names."""
    return DorisSqlError(f"Access denied; you need (at least one of) the ({privileges}) privilege(s) for this operation",
                         1227)


def require_table_privilege(grantee: Grantee, privilege: str, command: str, db: str, table: str) -> None:
    """``ERR_TABLEACCESS_DENIED_ERROR`` (1142) unless ``grantee`` holds ``privilege`` on the table;
    the table named ``db: table`` as the Nereids commands name it."""
    if not grantee.holds(privilege, db, table):
        raise DorisSqlError(
            f"{command} command denied to user '{grantee.user}'@'{grantee.remote_ip}' for table '{db}: {table}'", 1142)


def _require_database_privilege(grantee: Grantee, privilege: str, db: str) -> None:
    # ERR_DBACCESS_DENIED_ERROR (1044), as CREATE / DROP DATABASE report it.
    if not grantee.holds(privilege, db):
        raise DorisSqlError(f"Access denied for user '{grantee.user}' to database '{db}'", 1044)


# --- schema model ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ColumnType:
    """A Doris scalar type: ``name`` canonical (INT, VARCHAR, DECIMAL...), with its arguments."""

    name: str
    length: int | None = None  # CHAR/VARCHAR bytes
    precision: int | None = None  # DECIMAL precision, DATETIME fractional digits
    scale: int | None = None  # DECIMAL scale

    @property
    def sqlite_type(self) -> str:
        return _TYPES[self.name][1]

    def display(self) -> str:
        """The type as Doris's DESC prints it."""
        if self.name == "DECIMAL":
            return f"DECIMAL({self.precision}, {self.scale})"
        if self.name in ("CHAR", "VARCHAR"):
            return f"{self.name}({self.length})"
        if self.name == "DATETIME" and self.precision:
            return f"DATETIME({self.precision})"
        return self.name


@dataclass(frozen=True)
class ColumnDef:
    """One declared column."""

    name: str
    type: ColumnType
    nullable: bool = True
    default: str | None = None  # literal text; CURRENT_TIMESTAMP is kept as that keyword
    aggregation: str | None = None
    is_key: bool = False


@dataclass(frozen=True)
class TableSchema:
    """A table's model as the load path needs it."""

    name: str
    table_id: int
    keys_type: str
    columns: tuple[ColumnDef, ...]
    sequence_col: str | None = None  # function_column.sequence_col: a declared column
    sequence_type: ColumnType | None = None  # type of the hidden sequence column, if any
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def key_columns(self) -> tuple[ColumnDef, ...]:
        return tuple(c for c in self.columns if c.is_key)

    @property
    def has_sequence(self) -> bool:
        return self.sequence_type is not None

    def column(self, name: str) -> ColumnDef | None:
        lowered = name.lower()
        return next((c for c in self.columns if c.name.lower() == lowered), None)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> TableSchema:
        raw = json.loads(text)
        columns = tuple(
            ColumnDef(**{**c, "type": ColumnType(**c["type"])}) for c in raw.pop("columns")
        )
        seq_type = raw.pop("sequence_type")
        return cls(columns=columns, sequence_type=ColumnType(**seq_type) if seq_type else None, **raw)


# --- tokenizer and a small cursor over tokens ----------------------------------------------


_TOKEN_RE = re.compile(
    r"""(?P<skip>\s+|--[^\n]*|/\*.*?\*/)
      |(?P<quoted>`(?:[^`]|``)*`)
      |(?P<string>'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*")
      |(?P<number>\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+)
      |(?P<word>[A-Za-z_][A-Za-z0-9_$]*)
      |(?P<op><=|>=|<>|!=|==|[(),.=;*<>+\-/%@])""",
    re.X | re.S,
)


@dataclass(frozen=True)
class Token:
    """``kind`` is word, quoted (backticked identifier), string, number or op."""

    kind: str
    text: str
    value: str

    def is_word(self, *words: str) -> bool:
        return self.kind == "word" and self.value.upper() in words


def tokenize(text: str) -> list[Token]:
    """Split SQL text into tokens; strings are unescaped, backticked names unquoted."""
    tokens: list[Token] = []
    position = 0
    while position < len(text):
        match = _TOKEN_RE.match(text, position)
        if match is None:
            raise DorisSqlError(f"Syntax error near '{text[position:position + 20]}'", 1064)
        position = match.end()
        kind = match.lastgroup or "skip"
        raw = match.group()
        if kind == "skip":
            continue
        value = raw
        if kind == "quoted":
            value = raw[1:-1].replace("``", "`")
        elif kind == "string":
            quote = raw[0]
            value = re.sub(r"\\(.)", r"\1", raw[1:-1].replace(quote * 2, quote))
        tokens.append(Token(kind, raw, value))
    return tokens


class TokenCursor:
    """Recursive-descent helper over a token list."""

    def __init__(self, tokens: Sequence[Token]) -> None:
        self._tokens = list(tokens)
        self._index = 0

    def peek(self, ahead: int = 0) -> Token | None:
        index = self._index + ahead
        return self._tokens[index] if index < len(self._tokens) else None

    def at_end(self) -> bool:
        return self.peek() is None or (self.peek_op(";") and self.peek(1) is None)

    def next(self) -> Token:
        token = self.peek()
        if token is None:
            raise DorisSqlError("Syntax error: unexpected end of statement", 1064)
        self._index += 1
        return token

    def peek_word(self, *words: str) -> bool:
        token = self.peek()
        return token is not None and token.is_word(*words)

    def peek_op(self, op: str) -> bool:
        token = self.peek()
        return token is not None and token.kind == "op" and token.value == op

    def accept_word(self, *words: str) -> bool:
        if self.peek_word(*words):
            self._index += 1
            return True
        return False

    def accept_one_of(self, *words: str) -> str | None:
        """Accept one of the keywords and return it upper-cased, or None."""
        token = self.peek()
        if token is not None and token.is_word(*words):
            self._index += 1
            return token.value.upper()
        return None

    def accept_words(self, *words: str) -> bool:
        """Accept a keyword sequence (e.g. IF NOT EXISTS) only if all of it is there."""
        if all((tok := self.peek(i)) is not None and tok.is_word(w) for i, w in enumerate(words)):
            self._index += len(words)
            return True
        return False

    def accept_op(self, op: str) -> bool:
        if self.peek_op(op):
            self._index += 1
            return True
        return False

    def expect_word(self, *words: str) -> str:
        token = self.next()
        if not token.is_word(*words):
            raise DorisSqlError(f"Syntax error: expected {'/'.join(words)} but found '{token.text}'", 1064)
        return token.value.upper()

    def expect_op(self, op: str) -> None:
        token = self.next()
        if token.kind != "op" or token.value != op:
            raise DorisSqlError(f"Syntax error: expected '{op}' but found '{token.text}'", 1064)

    def identifier(self) -> str:
        token = self.next()
        if token.kind not in ("word", "quoted"):
            raise DorisSqlError(f"Syntax error: expected a name but found '{token.text}'", 1064)
        return token.value

    def qualified_name(self) -> tuple[str | None, str]:
        first = self.identifier()
        if self.accept_op("."):
            return first, self.identifier()
        return None, first

    def name_list(self) -> list[str]:
        self.expect_op("(")
        names = [self.identifier()]
        while self.accept_op(","):
            names.append(self.identifier())
        self.expect_op(")")
        return names

    def skip_balanced(self) -> None:
        """Skip one parenthesised group (partition definitions, index options...)."""
        self.expect_op("(")
        depth = 1
        while depth:
            token = self.next()
            if token.kind == "op" and token.value in "()":
                depth += 1 if token.value == "(" else -1

    def expect_end(self) -> None:
        self.accept_op(";")
        token = self.peek()
        if token is not None:
            raise DorisSqlError(f"Syntax error near '{token.text}'", 1064)


# --- statements --------------------------------------------------------------------------------


@dataclass(frozen=True)
class StatementResult:
    """``kind`` is ``result_set`` (columns, types, rows) or ``exec_status`` (no rows)."""

    kind: str
    columns: tuple[str, ...] = ()
    types: tuple[str, ...] = ()
    rows: tuple[tuple[Any, ...], ...] = ()
    truncated: bool = False
    """A query matched more rows than its ``limit``: ``rows`` holds the first ``limit`` only."""


EXEC_OK = StatementResult("exec_status")


def parse_type(cursor: TokenCursor) -> ColumnType:
    """Parse ``INT``, ``VARCHAR(20)``, ``DECIMAL(10, 2)``, ``DATETIME(3)``..."""
    raw_name = cursor.identifier().upper()
    if raw_name not in _TYPES:
        raise DorisSqlError(f"Unsupported type '{raw_name}' in the Doris stand-in", 1064)
    name = _TYPES[raw_name][0]
    args: list[int] = []
    if cursor.accept_op("("):
        args.append(int(cursor.next().value))
        while cursor.accept_op(","):
            args.append(int(cursor.next().value))
        cursor.expect_op(")")
    if name == "DECIMAL":
        precision = args[0] if args else 9
        scale = args[1] if len(args) > 1 else 0
        if not 1 <= precision <= 38 or not 0 <= scale <= precision:
            raise DorisSqlError(f"Invalid DECIMAL({precision}, {scale}): precision 1..38, scale 0..precision")
        return ColumnType(name, precision=precision, scale=scale)
    if name in ("CHAR", "VARCHAR"):
        default_length = 1 if name == "CHAR" else 65533
        return ColumnType(name, length=args[0] if args else default_length)
    if name == "DATETIME":
        return ColumnType(name, precision=args[0] if args else 0)
    return ColumnType(name)


def _parse_default(cursor: TokenCursor) -> str | None:
    token = cursor.next()
    if token.is_word("NULL"):
        return None
    if token.is_word("CURRENT_TIMESTAMP", "NOW"):
        if cursor.accept_op("("):
            while not cursor.accept_op(")"):
                cursor.next()
        return "CURRENT_TIMESTAMP"
    if token.kind == "op" and token.value == "-":
        return "-" + cursor.next().value
    return token.value


def _parse_column(cursor: TokenCursor) -> ColumnDef:
    name = cursor.identifier()
    ctype = parse_type(cursor)
    nullable, default, aggregation, is_key = True, None, None, False
    while not (cursor.peek_op(",") or cursor.peek_op(")")):
        if cursor.accept_word("KEY"):
            is_key = True
        elif aggregate := cursor.accept_one_of(*AGGREGATE_FUNCTIONS):
            aggregation = aggregate
        elif cursor.accept_words("NOT", "NULL"):
            nullable = False
        elif cursor.accept_word("NULL"):
            nullable = True
        elif cursor.accept_word("DEFAULT"):
            default = _parse_default(cursor)
        elif cursor.accept_word("COMMENT"):
            cursor.next()
        elif cursor.accept_word("AUTO_INCREMENT"):
            raise DorisSqlError("AUTO_INCREMENT columns are not emulated by the Doris stand-in")
        else:
            raise DorisSqlError(f"Syntax error near '{cursor.next().text}' in column '{name}'", 1064)
    return ColumnDef(name, ctype, nullable, default, aggregation, is_key)


def parse_properties(cursor: TokenCursor) -> dict[str, str]:
    """``("key" = "value", ...)``: a CREATE TABLE's PROPERTIES, an ADMIN SET CONFIG's settings."""
    cursor.expect_op("(")
    properties: dict[str, str] = {}
    while not cursor.accept_op(")"):
        key = cursor.next().value
        cursor.expect_op("=")
        properties[key] = cursor.next().value
        cursor.accept_op(",")
    return properties


@dataclass(frozen=True)
class CreateTable:
    """A parsed CREATE TABLE, before ids are assigned."""

    db: str | None
    name: str
    if_not_exists: bool
    keys_type: str
    key_names: tuple[str, ...]
    columns: tuple[ColumnDef, ...]
    properties: dict[str, str]


def parse_create_table(cursor: TokenCursor) -> CreateTable:
    """Parse the part after ``CREATE TABLE``."""
    if_not_exists = cursor.accept_words("IF", "NOT", "EXISTS")
    db, name = cursor.qualified_name()
    cursor.expect_op("(")
    columns: list[ColumnDef] = []
    while True:
        if cursor.accept_word("INDEX"):
            cursor.identifier()
            while not (cursor.peek_op(",") or cursor.peek_op(")")):
                if cursor.peek_op("("):
                    cursor.skip_balanced()
                else:
                    cursor.next()
        else:
            columns.append(_parse_column(cursor))
        if cursor.accept_op(")"):
            break
        cursor.expect_op(",")
    keys_type, key_names, properties = DUP_KEYS, (), {}
    while not cursor.at_end():
        if cursor.accept_word("ENGINE"):
            cursor.expect_op("=")
            cursor.identifier()
        elif cursor.peek_word("DUPLICATE", "UNIQUE", "AGGREGATE"):
            keys_type = {"DUPLICATE": DUP_KEYS, "UNIQUE": UNIQUE_KEYS, "AGGREGATE": AGG_KEYS}[
                cursor.expect_word("DUPLICATE", "UNIQUE", "AGGREGATE")
            ]
            cursor.expect_word("KEY")
            key_names = tuple(cursor.name_list())
        elif cursor.accept_word("COMMENT"):
            cursor.next()
        elif cursor.accept_word("AUTO") or cursor.accept_word("PARTITION"):
            # Partitions are accepted and ignored: every row lands in the one stored table.
            while not cursor.peek_op("("):
                cursor.next()
            cursor.skip_balanced()
            if cursor.peek_op("("):
                cursor.skip_balanced()
        elif cursor.accept_word("DISTRIBUTED"):
            cursor.expect_word("BY")
            if cursor.expect_word("HASH", "RANDOM") == "HASH":
                cursor.name_list()
            if cursor.accept_word("BUCKETS"):
                cursor.next()
        elif cursor.accept_word("ROLLUP"):
            cursor.skip_balanced()
        elif cursor.accept_word("PROPERTIES"):
            properties = parse_properties(cursor)
        else:
            raise DorisSqlError(f"Syntax error near '{cursor.next().text}'", 1064)
    cursor.expect_end()
    return CreateTable(db, name, if_not_exists, keys_type, key_names, tuple(columns), properties)


def build_schema(statement: CreateTable, table_id: int) -> TableSchema:
    """Check a CREATE TABLE the way Doris's analyzer does and return its schema."""
    names = [c.name.lower() for c in statement.columns]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise DorisSqlError(f"Duplicate column name '{sorted(duplicates)[0]}'", 1060)
    key_names = statement.key_names or _default_duplicate_keys(statement.columns)
    for position, key in enumerate(key_names):
        if position >= len(names) or names[position] != key.lower():
            raise DorisSqlError(
                f"Key columns should be a ordered prefix of the schema. KeyColumns[{position}] "
                f"(starts from zero) is {key}, but corresponding column is "
                f"{statement.columns[position].name if position < len(names) else '<none>'} "
                "in the previous columns declaration."
            )
    columns = tuple(
        ColumnDef(c.name, c.type, c.nullable, c.default, c.aggregation, i < len(key_names))
        for i, c in enumerate(statement.columns)
    )
    _check_aggregations(statement.keys_type, columns)
    sequence_col, sequence_type = _sequence_of(statement, columns)
    return TableSchema(
        statement.name, table_id, statement.keys_type, columns, sequence_col, sequence_type,
        dict(statement.properties),
    )


def _default_duplicate_keys(columns: Sequence[ColumnDef]) -> tuple[str, ...]:
    # Doris picks leading columns as the sort key of a DUPLICATE table when none is given.
    return tuple(c.name for c in columns[:1])


def _check_aggregations(keys_type: str, columns: Sequence[ColumnDef]) -> None:
    for column in columns:
        if column.is_key and column.aggregation:
            raise DorisSqlError(f"Key column {column.name} can not set aggregation type")
        if keys_type == AGG_KEYS and not column.is_key and not column.aggregation:
            raise DorisSqlError(f"The column '{column.name}' of aggregate table must specify aggregate type")
        if keys_type != AGG_KEYS and column.aggregation:
            raise DorisSqlError(
                f"The column '{column.name}' can not set aggregation type outside AGGREGATE KEY")


def _sequence_of(
    statement: CreateTable, columns: Sequence[ColumnDef]
) -> tuple[str | None, ColumnType | None]:
    sequence_col = statement.properties.get("function_column.sequence_col")
    sequence_type = statement.properties.get("function_column.sequence_type")
    if not (sequence_col or sequence_type):
        return None, None
    if statement.keys_type != UNIQUE_KEYS:
        raise DorisSqlError("sequence column only support UNIQUE_KEYS")
    if sequence_col:
        column = next((c for c in columns if c.name.lower() == sequence_col.lower()), None)
        if column is None:
            raise DorisSqlError(f"The specified sequence column[{sequence_col}] not exists")
        ctype = column.type
        sequence_col = column.name
    else:
        ctype = parse_type(TokenCursor(tokenize(sequence_type or "")))
    if ctype.name not in _SEQUENCE_TYPES:
        raise DorisSqlError(f"sequence type only support integer types and date types, not {ctype.display()}")
    return sequence_col, ctype


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


# --- applying loaded rows with the table model's semantics ----------------------------------


@dataclass(frozen=True)
class StagedRow:
    """A row that passed the load checks: ``values`` in schema order, ready to store.

    :param sequence: value of the sequence column (UNIQUE KEY tables with a sequence).
    :param delete: the row deletes its key (``merge_type`` DELETE / MERGE).
    """

    values: tuple[Any, ...]
    sequence: Any = None
    delete: bool = False


def storable(value: Any) -> Any:
    """SQLite has no Decimal and only 64-bit integers: store those as text."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        return str(value)
    return value


def apply_rows(connection: sqlite3.Connection, schema: TableSchema, rows: Sequence[StagedRow]) -> None:
    """Write rows inside the caller's SQLite transaction: DUPLICATE appends, UNIQUE upserts
    (sequence: larger wins, equal lets the later row win, smaller is ignored), AGGREGATE combines."""
    names = [c.name for c in schema.columns]
    if schema.sequence_type:
        names.append(SEQUENCE_COLUMN)
    names.append(DELETE_SIGN_COLUMN)
    physical = quote_identifier(physical_table(schema.name))
    placeholders = ", ".join("?" * len(names))
    insert = f"INSERT INTO {physical} ({', '.join(map(quote_identifier, names))}) VALUES ({placeholders})"
    if schema.keys_type == DUP_KEYS:
        connection.executemany(insert, [_stored_tuple(schema, row) for row in rows if not row.delete])
        return
    merged = _merge_by_key(connection, schema, rows)
    update = f"UPDATE {physical} SET {', '.join(quote_identifier(n) + ' = ?' for n in names)} WHERE rowid = ?"
    for rowid, row in merged.values():
        if rowid is None:
            connection.execute(insert, _stored_tuple(schema, row))
        else:
            connection.execute(update, (*_stored_tuple(schema, row), rowid))


def _stored_tuple(schema: TableSchema, row: StagedRow) -> tuple[Any, ...]:
    stored = [storable(v) for v in row.values]
    if schema.sequence_type:
        stored.append(storable(row.sequence))
    stored.append(1 if row.delete else 0)
    return tuple(stored)


def _merge_by_key(
    connection: sqlite3.Connection, schema: TableSchema, rows: Sequence[StagedRow]
) -> dict[tuple[Any, ...], tuple[int | None, StagedRow]]:
    key_count = len(schema.key_columns)
    merged: dict[tuple[Any, ...], tuple[int | None, StagedRow]] = {}
    for row in rows:
        key = tuple(storable(v) for v in row.values[:key_count])
        if key not in merged:
            merged[key] = _stored_row(connection, schema, key)
        rowid, current = merged[key]
        merged[key] = (rowid, _combine(schema, current, row))
    return {k: (rowid, row) for k, (rowid, row) in merged.items() if row is not None}


def _stored_row(
    connection: sqlite3.Connection, schema: TableSchema, key: tuple[Any, ...]
) -> tuple[int | None, Any]:
    keys = schema.key_columns
    where = " AND ".join(f"{quote_identifier(c.name)} IS ?" for c in keys)
    hidden = f", {quote_identifier(SEQUENCE_COLUMN)}" if schema.sequence_type else ", NULL"
    found = connection.execute(
        f"SELECT rowid, {', '.join(quote_identifier(c.name) for c in schema.columns)}{hidden}, "
        f"{quote_identifier(DELETE_SIGN_COLUMN)} FROM {quote_identifier(physical_table(schema.name))} WHERE {where}",
        key,
    ).fetchone()
    if found is None:
        return None, None
    width = len(schema.columns)
    return found[0], StagedRow(tuple(found[1:1 + width]), found[1 + width], bool(found[2 + width]))


def _combine(schema: TableSchema, current: StagedRow | None, incoming: StagedRow) -> StagedRow:
    if current is None:
        return incoming
    if schema.keys_type == UNIQUE_KEYS:
        ctype = schema.sequence_type
        if ctype and _sequence_lower(incoming.sequence, current.sequence, ctype):
            return current
        return incoming
    if current.delete:
        return incoming
    values = tuple(
        v_new if column.is_key else _aggregate(column, v_old, v_new)
        for column, v_old, v_new in zip(schema.columns, current.values, incoming.values)
    )
    return StagedRow(values)


def _sequence_lower(new: Any, old: Any, ctype: ColumnType) -> bool:
    """Whether a row's sequence value loses to the stored one (NULL sorts lowest)."""
    if old is None:
        return False
    if new is None:
        return True
    if ctype.name in ("DATE", "DATETIME"):
        return str(new) < str(old)
    return int(new) < int(old)


def _aggregate(column: ColumnDef, old: Any, new: Any) -> Any:
    function = column.aggregation
    if function == "REPLACE":
        return new
    if new is None:
        return old
    if old is None:
        return new
    if function == "REPLACE_IF_NOT_NULL":
        return new
    old_v, new_v = _comparable(column.type, old), _comparable(column.type, new)
    if function == "SUM":
        return old_v + new_v
    return max(old_v, new_v) if function == "MAX" else min(old_v, new_v)


def _comparable(ctype: ColumnType, value: Any) -> Any:
    """Stored values come back as SQLite types: bring numbers back to exact Python values."""
    if ctype.name == "DECIMAL":
        return Decimal(str(value))
    if ctype.name in ("TINYINT", "SMALLINT", "INT", "BIGINT", "LARGEINT", "BOOLEAN"):
        return int(value)
    if ctype.name in ("FLOAT", "DOUBLE"):
        return float(value)
    return value


def truncation_message(db: str, sql: str, limit: int) -> str:
    """What the stand-in logs when a query matched more rows than it returns."""
    statement = " ".join(sql.split())
    statement = statement if len(statement) <= 200 else statement[:197] + "..."
    return (
        f"Doris stand-in: the query in database {db!r} matched more than {limit} rows; only the first {limit} "
        f"are returned (truncated). Ask for more with \"limit\" in the SQL endpoint's request body (default "
        f"1000), or count with SELECT COUNT(*): {statement}"
    )


# --- the SQL endpoint's statement dispatcher -------------------------------------------------


def execute_statement(storage: Storage, db: str, sql: str, grantee: Grantee, limit: int | None = 1000) -> StatementResult:
    """Execute one statement of the supported subset with ``db`` as the current database.

    :param storage: the stand-in's storage (caller holds ``storage.lock``).
    :param db: current database ("" for none, ``information_schema`` always exists).
    :param sql: the statement text.
    :param grantee: who runs it; refused as Doris refuses a user without the privilege.
    :param limit: maximum number of rows returned by a query; a query that matches more returns
        the first ``limit`` with ``truncated`` set, and the stand-in logs a warning. None (the
        MySQL port) returns every row.
    :raises DorisSqlError: the statement is invalid or unsupported.
    """
    tokens = tokenize(sql)
    if not tokens:
        raise DorisSqlError("Syntax error: empty statement", 1064)
    cursor = TokenCursor(tokens)
    head = tokens[0].value.upper()
    if head in ("SELECT", "WITH"):
        if not db or db == INFORMATION_SCHEMA:
            raise DorisSqlError("No database selected", 1046)
        _require_select(storage, db, sql, grantee)
        return storage.select(db, sql.strip().rstrip(";"), limit)
    cursor.next()
    if head == "CREATE":
        return _create(storage, db, cursor, grantee)
    if head == "DROP":
        return _drop(storage, db, cursor, grantee)
    if head == "TRUNCATE":
        cursor.accept_word("TABLE")
        target_db, table = cursor.qualified_name()
        cursor.expect_end()
        require_table_privilege(grantee, "Load_priv", "LOAD", _resolve_db(target_db, db), table)
        storage.truncate_table(_resolve_db(target_db, db), table)
        return EXEC_OK
    if head == "SHOW":
        return _show(storage, db, cursor, grantee)
    if head in ("DESC", "DESCRIBE"):
        target_db, table = cursor.qualified_name()
        cursor.expect_end()
        if not grantee.sees(_resolve_db(target_db, db), table):
            require_table_privilege(grantee, "Select_priv", "DESCRIBE", _resolve_db(target_db, db), table)
        return _describe(storage, _resolve_db(target_db, db), table)
    raise DorisSqlError(f"Unsupported statement type in the Doris stand-in: {head}")


def _require_select(storage: Storage, db: str, sql: str, grantee: Grantee) -> None:
    """SELECT on every table the query reads (``UserAuthentication.checkPermission``): without
    it, a query naming columns of the table gets the column refusal of
    ``Auth.checkColsPriv`` (the first such column in schema order; Doris names whichever its set
    yields first), one naming none (``count(*)``) ``ERR_TABLE_ACCESS_DENIED_ERROR`` (1224)."""
    try:
        tree = sqlglot.parse_one(sql, read="mysql")
    except sqlglot.errors.ParseError:
        return  # SQLite judges the text
    named_ctes = {cte.alias_or_name for cte in tree.find_all(exp.CTE)}
    for table in tree.find_all(exp.Table):
        target = table.db or db
        if (not table.db and table.name in named_ctes) or not storage.has_database(target):
            continue
        schema = storage.table_schema(target, table.name)
        if schema is None or grantee.holds("Select_priv", target, table.name):
            continue  # an unknown table: SQLite reports it
        columns = _columns_read(tree, table, schema)
        if not columns:
            raise DorisSqlError(f"Access denied; you need (at least one of) the (Admin_priv Select_priv ) privilege(s) "
                                f"on table {schema.name} for this operation", 1224)
        raise DorisSqlError(f"Permission denied: user ['{grantee.user}'@'%'] does not have privilege for [priv "
                            f"predicate: OR, Admin_priv Select_priv ] command on [internal].[{target}].[{schema.name}]."
                            f"[{columns[0]}]")


def _columns_read(tree: exp.Expression, table: exp.Table, schema: TableSchema) -> list[str]:
    """The columns of ``schema`` the query names through ``table`` (all of them for ``*``), in schema order."""
    names = {table.alias_or_name.lower(), table.name.lower()}
    if any(isinstance(projection, exp.Star) or (isinstance(projection, exp.Column) and projection.is_star)
           for select in tree.find_all(exp.Select) for projection in select.expressions):
        return [column.name for column in schema.columns]
    named = {column.name.lower() for column in tree.find_all(exp.Column)
             if not column.table or column.table.lower() in names}
    return [column.name for column in schema.columns if column.name.lower() in named]


def _resolve_db(explicit: str | None, current: str) -> str:
    db = explicit or current
    if not db or db == INFORMATION_SCHEMA:
        raise DorisSqlError("No database selected", 1046)
    return db


def _create(storage: Storage, db: str, cursor: TokenCursor, grantee: Grantee) -> StatementResult:
    kind = cursor.expect_word("DATABASE", "SCHEMA", "TABLE")
    if kind == "TABLE":
        statement = parse_create_table(cursor)
        if not grantee.holds("Create_priv", _resolve_db(statement.db, db), statement.name):
            raise access_denied("CREATE")  # CreateTableStmt
        storage.create_table(_resolve_db(statement.db, db), statement)
        return EXEC_OK
    if_not_exists = cursor.accept_words("IF", "NOT", "EXISTS")
    name = cursor.identifier()
    if cursor.accept_word("PROPERTIES"):
        parse_properties(cursor)
    cursor.expect_end()
    _require_database_privilege(grantee, "Create_priv", name)
    storage.create_database(name, if_not_exists)
    return EXEC_OK


def _drop(storage: Storage, db: str, cursor: TokenCursor, grantee: Grantee) -> StatementResult:
    kind = cursor.expect_word("DATABASE", "SCHEMA", "TABLE")
    if_exists = cursor.accept_words("IF", "EXISTS")
    target_db, name = cursor.qualified_name()
    cursor.accept_word("FORCE")
    cursor.expect_end()
    if kind == "TABLE":
        require_table_privilege(grantee, "Drop_priv", "DROP", _resolve_db(target_db, db), name)
        storage.drop_table(_resolve_db(target_db, db), name, if_exists)
    else:
        _require_database_privilege(grantee, "Drop_priv", name)
        storage.drop_database(name, if_exists)
    return EXEC_OK


def _show(storage: Storage, db: str, cursor: TokenCursor, grantee: Grantee) -> StatementResult:
    """SHOW DATABASES / TABLES list what the user sees (``PrivPredicate.SHOW``); SHOW CREATE
    TABLE of a table the user does not see is refused (``ShowCreateTableStmt``)."""
    if cursor.accept_word("CREATE"):
        cursor.expect_word("TABLE")
        target_db, table = cursor.qualified_name()
        cursor.expect_end()
        if not grantee.sees(_resolve_db(target_db, db), table):
            require_table_privilege(grantee, "Select_priv", "SHOW CREATE TABLE", _resolve_db(target_db, db), table)
        return _show_create_table(storage, _resolve_db(target_db, db), table)
    what = cursor.expect_word("DATABASES", "SCHEMAS", "TABLES")
    if what in ("DATABASES", "SCHEMAS"):
        cursor.expect_end()
        names = [INFORMATION_SCHEMA, *(name for name in storage.database_names() if grantee.sees(name))]
        return StatementResult("result_set", ("Database",), ("VARCHAR",), tuple((n,) for n in names))
    target = db
    if cursor.accept_word("FROM", "IN"):
        target = cursor.identifier()
    pattern = None
    if cursor.accept_word("LIKE"):
        pattern = cursor.next().value
    cursor.expect_end()
    names = [name for name in storage.table_names(_resolve_db(target, "")) if grantee.sees(target, name)]
    if pattern is not None:
        regex = re.compile("^" + re.escape(pattern).replace("%", ".*").replace("_", ".") + "$", re.I)
        names = [n for n in names if regex.match(n)]
    return StatementResult("result_set", (f"Tables_in_{target}",), ("VARCHAR",), tuple((n,) for n in names))


def _describe(storage: Storage, db: str, table: str) -> StatementResult:
    schema = storage.table_schema(db, table)
    if schema is None:
        raise DorisSqlError(f"Unknown table '{table}'", 1051)
    rows = tuple(
        (c.name, c.type.display(), "Yes" if c.nullable else "No", "true" if c.is_key else "false",
         c.default, c.aggregation or "")
        for c in schema.columns
    )
    columns = ("Field", "Type", "Null", "Key", "Default", "Extra")
    return StatementResult("result_set", columns, ("VARCHAR",) * len(columns), rows)


# Printed by Doris for every OLAP table (``Env.getDdlStmt``) whether set or not; ``group_commit_mode``
# (Doris 4.x, apache/doris#61242) only when set.
_SHOWN_PROPERTY_DEFAULTS = {"group_commit_interval_ms": "10000", "group_commit_data_bytes": "134217728"}


def _show_create_table(storage: Storage, db: str, table: str) -> StatementResult:
    """``SHOW CREATE TABLE``: columns ``Table`` and ``Create Table`` (``ShowCreateTableStmt``), the
    DDL as ``Env.getDdlStmt`` prints it: columns, keys and ``PROPERTIES``; the stand-in stores no
    partitions or distribution, so it prints none."""
    schema = storage.table_schema(db, table)
    if schema is None:
        raise DorisSqlError(f"Unknown table '{table}'", 1051)
    columns = ",\n".join(_column_ddl(c) for c in schema.columns)
    keys = ", ".join(f"`{c.name}`" for c in schema.key_columns)
    model = {DUP_KEYS: "DUPLICATE", UNIQUE_KEYS: "UNIQUE", AGG_KEYS: "AGGREGATE"}[schema.keys_type]
    properties = {**_SHOWN_PROPERTY_DEFAULTS, **schema.properties}
    shown = ",\n".join(f'"{key}" = "{value}"' for key, value in properties.items())
    ddl = f"CREATE TABLE `{schema.name}` (\n{columns}\n) ENGINE=OLAP\n{model} KEY({keys})\nPROPERTIES (\n{shown}\n);"
    return StatementResult("result_set", ("Table", "Create Table"), ("VARCHAR", "VARCHAR"), ((schema.name, ddl),))


def _column_ddl(column: ColumnDef) -> str:
    text = f"  `{column.name}` {column.type.display().lower()}"
    if column.aggregation:
        text += f" {column.aggregation}"
    text += " NULL" if column.nullable else " NOT NULL"
    if column.default is not None:
        text += f' DEFAULT "{column.default}"'
    return text


def now_text(precision: int = 0) -> str:
    """Current local time as Doris prints a DATETIME (used for CURRENT_TIMESTAMP defaults)."""
    stamp = time.time()
    text = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp))
    if precision:
        text += f".{int((stamp % 1) * 10**6):06d}"[: precision + 1]
    return text
