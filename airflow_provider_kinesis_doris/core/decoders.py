"""How a record's payload becomes rows: the ``decoder`` setting.

Whatever the decoder, the rows go to Doris as JSON lines (one object per line), so the table's
columns are matched by name and every load sends the same headers. The decoders:

``"json"`` (default)
    The payload is one JSON object, one row (``core.mapping``'s fast path).
``"gzip+json"``
    The payload is gzip of one JSON object. A CloudWatch Logs subscription envelope
    (``messageType``, ``owner``, ``logGroup``, ``logStream``, ``logEvents``) becomes one row per
    log event, with the columns of :data:`CLOUDWATCH_COLUMNS`; its ``CONTROL_MESSAGE`` (sent when
    the subscription is set up) carries no log event and makes no row: it is counted as skipped
    (``records_skipped`` in the report and ``skipped`` in XCom), never dead-lettered. Any other
    object is one row, as with ``"json"``.
``"csv"``
    The payload is UTF-8 CSV (comma-separated, ``"`` quoting as in RFC 4180, ``\\N`` for NULL as in
    Doris's CSV loads), one row per line: a record may hold several lines. Fields are named by the
    table's columns (``DESC`` of the table, without the metadata columns) or by
    ``load_options["columns"]`` (its plain names; ``target = expr`` entries are derived).
    Values are strings; Doris converts them to the column types (``strict_mode`` refuses what does
    not convert, and the row becomes a dead letter with Doris's reason).
``"package.module:function"``
    A function of the payload's bytes returning a dict (one row) or an iterable of dicts (one row
    each, none to skip the record). It must be importable on Spark executors too.

A record's rows always travel together: they are one item for chunking (limits count records),
so they land in the same chunk, under the same label, on every replay. A record that fails to
decode (an exception, a return that is not a dict or an iterable of dicts, or one row failing the
transform or ``required_fields``) is one dead letter with the reason, none of its rows loaded
(invariant I6).
"""

from __future__ import annotations

import csv
import importlib
import io
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.core.mapping import PayloadError, RecordDecoder, parse_json_object

JSON = "json"
GZIP_JSON = "gzip+json"
CSV = "csv"
BUILT_IN = (JSON, GZIP_JSON, CSV)

CLOUDWATCH_COLUMNS = ("log_group", "log_stream", "owner", "id", "timestamp", "message")
"""The row of one CloudWatch Logs log event: the envelope's ``logGroup``, ``logStream`` and
``owner`` (the AWS account), and the event's ``id`` (a string of digits), ``timestamp`` (epoch
milliseconds) and ``message``. A table for them::

    log_group VARCHAR(512), log_stream VARCHAR(512), owner VARCHAR(12), id VARCHAR(64),
    timestamp BIGINT, message STRING
"""

MAX_GUNZIPPED_BYTES = 64 * 1024 * 1024
"""A gzip payload that inflates beyond this is a dead letter (a decompression bomb, or a payload
no Stream Load chunk could hold)."""

CSV_NULL = "\\N"


def check_decoder(decoder: str) -> str:
    """``decoder`` if it names a decoder.

    :raises ConfigurationError: neither a built-in name nor ``package.module:function``.
    """
    if decoder in BUILT_IN:
        return decoder
    module, _, function = decoder.partition(":") if isinstance(decoder, str) else ("", "", "")
    if not module or not function:
        raise ConfigurationError(
            f"decoder must be one of {list(BUILT_IN)} or 'package.module:function', got {decoder!r}"
        )
    return decoder


def build_decoder(decoder: str, csv_columns: Sequence[str] | None = None) -> RecordDecoder | None:
    """The function ``mapping.decoder`` holds for ``decoder`` (None for ``"json"``: the mapping's
    own fast path), imported or built where the pipeline's settings are made: in the task before
    planning, and on each executor.

    :param csv_columns: the field names of ``"csv"``.
    :raises ConfigurationError: a function that does not import, or ``"csv"`` without columns (the
        name was checked with the operator's arguments: :func:`check_decoder`).
    """
    if decoder == JSON:
        return None
    if decoder == GZIP_JSON:
        return gzip_json
    if decoder == CSV:
        if not csv_columns:
            raise ConfigurationError(
                "decoder 'csv' needs the table's columns: they are read with DESC of the table, or give them in "
                "load_options['columns']"
            )
        return CsvDecoder(tuple(csv_columns))
    return import_function(decoder, "decoder")


def import_function(path: str, what: str) -> Any:
    """The function named ``package.module:function``; ``what`` names the setting in messages."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ConfigurationError(f"{what} must be 'package.module:function', got {path!r}")
    try:
        function = getattr(importlib.import_module(module_name), attribute)
    except Exception as exc:  # noqa: BLE001 - a module failing on import (SyntaxError, NameError ...) is a bad path too
        raise ConfigurationError(f"Cannot import {what} {path!r}: {type(exc).__name__}: {exc}") from exc
    if not callable(function):
        raise ConfigurationError(f"{what} {path!r} is a {type(function).__name__}, not a function")
    return function


# --- load_options that contradict the body ------------------------------------------------------------


def _truthy(value: Any) -> bool:
    return value is True or (isinstance(value, (str, int)) and str(value).strip().lower() in ("true", "1"))


def _falsy(value: Any) -> bool:
    return value is False or (isinstance(value, (str, int)) and str(value).strip().lower() in ("false", "0"))


def check_load_options(options: Mapping[str, Any], decoder: str, *, skip_templates: bool = False) -> None:
    """Refuse Stream Load options that contradict the body the loader sends: JSON lines, whatever
    the decoder (``format`` other than json, ``strip_outer_array``, ``read_json_by_line`` false),
    and ``two_phase_commit``: a pre-committed load is not visible, so checkpoints would move past
    data that Doris aborts after its precommit timeout (I4).

    :param skip_templates: leave values holding ``{{`` alone (checked again once rendered).
    :raises ConfigurationError: naming the option, its value and the decoder.
    """
    body = (
        f"with decoder={decoder!r} the loader sends every row as a line of JSON (format 'json', "
        "read_json_by_line true, no outer array)"
    )
    for name, contradicts, advice in (
        ("format", lambda v: str(v).strip().lower() != JSON,
         "remove it; for CSV records set decoder='csv', for gzip-compressed JSON decoder='gzip+json'"),
        ("strip_outer_array", _truthy, "remove it: no outer array is sent"),
        ("read_json_by_line", _falsy, "remove it: the loader sets it"),
    ):  # fmt: skip
        value = options.get(name)
        if value is None or (skip_templates and isinstance(value, str) and "{{" in value):
            continue
        if contradicts(value):
            raise ConfigurationError(f"load.options {name}={value!r} contradicts the body: {body}; {advice}")
    commit = options.get("two_phase_commit")
    if _truthy(commit) and not (skip_templates and isinstance(commit, str) and "{{" in commit):
        raise ConfigurationError(
            f"load.options two_phase_commit={commit!r} is not supported by the pipeline, which records a chunk as "
            "loaded only once Doris makes it VISIBLE; remove it (each chunk is already loaded exactly once under its "
            "label)"
        )


def plain_columns(columns: Sequence[str]) -> tuple[str, ...]:
    """The source columns of a Stream Load ``columns`` list: its entries that are not
    ``target = expr`` (derived), stripped of whitespace and backticks."""
    return tuple(column.strip().strip("`") for column in columns if "=" not in column)


# --- the decoders ------------------------------------------------------------------------------------


def gunzip(data: bytes, limit: int = MAX_GUNZIPPED_BYTES) -> bytes:
    """The content of ``data``, a gzip stream of one or more members.

    :raises PayloadError: not gzip, truncated, or larger than ``limit`` once inflated.
    """
    pieces: list[bytes] = []
    size = 0
    rest = data
    try:
        while rest:
            inflater = zlib.decompressobj(wbits=31)
            piece = inflater.decompress(rest, limit - size + 1)
            size += len(piece)
            if size > limit or inflater.unconsumed_tail:
                raise PayloadError(f"gunzipped payload is larger than {limit} bytes")
            if not inflater.eof:
                raise PayloadError("payload is not gzip: the stream is truncated")
            pieces.append(piece)
            rest = inflater.unused_data
    except zlib.error as exc:
        raise PayloadError(f"payload is not gzip: {exc}") from exc
    return b"".join(pieces)


def gzip_json(data: bytes) -> dict[str, Any] | list[dict[str, Any]]:
    """The ``"gzip+json"`` decoder: a CloudWatch Logs envelope's log events, else the object."""
    payload = parse_json_object(gunzip(data), "gunzipped payload")
    if "messageType" in payload and "logEvents" in payload:
        return cloudwatch_rows(payload)
    return payload


def cloudwatch_rows(envelope: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per log event of a CloudWatch Logs subscription envelope (:data:`CLOUDWATCH_COLUMNS`);
    none for a ``CONTROL_MESSAGE``.

    :raises PayloadError: another message type, or a log event that is not an object with ``id``,
        ``timestamp`` and ``message``.
    """
    kind = envelope.get("messageType")
    if kind == "CONTROL_MESSAGE":
        return []
    if kind != "DATA_MESSAGE":
        raise PayloadError(f"CloudWatch Logs messageType {kind!r} is neither DATA_MESSAGE nor CONTROL_MESSAGE")
    events = envelope.get("logEvents")
    if not isinstance(events, list):
        raise PayloadError(f"CloudWatch Logs logEvents is JSON {type(events).__name__}, expected an array")
    shared = {"log_group": envelope.get("logGroup"), "log_stream": envelope.get("logStream"), "owner": envelope.get("owner")}
    rows = []
    for index, event in enumerate(events):
        if not isinstance(event, dict) or any(event.get(name) is None for name in ("id", "timestamp", "message")):
            raise PayloadError(f"CloudWatch Logs log event lacks id, timestamp or message (event {index})")
        rows.append({**shared, "id": event["id"], "timestamp": event["timestamp"], "message": event["message"]})
    return rows


@dataclass(frozen=True)
class CsvDecoder:
    """The ``"csv"`` decoder: each non-blank line of the payload is one row, its fields named by
    ``columns`` in order; a line with another number of fields makes the record a dead letter."""

    columns: tuple[str, ...]

    def __call__(self, data: bytes) -> list[dict[str, Any]]:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PayloadError(f"payload is not UTF-8 text: {exc.reason} at byte {exc.start}") from exc
        try:
            lines = [fields for fields in csv.reader(io.StringIO(text, newline=""), strict=True) if fields]
        except csv.Error as exc:
            raise PayloadError(f"payload is not CSV: {exc}") from exc
        if not lines:
            raise PayloadError("payload holds no CSV line")
        rows = []
        for fields in lines:
            if len(fields) != len(self.columns):
                raise PayloadError(
                    f"CSV line has {len(fields)} fields, expected {len(self.columns)} ({', '.join(self.columns)})"
                )
            rows.append({name: None if value == CSV_NULL else value for name, value in zip(self.columns, fields)})
        return rows
