"""``INSERT INTO ... VALUES`` and ``DELETE FROM ... WHERE`` of the Doris stand-in, both needing
LOAD on the table as Doris checks it (``ERR_TABLEACCESS_DENIED_ERROR``, 1142).

An INSERT's rows take the Stream Load's row path (:mod:`kinesis_doris_devstack.doris_loads`: type
conversion in ``doris_load_conversion``, defaults, the table model's semantics) in strict mode, Doris's default
(``enable_insert_strict``), inside a transaction with a label (``label_<hex>_<hex>`` as Nereids
names it, or ``WITH LABEL l``): ``get_load_state`` knows it, and a label that is taken refuses the
INSERT. A DELETE removes the rows its predicate matches; on a UNIQUE KEY table it writes the delete
sign, as Doris does, so a later load with a smaller sequence value does not bring the key back.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kinesis_doris_devstack.doris_load_expressions import compile_expression
from kinesis_doris_devstack.doris_load_options import LoadError, LoadOptions
from kinesis_doris_devstack.doris_loads import plan_load, run_load
from kinesis_doris_devstack.doris_schema import (
    DELETE_SIGN_COLUMN,
    EXEC_OK,
    UNIQUE_KEYS,
    DorisSqlError,
    Grantee,
    StatementResult,
    TableSchema,
    require_table_privilege,
)
from kinesis_doris_devstack.doris_sql import Storage, physical_table, quote_identifier, transaction
from kinesis_doris_devstack.doris_tokens import Token, TokenCursor, tokenize
from kinesis_doris_devstack.doris_txn import TxnError, TxnManager

_INSERT_TIMEOUT_SECONDS = 14400  # Doris's insert_timeout session variable

WriteErrorLog = Callable[[list[str]], str]
"""Stores an INSERT's rejected rows; returns the URL of the error log."""


@dataclass(frozen=True)
class Insert:
    """A parsed ``INSERT INTO [db.]t [WITH LABEL l] [(cols)] VALUES (...), ...``."""

    db: str | None
    table: str
    label: str | None
    columns: tuple[str, ...] | None
    rows: tuple[tuple[str | None, ...], ...]


def execute_dml(storage: Storage, txns: TxnManager, grantee: Grantee, db: str, sql: str,
                write_error_log: WriteErrorLog) -> StatementResult | None:
    """Run ``sql`` if it is an INSERT or a DELETE (caller holds ``storage.lock``), else None."""
    cursor = TokenCursor(tokenize(sql))
    if cursor.accept_words("INSERT", "INTO"):
        statement = _parse_insert(cursor)
        target = _target_db(statement.db, db)
        require_table_privilege(grantee, "Load_priv", "LOAD", target, statement.table)
        _insert(storage, txns, target, statement, write_error_log)
        return EXEC_OK
    if cursor.accept_words("DELETE", "FROM"):
        named_db, table = cursor.qualified_name()
        target = _target_db(named_db, db)
        require_table_privilege(grantee, "Load_priv", "LOAD", target, table)
        _delete(storage, target, table, _where_text(cursor))
        return EXEC_OK
    return None


def _target_db(named: str | None, current: str) -> str:
    if not (named or current):
        raise DorisSqlError("No database selected", 1046)
    return named or current


# --- INSERT --------------------------------------------------------------------------------------


def _parse_insert(cursor: TokenCursor) -> Insert:
    db, table = cursor.qualified_name()
    label = cursor.identifier() if cursor.accept_words("WITH", "LABEL") else None
    columns = tuple(cursor.name_list()) if cursor.peek_op("(") else None
    cursor.expect_word("VALUES")
    rows = [_values_row(cursor)]
    while cursor.accept_op(","):
        rows.append(_values_row(cursor))
    cursor.expect_end()
    return Insert(db, table, label, columns, tuple(rows))


def _values_row(cursor: TokenCursor) -> tuple[str | None, ...]:
    cursor.expect_op("(")
    values = [_literal(cursor)]
    while cursor.accept_op(","):
        values.append(_literal(cursor))
    cursor.expect_op(")")
    return tuple(values)


def _literal(cursor: TokenCursor) -> str | None:
    """A literal as text (the row path converts it to the column's type); NULL as None."""
    sign = "-" if cursor.accept_op("-") else ""
    token: Token = cursor.next()
    if token.is_word("NULL") and not sign:
        return None
    if token.kind in ("number", "string") or token.is_word("TRUE", "FALSE"):
        return sign + token.value
    raise DorisSqlError(f"Syntax error: the Doris stand-in's INSERT takes literals only, found '{token.text}'", 1064)


def _insert(storage: Storage, txns: TxnManager, db: str, statement: Insert, write_error_log: WriteErrorLog) -> None:
    schema = storage.table_schema(db, statement.table)
    if schema is None:
        raise DorisSqlError(f"Unknown table '{statement.table}'", 1051)
    columns = statement.columns or tuple(column.name for column in schema.columns)
    for name in columns:
        if schema.column(name) is None:
            raise DorisSqlError(f"Unknown column '{name}' in '{schema.name}'", 1054)
    if any(len(row) != len(columns) for row in statement.rows):
        raise DorisSqlError("Column count doesn't match value count", 1058)
    try:
        outcome = run_load(plan_load(LoadOptions(format="json", strict_mode=True), schema),
                           _json_lines(columns, statement.rows))
    except LoadError as error:
        raise DorisSqlError(str(error)) from None
    if outcome.filtered:
        url = write_error_log(outcome.error_lines)
        raise DorisSqlError(f"Insert has filtered data in strict mode. url: {url}")
    label = statement.label or f"label_{uuid.uuid4().hex[:16]}_{uuid.uuid4().hex[:16]}"
    try:
        txn_id = txns.begin(db, statement.table, label, _INSERT_TIMEOUT_SECONDS)
        txns.commit(db, txn_id, outcome.rows)
    except TxnError as error:
        raise DorisSqlError(str(error).removeprefix("TStatus: errCode = 2, detailMessage = ")) from None


def _json_lines(columns: Sequence[str], rows: Sequence[Sequence[str | None]]) -> bytes:
    records: list[Mapping[str, Any]] = [dict(zip(columns, row)) for row in rows]
    return "".join(json.dumps(record) + "\n" for record in records).encode("utf-8")


# --- DELETE --------------------------------------------------------------------------------------


def _where_text(cursor: TokenCursor) -> str:
    if cursor.accept_word("PARTITION"):  # the stand-in stores no partitions: every row is in "the" one
        cursor.identifier()
    if not cursor.accept_word("WHERE"):
        raise DorisSqlError("Syntax error: the Doris stand-in's DELETE needs a WHERE clause", 1064)
    tokens = []
    while not cursor.at_end():
        tokens.append(cursor.next().text)
    return " ".join(tokens)


def _delete(storage: Storage, db: str, table: str, where: str) -> None:
    schema = storage.table_schema(db, table)
    if schema is None:
        raise DorisSqlError(f"Unknown table '{table}'", 1051)
    try:
        predicate = compile_expression(where)
    except LoadError as error:
        raise DorisSqlError(str(error).removeprefix("[ANALYSIS_ERROR]")) from None
    for name in predicate.names:
        if schema.column(name) is None:
            raise DorisSqlError(f"Unknown column '{name}' in '{schema.name}'", 1054)
    connection = storage.connection(db)
    with transaction(connection):
        matched = [rowid for rowid, row in _stored_rows(connection, schema) if predicate.evaluate(row) is True]
        _remove(connection, schema, matched)


def _stored_rows(connection: sqlite3.Connection, schema: TableSchema) -> list[tuple[int, dict[str, Any]]]:
    names = [column.name for column in schema.columns]
    selected = ", ".join(quote_identifier(name) for name in names)
    found = connection.execute(f"SELECT rowid, {selected} FROM {quote_identifier(physical_table(schema.name))} "
                               f"WHERE {quote_identifier(DELETE_SIGN_COLUMN)} = 0").fetchall()
    return [(row[0], {name.lower(): value for name, value in zip(names, row[1:])}) for row in found]


def _remove(connection: sqlite3.Connection, schema: TableSchema, rowids: Sequence[int]) -> None:
    physical = quote_identifier(physical_table(schema.name))
    if schema.keys_type == UNIQUE_KEYS:  # the delete sign keeps the key's sequence value
        statement = f"UPDATE {physical} SET {quote_identifier(DELETE_SIGN_COLUMN)} = 1 WHERE rowid = ?"
    else:
        statement = f"DELETE FROM {physical} WHERE rowid = ?"
    connection.executemany(statement, [(rowid,) for rowid in rowids])
