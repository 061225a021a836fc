"""Decode Kinesis records and map them to the rows Stream Load receives (JSON lines).

A record that cannot be decoded or mapped is not dropped: it becomes a ``DeadLetter`` carrying
its shard, position and reason (invariant I6).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from json.encoder import encode_basestring  # type: ignore[attr-defined]
from typing import Any

from airflow_provider_kinesis_doris.core.doris.identifiers import qualified_name
from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.core.model import KinesisRecord

# The metadata a row can carry, by column name; values are taken from the record.
METADATA_COLUMNS: dict[str, Callable[[KinesisRecord], Any]] = {
    "_kinesis_shard": lambda record: record.shard_id,
    "_kinesis_sequence": lambda record: record.position.encode(),
    "_kinesis_arrival": lambda record: record.arrival_ms,
    "_kinesis_partition_key": lambda record: record.partition_key,
}

RowTransform = Callable[[dict[str, Any]], "dict[str, Any] | None"]
"""A user function applied to each decoded row: return the row to load, or None to send the
record to the dead letter (it is never dropped silently)."""

RecordDecoder = Callable[[bytes], Any]
"""Turns a record's payload into its rows: a dict (one row) or an iterable of dicts (one row
each; none for a record that carries no data by design). Anything else it returns, and anything
it raises, makes the record a dead letter with the reason (``core.decoders``)."""


@dataclass(frozen=True)
class RecordMapping:
    """How a record's JSON payload becomes a row.

    :param metadata_columns: names from ``METADATA_COLUMNS`` to add to every row.
    :param required_fields: fields a payload must have (after ``transform``); a payload missing
        one goes to the dead letter instead of failing the whole chunk in Doris.
    :param transform: optional per-row function (must be picklable to reach Spark executors).
    :param decoder: how a payload becomes rows (``core.decoders``); None: the payload is one
        JSON object (the default ``"json"`` decoder, with its fast path).
    """

    metadata_columns: tuple[str, ...] = ()
    required_fields: tuple[str, ...] = ()
    transform: RowTransform | None = field(default=None, compare=False)
    decoder: RecordDecoder | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.metadata_columns) - set(METADATA_COLUMNS))
        if unknown:
            raise ConfigurationError(f"Unknown metadata columns {unknown}; choose from {sorted(METADATA_COLUMNS)}")


@dataclass(frozen=True, slots=True)
class Row:
    """A record mapped for loading: its JSON lines, joined by newlines, without the last one.

    Most records are one line. A decoder may make several (CloudWatch Logs: one per log event),
    which stay together in one chunk, or none (a CloudWatch Logs control message): then ``line``
    is empty and the record is counted as skipped, not dead-lettered.
    """

    record: KinesisRecord
    line: bytes
    lines: int = 1


_DEAD_LETTER_DDL = """CREATE TABLE IF NOT EXISTS {name} (
    stream_name VARCHAR(128) NOT NULL,
    shard_id VARCHAR(64) NOT NULL,
    sequence_number VARCHAR(64) NOT NULL,
    sub_sequence_number INT NOT NULL,
    arrival_ms BIGINT NULL,
    partition_key VARCHAR(256) NULL,
    reason STRING NULL,
    payload_base64 STRING NULL
) DUPLICATE KEY(stream_name, shard_id, sequence_number)
DISTRIBUTED BY HASH(shard_id) BUCKETS AUTO"""


def dead_letter_ddl(database: str, table: str, properties: Mapping[str, str] | None = None) -> str:
    """``CREATE TABLE IF NOT EXISTS`` of a dead-letter table: the columns of ``DeadLetter.as_row``.

    :param properties: the table's ``PROPERTIES``, e.g. ``{"replication_num": "1"}``: Doris's
        default of 3 replicas fails on a cluster with fewer BEs.

    Both names are backtick-quoted (backticks inside doubled), whatever they hold; the operator
    also refuses names Doris could not have (``core.doris.identifiers``) before any SQL runs.
    """
    ddl = _DEAD_LETTER_DDL.format(name=qualified_name(database, table))
    if properties:
        ddl += "\nPROPERTIES (" + ", ".join(f"{json.dumps(str(k))} = {json.dumps(str(v))}" for k, v in properties.items()) + ")"
    return ddl


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A record that could not become a row, and why."""

    record: KinesisRecord
    reason: str

    def as_row(self, stream_name: str) -> bytes:
        """The dead-letter table's JSON line: stream, shard, position, arrival, reason, raw base64."""
        return json.dumps(
            {
                "stream_name": stream_name,
                "shard_id": self.record.shard_id,
                "sequence_number": str(self.record.position.sequence),
                "sub_sequence_number": self.record.position.sub_sequence,
                "arrival_ms": self.record.arrival_ms,
                "partition_key": self.record.partition_key,
                "reason": self.reason[:1000],
                "payload_base64": base64.b64encode(self.record.data).decode("ascii"),
            },
            ensure_ascii=False,
            separators=(",", ":"),
        ).encode("utf-8")


MAX_NESTING = 256
"""Arrays and objects a payload may nest. Deeper ones are dead letters: Python's decoder recurses
once per level and fails near the interpreter's recursion limit (lower on a deep call stack)."""


def map_record(record: KinesisRecord, mapping: RecordMapping) -> Row | DeadLetter:
    """Decode ``record`` as a JSON object and apply ``mapping``; any failure for this record
    (decoding, the transform, encoding the row) is its dead letter, never the run's."""
    try:
        return _map(record, mapping)
    except Exception as exc:  # noqa: BLE001 - one record must not stop the pipeline (a poison pill)
        return DeadLetter(record, f"mapping raised {type(exc).__name__}: {exc}")


class PayloadError(ValueError):
    """A payload that is not what its decoder reads; the message is the dead letter's reason."""


def _map(record: KinesisRecord, mapping: RecordMapping) -> Row | DeadLetter:
    if not record.data:
        return DeadLetter(record, "payload is empty")
    if mapping.decoder is not None:
        return _map_decoded(record, mapping)
    try:
        payload = parse_json_object(record.data)
    except PayloadError as exc:
        return DeadLetter(record, str(exc))
    payload_or_dead = _shape(record, payload, mapping)
    if isinstance(payload_or_dead, DeadLetter):
        return payload_or_dead
    payload, metadata = payload_or_dead
    if mapping.transform is None and _splicable(record.data, payload, metadata):
        return Row(record, _spliced_line(record.data, payload, metadata))
    payload.update(metadata)
    return Row(record, _json_line(payload))


def parse_json_object(data: bytes, what: str = "payload") -> dict[str, Any]:
    """``data`` as one JSON object (UTF-8, no NaN/Infinity, at most ``MAX_NESTING`` deep).

    :param what: what ``data`` is, for the message (``"payload"``, ``"gunzipped payload"``).
    :raises PayloadError: with the dead letter's reason.
    """
    if (depth := _nesting_beyond(data, MAX_NESTING)) is not None:
        raise PayloadError(f"{what} nests more than {MAX_NESTING} arrays/objects deep (at byte {depth})")
    try:
        # Decode explicitly: json.loads(bytes) guesses UTF-16/32 and can misread binary payloads.
        payload = _DECODER.decode(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise PayloadError(f"{what} is not UTF-8 text: {exc.reason} at byte {exc.start}") from exc
    except (json.JSONDecodeError, ValueError) as exc:
        raise PayloadError(f"{what} is not JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise PayloadError(f"{what} is JSON {type(payload).__name__}, expected an object")
    return payload


def _shape(
    record: KinesisRecord, payload: dict[str, Any], mapping: RecordMapping
) -> tuple[dict[str, Any], dict[str, Any]] | DeadLetter:
    """``payload`` after the transform and the required fields, with the record's metadata."""
    if mapping.transform is not None:
        try:
            payload = mapping.transform(payload)  # type: ignore[assignment]
        except Exception as exc:  # noqa: BLE001 - a user function's failure is this record's dead letter
            return DeadLetter(record, f"transform raised {type(exc).__name__}: {exc}")
        if payload is None:
            return DeadLetter(record, "transform rejected the record")
        if not isinstance(payload, dict):
            return DeadLetter(record, f"transform returned {type(payload).__name__}, expected a dict or None")
    missing = [name for name in mapping.required_fields if payload.get(name) is None]
    if missing:
        return DeadLetter(record, f"missing required fields {missing}")
    return payload, {column: METADATA_COLUMNS[column](record) for column in mapping.metadata_columns}


def _map_decoded(record: KinesisRecord, mapping: RecordMapping) -> Row | DeadLetter:
    """A record through ``mapping.decoder``: all of its rows, or its dead letter (one row failing
    the transform or the required fields dead-letters the whole record, so a record is never
    half loaded)."""
    try:
        decoded = mapping.decoder(record.data)  # type: ignore[misc]
    except PayloadError as exc:
        return DeadLetter(record, str(exc))
    except Exception as exc:  # noqa: BLE001 - a decoder's failure is this record's dead letter
        return DeadLetter(record, f"decoder raised {type(exc).__name__}: {exc}")
    if isinstance(decoded, dict):
        rows: list[Any] = [decoded]
    elif decoded is None or isinstance(decoded, (str, bytes, bytearray)):
        return DeadLetter(record, f"decoder returned {type(decoded).__name__}, expected a dict or an iterable of dicts")
    else:
        try:
            rows = list(decoded)
        except TypeError:
            return DeadLetter(record, f"decoder returned {type(decoded).__name__}, expected a dict or an iterable of dicts")
        except Exception as exc:  # noqa: BLE001 - a generator failing midway is the record's dead letter
            return DeadLetter(record, f"decoder raised {type(exc).__name__}: {exc}")
    lines: list[bytes] = []
    for index, row in enumerate(rows):
        if not isinstance(row, dict):
            return DeadLetter(record, f"decoder returned {type(row).__name__} as row {index}, expected a dict")
        shaped = _shape(record, dict(row), mapping)
        if isinstance(shaped, DeadLetter):
            return shaped
        payload, metadata = shaped
        payload.update(metadata)
        lines.append(_json_line(payload))
    return Row(record, b"\n".join(lines), len(lines))


def _nesting_beyond(data: bytes, limit: int) -> int | None:
    """The offset where ``data`` opens its ``limit + 1``-th nested array/object, if it does.

    Counting brackets (C speed) rules out nearly every payload; only one with more brackets than
    the limit is scanned, skipping strings, whose brackets do not nest.
    """
    if data.count(b"[") + data.count(b"{") <= limit:
        return None
    depth, in_string, escaped = 0, False, False
    for offset, byte in enumerate(data):
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > limit:
                return offset
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1
    return None


def _reject_constant(name: str) -> Any:
    # NaN and Infinity are Python's extension, not JSON; Doris would reject the whole chunk.
    raise ValueError(f"{name} is not valid JSON")


# One decoder for every record: ``json.loads`` with an argument builds a new one each call.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _splicable(data: bytes, payload: Mapping[str, Any], metadata: Mapping[str, Any]) -> bool:
    """Whether the record's own bytes can be the line, with the metadata appended in place.

    Re-encoding the whole payload was the costliest step per record (see docs/benchmarks.md); the
    decoded payload already proved the bytes are one UTF-8 JSON object without NaN/Infinity. The
    bytes must also be one line, end with ``}``, and hold no metadata column name of their own
    (those are re-encoded, so that the metadata value wins exactly as before).
    """
    return (
        b"\n" not in data
        and b"\r" not in data
        and data.rstrip().endswith(b"}")
        and payload.keys().isdisjoint(metadata)
    )


def _spliced_line(data: bytes, payload: Mapping[str, Any], metadata: Mapping[str, Any]) -> bytes:
    """``data`` (a JSON object on one line) with ``metadata`` appended as its last members."""
    body = data.strip()
    if not metadata:
        return body
    return body[:-1].rstrip() + (b"," if payload else b"") + json_members(metadata) + b"}"


def json_members(metadata: Mapping[str, str | int]) -> bytes:
    """``_json_line(metadata)`` without its braces, for the string and integer values metadata
    columns hold: the same bytes, at a third of ``json.dumps``'s cost per record."""
    return ",".join(
        [f"{encode_basestring(name)}:{encode_basestring(value) if isinstance(value, str) else int(value)}"
         for name, value in metadata.items()]
    ).encode("utf-8")  # fmt: skip


def _json_line(payload: Mapping[str, Any]) -> bytes:
    # ensure_ascii=False keeps unicode readable and smaller; Doris reads UTF-8.
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
