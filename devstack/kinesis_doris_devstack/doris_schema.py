"""The Doris stand-in's schema model and what every statement shares: column types and their SQLite
affinity, :class:`TableSchema`, the hidden sequence and delete-sign columns, privileges
(:class:`Grantee`), :class:`DorisSqlError` and :class:`StatementResult`.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol


SEQUENCE_COLUMN = "__DORIS_SEQUENCE_COL__"
DELETE_SIGN_COLUMN = "__DORIS_DELETE_SIGN__"
INFORMATION_SCHEMA = "information_schema"
DUP_KEYS, UNIQUE_KEYS, AGG_KEYS = "DUP_KEYS", "UNIQUE_KEYS", "AGG_KEYS"
AGGREGATE_FUNCTIONS = ("SUM", "MAX", "MIN", "REPLACE", "REPLACE_IF_NOT_NULL")


# Doris type name -> (canonical name, SQLite column type giving the right affinity)
COLUMN_TYPES: dict[str, tuple[str, str]] = {
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


def require_database_privilege(grantee: Grantee, privilege: str, db: str) -> None:
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
        return COLUMN_TYPES[self.name][1]

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


def now_text(precision: int = 0) -> str:
    """Current local time as Doris prints a DATETIME (used for CURRENT_TIMESTAMP defaults)."""
    stamp = time.time()
    text = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp))
    if precision:
        text += f".{int((stamp % 1) * 10**6):06d}"[: precision + 1]
    return text
