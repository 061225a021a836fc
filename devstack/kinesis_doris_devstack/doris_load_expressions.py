"""Expressions of a Stream Load (the ``columns`` mapping, ``where``, ``delete``): parsed and compiled
into evaluators over a row's values, with the Doris functions the stand-in knows.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any
from zoneinfo import ZoneInfo

from kinesis_doris_devstack.doris_ddl import parse_type
from kinesis_doris_devstack.doris_schema import ColumnType, DorisSqlError
from kinesis_doris_devstack.doris_sql import left, right, substring_index
from kinesis_doris_devstack.doris_tokens import Token, TokenCursor, tokenize
from kinesis_doris_devstack.doris_load_conversion import (
    ConversionError,
    INT_TEXT,
    NUMBER_TEXT,
    convert_value,
    to_datetime_text,
    to_text,
)
from kinesis_doris_devstack.doris_load_options import plan_error


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
    if INT_TEXT.match(text):
        return int(text)
    if NUMBER_TEXT.match(text):
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
        return dt.datetime.fromisoformat(to_datetime_text(value, False, 6))
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
        return lambda env: lenient_convert(inner(env), ctype)

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


def lenient_convert(value: Any, ctype: ColumnType) -> Any:
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
