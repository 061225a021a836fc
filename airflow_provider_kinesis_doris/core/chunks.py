"""Cut a range's mapped records into Stream Load chunks, and settle what each chunk holds.

Chunks are a pure function of the records, the limits and the spans of chunks already recorded
for the range: a replay re-creates the recorded chunks exactly (same labels, so Doris or the
intent log drops them) even if the limits changed since, and cuts only the rest by the current
limits (invariants I2, I3).

What a chunk holds is fixed like its span: before its first load, the loader settles the chunk's
:class:`ChunkContent` (which of its records are dead letters) in the checkpoint store, and every
later attempt follows it (:func:`follow_contents`). Otherwise a record that a user transform
failed on once, or that a changed ``required_fields`` now accepts, would be a dead letter in one
attempt and a row in the next, under labels that Doris already holds: in neither table, or in both.
The reads and writes of settled contents in the checkpoint store are here too (:func:`settle_content`,
:func:`settled_contents`, :func:`follow_an_amendment`).
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from airflow_provider_kinesis_doris.core.errors import (
    ChunkContentChanged,
    ChunkContentSettledElsewhere,
    ChunkContentTooLarge,
    RowsRefused,
)
from airflow_provider_kinesis_doris.core.model import ChunkLimits, Position, ShardRange, describe_instant
from airflow_provider_kinesis_doris.core.mapping import DeadLetter, Row
from airflow_provider_kinesis_doris.core.stores.chunk_log import ChunkLog
from airflow_provider_kinesis_doris.core.stores.items import ChunkRecord

_MAX_POSITION = Position(2**200, 2**31)
MAX_CONTENT_CHARS = 300_000
"""The longest encoded :class:`ChunkContent`: it is stored in one DynamoDB item (400 KB at most)."""
RECORDED_DEAD_LETTER = "dead-lettered when its chunk was first loaded; it maps to a row now"
_MAX_REASON_CHARS = 500


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
    dead_ordinals: tuple[int, ...]
    """Where the dead letters are among the chunk's records (0 is ``first``)."""
    row_lines: tuple[int, ...] | None = None
    """Lines of ``body`` per record that became rows, in order, when a decoder made a record into
    other than one line (``core.decoders``); None when each is one line."""

    @property
    def record_count(self) -> int:
        return self.row_count + len(self.dead_letters)

    @property
    def line_count(self) -> int:
        """Lines of ``body``: the rows Stream Load receives."""
        return self.row_count if self.row_lines is None else sum(self.row_lines)

    @property
    def skipped(self) -> int:
        """Records that became no row by design (a CloudWatch Logs control message)."""
        return 0 if self.row_lines is None else self.row_lines.count(0)

    def line_records(self) -> list[int]:
        """For each line of ``body``, the ordinal of its record among the chunk's records."""
        dead = set(self.dead_ordinals)
        ordinals = [ordinal for ordinal in range(self.record_count) if ordinal not in dead]
        if self.row_lines is None:
            return ordinals
        return [ordinal for ordinal, lines in zip(ordinals, self.row_lines) for _ in range(lines)]

    @property
    def content(self) -> ChunkContent:
        return ChunkContent(self.first, self.last, self.record_count, self.dead_ordinals)


@dataclass(frozen=True)
class ChunkContent:
    """Which records of the chunk ``first..last`` are dead letters: ordinals among its
    ``records`` records (Kinesis never changes the records of a span, so ordinals are stable and
    far smaller than positions). Encoded as a short JSON text with runs of ordinals."""

    first: Position
    last: Position
    records: int
    dead: tuple[int, ...]
    refused: Mapping[int, str] = field(default_factory=dict, compare=False)
    """Dead letters because Doris refused their rows: ordinal → Doris's reason."""

    def with_refused(self, refused: Mapping[int, str]) -> ChunkContent:
        """This content with more records dead-lettered for Doris's ``refused`` reasons."""
        merged = {**self.refused, **{ordinal: reason[:_MAX_REASON_CHARS] for ordinal, reason in refused.items()}}
        return ChunkContent(self.first, self.last, self.records, tuple(sorted({*self.dead, *refused})), merged)

    def encode(self) -> str:
        """The stored form; raises :class:`ChunkContentTooLarge` past :data:`MAX_CONTENT_CHARS`."""
        runs: list[list[int]] = []
        for ordinal in self.dead:
            if runs and runs[-1][1] == ordinal - 1:
                runs[-1][1] = ordinal
            else:
                runs.append([ordinal, ordinal])
        dead = ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
        stored: dict[str, object] = {"first": self.first.encode(), "last": self.last.encode(), "records": self.records, "dead": dead}
        if self.refused:
            stored["refused"] = {str(ordinal): reason for ordinal, reason in sorted(self.refused.items())}
        text = json.dumps(stored)
        if len(text) > MAX_CONTENT_CHARS:
            raise ChunkContentTooLarge(
                f"Chunk {self.first.encode()}..{self.last.encode()} has {len(self.dead)} dead letters among "
                f"{self.records} records in {len(runs)} separate runs: {len(text)} characters, more than the "
                f"{MAX_CONTENT_CHARS} a checkpoint item can hold. Its content cannot be fixed before loading, "
                "so it is not loaded; fix the producer or the mapping so fewer records fail alternately"
            )
        return text

    @classmethod
    def decode(cls, text: str) -> ChunkContent:
        data = json.loads(text)
        dead: list[int] = []
        for run in filter(None, data["dead"].split(",")):
            low, _, high = run.partition("-")
            dead.extend(range(int(low), int(high or low) + 1))
        refused = {int(ordinal): str(reason) for ordinal, reason in data.get("refused", {}).items()}
        return cls(Position.decode(data["first"]), Position.decode(data["last"]), int(data["records"]), tuple(dead), refused)


def follow_contents(mapped: Iterable[Row | DeadLetter], contents: Mapping[Position, ChunkContent]) -> Iterator[Row | DeadLetter]:
    """``mapped`` with the settled content of each chunk imposed on its records (``mapped``
    itself when nothing is settled: a range's first run pays nothing per record).

    A record settled as a dead letter stays one, even if it maps to a row now (its reason then
    says so). A record settled as a row must still map to one.

    :param contents: settled contents by the chunk's first position.
    :raises ChunkContentChanged: a settled row is a dead letter now, or a settled chunk ends with
        another number of records.
    """
    return _follow(mapped, contents) if contents else iter(mapped)


def _follow(mapped: Iterable[Row | DeadLetter], contents: Mapping[Position, ChunkContent]) -> Iterator[Row | DeadLetter]:
    current: ChunkContent | None = None
    dead: frozenset[int] = frozenset()
    ordinal = 0
    for item in mapped:
        position = item.record.position
        if current is not None and position > current.last:
            _check_count(current, ordinal)
            current = None
        if current is None and position in contents:
            current, dead, ordinal = contents[position], frozenset(contents[position].dead), 0
        if current is not None:
            if ordinal in dead and isinstance(item, Row):
                item = DeadLetter(item.record, current.refused.get(ordinal, RECORDED_DEAD_LETTER))
            elif ordinal not in dead and isinstance(item, DeadLetter):
                raise ChunkContentChanged(
                    f"Record {position.encode()} of shard {item.record.shard_id} is a row of chunk "
                    f"{current.first.encode()}..{current.last.encode()} (fixed before the chunk's first load) and "
                    f"now fails to map ({item.reason}); nothing of the chunk is sent until it maps as before"
                )
            ordinal += 1
        yield item
    if current is not None:
        _check_count(current, ordinal)


def _check_count(content: ChunkContent, seen: int) -> None:
    if seen != content.records:
        raise ChunkContentChanged(
            f"Chunk {content.first.encode()}..{content.last.encode()} held {content.records} records when its "
            f"content was settled and {seen} now: nothing is sent"
        )


def cut_chunks(
    mapped: Iterable[Row | DeadLetter],
    chunk_limits: ChunkLimits,
    recorded: Sequence[tuple[Position, Position]] = (),
) -> Iterator[Chunk]:
    """Group mapped records, in shard order, into chunks.

    Dead letters count toward the limits like rows, so where a chunk ends depends only on the
    records, never on how a user transform classified them. A record a decoder made into several
    rows counts once toward ``chunk_max_rows`` (it is one record) and its lines stay in one chunk.

    :param recorded: ``(first, last)`` of chunks an earlier attempt recorded for this range; a
        record inside one of them is chunked exactly as then.
    """
    spans = sorted(recorded)
    body = bytearray()
    rows = 0
    dead: list[DeadLetter] = []
    ordinals: list[int] = []
    size = 0
    first: Position | None = None
    last: Position | None = None
    shard_id = ""
    row_lines: list[int] | None = None
    for item in mapped:
        position = item.record.position
        item_size = len(item.line) + 1 if isinstance(item, Row) else len(item.record.data) + 1
        span = _span_of(position, spans)
        if first is not None and _ends_before(first, last, position, span, chunk_limits, rows + len(dead) + 1, size + item_size, spans):  # type: ignore[arg-type]
            yield Chunk(shard_id, first, last, bytes(body), rows, tuple(dead), tuple(ordinals), _lines(row_lines))  # type: ignore[arg-type]
            body, rows, dead, ordinals, size, first, row_lines = bytearray(), 0, [], [], 0, None, None
        if first is None:
            first, shard_id = item.record.position, item.record.shard_id
        last = item.record.position
        size += item_size
        if isinstance(item, Row):
            if item.lines != 1 and row_lines is None:
                row_lines = [1] * rows
            if row_lines is not None:
                row_lines.append(item.lines)
            if item.lines:
                body += item.line
                body += b"\n"
            rows += 1
        else:
            ordinals.append(rows + len(dead))
            dead.append(item)
    if first is not None:
        yield Chunk(shard_id, first, last, bytes(body), rows, tuple(dead), tuple(ordinals), _lines(row_lines))  # type: ignore[arg-type]


def _lines(row_lines: list[int] | None) -> tuple[int, ...] | None:
    return tuple(row_lines) if row_lines is not None else None


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
    chunk_limits: ChunkLimits,
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
    return count_with > chunk_limits.chunk_max_rows or size_with > chunk_limits.chunk_max_bytes


def follow_an_amendment(chunks: ChunkLog, shard_range: ShardRange, chunk: Chunk) -> None:
    """Check, before the dead letters of ``chunk`` are sent, that its content is still the one this
    pass cut it by, when its rows turned out loaded by another run during this pass (Doris knew the
    label; a chunk recorded loaded when the pass began was cut by the contents read after that).
    That run may have found rows Doris refused, amended the content (``core.chunk_load``)
    and loaded the rows without them: the dead letters this pass holds lack those records, and
    whichever run's dead-letter load reaches Doris first owns the label. The amendment is written
    before the load that made the rows visible, so this strongly consistent read sees it.

    :raises RowsRefused: the content changed; the range is read again, following it.
    """
    stored = chunks.chunk_content(shard_range.shard_id, shard_range.interval_start_ms, chunk.first)
    if stored is not None and ChunkContent.decode(stored) != chunk.content:
        raise RowsRefused(
            f"Another run amended the content of chunk {chunk.first.encode()}..{chunk.last.encode()} of shard "
            f"{chunk.shard_id} (interval {describe_instant(shard_range.interval_start_ms)}) after this run settled it, and loaded its "
            "rows without the rows Doris refused; its dead letters are sent as amended"
        )


def settled_contents(chunks: ChunkLog, shard_range: ShardRange) -> dict[Position, ChunkContent]:
    """The contents settled for the range's chunks, by first position."""
    stored = chunks.chunk_contents_for_range(shard_range.shard_id, shard_range.interval_start_ms)
    contents = (ChunkContent.decode(text) for text in stored)
    return {content.first: content for content in contents}


def settle_content(
    chunks: ChunkLog, shard_range: ShardRange, chunk: Chunk, first_label: str, known: ChunkRecord | None,
    attempt: str,
) -> tuple[str, bool]:  # fmt: skip
    """Fix which records of ``chunk`` are rows and which dead letters before anything of it is
    sent; the first run to settle it wins and every later or concurrent run follows. A chunk whose
    first label (``first_label``, recorded as ``known``) has no intent yet gets it in the same
    write (owned by ``attempt``), when its content is not settled either.

    :return: the stored content, and whether this call put the intent of ``first_label``.
    """
    content = chunk.content.encode()
    interval_start_ms = shard_range.interval_start_ms
    if known is None and chunks.put_chunk_intent_with_content(
        first_label, chunk.shard_id, chunk.first, chunk.last, interval_start_ms, content, attempt=attempt
    ):
        return content, True
    stored = chunks.settle_chunk_content(shard_range.shard_id, interval_start_ms, chunk.first, content)
    if ChunkContent.decode(stored) != chunk.content:
        # Another attempt settled it first with another mapping outcome, or amended it for rows
        # Doris refused; the range's next pass follows it.
        raise ChunkContentSettledElsewhere(
            f"Chunk {chunk.first.encode()}..{chunk.last.encode()} of shard {chunk.shard_id} was settled by another "
            "run with other dead letters while this pass cut it; nothing of it is sent by this pass"
        )
    return stored, False
