"""``CREATE TABLE`` of the Doris stand-in: column types, defaults, keys, aggregations, the sequence
column and ``PROPERTIES`` parsed and checked as Doris does, into a :class:`TableSchema`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kinesis_doris_devstack.doris_schema import (
    AGGREGATE_FUNCTIONS,
    AGG_KEYS,
    COLUMN_TYPES,
    ColumnDef,
    ColumnType,
    DUP_KEYS,
    DorisSqlError,
    TableSchema,
    UNIQUE_KEYS,
)
from kinesis_doris_devstack.doris_tokens import TokenCursor, tokenize


_SEQUENCE_TYPES = ("TINYINT", "SMALLINT", "INT", "BIGINT", "LARGEINT", "DATE", "DATETIME")


def parse_type(cursor: TokenCursor) -> ColumnType:
    """Parse ``INT``, ``VARCHAR(20)``, ``DECIMAL(10, 2)``, ``DATETIME(3)``..."""
    raw_name = cursor.identifier().upper()
    if raw_name not in COLUMN_TYPES:
        raise DorisSqlError(f"Unsupported type '{raw_name}' in the Doris stand-in", 1064)
    name = COLUMN_TYPES[raw_name][0]
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
