"""Stream Load header options of the Doris stand-in, checked as Doris checks them: the header phase
(:func:`parse_load_options`, before the transaction begins), the ``streamLoadPut`` phase
(:func:`parse_put_options`), and the body's decompression. Errors are :class:`LoadError`, whose
``str()`` is the BE ``Message`` (``[CODE]detail``).
"""

from __future__ import annotations

import bz2
import dataclasses
import gzip
import re
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


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


def decompress(body: bytes, compress_type: str) -> bytes:
    """Undo ``compress_type``; :class:`LoadError` if the body is not in that format."""
    if not compress_type:
        return body
    try:
        return _DECOMPRESSORS[compress_type](body)
    except (OSError, EOFError, zlib.error, ValueError) as exc:
        raise LoadError("INTERNAL_ERROR", f"Failed to decompress {compress_type} data: {exc}") from None
