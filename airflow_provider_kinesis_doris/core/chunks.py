"""Cut a range's mapped records into Stream Load chunks.

Chunks are a pure function of the records, the limits and the spans of chunks already recorded
for the range: a replay re-creates the recorded chunks exactly (same labels, so Doris or the
intent log drops them) even if the limits changed since, and cuts only the rest by the current
limits (invariants I2, I3).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.core.model import Position
from airflow_provider_kinesis_doris.core.transform import DeadLetter, Row

_MAX_POSITION = Position(2**200, 2**31)


@dataclass(frozen=True)
class ChunkLimits:
    """Upper bounds of one Stream Load request.

    :param max_rows: records per chunk.
    :param max_bytes: bytes of JSON lines per chunk; a single larger record still forms a chunk
        of its own (Doris enforces its own body limits).
    """

    max_rows: int = 100_000
    max_bytes: int = 64 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.max_rows < 1 or self.max_bytes < 1:
            raise ConfigurationError(f"Chunk limits must be positive, got rows={self.max_rows} bytes={self.max_bytes}")


@dataclass(frozen=True)
class Chunk:
    """Consecutive records of one shard, ``first`` to ``last`` inclusive, ready to load.

    The rows are kept only as the Stream Load body (one JSON line each), not as objects: a task
    holds two chunks while one loads and the next is cut, and the body is half their memory.
    """

    shard_id: str
    first: Position
    last: Position
    body: bytes
    row_count: int
    dead_letters: tuple[DeadLetter, ...]

    @property
    def record_count(self) -> int:
        return self.row_count + len(self.dead_letters)


def cut_chunks(
    mapped: Iterable[Row | DeadLetter],
    limits: ChunkLimits,
    recorded: Sequence[tuple[Position, Position]] = (),
) -> Iterator[Chunk]:
    """Group mapped records, in shard order, into chunks.

    Dead letters count toward the limits like rows, so where a chunk ends depends only on the
    records, never on how a user transform classified them.

    :param recorded: ``(first, last)`` of chunks an earlier attempt recorded for this range; a
        record inside one of them is chunked exactly as then.
    """
    spans = sorted(recorded)
    body = bytearray()
    rows = 0
    dead: list[DeadLetter] = []
    size = 0
    first: Position | None = None
    last: Position | None = None
    shard_id = ""
    for item in mapped:
        position = item.record.position
        item_size = len(item.line) + 1 if isinstance(item, Row) else len(item.record.data) + 1
        span = _span_of(position, spans)
        if first is not None and _ends_before(first, last, position, span, limits, rows + len(dead) + 1, size + item_size, spans):  # type: ignore[arg-type]
            yield Chunk(shard_id, first, last, bytes(body), rows, tuple(dead))  # type: ignore[arg-type]
            body, rows, dead, size, first = bytearray(), 0, [], 0, None
        if first is None:
            first, shard_id = item.record.position, item.record.shard_id
        last = item.record.position
        size += item_size
        if isinstance(item, Row):
            body += item.line
            body += b"\n"
            rows += 1
        else:
            dead.append(item)
    if first is not None:
        yield Chunk(shard_id, first, last, bytes(body), rows, tuple(dead))  # type: ignore[arg-type]


def _span_of(position: Position, spans: Sequence[tuple[Position, Position]]) -> tuple[Position, Position] | None:
    index = bisect.bisect_right(spans, (position, _MAX_POSITION)) - 1
    if index >= 0 and spans[index][0] <= position <= spans[index][1]:
        return spans[index]
    return None


def _ends_before(
    first: Position,
    last: Position,
    position: Position,
    span: tuple[Position, Position] | None,
    limits: ChunkLimits,
    count_with: int,
    size_with: int,
    spans: Sequence[tuple[Position, Position]],
) -> bool:
    """Whether the open chunk ``first..last`` must be closed before the record at ``position``."""
    current = _span_of(first, spans)
    if current is not None:
        # A recorded chunk closes at its recorded last record, and nothing else may join it.
        return last >= current[1] or span != current
    if span is not None:
        return True
    return count_with > limits.max_rows or size_with > limits.max_bytes
