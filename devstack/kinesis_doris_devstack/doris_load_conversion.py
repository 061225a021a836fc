"""Value conversion of the Doris stand-in's row path: a source value into a column's type, with the
``invalid`` / ``overflow`` / ``too_long`` kinds that strict mode and the filtered accounting of
docs/doris-standin.md ("Load semantics") decide on.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation, localcontext
from typing import Any

from kinesis_doris_devstack.doris_schema import ColumnType


# --- value conversion ----------------------------------------------------------------------


class ConversionError(ValueError):
    """``kind`` is ``invalid`` (strict mode decides), ``overflow`` or ``too_long`` (always filtered)."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


_INT_BITS = {"TINYINT": 8, "SMALLINT": 16, "INT": 32, "BIGINT": 64, "LARGEINT": 128}
INT_TEXT = re.compile(r"^\s*[+-]?\d+\s*$")
NUMBER_TEXT = re.compile(r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$")
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
        return to_datetime_text(value, name == "DATE", ctype.precision or 0)
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
    elif isinstance(value, str) and INT_TEXT.match(value):
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
    if isinstance(value, str) and NUMBER_TEXT.match(value):
        return float(value)
    raise ConversionError("invalid")


def _to_decimal(value: Any, precision: int, scale: int) -> Decimal:
    if isinstance(value, bool) or isinstance(value, (dict, list)):
        raise ConversionError("invalid")
    text = to_text(value) if not isinstance(value, float) else repr(value)
    if not NUMBER_TEXT.match(text):
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


def to_datetime_text(value: Any, date_only: bool, precision: int) -> str:
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
