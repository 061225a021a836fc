"""Loaded rows applied with the table model's semantics of the Doris stand-in: duplicate keys
appended; unique keys merged by the sequence column and the delete sign; aggregate keys combined
by each column's aggregation.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kinesis_doris_devstack.doris_schema import (
    ColumnDef,
    ColumnType,
    DELETE_SIGN_COLUMN,
    DUP_KEYS,
    SEQUENCE_COLUMN,
    TableSchema,
    UNIQUE_KEYS,
)
from kinesis_doris_devstack.doris_sql import physical_table, quote_identifier


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
