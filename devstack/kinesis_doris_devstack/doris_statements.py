"""The SQL endpoint's statement dispatcher of the Doris stand-in (:func:`execute_statement`):
``CREATE``, ``DROP``, ``TRUNCATE``, ``SHOW`` (``SHOW CREATE TABLE`` among them) and ``DESC``
answered from the storage's catalog, SELECTs checked for privileges and run by SQLite.
"""

from __future__ import annotations

import re

import sqlglot
from sqlglot import expressions as exp

from kinesis_doris_devstack.doris_ddl import parse_create_table, parse_properties
from kinesis_doris_devstack.doris_schema import (
    AGG_KEYS,
    ColumnDef,
    DUP_KEYS,
    DorisSqlError,
    EXEC_OK,
    Grantee,
    INFORMATION_SCHEMA,
    StatementResult,
    TableSchema,
    UNIQUE_KEYS,
    access_denied,
    require_database_privilege,
    require_table_privilege,
)
from kinesis_doris_devstack.doris_sql import Storage
from kinesis_doris_devstack.doris_tokens import TokenCursor, tokenize


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
    require_database_privilege(grantee, "Create_priv", name)
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
        require_database_privilege(grantee, "Drop_priv", name)
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
