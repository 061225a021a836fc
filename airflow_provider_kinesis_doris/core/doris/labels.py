"""Stream Load labels derived from record ranges (invariant I3).

A label is a pure function of (pipeline, stream, shard, first position, last position): a retried
task, a rerun or a backfill of the same range sends the same label, and Doris drops the duplicate
for as long as it remembers the label (``streaming_label_keep_max_second``, 12 h by default).

Shape: ``<namespace>:<pipeline>:<shard>:<hash>``

- ``namespace`` is ``kd`` for data chunks and ``kdx`` for dead-letter chunks, so the two tables
  (often in the same database, where labels are unique) never share a label;
- ``pipeline`` and ``shard`` are a readable, sanitized and truncated prefix, for humans only;
- ``hash`` is 160 bits of BLAKE2b over an unambiguous encoding of every input, *unsanitized*,
  so ``events.v1`` and ``events_v1`` (which sanitize alike) still get different labels.

Doris accepts ``^[-_A-Za-z0-9:]{1,128}$``; the longest label built here is 83 characters.
"""

from __future__ import annotations

import hashlib
import json
import re

from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.core.model import Position

LABEL_PATTERN = re.compile(r"^[-_A-Za-z0-9:]{1,128}$")
CHUNK_NAMESPACE = "kd"
DEAD_LETTER_NAMESPACE = "kdx"
# Bumping this changes every label: only do it together with a migration note, because a replay
# of an already loaded range would then no longer be recognised as a duplicate.
_ENCODING_VERSION = 1
_HASH_BYTES = 20
_PIPELINE_PREFIX_CHARS = 24
_SHARD_PREFIX_CHARS = 12
# ':' separates label parts, so the readable parts may not contain it.
_NOT_LABEL_SAFE = re.compile(r"[^-_A-Za-z0-9]")


def chunk_label(pipeline_id: str, stream_name: str, shard_id: str, first: Position, last: Position) -> str:
    """The Stream Load label of the chunk holding the records ``first..last`` (both inclusive).

    :param pipeline_id: the pipeline that owns the range (any text, not empty).
    :param stream_name: the Kinesis stream name (any text, not empty).
    :param shard_id: the shard id, e.g. ``shardId-000000000001`` (any text, not empty).
    :param first: position of the chunk's first record.
    :param last: position of the chunk's last record; not before ``first``.
    :return: a label matching ``^[-_A-Za-z0-9:]{1,128}$``.
    :raises ConfigurationError: an input is empty or ``last`` is before ``first``.
    """
    return _label(CHUNK_NAMESPACE, pipeline_id, stream_name, shard_id, first, last)


def dead_letter_label(
    pipeline_id: str, stream_name: str, shard_id: str, first: Position, last: Position
) -> str:
    """The label for the dead-letter load of the undecodable records of ``first..last``.

    Same properties as :func:`chunk_label`, in a namespace of its own: the dead-letter load of a
    range never collides with the data load of the same range.

    :param pipeline_id: the pipeline that owns the range (any text, not empty).
    :param stream_name: the Kinesis stream name (any text, not empty).
    :param shard_id: the shard id (any text, not empty).
    :param first: position of the chunk's first record.
    :param last: position of the chunk's last record; not before ``first``.
    :return: a label matching ``^[-_A-Za-z0-9:]{1,128}$``.
    :raises ConfigurationError: an input is empty or ``last`` is before ``first``.
    """
    return _label(DEAD_LETTER_NAMESPACE, pipeline_id, stream_name, shard_id, first, last)


def is_valid_label(label: str) -> bool:
    """Whether Doris would accept ``label`` (default ``label_regex_length`` of 128).

    :param label: the candidate label.
    """
    return LABEL_PATTERN.fullmatch(label) is not None


def _label(
    namespace: str, pipeline_id: str, stream_name: str, shard_id: str, first: Position, last: Position
) -> str:
    _check_inputs(pipeline_id, stream_name, shard_id, first, last)
    digest = _range_digest(namespace, pipeline_id, stream_name, shard_id, first, last)
    pipeline_part = _readable(pipeline_id)[:_PIPELINE_PREFIX_CHARS]
    shard_part = _readable(_shard_suffix(shard_id))[-_SHARD_PREFIX_CHARS:]
    return f"{namespace}:{pipeline_part}:{shard_part}:{digest}"


def _check_inputs(pipeline_id: str, stream_name: str, shard_id: str, first: Position, last: Position) -> None:
    for name, value in (("pipeline_id", pipeline_id), ("stream_name", stream_name), ("shard_id", shard_id)):
        if not value:
            raise ConfigurationError(f"{name} must not be empty when building a label")
    if last < first:
        raise ConfigurationError(
            f"Label range of shard {shard_id!r} ends before it starts: "
            f"first={first.encode()}, last={last.encode()}"
        )


def _range_digest(
    namespace: str, pipeline_id: str, stream_name: str, shard_id: str, first: Position, last: Position
) -> str:
    # A JSON array of the raw values is injective (strings are quoted and escaped, ints are
    # decimal), and ensure_ascii makes it encodable even for lone surrogates.
    encoded = json.dumps(
        [
            namespace,
            _ENCODING_VERSION,
            pipeline_id,
            stream_name,
            shard_id,
            first.sequence,
            first.sub_sequence,
            last.sequence,
            last.sub_sequence,
        ],
        ensure_ascii=True,
        separators=(",", ":"),
    )
    return hashlib.blake2b(encoded.encode("ascii"), digest_size=_HASH_BYTES).hexdigest()


def _shard_suffix(shard_id: str) -> str:
    # "shardId-000000000007" → "000000000007": the informative end of a Kinesis shard id.
    return shard_id.rsplit("-", 1)[-1] or shard_id


def _readable(text: str) -> str:
    return _NOT_LABEL_SAFE.sub("_", text) or "_"
