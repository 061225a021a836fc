"""Row path of the Doris stand-in's Stream Load: the load plan (``columns``, ``where``,
``jsonpaths``, sequence and delete columns), CSV/JSON readers, and the filtered / unselected
accounting of docs/doris-standin.md ("Load semantics").

The phases mirror Doris: the header options are checked first (``doris_load_options``),
:func:`plan_load` is what FE checks when planning, :func:`run_load` what the scan does with the
body. Errors carry a Doris status code name (``[CODE]detail``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kinesis_doris_devstack.doris_schema import UNIQUE_KEYS, ColumnDef, TableSchema, now_text
from kinesis_doris_devstack.doris_table_models import StagedRow
from kinesis_doris_devstack.doris_load_conversion import ConversionError, convert_value, to_text
from kinesis_doris_devstack.doris_load_expressions import Expression, compile_expression, lenient_convert
from kinesis_doris_devstack.doris_load_options import LoadError, LoadOptions, decompress, plan_error


# --- the plan ------------------------------------------------------------------------------


_MISSING = object()  # a JSON key that is absent (not null): the column's default applies


@dataclass(frozen=True)
class LoadPlan:
    """What FE derives from headers and schema: where each table column's value comes from."""

    options: LoadOptions
    schema: TableSchema
    source_names: tuple[str, ...]  # lower-cased names of the source fields, in file order
    derived: Mapping[str, Expression]  # lower-cased table column -> expression
    where: Expression | None
    delete: Expression | None
    jsonpaths: tuple[tuple[str | int, ...], ...] | None
    json_root: tuple[str | int, ...] | None
    sequence_source: str | None  # lower-cased name feeding the sequence column
    source_labels: Mapping[str, str] = field(default_factory=dict)  # lower -> as written


def plan_load(options: LoadOptions, schema: TableSchema) -> LoadPlan:
    """Check the load against the table the way FE plans it.

    :raises LoadError: ANALYSIS_ERROR for bad ``columns``/``where``/``jsonpaths``/sequence use.
    """
    table_names = {c.name.lower() for c in schema.columns}
    source, derived = _parse_columns(options, schema)
    known = table_names | set(source)
    for target, expression in derived.items():
        if target not in table_names:
            raise plan_error(f"Unknown column '{target}' in table '{schema.name}'")
        _require_known(expression, set(source), schema)
    if options.columns:
        _require_defaults(schema, set(source) | set(derived))
    where = _optional_expression(options.where, options.timezone)
    delete = _optional_expression(options.delete_condition, options.timezone)
    for expression in (where, delete):
        if expression is not None:
            _require_known(expression, known, schema)
    if options.merge_type != "APPEND" and schema.keys_type != UNIQUE_KEYS:
        raise plan_error("load by MERGE or DELETE is only supported in unique tables.")
    is_json = options.format == "json"
    jsonpaths = _parse_jsonpaths(options.jsonpaths, len(source)) if is_json else None
    json_root = _parse_json_path(options.json_root) if options.json_root and is_json else None
    return LoadPlan(
        options, schema, tuple(source), derived, where, delete, jsonpaths, json_root,
        _sequence_source(options, schema, known),
        {name: label for name, label in source.items()},
    )


def _optional_expression(text: str | None, timezone: str) -> Expression | None:
    return compile_expression(text, timezone) if text else None


def _parse_columns(options: LoadOptions, schema: TableSchema) -> tuple[dict[str, str], dict[str, Expression]]:
    schema_fields = {c.name.lower(): c.name for c in schema.columns}
    if not options.columns:
        return schema_fields, {}
    source: dict[str, str] = {}
    derived: dict[str, Expression] = {}
    for item in _split_top_level(options.columns):
        name, equals, expression = item.partition("=")
        name = name.strip().strip("`")
        if not name:
            raise plan_error(f"Invalid columns header item '{item.strip()}'")
        if equals:
            derived[name.lower()] = compile_expression(expression, options.timezone)
        else:
            source[name.lower()] = name
    # FE Load.initColumns: when no plain column names a file field (specifyFileFieldNames is
    # false), the file's fields are the table's columns in schema order, so `id = id * 10` reads
    # the file's id field.
    return (source or schema_fields), derived


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside parentheses and quotes."""
    items, depth, quote, current = [], 0, "", []
    for char in text:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"`":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            items.append("".join(current))
            current = []
            continue
        current.append(char)
    items.append("".join(current))
    return [i for i in items if i.strip()]


def _require_known(expression: Expression, known: set[str], schema: TableSchema) -> None:
    unknown = sorted(expression.names - known)
    if unknown:
        raise plan_error(f"Unknown column '{unknown[0]}' in '{schema.name}'")


def _require_defaults(schema: TableSchema, provided: set[str]) -> None:
    for column in schema.columns:
        if column.name.lower() not in provided and not column.nullable and column.default is None:
            raise plan_error(f"Column has no default value. column: {column.name}")


def _sequence_source(options: LoadOptions, schema: TableSchema, known: set[str]) -> str | None:
    if options.sequence_col:
        if not schema.has_sequence:
            raise plan_error(f"There is no sequence column in the table {schema.name}")
        if options.sequence_col.lower() not in known:
            raise plan_error(f"Unknown column '{options.sequence_col}' in '{schema.name}'")
        return options.sequence_col.lower()
    if schema.sequence_col:
        return schema.sequence_col.lower()
    if schema.has_sequence:
        raise plan_error(f"Table {schema.name} has sequence column, need to specify the sequence column")
    return None


_PATH_STEP = re.compile(r"\.([^.\[\]]+)|\[\s*'([^']*)'\s*\]|\[\s*\"([^\"]*)\"\s*\]|\[\s*(\d+)\s*\]")


def _parse_json_path(path: str) -> tuple[str | int, ...]:
    text = path.strip()
    if not text.startswith("$"):
        raise plan_error(f"Invalid json path: {path}")
    steps: list[str | int] = []
    position = 1
    while position < len(text):
        match = _PATH_STEP.match(text, position)
        if match is None:
            raise plan_error(f"Invalid json path: {path}")
        name, single, double, index = match.groups()
        key = next(s for s in (name, single, double) if s is not None) if index is None else int(index)
        steps.append(key)
        position = match.end()
    return tuple(steps)


def _parse_jsonpaths(raw: str | None, column_count: int) -> tuple[tuple[str | int, ...], ...] | None:
    if raw is None:
        return None
    try:
        paths = json.loads(raw)
    except ValueError:
        raise plan_error(f"Invalid jsonpaths: {raw}") from None
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise plan_error(f"Invalid jsonpaths: {raw}")
    if len(paths) != column_count:
        raise plan_error(
            f"The number of jsonpaths ({len(paths)}) does not match the number of columns ({column_count})"
        )
    return tuple(_parse_json_path(p) for p in paths)


# --- reading the body ------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceRecord:
    """One source row: its fields by lower-cased name, or the reason it is unreadable."""

    line: str
    fields: Mapping[str, Any] | None = None
    error: str | None = None


def read_records(plan: LoadPlan, body: bytes) -> Iterator[SourceRecord]:
    """Source records of the body in file order."""
    text = decompress(body, plan.options.compress_type).decode("utf-8", errors="replace")
    if plan.options.format == "json":
        return _json_records(plan, text)
    return _csv_records(plan, text)


def _csv_records(plan: LoadPlan, text: str) -> Iterator[SourceRecord]:
    options = plan.options
    lines = text.split(options.line_delimiter)
    if lines and lines[-1] == "":
        lines.pop()
    names = plan.source_names
    for line in lines[options.skip_lines:]:
        if line == "":
            continue  # Doris's CSV reader skips empty lines
        values = [_csv_field(f, options) for f in line.split(options.column_separator)]
        if len(values) != len(names):
            relation = "less than" if len(values) < len(names) else "more than"
            # csv_reader.cpp formats "{} {} {}" around a part that ends and one that starts with
            # a blank: two spaces on each side of the relation.
            yield SourceRecord(
                line,
                error=f"actual column number in csv file is  {relation}  schema column number."
                f"actual number: {len(values)}, schema column number: {len(names)}; ",
            )
            continue
        yield SourceRecord(line, dict(zip(names, values)))


def _csv_field(raw: str, options: LoadOptions) -> str | None:
    if raw == "\\N" or (raw == "" and options.empty_field_as_null):
        return None
    if options.trim_double_quotes and len(raw) >= 2 and raw[0] == raw[-1] == '"':
        return raw[1:-1]
    return raw


def _json_records(plan: LoadPlan, text: str) -> Iterator[SourceRecord]:
    options = plan.options
    documents = (line for line in text.split("\n")) if options.read_json_by_line else iter([text])
    for document in documents:
        if not document.strip():
            continue
        try:
            parsed = _decode_single(document, by_line=options.read_json_by_line)
        except ValueError as exc:
            reason = f"Parse json data for JsonDoc failed. code: 1, error info: {exc}"
            yield SourceRecord(document, error=reason)
            continue
        yield from _json_rows(plan, parsed, document)


def _decode_single(document: str, by_line: bool) -> Any:
    decoder = json.JSONDecoder(parse_float=Decimal)
    stripped = document.strip()
    value, end = decoder.raw_decode(stripped)
    if stripped[end:].strip():
        if by_line:
            raise LoadError("DATA_QUALITY_ERROR", "Multiple JSON objects in a single line")
        raise ValueError("The document root must not be followed by other values.")
    return value


def _json_rows(plan: LoadPlan, document: Any, line: str) -> Iterator[SourceRecord]:
    options = plan.options
    if plan.json_root is not None:
        document = _walk(document, plan.json_root)
        if document is _MISSING:
            yield SourceRecord(line, error="JSON Root not found.")
            return
    if options.strip_outer_array:
        if not isinstance(document, list):
            reason = "JSON data is not an array-object, `strip_outer_array` must be FALSE."
            yield SourceRecord(line, error=reason)
            return
        elements = document
    elif isinstance(document, list):
        yield SourceRecord(line, error="JSON data is array-object, `strip_outer_array` must be TRUE.")
        return
    else:
        elements = [document]
    for element in elements:
        if not isinstance(element, dict):
            yield SourceRecord(to_text(element), error="Expect json object value")
            continue
        yield SourceRecord(to_text(element), _json_fields(plan, element))


def _json_fields(plan: LoadPlan, element: dict[str, Any]) -> dict[str, Any]:
    if plan.jsonpaths is not None:
        return {name: _walk(element, path) for name, path in zip(plan.source_names, plan.jsonpaths)}
    lowered = {key.lower(): value for key, value in element.items()}
    return {name: element.get(plan.source_labels.get(name, name), lowered.get(name, _MISSING))
            for name in plan.source_names}


def _walk(value: Any, path: Sequence[str | int]) -> Any:
    for step in path:
        if isinstance(step, int) and isinstance(value, list) and step < len(value):
            value = value[step]
        elif isinstance(step, str) and isinstance(value, dict) and step in value:
            value = value[step]
        else:
            return _MISSING
    return value


# --- turning records into rows ----------------------------------------------------------------


MAX_ERROR_LINES = 50
"""BE's MAX_ERROR_NUM: rows an error log lists."""


@dataclass
class LoadOutcome:
    """Counts of docs/doris-standin.md ("Load semantics") plus the rows to store and the error-log lines."""

    rows: list[StagedRow] = field(default_factory=list)
    total: int = 0
    filtered: int = 0
    unselected: int = 0
    error_lines: list[str] = field(default_factory=list)

    def log_error(self, reason: str, line: str) -> None:
        """One error-log line as BE's ``RuntimeState::append_error_msg_to_file`` writes it: at most
        50, then a last line. The table sink's checks (``column_name[...]`` messages: too long, NULL
        in NOT NULL) do not have the source line, so Doris prints ``src line []`` for them."""
        if len(self.error_lines) < MAX_ERROR_LINES:
            source = "" if reason.startswith("column_name[") else line
            self.error_lines.append(f"Reason: {reason}. src line [{source}]; ")
        elif len(self.error_lines) == MAX_ERROR_LINES:
            self.error_lines.append(f"TOO MUCH ERROR! already reach {MAX_ERROR_LINES}. show no more next error.")

    def too_many_filtered(self, max_filter_ratio: float) -> bool:
        """The ratio check of BE: filtered / (total - unselected) > max_filter_ratio."""
        considered = self.total - self.unselected
        return considered > 0 and self.filtered / considered > max_filter_ratio


class RowRejected(Exception):
    """A row is filtered (data quality); the message is the error-log reason."""


def run_load(plan: LoadPlan, body: bytes) -> LoadOutcome:
    """Read, map, convert and filter every source record of ``body``.

    :raises LoadError: the body as a whole is unusable (bad compression, several JSON objects
        on one line in line mode).
    """
    outcome = LoadOutcome()
    for record in read_records(plan, body):
        outcome.total += 1
        try:
            if record.error is not None:
                raise RowRejected(record.error)
            row, env = _build_row(plan, record.fields or {})
        except RowRejected as rejected:
            outcome.filtered += 1
            outcome.log_error(str(rejected), record.line)
            continue
        if plan.where is not None and not plan.where.evaluate(env):
            outcome.unselected += 1
            continue
        outcome.rows.append(row)
    return outcome


def _build_row(plan: LoadPlan, fields: Mapping[str, Any]) -> tuple[StagedRow, dict[str, Any]]:
    env = {name: (None if value is _MISSING else value) for name, value in fields.items()}
    values = []
    for column in plan.schema.columns:
        key = column.name.lower()
        if key in plan.derived:
            raw = plan.derived[key].evaluate(env)
        elif key in fields and fields[key] is not _MISSING:
            raw = fields[key]
        else:
            raw = _default_of(column, missing_json_key=key in fields)
        values.append(_checked(column, raw, plan.options.strict_mode))
    env.update({c.name.lower(): v for c, v in zip(plan.schema.columns, values)})
    sequence = _sequence_value(plan, env)
    delete = plan.options.merge_type == "DELETE" or bool(plan.delete and plan.delete.evaluate(env))
    return StagedRow(tuple(values), sequence, delete), env


def _default_of(column: ColumnDef, missing_json_key: bool) -> Any:
    if column.default == "CURRENT_TIMESTAMP":
        return now_text(column.type.precision or 0)
    if column.default is not None:
        return column.default
    if missing_json_key and not column.nullable:
        raise RowRejected(f"The column `{column.name}` is not nullable, but it's not found in jsondata.")
    return None


def _checked(column: ColumnDef, raw: Any, strict: bool) -> Any:
    try:
        value = convert_value(raw, column.type)
    except ConversionError as error:
        value = _handle_conversion_error(column, raw, error, strict)
    if value is None and not column.nullable:
        raise RowRejected(f"column({column.name}) values is null while columns is not nullable")
    return value


def _handle_conversion_error(column: ColumnDef, raw: Any, error: ConversionError, strict: bool) -> None:
    text = to_text(raw)
    if error.kind == "too_long":
        raise RowRejected(
            f"column_name[{column.name}], the length of input is too long than schema. first 32 bytes of "
            f"input str: [{text[:32]}] schema length: {column.type.length}; "
            f"actual length: {len(text.encode('utf-8'))}; "
        )
    if error.kind == "overflow":
        raise RowRejected(
            f"Arithmetic overflow, convert failed from {text}, expected data is {column.type.display()}")
    if strict:
        raise RowRejected(
            f"column({column.name}) value is incorrect while strict mode is true, src value is {text}")
    return None


def _sequence_value(plan: LoadPlan, env: Mapping[str, Any]) -> Any:
    if plan.sequence_source is None or plan.schema.sequence_type is None:
        return None
    return lenient_convert(env.get(plan.sequence_source), plan.schema.sequence_type)
