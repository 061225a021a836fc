"""Unpack KPL-aggregated Kinesis records into their user records.

Wire format (awslabs/amazon-kinesis-producer aggregation-format.md): 4 magic bytes, a protobuf
``AggregatedRecord``, then the MD5 of the protobuf bytes. Every user record inside shares the
outer record's sequence number; its sub-sequence number is its index, 0..n-1.

The protobuf parsing is ``aws-kinesis-agg``'s generated ``AggregatedRecord`` class. Its own
``iter_deaggregate_records`` is not used because it prints to stderr and silently drops the rest
of an aggregate when one packed record has a bad table index (invariant I6 forbids silent loss),
and it hands packed data back base64-encoded while plain records stay raw bytes. Here a record that
is not a well-formed aggregate is always kept whole, as one plain user record, like KCL does.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any

# aws-kinesis-agg's generated messages_pb2 imports ``config_pb2`` as a top-level module; importing
# its deaggregator first puts the package folder on sys.path for that, so take the class from there.
from aws_kinesis_agg import DIGEST_SIZE, MAGIC, deaggregator
from google.protobuf.message import DecodeError

log = logging.getLogger(__name__)

_AggregatedRecord = deaggregator.messages_pb2.AggregatedRecord


@dataclass(frozen=True, slots=True)
class UserRecord:
    """One user record inside a Kinesis record: its index in the aggregate (0 for a plain
    record), its partition key and its raw bytes."""

    sub_sequence: int
    partition_key: str
    data: bytes = field(repr=False)


def may_be_aggregate(data: bytes) -> bool:
    """Whether ``data`` starts like a KPL aggregate; False proves it is a plain record (the
    common case, checked first so that a plain record costs no parsing and no extra object).

    :param data: a Kinesis record's raw bytes.
    """
    return data.startswith(MAGIC)


def deaggregate(data: bytes, partition_key: str) -> list[UserRecord]:
    """The user records held by one Kinesis record.

    :param data: the record's raw bytes, as boto3's GetRecords returns them.
    :param partition_key: the record's own partition key (used for a plain record).
    :return: one user record per packed record of a KPL aggregate, numbered from 0; otherwise the
        record itself, unchanged, as user record 0.
    """
    aggregate = _parse_aggregate(data)
    if aggregate is None:
        return [UserRecord(0, partition_key, data)]
    try:
        return [
            UserRecord(index, aggregate.partition_key_table[packed.partition_key_index], packed.data)
            for index, packed in enumerate(aggregate.records)
        ]
    except IndexError:
        log.warning("KPL aggregate with partition key %r names a missing partition key; kept whole",
                    partition_key)  # fmt: skip
        return [UserRecord(0, partition_key, data)]


def _parse_aggregate(data: bytes) -> Any | None:
    """The protobuf message of a well-formed, non-empty KPL aggregate, else None."""
    if not may_be_aggregate(data) or len(data) <= len(MAGIC) + DIGEST_SIZE:
        return None
    message, digest = data[len(MAGIC) : -DIGEST_SIZE], data[-DIGEST_SIZE:]
    if hashlib.md5(message).digest() != digest:  # noqa: S324 - the format's checksum, not security
        return None
    aggregate = _AggregatedRecord()
    try:
        aggregate.ParseFromString(message)
    except DecodeError:
        return None
    return aggregate if aggregate.records else None
