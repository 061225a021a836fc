"""Row path of the Doris stand-in's Stream Load: header options, the load plan (``columns``,
``where``, ``jsonpaths``, sequence and delete columns), CSV/JSON readers, type conversion with
strict mode, and the filtered / unselected accounting of docs/doris-standin.md ("Load semantics").

The phases mirror Doris: :func:`parse_load_options` is what BE checks in the header phase
(before the transaction begins), :func:`parse_put_options` what it checks after, while building
the ``streamLoadPut`` request, :func:`plan_load` what FE checks when planning, :func:`run_load`
what the scan does with the body. Errors carry a Doris status code name (``[CODE]detail``).
"""

from __future__ import annotations

import bz2
import dataclasses
import datetime as dt
import gzip
import json
import re
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation, localcontext
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from kinesis_doris_devstack.doris_sql import (
    UNIQUE_KEYS,
    ColumnDef,
    ColumnType,
    DorisSqlError,
    StagedRow,
    TableSchema,
    Token,
    TokenCursor,
    left,
    now_text,
    parse_type,
    right,
    substring_index,
    tokenize,
)

_CSV_FORMATS = {"csv": 0, "csv_with_names": 1, "csv_with_names_and_types": 2}
_NOT_EMULATED_FORMATS = ("parquet", "orc", "arrow")
_DORIS_COMPRESS_TYPES = ("lzo", "lz4", "lz4frame", "lz4_block", "lzop", "snappy_block", "deflate")
_DECOMPRESSORS: dict[str, Callable[[bytes], bytes]] = {"gz": gzip.decompress, "bz2": bz2.decompress}
_FE_DETAIL = "TStatus: errCode = 2, detailMessage = "


class LoadError(Exception):
    """A load failed as a whole; ``str()`` is the BE ``Message`` (``[CODE]detail``)."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"[{code}]{detail}")
        self.code = code
        self.detail = detail


def _not_emulated(what: str) -> LoadError:
    return LoadError("NOT_IMPLEMENTED_ERROR", f"{what} is not emulated by the Doris stand-in")


def plan_error(detail: str) -> LoadError:
    """An error raised by FE while planning, as BE reports it."""
    return LoadError("ANALYSIS_ERROR", _FE_DETAIL + detail)


# --- header options (BE header phase) --------------------------------------------------------


@dataclass(frozen=True)
class LoadOptions:
    """Validated load headers."""

    format: str = "csv"
    compress_type: str = ""
    column_separator: str = "\t"
    line_delimiter: str = "\n"
    skip_lines: int = 0
    trim_double_quotes: bool = False
    empty_field_as_null: bool = False
    strict_mode: bool = False
    max_filter_ratio: float = 0.0
    timeout_seconds: int = 259200
    two_phase_commit: bool = False
    merge_type: str = "APPEND"
    delete_condition: str | None = None
    columns: str | None = None
    where: str | None = None
    jsonpaths: str | None = None
    json_root: str | None = None
    strip_outer_array: bool = False
    read_json_by_line: bool = True
    sequence_col: str | None = None
    timezone: str = "UTC"
    comment: str = ""


def _is_true(value: str | None) -> bool:
    return value is not None and value.strip().lower() == "true"


def _unescape_separator(value: str) -> str:
    """Doris accepts separators written as hex (``\\x01``)."""
    return re.sub(r"\\x([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), value)


def parse_load_options(headers: Mapping[str, str]) -> LoadOptions:
    """Validate the load headers BE checks in its header phase, before a transaction begins
    (``StreamLoadAction::_on_header``); :func:`parse_put_options` checks the rest once it has.

    :param headers: request headers with lower-cased names.
    :raises LoadError: a header has a value Doris rejects or the stand-in does not emulate.
    """
    fmt = headers.get("format", "csv").strip().lower() or "csv"
    if fmt in _NOT_EMULATED_FORMATS:
        raise _not_emulated(f"format {fmt}")
    if fmt not in _CSV_FORMATS and fmt != "json":
        # Status::Error<DATA_FILE_TYPE_ERROR> (code -1101): status.h prints negative codes as E<code>.
        raise LoadError("E-1101", f"unknown data format, format={headers.get('format')}")
    for unsupported in ("enclose", "escape", "hidden_columns"):
        if headers.get(unsupported):
            raise _not_emulated(f"header {unsupported}")
    if _is_true(headers.get("partial_columns")) or _is_true(headers.get("negative")):
        raise _not_emulated("partial_columns/negative loads")
    return LoadOptions(
        format=fmt,
        compress_type=_compress_type(headers.get("compress_type", "")),
        column_separator=_unescape_separator(headers.get("column_separator", "\t")) or "\t",
        line_delimiter=_unescape_separator(headers.get("line_delimiter", "\n")) or "\n",
        trim_double_quotes=_is_true(headers.get("trim_double_quotes")),
        empty_field_as_null=_is_true(headers.get("empty_field_as_null")),
        max_filter_ratio=_lenient_ratio(headers.get("max_filter_ratio")),
        timeout_seconds=_timeout(headers.get("timeout")),
        two_phase_commit=headers.get("two_phase_commit") == "true",
        columns=headers.get("columns") or None,
        where=headers.get("where") or None,
        jsonpaths=headers.get("jsonpaths") or None,
        json_root=headers.get("json_root") or None,
        strip_outer_array=_is_true(headers.get("strip_outer_array")),
        read_json_by_line=_read_json_by_line(headers),
        sequence_col=headers.get("function_column.sequence_col") or None,
        comment=headers.get("comment", ""),
    )


def parse_put_options(headers: Mapping[str, str], options: LoadOptions) -> LoadOptions:
    """Add the headers BE checks only after the transaction began, while building the
    ``streamLoadPut`` request (``StreamLoadAction::_process_put``): a bad value fails a load that
    already holds a real TxnId, and the transaction is rolled back.

    :param headers: request headers with lower-cased names.
    :param options: what :func:`parse_load_options` accepted.
    :raises LoadError: ``strict_mode``, ``merge_type``/``delete``, ``skip_lines`` or ``timezone``
        has a value Doris rejects.
    """
    strict = headers.get("strict_mode")
    if strict and strict.strip().lower() not in ("true", "false"):
        raise LoadError("INVALID_ARGUMENT", "Invalid strict mode format. Must be bool type")
    merge_type = headers.get("merge_type", "APPEND").strip().upper() or "APPEND"
    if merge_type not in ("APPEND", "DELETE", "MERGE"):
        raise LoadError("INVALID_ARGUMENT", f"Invalid merge type {headers.get('merge_type')}")
    delete_condition = headers.get("delete") or None
    if merge_type == "MERGE" and not delete_condition:
        raise LoadError("INVALID_ARGUMENT", "Excepted DELETE ON clause when merge type is MERGE.")
    if merge_type != "MERGE" and delete_condition:
        raise LoadError("INVALID_ARGUMENT", "Not support DELETE ON clause when merge type is not MERGE.")
    return dataclasses.replace(
        options,
        skip_lines=_skip_lines(headers.get("skip_lines"), options.format),
        strict_mode=_is_true(strict),
        merge_type=merge_type,
        delete_condition=delete_condition,
        timezone=_timezone(headers.get("timezone") or headers.get("time_zone") or "UTC"),
    )


def _compress_type(value: str) -> str:
    name = value.strip().lower()
    if name in ("", "plain", "none") or name in _DECOMPRESSORS:
        return name if name in _DECOMPRESSORS else ""
    if name in _DORIS_COMPRESS_TYPES:
        raise _not_emulated(f"compress_type {name}")
    raise LoadError("INVALID_ARGUMENT", f"unknown compress type: {value}")


def _skip_lines(value: str | None, fmt: str) -> int:
    if fmt in _CSV_FORMATS and _CSV_FORMATS[fmt]:
        return _CSV_FORMATS[fmt]
    if value is None or value.strip() == "":
        return 0
    try:
        lines = int(value)
    except ValueError:
        # Doris's safe_stoi text is not emulated (docs/doris-standin.md).
        raise LoadError("INVALID_ARGUMENT", f"Invalid 'skip_lines': '{value}'") from None
    if lines < 0:
        raise LoadError("INVALID_ARGUMENT", f"Invalid 'skip_lines': {lines}")
    return lines


def _lenient_ratio(value: str | None) -> float:
    # Doris parses max_filter_ratio leniently: junk means 0.
    try:
        return float(value) if value is not None else 0.0
    except ValueError:
        return 0.0


def _timeout(value: str | None) -> int:
    if value is None or value.strip() == "":
        return 259200
    try:
        return int(value)
    except ValueError:
        raise LoadError("INVALID_ARGUMENT", f"Invalid timeout format, {value}") from None


def _read_json_by_line(headers: Mapping[str, str]) -> bool:
    # master: line mode is the default only when neither header is sent; once either is,
    # read_json_by_line is whatever it says (absent = false), so strip_outer_array: false alone
    # reads the body as one document (StreamLoadAction::_process_put).
    if not headers.get("read_json_by_line") and not headers.get("strip_outer_array"):
        return True
    return _is_true(headers.get("read_json_by_line"))


def _timezone(name: str) -> str:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise LoadError("INVALID_ARGUMENT", f"Unknown time zone: '{name}'") from None
    return name


# --- value conversion ----------------------------------------------------------------------


class ConversionError(ValueError):
    """``kind`` is ``invalid`` (strict mode decides), ``overflow`` or ``too_long`` (always filtered)."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


_INT_BITS = {"TINYINT": 8, "SMALLINT": 16, "INT": 32, "BIGINT": 64, "LARGEINT": 128}
_INT_TEXT = re.compile(r"^\s*[+-]?\d+\s*$")
_NUMBER_TEXT = re.compile(r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$")
_DATE_TEXT = re.compile(
    r"^\s*(\d{4})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,9}))?)?)?\s*$"
    r"|^\s*(\d{4})(\d{2})(\d{2})(?:(\d{2})(\d{2})(\d{2}))?\s*$"
)


def to_text(value: Any) -> str:
    """How a JSON or derived value reads when it lands in a string column."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(_plain_json(value), separators=(",", ":"), ensure_ascii=False)
    return str(value)


def _plain_json(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() and "." not in str(value) else float(value)
    if isinstance(value, dict):
        return {k: _plain_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_json(v) for v in value]
    return value


def convert_value(value: Any, ctype: ColumnType) -> Any:
    """Convert a source value to a column type's stored value.

    :raises ConversionError: the value does not fit the type.
    """
    if value is None:
        return None
    name = ctype.name
    if name in _INT_BITS:
        return _to_int(value, _INT_BITS[name])
    if name == "BOOLEAN":
        return _to_bool(value)
    if name in ("FLOAT", "DOUBLE"):
        return _to_float(value)
    if name == "DECIMAL":
        return _to_decimal(value, ctype.precision or 9, ctype.scale or 0)
    if name in ("DATE", "DATETIME"):
        return _to_datetime_text(value, name == "DATE", ctype.precision or 0)
    if name == "JSON":
        return _to_json_text(value)
    text = to_text(value)
    if ctype.length is not None and len(text.encode("utf-8")) > ctype.length:
        raise ConversionError("too_long")
    return text


def _to_int(value: Any, bits: int) -> int:
    if isinstance(value, bool):
        number = int(value)
    elif isinstance(value, int):
        number = value
    elif isinstance(value, (Decimal, float)) and value == int(value):
        number = int(value)
    elif isinstance(value, str) and _INT_TEXT.match(value):
        number = int(value)
    else:
        raise ConversionError("invalid")
    if not -(2 ** (bits - 1)) <= number < 2 ** (bits - 1):
        raise ConversionError("invalid")
    return number


def _to_bool(value: Any) -> int:
    if isinstance(value, bool):
        return int(value)
    text = to_text(value).strip().lower()
    if text in ("true", "1"):
        return 1
    if text in ("false", "0"):
        return 0
    raise ConversionError("invalid")


def _to_float(value: Any) -> float:
    if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and _NUMBER_TEXT.match(value):
        return float(value)
    raise ConversionError("invalid")


def _to_decimal(value: Any, precision: int, scale: int) -> Decimal:
    if isinstance(value, bool) or isinstance(value, (dict, list)):
        raise ConversionError("invalid")
    text = to_text(value) if not isinstance(value, float) else repr(value)
    if not _NUMBER_TEXT.match(text):
        raise ConversionError("invalid")
    with localcontext() as context:
        context.prec = 100  # DECIMAL(38, s) needs more than the default 28 digits
        try:
            number = Decimal(text.strip()).quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP)
        except InvalidOperation:
            raise ConversionError("overflow") from None
    if len(number.as_tuple().digits) > precision:
        raise ConversionError("overflow")
    return number


def _to_datetime_text(value: Any, date_only: bool, precision: int) -> str:
    match = _DATE_TEXT.match(to_text(value))
    if match is None:
        raise ConversionError("invalid")
    parts = [p for p in match.groups() if p is not None]
    fraction = parts[6] if len(parts) > 6 else ""
    try:
        moment = dt.datetime(*(int(p) for p in parts[:6]))
    except ValueError:
        raise ConversionError("invalid") from None
    if date_only:
        return moment.strftime("%Y-%m-%d")
    text = moment.strftime("%Y-%m-%d %H:%M:%S")
    return text + ("." + fraction.ljust(precision, "0")[:precision] if precision else "")


def _to_json_text(value: Any) -> str:
    if isinstance(value, str):
        try:
            value = json.loads(value, parse_float=Decimal)
        except ValueError:
            raise ConversionError("invalid") from None
    return json.dumps(_plain_json(value), separators=(",", ":"), ensure_ascii=False)


# --- expressions (columns mapping, where, delete) -------------------------------------------


@dataclass(frozen=True)
class Expression:
    """A compiled expression: ``evaluate`` maps lower-cased names to values."""

    text: str
    evaluate: Callable[[Mapping[str, Any]], Any]
    names: frozenset[str]


Evaluator = Callable[[Mapping[str, Any]], Any]


def _number(value: Any) -> int | float | Decimal | None:
    if value is None or isinstance(value, (int, float, Decimal)):
        return int(value) if isinstance(value, bool) else value
    text = to_text(value)
    if _INT_TEXT.match(text):
        return int(text)
    if _NUMBER_TEXT.match(text):
        return Decimal(text.strip())
    return None


def _arithmetic(op: str, left: Any, right: Any) -> Any:
    a, b = _number(left), _number(right)
    if a is None or b is None:
        return None
    if isinstance(a, float) or isinstance(b, float):
        a, b = float(a), float(b)
    elif isinstance(a, Decimal) or isinstance(b, Decimal):
        a, b = Decimal(a), Decimal(b)
    if op in "/%" and b == 0:
        return None
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        return float(a) / float(b)
    return a % b


def _compare(op: str, left: Any, right: Any) -> bool | None:
    if left is None or right is None:
        return None
    a: Any
    b: Any
    numeric = isinstance(left, (int, float, Decimal)) or isinstance(right, (int, float, Decimal))
    a, b = (_number(left), _number(right)) if numeric else (to_text(left), to_text(right))
    if a is None or b is None:
        a, b = to_text(left), to_text(right)
    return {
        "=": a == b, "==": a == b, "!=": a != b, "<>": a != b,
        "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b,
    }[op]


_DORIS_TIME_FORMAT = {"%i": "%M", "%s": "%S", "%S": "%S", "%f": "%f", "%h": "%I", "%p": "%p",
                      "%Y": "%Y", "%y": "%y", "%m": "%m", "%d": "%d", "%H": "%H", "%c": "%-m",
                      "%e": "%-d", "%T": "%H:%M:%S", "%M": "%B", "%b": "%b", "%W": "%A", "%a": "%a"}


def _strftime(moment: dt.datetime, doris_format: str) -> str:
    python_format = re.sub(r"%.", lambda m: _DORIS_TIME_FORMAT.get(m.group(), m.group()), doris_format)
    return moment.strftime(python_format)


def _parse_datetime(value: Any) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(_to_datetime_text(value, False, 6))
    except ConversionError:
        return None


class _Functions:
    """Builtin functions usable in ``columns``/``where``; all propagate NULL unless noted."""

    def __init__(self, timezone: str) -> None:
        self._zone = ZoneInfo(timezone)

    def call(self, name: str, args: list[Any]) -> Any:
        if name in ("coalesce", "ifnull", "nvl"):
            return next((a for a in args if a is not None), None)
        if name == "if":
            return args[1] if args[0] else args[2]
        if name in ("now", "current_timestamp"):
            return dt.datetime.now(self._zone).strftime("%Y-%m-%d %H:%M:%S")
        if any(a is None for a in args):
            return None
        return getattr(self, f"_fn_{name}")(*args)

    def knows(self, name: str) -> bool:
        return name in _LAZY_FUNCTIONS or hasattr(self, f"_fn_{name}")

    def _fn_substring_index(self, text: Any, delimiter: Any, count: Any) -> str | None:
        return substring_index(to_text(text), to_text(delimiter), int(_number(count) or 0))

    def _fn_left(self, text: Any, length: Any) -> str | None:
        return left(to_text(text), int(_number(length) or 0))

    def _fn_right(self, text: Any, length: Any) -> str | None:
        return right(to_text(text), int(_number(length) or 0))

    def _fn_from_unixtime(self, seconds: Any, fmt: str = "%Y-%m-%d %H:%i:%s") -> str | None:
        number = _number(seconds)
        if number is None:
            return None
        return _strftime(dt.datetime.fromtimestamp(int(number), self._zone), to_text(fmt))

    def _fn_unix_timestamp(self, value: Any) -> int | None:
        moment = _parse_datetime(value)
        return int(moment.replace(tzinfo=self._zone).timestamp()) if moment else None

    def _fn_date_format(self, value: Any, fmt: Any) -> str | None:
        moment = _parse_datetime(value)
        return _strftime(moment, to_text(fmt)) if moment else None

    def _fn_to_date(self, value: Any) -> str | None:
        moment = _parse_datetime(value)
        return moment.strftime("%Y-%m-%d") if moment else None

    @staticmethod
    def _fn_concat(*parts: Any) -> str:
        return "".join(to_text(p) for p in parts)

    @staticmethod
    def _fn_upper(value: Any) -> str:
        return to_text(value).upper()

    @staticmethod
    def _fn_lower(value: Any) -> str:
        return to_text(value).lower()

    @staticmethod
    def _fn_trim(value: Any) -> str:
        return to_text(value).strip()

    @staticmethod
    def _fn_length(value: Any) -> int:
        return len(to_text(value).encode("utf-8"))

    @staticmethod
    def _fn_replace(value: Any, old: Any, new: Any) -> str:
        return to_text(value).replace(to_text(old), to_text(new))

    @staticmethod
    def _fn_substr(value: Any, position: Any, length: Any = None) -> str:
        text, start = to_text(value), int(_number(position) or 0)
        begin = start - 1 if start > 0 else len(text) + start
        if start == 0 or begin < 0:
            return ""
        return text[begin:] if length is None else text[begin:begin + int(_number(length) or 0)]

    _fn_substring = _fn_substr

    @staticmethod
    def _fn_abs(value: Any) -> Any:
        number = _number(value)
        return abs(number) if number is not None else None

    @staticmethod
    def _fn_round(value: Any, digits: Any = 0) -> Any:
        number = _number(value)
        if number is None:
            return None
        places = int(_number(digits) or 0)
        rounded = Decimal(str(number)).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
        return int(rounded) if places <= 0 else rounded

    @staticmethod
    def _fn_nullif(first: Any, second: Any) -> Any:
        return None if _compare("=", first, second) else first


_COMPARISONS = ("=", "==", "!=", "<>", "<", "<=", ">", ">=")


class _ExpressionParser:
    """Recursive descent over the usual SQL precedence: OR < AND < NOT < comparison < +- < */%."""

    def __init__(self, text: str, functions: _Functions) -> None:
        try:
            tokens = tokenize(text)
        except DorisSqlError as exc:
            raise plan_error(str(exc)) from None
        self._cursor = TokenCursor(tokens)
        self._functions = functions
        self.names: set[str] = set()

    def parse(self) -> Evaluator:
        try:
            evaluator = self._or()
            if self._cursor.peek() is not None:
                raise DorisSqlError(f"Syntax error near '{self._cursor.next().text}'")
        except DorisSqlError as exc:
            raise plan_error(str(exc)) from None
        return evaluator

    def _or(self) -> Evaluator:
        left = self._and()
        while self._cursor.accept_word("OR"):
            left = _or_of(left, self._and())
        return left

    def _and(self) -> Evaluator:
        left = self._not()
        while self._cursor.accept_word("AND"):
            left = _and_of(left, self._not())
        return left

    def _not(self) -> Evaluator:
        if self._cursor.accept_word("NOT"):
            inner = self._not()
            return lambda env: None if (v := inner(env)) is None else not v
        return self._comparison()

    def _comparison(self) -> Evaluator:
        left = self._additive()
        cursor = self._cursor
        token = cursor.peek()
        if token is not None and token.kind == "op" and token.value in _COMPARISONS:
            cursor.next()
            right = self._additive()
            return lambda env: _compare(token.value, left(env), right(env))
        if cursor.accept_word("IS"):
            negate = cursor.accept_word("NOT")
            cursor.expect_word("NULL")
            return lambda env: (left(env) is None) != negate
        negate = cursor.accept_word("NOT")
        if cursor.accept_word("IN"):
            items = self._arguments()
            return lambda env: _negate(_in(left(env), [i(env) for i in items]), negate)
        if cursor.accept_word("LIKE"):
            pattern = self._additive()
            return lambda env: _negate(_like(left(env), pattern(env)), negate)
        if cursor.accept_word("BETWEEN"):
            low = self._additive()
            cursor.expect_word("AND")
            high = self._additive()
            return lambda env: _negate(_and_values(_compare(">=", left(env), low(env)),
                                                   _compare("<=", left(env), high(env))), negate)
        if negate:
            raise DorisSqlError("Syntax error after NOT")
        return left

    def _additive(self) -> Evaluator:
        return self._binary(self._multiplicative, ("+", "-"))

    def _multiplicative(self) -> Evaluator:
        return self._binary(self._unary, ("*", "/", "%"))

    def _binary(self, operand: Callable[[], Evaluator], ops: tuple[str, ...]) -> Evaluator:
        left = operand()
        while (token := self._cursor.peek()) is not None and token.kind == "op" and token.value in ops:
            self._cursor.next()
            left = _binary_of(token.value, left, operand())
        return left

    def _unary(self) -> Evaluator:
        if self._cursor.accept_op("-"):
            inner = self._unary()
            return lambda env: _arithmetic("-", 0, inner(env))
        return self._primary()

    def _primary(self) -> Evaluator:
        cursor = self._cursor
        token = cursor.next()
        if token.kind == "number":
            value: Any = int(token.value) if token.value.isdigit() else Decimal(token.value)
            return lambda env: value
        if token.kind == "string":
            return lambda env: token.value
        if token.kind == "op" and token.value == "(":
            inner = self._or()
            cursor.expect_op(")")
            return inner
        if token.is_word("NULL", "TRUE", "FALSE"):
            constant = {"NULL": None, "TRUE": True, "FALSE": False}[token.value.upper()]
            return lambda env: constant
        if token.is_word("CAST"):
            return self._cast()
        if token.is_word("CASE"):
            return self._case()
        if token.kind in ("word", "quoted") and cursor.peek_op("(") and token.kind == "word":
            return self._call(token)
        if token.kind in ("word", "quoted"):
            name = token.value.lower()
            self.names.add(name)
            return lambda env: env.get(name)
        raise DorisSqlError(f"Syntax error near '{token.text}'")

    def _arguments(self) -> list[Evaluator]:
        self._cursor.expect_op("(")
        if self._cursor.accept_op(")"):
            return []
        items = [self._or()]
        while self._cursor.accept_op(","):
            items.append(self._or())
        self._cursor.expect_op(")")
        return items

    def _call(self, token: Token) -> Evaluator:
        name = token.value.lower()
        functions = self._functions
        if not functions.knows(name):
            raise DorisSqlError(f"Unknown function '{name}' (not emulated by the Doris stand-in)")
        args = self._arguments()
        return lambda env: functions.call(name, [a(env) for a in args])

    def _cast(self) -> Evaluator:
        self._cursor.expect_op("(")
        inner = self._or()
        self._cursor.expect_word("AS")
        ctype = parse_type(self._cursor)
        self._cursor.expect_op(")")
        return lambda env: _lenient_convert(inner(env), ctype)

    def _case(self) -> Evaluator:
        subject = None if self._cursor.peek_word("WHEN") else self._or()
        branches: list[tuple[Evaluator, Evaluator]] = []
        while self._cursor.accept_word("WHEN"):
            condition = self._or()
            self._cursor.expect_word("THEN")
            branches.append((condition, self._or()))
        otherwise = self._or() if self._cursor.accept_word("ELSE") else (lambda env: None)
        self._cursor.expect_word("END")

        def evaluate(env: Mapping[str, Any]) -> Any:
            for condition, result in branches:
                matched = _compare("=", subject(env), condition(env)) if subject else condition(env)
                if matched:
                    return result(env)
            return otherwise(env)

        return evaluate


# Functions that see NULL arguments instead of returning NULL for them.
_LAZY_FUNCTIONS = ("coalesce", "ifnull", "nvl", "if", "now", "current_timestamp")


def _or_of(left: Evaluator, right: Evaluator) -> Evaluator:
    def evaluate(env: Mapping[str, Any]) -> bool | None:
        a, b = left(env), right(env)
        if a or b:
            return True
        return None if a is None or b is None else False

    return evaluate


def _and_values(a: Any, b: Any) -> bool | None:
    if a is False or b is False or (a is not None and not a) or (b is not None and not b):
        return False
    return None if a is None or b is None else True


def _and_of(left: Evaluator, right: Evaluator) -> Evaluator:
    return lambda env: _and_values(left(env), right(env))


def _binary_of(op: str, left: Evaluator, right: Evaluator) -> Evaluator:
    return lambda env: _arithmetic(op, left(env), right(env))


def _negate(value: bool | None, negate: bool) -> bool | None:
    return value if value is None or not negate else not value


def _in(value: Any, items: list[Any]) -> bool | None:
    if value is None:
        return None
    return any(_compare("=", value, item) for item in items)


def _like(value: Any, pattern: Any) -> bool | None:
    if value is None or pattern is None:
        return None
    regex = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in to_text(pattern))
    return re.fullmatch(regex, to_text(value), re.S) is not None


def _lenient_convert(value: Any, ctype: ColumnType) -> Any:
    try:
        return convert_value(value, ctype)
    except ConversionError:
        return None


def compile_expression(text: str, timezone: str = "UTC") -> Expression:
    """Compile a ``columns``/``where``/``delete`` expression.

    :raises LoadError: (ANALYSIS_ERROR) the expression does not parse or uses an unknown function.
    """
    parser = _ExpressionParser(text, _Functions(timezone))
    evaluator = parser.parse()
    return Expression(text, evaluator, frozenset(parser.names))


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


def decompress(body: bytes, compress_type: str) -> bytes:
    """Undo ``compress_type``; :class:`LoadError` if the body is not in that format."""
    if not compress_type:
        return body
    try:
        return _DECOMPRESSORS[compress_type](body)
    except (OSError, EOFError, zlib.error, ValueError) as exc:
        raise LoadError("INTERNAL_ERROR", f"Failed to decompress {compress_type} data: {exc}") from None


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
    return _lenient_convert(env.get(plan.sequence_source), plan.schema.sequence_type)
