"""Value objects shared by every step of the data path: plan → read → load → commit.

Nothing here does I/O. Times are integer epoch milliseconds (Kinesis arrival stamps have
millisecond precision); sequence numbers are Python ints (Kinesis sends 56-digit decimal
strings, which compare correctly only as integers).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from airflow_provider_kinesis_doris.core.errors import ConfigurationError

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def iso_utc(epoch_ms: int) -> str:
    """``2026-11-27T04:20:00Z`` (with milliseconds only when it has any): ISO 8601 UTC, what a
    person reads in a message or a log line."""
    moment = _EPOCH + timedelta(milliseconds=epoch_ms)
    return moment.isoformat(timespec="milliseconds" if epoch_ms % 1000 else "seconds").replace("+00:00", "Z")


def describe_instant(epoch_ms: int) -> str:
    """``2023-11-14T22:13:20Z (1700000000000)``: a person reads the first part, the checkpoint
    table's keys hold the second."""
    return f"{iso_utc(epoch_ms)} ({epoch_ms})"


def describe_interval(interval: tuple[int, int]) -> str:
    """``[2026-11-27T04:20:00Z, 2026-11-27T04:21:00Z) (1795..., 1795...)``: a person reads the
    first part, the keys in the checkpoint table are the second."""
    return f"[{iso_utc(interval[0])}, {iso_utc(interval[1])}) ({interval[0]}, {interval[1]})"


@dataclass(frozen=True, order=True, slots=True)
class Position:
    """Where a user record sits in a shard: sequence number plus KPL sub-sequence number.

    Records that were not KPL-aggregated have ``sub_sequence == 0``. Every user record of one
    aggregate shares the outer record's sequence number and is numbered 0..n-1.
    """

    sequence: int
    sub_sequence: int = 0

    def __post_init__(self) -> None:
        if self.sequence < 0 or self.sub_sequence < 0:
            raise ValueError(f"Position must be non-negative, got {self.sequence}/{self.sub_sequence}")

    def encode(self) -> str:
        """Stable text form, ``<sequence>:<sub_sequence>``, used in DynamoDB items and labels."""
        return f"{self.sequence}:{self.sub_sequence}"

    @classmethod
    def decode(cls, text: str) -> Position:
        sequence, _, sub = text.partition(":")
        return cls(int(sequence), int(sub or 0))


SHARD_START_INSTANT_MS = 0
"""The instant of a TRIM_HORIZON sweep's start boundary: every record arrives after it."""


class BoundaryKind(str, enum.Enum):
    """Where a boundary cuts a shard (``docs/design.md``, "The model")."""

    SHARD_START = "SHARD_START"
    """Before every record of the shard (the shard was created after the instant)."""
    AT = "AT"
    """Just before the record at ``position``: that record belongs to the later range."""
    AFTER = "AFTER"
    """Just after the record at ``position``: that record belongs to the earlier range."""
    SHARD_END = "SHARD_END"
    """After every record of a closed shard."""
    PENDING = "PENDING"
    """Not known yet: no record at or after the instant existed when it was planned. A reader
    makes it concrete (AT or AFTER) with a conditional write when it meets the cut."""


@dataclass(frozen=True, slots=True)
class Boundary:
    """``boundary(shard, instant)``: the cut between records arriving before and at/after
    ``instant_ms``. Resolved once, persisted, and shared by the two ranges it separates.

    ``arrival_ms`` is the arrival stamp of the record an AT boundary starts at, when it was seen
    while resolving the cut (None otherwise). It is a hint for resolving later instants, not part
    of the cut: two boundaries at the same cut are equal whatever their ``arrival_ms``.
    """

    shard_id: str
    instant_ms: int
    kind: BoundaryKind
    position: Position | None = None
    arrival_ms: int | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        needs_position = self.kind in (BoundaryKind.AT, BoundaryKind.AFTER)
        if needs_position != (self.position is not None):
            raise ValueError(f"{self.kind.value} boundary {'needs' if needs_position else 'takes no'} position")
        if self.arrival_ms is not None and self.kind is not BoundaryKind.AT:
            raise ValueError(f"{self.kind.value} boundary takes no arrival_ms")

    @property
    def is_concrete(self) -> bool:
        return self.kind is not BoundaryKind.PENDING

    def same_cut(self, other: Boundary) -> bool:
        """Whether both cut the shard at the same place, whatever their instants: no record
        arrived between the two instants."""
        return self.is_concrete and (self.kind, self.position) == (other.kind, other.position)

    def describe(self, *, position: bool = True) -> str:
        """For logs, messages and summaries: ``AT(<position>) at <instant>``, or ``<kind> at <instant>``
        (also for a positioned kind when ``position`` is False), the instant as :func:`describe_instant`."""
        if self.position is None or not position:
            return f"{self.kind.value} at {describe_instant(self.instant_ms)}"
        return f"{self.kind.value}({self.position.encode()}) at {describe_instant(self.instant_ms)}"


@dataclass(frozen=True)
class ChunkLimits:
    """Upper bounds of one Stream Load request, under the names of ``LoadConfig`` that set them
    (and of the range item's attributes that keep them).

    :param chunk_max_rows: records per chunk.
    :param chunk_max_bytes: bytes of JSON lines per chunk; a single larger record still forms a
        chunk of its own (Doris enforces its own body limits).
    """

    chunk_max_rows: int = 100_000
    chunk_max_bytes: int = 64 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.chunk_max_rows < 1 or self.chunk_max_bytes < 1:
            raise ConfigurationError(
                f"Chunk limits must be positive, got chunk_max_rows={self.chunk_max_rows} "
                f"chunk_max_bytes={self.chunk_max_bytes}"
            )


class RangeState(str, enum.Enum):
    PLANNED = "PLANNED"
    LOADED = "LOADED"


@dataclass(frozen=True, slots=True)
class ShardRange:
    """The records of one shard that belong to one interval ``[interval_start_ms, interval_end_ms)``:
    everything from ``start`` (inclusive cut) to ``end`` (exclusive cut)."""

    pipeline_id: str
    stream_name: str
    shard_id: str
    interval_start_ms: int
    interval_end_ms: int
    start: Boundary
    end: Boundary
    state: RangeState = RangeState.PLANNED
    chunk_limits: ChunkLimits | None = None
    """The limits every run cuts the range's chunks with (their labels follow the
    spans), stored with the range when it was planned. None: not known yet (a range stored before
    planners stored them; its first loader settles them)."""

    def __post_init__(self) -> None:
        if self.interval_end_ms <= self.interval_start_ms:
            raise ValueError(
                f"Interval {describe_interval((self.interval_start_ms, self.interval_end_ms))} of shard {self.shard_id} is empty"
            )


@dataclass(frozen=True, slots=True)
class KinesisRecord:
    """One user record (after KPL de-aggregation), with everything needed to place it."""

    shard_id: str
    position: Position
    arrival_ms: int
    partition_key: str
    data: bytes = field(repr=False)


class ShardState(str, enum.Enum):
    OPEN = "OPEN"
    """Still accepting writes (EndingSequenceNumber is null in ListShards)."""
    CLOSED = "CLOSED"
    """Split or merged away; still holds records that may not be loaded yet."""
    DRAINED = "DRAINED"
    """Closed and read to its end (NextShardIterator came back null) and loaded. Never read again."""


@dataclass(frozen=True, slots=True)
class ShardInfo:
    """One shard as ListShards reports it, plus its lineage."""

    shard_id: str
    parent_ids: tuple[str, ...]
    starting_hash_key: int
    ending_hash_key: int
    starting_sequence: int
    is_open: bool

    @property
    def hash_width(self) -> int:
        return self.ending_hash_key - self.starting_hash_key + 1
