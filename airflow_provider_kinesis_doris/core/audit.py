"""Audit: what the checkpoint table says a span of intervals loaded, against what Doris holds.

For each interval of the span and each shard, the records its range holds (rows loaded and dead
letters per chunk, from the chunk records and settled contents) are compared with the rows Doris
has of that shard and interval, in the table and in the dead-letter table. Also reported: records
loaded twice (the same shard and sequence twice), spans of time no interval of the pipeline's grid
covers (never planned: records that arrived then are in no range), and shards stuck (a range of
the span planned and not loaded; a closed shard loaded to its end and never marked drained).

**What it needs.** The table must carry the metadata columns ``_kinesis_shard``,
``_kinesis_sequence`` and ``_kinesis_arrival`` (``metadata_columns`` of the loader): rows are
attributed to a shard by the first, told apart by the second, and to an interval by the third (a
range of the interval ``[start, end)`` holds the shard's records that arrived in it: its cuts are
the first records at or after each instant). Without them nothing can be checked, and the audit
refuses to run (:class:`~airflow_provider_kinesis_doris.core.errors.ConfigurationError`). The table
must hold one stream's records: shard ids repeat across streams. The dead-letter table is optional;
without it dead letters are not checked. A decoder that makes several rows of one record (CloudWatch
Logs) repeats its sequence: pass ``one_row_per_record=False``, which drops the duplicate check (the
per-interval counts still see a record loaded twice). A UNIQUE KEY table merges rows of the same
key: the audit then counts what survived, and reports the merged ones as missing.

**Records by identity.** Per shard and interval the table's rows are counted twice: all of them,
and distinct sequences. A record missing is found even where a copy of another record of the same
shard makes the row count agree, and both are reported (the copy by its sequence, in the
duplicates). Where the counts differ, each record is named: the checkpoint table keeps each chunk's
first and last position and its record count, so the chunks that lack a record are found from the
positions Doris holds, and those chunks (only those) are read again from Kinesis
(``read_positions``): every record of them in neither the table nor the dead-letter table is named
by its position, and every row of the shard's interval outside all its chunks as a record it never
loaded. Without Kinesis, or past its retention, the chunk is named (``first..last``), and its first
or last record if that one is gone.

**What it cannot see.** Intervals whose history was pruned (``core.prune``: chunks and ranges are
deleted) are reported as not verifiable. A record whose range is not the interval of its arrival
stamp (a stamp earlier than one before it in its shard, Kinesis stamps being approximate; a stamp
more than ``seal_grace`` old when the record arrived, README "Arrival stamps") counts in the
interval of its stamp: it shows as one row too many in one interval of its shard and one too few
in a later one (the span's totals agree).

**What it costs.** SQL runs through the MySQL protocol (the HTTP SQL endpoint stops at 1,000 rows),
aggregated in Doris, never fetching rows: per interval one ``COUNT(*) ... GROUP BY _kinesis_shard``
on the table and one on the dead-letter table, each bounded by the interval's arrival range
(``_kinesis_arrival >= start AND < end``) and not by shard: rows of a shard or an interval the
checkpoint table has no range of are differences too; over the span one ``GROUP BY _kinesis_shard,
_kinesis_sequence HAVING COUNT(*) > 1`` per table. A table partitioned on ``_kinesis_arrival`` (or
a column derived from it) prunes each query to the span's partitions; otherwise each query scans
the table. The dead-letter table (``core.mapping.dead_letter_ddl``) is not partitioned: each of its
queries scans it. From the checkpoint table: per interval the ranges of every shard registered
(batched reads), per range its chunk records and contents (two Queries). Where a range differs, its
positions in both tables (one query each, as many rows as the range loaded) and one read of each
chunk that lacks a record.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from airflow_provider_kinesis_doris.core.catch_up import Interval
from airflow_provider_kinesis_doris.core.chunks import ChunkContent
from airflow_provider_kinesis_doris.core.doris.identifiers import qualified_name
from airflow_provider_kinesis_doris.core.doris.labels import CHUNK_NAMESPACE
from airflow_provider_kinesis_doris.core.errors import ConfigurationError, DataTrimmed
from airflow_provider_kinesis_doris.core.model import (
    BoundaryKind,
    Position,
    RangeState,
    ShardRange,
    ShardState,
    describe_instant,
    describe_interval,
)
from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
from airflow_provider_kinesis_doris.core.stores.chunk_log import ChunkLog
from airflow_provider_kinesis_doris.core.stores.items import ChunkRecord

SqlRunner = Callable[[str], Sequence[Sequence[Any]]]
"""Runs one query on Doris and returns every row of its answer (the MySQL protocol: the HTTP SQL
endpoint stops at 1,000 rows)."""

PositionReader = Callable[[str, Position, Position], list[Position]]
"""The positions of a shard's records from a first through a last one, read again from Kinesis
(``core.kinesis.reader.positions_between``); raises ``DataTrimmed`` past retention."""

AUDIT_COLUMNS = ("_kinesis_shard", "_kinesis_sequence", "_kinesis_arrival")
"""The metadata columns the table must carry (``core.mapping.METADATA_COLUMNS``)."""

_LOADED_CHUNK_STATES = frozenset({"VISIBLE", "COMMITTED"})
_SAFE_LITERAL = re.compile(r"^[A-Za-z0-9_.:-]{1,256}$")
NO_RANGE = "NONE"
"""The state of a shard's rows in an interval for which the shard has no range."""


@dataclass(frozen=True)
class AuditTarget:
    """Where the pipeline's rows are, and how its records become rows.

    :param database: the table's database.
    :param table: the table, with the columns :data:`AUDIT_COLUMNS`.
    :param stream_name: the stream (the dead-letter table holds it per row).
    :param dead_letter_table: the dead-letter table of the database; None: dead letters are not checked.
    :param one_row_per_record: each record makes at most one row (False for decoders that make
        several: no duplicate check on the table).
    :param max_listed: duplicates listed at most per table (the counts see them all).
    """

    database: str
    table: str
    stream_name: str
    dead_letter_table: str | None = None
    one_row_per_record: bool = True
    max_listed: int = 20


@dataclass(frozen=True)
class RangeAudit:
    """One shard in one interval: what the checkpoint table holds, what Doris has."""

    shard_id: str
    interval: Interval
    state: str
    """``LOADED``, ``PLANNED`` or :data:`NO_RANGE`."""
    chunks: int
    rows_held: int | None
    """Rows the range's chunks loaded (None: a chunk's count is not known, see :func:`held_rows`)."""
    rows_found: int
    dead_letters_held: int
    dead_letters_found: int | None
    """None: no dead-letter table given."""
    records_found: int | None = None
    """Distinct records (sequences) of the range in the table; None where a record makes several
    rows (``one_row_per_record=False``), which the row count then stands for."""
    missing: tuple[str, ...] = ()
    """Where the counts differ: the records the range loaded that neither table holds, by position
    (``sequence:sub-sequence``, read again from Kinesis); where Kinesis could not be read, the
    chunk each lies in (``first..last``) and its first or last record if that one is gone."""
    extra: tuple[str, ...] = ()
    """Where the counts differ: positions in the table that no chunk of the range loaded."""

    def difference(self) -> str | None:
        """What is wrong, for a person; None when the two agree."""
        where = f"shard {self.shard_id} in {describe_interval(self.interval)}"
        if self.state == RangeState.PLANNED.value:
            return f"{where}: range planned, not loaded (stuck); Doris has {self.rows_found} rows of it"
        if self.state == NO_RANGE:
            return f"{where}: Doris has {self.rows_found} rows and {self.dead_letters_found or 0} dead letters no range holds"
        wrong = []
        if self.rows_held is not None and self.records_found is not None:
            # By identity, so a record missing is named even where another one's copy makes the
            # row count agree.
            missing, copies = self.rows_held - self.records_found, self.rows_found - self.records_found
            if missing > 0:
                wrong.append(f"{missing} of its {self.rows_held} records loaded are missing from the table{_named(self.missing)}")
            if missing < 0 or self.extra:
                extra = max(-missing, len(self.extra))
                wrong.append(f"{extra} record(s) in the table that it never loaded{_named(self.extra)}")
            if copies > 0:
                wrong.append(f"{copies} extra cop{'y' if copies == 1 else 'ies'} of its records in the table")
        elif self.rows_held is not None and self.rows_held != self.rows_found:
            wrong.append(f"{self.rows_held} rows loaded, {self.rows_found} in the table")
        if self.dead_letters_found is not None and self.dead_letters_held != self.dead_letters_found:
            wrong.append(f"{self.dead_letters_held} dead letters loaded, {self.dead_letters_found} in the dead-letter table")
        return f"{where}: " + "; ".join(wrong) if wrong else None


def _named(names: Sequence[str]) -> str:
    return f": {', '.join(names)}" if names else ""


@dataclass(frozen=True)
class Duplicate:
    """A record Doris holds more than once."""

    table: str
    shard_id: str
    sequence: str
    copies: int


@dataclass(frozen=True)
class AuditReport:
    """The audit of ``[start_ms, end_ms)`` of one pipeline."""

    pipeline_id: str
    span: Interval
    ranges: tuple[RangeAudit, ...]
    duplicates: tuple[Duplicate, ...] = ()
    unplanned: tuple[Interval, ...] = ()
    """Spans of time in no interval of the grid: their records are in no range."""
    stuck: tuple[str, ...] = ()
    """Shards that do not progress, why (ranges planned and not loaded are in :attr:`ranges`)."""
    not_verifiable: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())

    def differences(self) -> list[str]:
        """Every difference, for a person (empty: the span holds every record once)."""
        found = [text for audit in self.ranges if (text := audit.difference()) is not None]
        found += [f"{d.table}: shard {d.shard_id} sequence {d.sequence} is there {d.copies} times" for d in self.duplicates]
        found += [f"{describe_interval(gap)}: no interval of the pipeline covers it (never planned)" for gap in self.unplanned]
        return found + list(self.stuck)

    @property
    def ok(self) -> bool:
        return not self.differences()

    def table(self) -> str:
        """The per-shard, per-interval table for the task log."""
        header = ("interval (UTC)", "shard", "state", "chunks", "rows held", "rows found", "dead held", "dead found", "")
        lines = [header] + [
            (
                describe_interval(a.interval).partition(")")[0] + ")", a.shard_id, a.state, str(a.chunks),
                "?" if a.rows_held is None else str(a.rows_held), str(a.rows_found), str(a.dead_letters_held),
                "-" if a.dead_letters_found is None else str(a.dead_letters_found), "" if a.difference() is None else "DIFFERS",
            )  # fmt: skip
            for a in self.ranges
        ]
        widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
        return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in lines)

    def summary(self) -> dict[str, Any]:
        """JSON-safe and small, for XCom: totals, and the first differences."""
        differences = self.differences()
        return {
            "ok": not differences,
            "span": describe_interval(self.span),
            "ranges": len(self.ranges),
            "rows_held": sum(a.rows_held or 0 for a in self.ranges),
            "rows_found": sum(a.rows_found for a in self.ranges),
            "dead_letters_held": sum(a.dead_letters_held for a in self.ranges),
            "duplicates": len(self.duplicates),
            "unplanned": len(self.unplanned),
            "differences": len(differences),
            "first_differences": differences[:10],
            "not_verifiable": list(self.not_verifiable[:10]),
            "notes": list(self.notes),
        }


def held_rows(chunks: Iterable[ChunkRecord], contents: Mapping[str, ChunkContent], one_row_per_record: bool) -> int | None:
    """Rows a loaded range's data chunks put in the table. A chunk's count is Doris's answer when
    its load was answered (it carries a transaction); a chunk found loaded after a lost answer has
    no count: then its records less its dead letters, if each record makes one row, else None."""
    total = 0
    for chunk in chunks:
        if not _loaded_data_chunk(chunk):
            continue
        if chunk.txn_id is not None:
            total += chunk.rows_loaded
            continue
        content = contents.get(chunk.first.encode())
        if content is None or not one_row_per_record:
            return None
        total += content.records - len(content.dead)
    return total


def audit(
    store: CheckpointStore, run_sql: SqlRunner, target: AuditTarget, start_ms: int, end_ms: int,
    read_positions: PositionReader | None = None,
) -> AuditReport:  # fmt: skip
    """Compare the checkpoint table with Doris over ``[start_ms, end_ms)`` (module docstring).

    :param read_positions: reads a chunk's records again from Kinesis, to name the records missing
        from Doris (None: the chunks they lie in are named instead).

    :raises ConfigurationError: the table lacks a column of :data:`AUDIT_COLUMNS`, or the span is empty.
    """
    if end_ms <= start_ms:
        raise ConfigurationError(f"The audit's span {describe_interval((start_ms, end_ms))} is empty")
    _check_columns(run_sql, target)
    horizon = store.ranges.prune_horizon()
    notes: list[str] = []
    first_ms = store.ranges.first_interval_start()
    # Past the prune horizon the grid's first interval is where the pipeline started (pruning
    # deletes only intervals that end by the horizon).
    if first_ms is not None and start_ms < first_ms < end_ms and first_ms > (horizon or first_ms - 1):
        # Before its first interval the pipeline loaded nothing, by design: not "never planned".
        notes.append(f"the pipeline starts at {describe_instant(first_ms)}: the audit starts there")
        start_ms = first_ms
    floor = store.ranges.get_floor()
    grid = store.ranges.intervals_between(start_ms, end_ms)
    if floor is not None and start_ms <= floor.start_ms and floor.end_ms <= end_ms:
        grid = sorted({*grid, (floor.start_ms, floor.end_ms)})
    unplanned = _gaps(grid, max(start_ms, horizon or start_ms), end_ms)
    not_verifiable = []
    if horizon is not None and horizon > start_ms:
        not_verifiable.append(f"{describe_interval((start_ms, horizon))}: pruned (core.prune), its ranges are deleted")
    shards = store.ledger.list_shard_checkpoints()
    shard_ids = [shard.shard_id for shard in shards]
    pruned = {shard.shard_id: shard.pruned_through_ms or 0 for shard in shards}
    audits: list[RangeAudit] = []
    floor_interval = (floor.start_ms, floor.end_ms) if floor is not None else None
    # Rows of the span outside the grid (never planned) are no range's either: counted per gap.
    for interval in sorted({*grid, *unplanned}):
        low = None if interval == floor_interval else interval[0]
        counts = _counts(run_sql, target, low, interval[1])
        dead = _dead_letter_counts(run_sql, target, low, interval[1]) if target.dead_letter_table else None
        held = store.ranges.ranges_at(shard_ids, interval[0]) if interval in grid else {}
        for shard_id in sorted({*held, *counts, *(dead or {})}):
            if shard_id not in held and pruned.get(shard_id, 0) >= interval[1]:
                not_verifiable.append(f"shard {shard_id} in {describe_interval(interval)}: pruned")
                continue
            found = _Found(run_sql, target, shard_id, low, interval[1], counts, dead, read_positions)
            audits.append(_range_audit(store.chunks, found, interval, held.get(shard_id)))
    low = None if floor_interval in grid else start_ms
    duplicates = _duplicates(run_sql, target, low, end_ms)
    stuck = [
        f"shard {shard.shard_id}: closed and loaded to its end ({shard.high_water_mark.describe()}), never marked drained"
        for shard in shards
        if shard.state is ShardState.CLOSED and shard.high_water_mark is not None
        and shard.high_water_mark.kind is BoundaryKind.SHARD_END
    ]  # fmt: skip
    if not target.one_row_per_record:
        notes.append("one_row_per_record=False: duplicates and missing records in the table are seen in the counts only")
    return AuditReport(
        store.pipeline_id, (start_ms, end_ms), tuple(audits), tuple(duplicates), tuple(unplanned), tuple(stuck),
        tuple(not_verifiable), tuple(notes),
    )  # fmt: skip


@dataclass(frozen=True)
class _Found:
    """What Doris has of one shard in one interval, and how to look closer where it differs."""

    run_sql: SqlRunner
    target: AuditTarget
    shard_id: str
    low: int | None
    high: int
    counts: Mapping[str, tuple[int, int]]
    dead: Mapping[str, int] | None
    read_positions: PositionReader | None

    def positions(self) -> set[Position]:
        """The positions of the shard's rows of the interval in the table."""
        rows = self.run_sql(
            f"SELECT _kinesis_sequence FROM {qualified_name(self.target.database, self.target.table)} "
            f"WHERE _kinesis_shard = {_literal(self.shard_id)} AND {_arrival('_kinesis_arrival', self.low, self.high)} "
            "GROUP BY _kinesis_sequence"
        )
        return {Position.decode(str(sequence)) for (sequence,) in rows}

    def dead_letter_positions(self) -> set[Position]:
        if not self.target.dead_letter_table:
            return set()
        rows = self.run_sql(
            f"SELECT sequence_number, sub_sequence_number FROM "
            f"{qualified_name(self.target.database, self.target.dead_letter_table)} WHERE stream_name = "
            f"{_literal(self.target.stream_name)} AND shard_id = {_literal(self.shard_id)} AND "
            f"{_arrival('arrival_ms', self.low, self.high)}"
        )
        return {Position(int(sequence), int(sub)) for sequence, sub in rows}


@dataclass(frozen=True)
class _Chunk:
    first: Position
    last: Position
    records: int | None
    """Its records, dead letters included; None where the chunk's content was not recorded."""

    def holds(self, position: Position) -> bool:
        return self.first <= position <= self.last

    def describe(self) -> str:
        return f"{self.first.encode()}..{self.last.encode()}"


def _range_audit(chunks: ChunkLog, found: _Found, interval: Interval, shard_range: ShardRange | None) -> RangeAudit:
    shard_id, target = found.shard_id, found.target
    found_dead = None if found.dead is None else found.dead.get(shard_id, 0)
    rows_found, records_found = found.counts.get(shard_id, (0, 0))
    if shard_range is None:
        return RangeAudit(shard_id, interval, NO_RANGE, 0, 0, rows_found, 0, found_dead)
    recorded = chunks.chunks_for_range(shard_id, interval[0])
    contents = [ChunkContent.decode(text) for text in chunks.chunk_contents_for_range(shard_id, interval[0])]
    by_first = {content.first.encode(): content for content in contents}
    checked = RangeAudit(
        shard_id, interval, shard_range.state.value, len({chunk.first for chunk in recorded}),
        held_rows(recorded, by_first, target.one_row_per_record), rows_found,
        sum(len(content.dead) for content in contents), found_dead,
        records_found if target.one_row_per_record else None,
    )  # fmt: skip
    if checked.records_found is None or checked.records_found == checked.rows_held or checked.state != RangeState.LOADED.value:
        return checked
    loaded = [
        _Chunk(chunk.first, chunk.last, content.records if (content := by_first.get(chunk.first.encode())) else None)
        for chunk in {chunk.first: chunk for chunk in recorded if _loaded_data_chunk(chunk)}.values()
    ]
    missing, extra = _name_records(found, loaded)
    return replace(checked, missing=tuple(missing[: target.max_listed]), extra=tuple(extra[: target.max_listed]))


def _loaded_data_chunk(chunk: ChunkRecord) -> bool:
    return chunk.label.startswith(f"{CHUNK_NAMESPACE}:") and chunk.state in _LOADED_CHUNK_STATES


def _name_records(found: _Found, chunks: Sequence[_Chunk]) -> tuple[list[str], list[str]]:
    """The records of ``chunks`` in neither table, and the table's records in none of ``chunks``.

    Only where the counts differ: it fetches the shard's positions of the interval (as many as the
    range loaded) and reads again from Kinesis only the chunks that lack a record.
    """
    in_table = found.positions()
    present = in_table | found.dead_letter_positions()
    in_order = sorted(present)
    chunks = sorted(chunks, key=lambda c: c.first)
    missing: list[str] = []
    for chunk in chunks:
        held = bisect_right(in_order, chunk.last) - bisect_left(in_order, chunk.first)
        if chunk.records is None or held < chunk.records:
            missing += _missing_in(found, chunk, present)
    firsts = [chunk.first for chunk in chunks]
    extra = [p for p in sorted(in_table) if not (at := bisect_right(firsts, p)) or not chunks[at - 1].holds(p)]
    return missing, [position.encode() for position in extra]


def _missing_in(found: _Found, chunk: _Chunk, present: set[Position]) -> list[str]:
    if found.read_positions is not None:
        try:
            return [p.encode() for p in found.read_positions(found.shard_id, chunk.first, chunk.last) if p not in present]
        except DataTrimmed:
            pass  # retention deleted them: the chunk is what can be named
    gone = [p.encode() for p in dict.fromkeys((chunk.first, chunk.last)) if p not in present]
    if chunk.records is None and not gone:
        return []  # nothing says this chunk lacks a record
    return [f"record(s) of chunk {chunk.describe()}" + (f" (gone: {', '.join(gone)})" if gone else "")]


def _gaps(grid: Sequence[Interval], start_ms: int, end_ms: int) -> list[Interval]:
    """The spans of ``[start_ms, end_ms)`` no interval of ``grid`` (sorted, disjoint) covers."""
    gaps, reached = [], start_ms
    for low, high in grid:
        if low > reached:
            gaps.append((reached, min(low, end_ms)))
        reached = max(reached, high)
    if reached < end_ms:
        gaps.append((reached, end_ms))
    return [gap for gap in gaps if gap[0] < gap[1]]


def _check_columns(run_sql: SqlRunner, target: AuditTarget) -> None:
    columns = {str(row[0]) for row in run_sql(f"DESC {qualified_name(target.database, target.table)}")}
    missing = [name for name in AUDIT_COLUMNS if name not in columns]
    if missing:
        raise ConfigurationError(
            f"The table {target.database}.{target.table} has no column {', '.join(missing)}: the audit attributes "
            f"rows to shards and intervals by {', '.join(AUDIT_COLUMNS)}. Add them to the table and to the "
            "loader's metadata_columns; rows loaded before cannot be audited"
        )


def _arrival(column: str, low: int | None, high: int) -> str:
    return (f"{column} >= {int(low)} AND " if low is not None else "") + f"{column} < {int(high)}"


def _literal(text: str) -> str:
    # Stream names and shard ids are of these characters (AWS's rules): no escaping to get wrong.
    if not _SAFE_LITERAL.fullmatch(text):
        raise ConfigurationError(f"{text!r} is not a stream name the audit can put in SQL")
    return f"'{text}'"


def _counts(run_sql: SqlRunner, target: AuditTarget, low: int | None, high: int) -> dict[str, tuple[int, int]]:
    """Per shard: rows, and distinct records (sequences)."""
    rows = run_sql(
        f"SELECT _kinesis_shard, COUNT(*), COUNT(DISTINCT _kinesis_sequence) FROM "
        f"{qualified_name(target.database, target.table)} "
        f"WHERE {_arrival('_kinesis_arrival', low, high)} GROUP BY _kinesis_shard"
    )
    return {str(shard): (int(count), int(records)) for shard, count, records in rows}


def _dead_letter_counts(run_sql: SqlRunner, target: AuditTarget, low: int | None, high: int) -> dict[str, int]:
    assert target.dead_letter_table is not None
    rows = run_sql(
        f"SELECT shard_id, COUNT(*) FROM {qualified_name(target.database, target.dead_letter_table)} "
        f"WHERE stream_name = {_literal(target.stream_name)} AND {_arrival('arrival_ms', low, high)} GROUP BY shard_id"
    )
    return {str(shard): int(count) for shard, count in rows}


def _duplicates(run_sql: SqlRunner, target: AuditTarget, low: int | None, high: int) -> list[Duplicate]:
    found: list[Duplicate] = []
    if target.one_row_per_record:
        rows = run_sql(
            f"SELECT _kinesis_shard, _kinesis_sequence, COUNT(*) FROM {qualified_name(target.database, target.table)} "
            f"WHERE {_arrival('_kinesis_arrival', low, high)} GROUP BY _kinesis_shard, _kinesis_sequence "
            f"HAVING COUNT(*) > 1 ORDER BY _kinesis_shard, _kinesis_sequence LIMIT {int(target.max_listed)}"
        )
        found += [Duplicate(target.table, str(shard), str(sequence), int(copies)) for shard, sequence, copies in rows]
    if target.dead_letter_table:
        rows = run_sql(
            f"SELECT shard_id, sequence_number, sub_sequence_number, COUNT(*) FROM "
            f"{qualified_name(target.database, target.dead_letter_table)} WHERE stream_name = {_literal(target.stream_name)} "
            f"AND {_arrival('arrival_ms', low, high)} GROUP BY shard_id, sequence_number, sub_sequence_number "
            f"HAVING COUNT(*) > 1 ORDER BY shard_id, sequence_number, sub_sequence_number LIMIT {int(target.max_listed)}"
        )
        found += [Duplicate(target.dead_letter_table, str(shard), f"{seq}:{sub}", int(n)) for shard, seq, sub, n in rows]
    return found
