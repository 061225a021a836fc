"""Unmatched fields: JSON members no column of the table takes, and columns no row fills.

Doris's Stream Load of JSON lines matches members to columns by name and drops the members that
name no column, without a word: a field renamed upstream (``ts`` for ``event_time``) loads every
row with the column NULL, and the run is green. The loader samples the member names of each
range's first rows (:func:`sample_members`), and the driver compares them with the table's columns
(:func:`compare`): the run reports both sides, and with ``MappingConfig(unmatched_fields="fail")``
the loader refuses to send a chunk whose rows hold a member no column takes
(:class:`~airflow_provider_kinesis_doris.core.errors.UnmatchedFields`), before anything loads.

The ``check`` command says the same before anything loads (:func:`sampled_fields_item`): it reads
the stream's records of the last hour, maps them with the pipeline's mapping as the loader does,
and compares their members with the columns.

Not checked where Doris does not match by name: ``load.options`` with ``columns`` or ``jsonpaths``,
and ``decoder="csv"`` (its fields are the columns).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from airflow_provider_kinesis_doris.core.decoders import CSV
from airflow_provider_kinesis_doris.core.doris.preflight import CheckStatus, PreflightItem
from airflow_provider_kinesis_doris.core.errors import KinesisDorisError, UnmatchedFields, aws_error_code
from airflow_provider_kinesis_doris.core.kinesis.reader import user_records
from airflow_provider_kinesis_doris.core.kinesis.shard_pages import Pager, ShardClient, timestamp_of_ms
from airflow_provider_kinesis_doris.core.kinesis.topology import list_shards
from airflow_provider_kinesis_doris.core.mapping import DeadLetter, RecordMapping, Row, map_record
from airflow_provider_kinesis_doris.core.model import KinesisRecord

if TYPE_CHECKING:
    from airflow_provider_kinesis_doris.core.settings import PipelineConfig

SAMPLED_ROWS = 100
"""Rows of a range's first chunk whose members are read: a renamed field is in every row."""

UNMATCHED_FIELDS_CHOICES = ("report", "fail")

RENAME_OR_ADD = "Rename the column or the field (a transform can), or add the column"

SAMPLE_LOOKBACK_MS = 3_600_000
"""Where the check's sample of each shard starts: AT_TIMESTAMP an hour ago. LATEST would find only
records put after the check began (none, unless it waited), TRIM_HORIZON the oldest the stream
retains (a day or more old, from before a rename); the last hour holds what the next run of any
schedule up to hourly loads, and still finds records on a stream whose traffic is sparse."""

SAMPLE_CALLS_PER_SHARD = 3
"""GetRecords calls per shard at most: a page can come back empty before a shard's records do."""

RECORD_FIELDS_CHECK = "record fields"


@dataclass(frozen=True)
class FieldMismatch:
    """What the sampled rows and the table's columns do not share (names as each side spells them)."""

    members_without_column: tuple[str, ...] = ()
    """JSON members Doris drops: no column of the table has their name."""
    columns_without_member: tuple[str, ...] = ()
    """Columns no sampled row fills (NULL or their default)."""

    def summary(self) -> dict[str, list[str]]:
        return {
            "members_without_column": list(self.members_without_column),
            "columns_without_member": list(self.columns_without_member),
        }

    def describe(self) -> str:
        return (
            f"JSON members no column of the table takes (Doris drops them): {list(self.members_without_column)}; "
            f"columns no record filled: {list(self.columns_without_member)}"
        )


def sample_members(body: bytes, rows: int = SAMPLED_ROWS) -> set[str]:
    """The member names of the first ``rows`` JSON lines of a chunk's body."""
    members: set[str] = set()
    for line in body.split(b"\n", rows)[:rows]:
        if line.strip():
            members.update(json.loads(line))
    return members


def compare(members: Iterable[str], columns: Sequence[str]) -> FieldMismatch:
    """``members`` against the table's ``columns``; Doris's column names ignore case."""
    seen = {member.lower(): member for member in members}
    named = {column.lower(): column for column in columns}
    return FieldMismatch(
        tuple(sorted(seen[name] for name in seen.keys() - named.keys())),
        tuple(sorted(named[name] for name in named.keys() - seen.keys())),
    )


def refuse_unmatched(members: Iterable[str], columns: Sequence[str], shard_id: str) -> None:
    """:raises UnmatchedFields: a member no column takes (``unmatched_fields="fail"``)."""
    mismatch = compare(members, columns)
    if mismatch.members_without_column:
        raise UnmatchedFields(
            f"Shard {shard_id}: the records hold {mismatch.describe()}. Nothing of the chunk was sent "
            f"(MappingConfig(unmatched_fields='fail')). {RENAME_OR_ADD}; unmatched_fields='report' loads and reports "
            "instead."
        )


# --- the check command's sample -----------------------------------------------------------------


@dataclass(frozen=True)
class StreamSample:
    """Recent records of a stream's open shards, mapped as the loader maps them."""

    stream_name: str
    shards: int
    records: int = 0
    members: frozenset[str] = frozenset()
    """The member names of each shard's first rows (``sample_members``, as each range's first chunk)."""
    dead_letters: tuple[DeadLetter, ...] = ()


def sample_stream(kinesis: Any, stream_name: str, mapping: RecordMapping, since_ms: int) -> StreamSample:
    """The records of each open shard from ``since_ms`` on (at most ``SAMPLED_ROWS`` a shard, in at
    most ``SAMPLE_CALLS_PER_SHARD`` GetRecords calls), mapped with ``mapping``. A closed shard is
    left out: its children hold the traffic since it closed. Reads only: no iterator or position
    is kept anywhere.

    :raises ClientError: the stream cannot be listed or read (a missing stream, a denied action).
    """
    shards = [shard.shard_id for shard in list_shards(kinesis, stream_name) if shard.is_open]
    by_shard = [[map_record(record, mapping) for record in _recent_records(kinesis, stream_name, shard_id, since_ms)]
                for shard_id in shards]  # fmt: skip
    mapped = [item for shard in by_shard for item in shard]
    members = frozenset().union(*(_first_rows_members(shard) for shard in by_shard))
    dead_letters = tuple(item for item in mapped if isinstance(item, DeadLetter))
    return StreamSample(stream_name, len(shards), len(mapped), members, dead_letters)


def _first_rows_members(mapped: Sequence[Row | DeadLetter]) -> set[str]:
    """The members of one shard's first rows, read as the loader reads a range's first chunk."""
    return sample_members(b"\n".join(item.line for item in mapped if isinstance(item, Row) and item.lines))


def _recent_records(kinesis: Any, stream_name: str, shard_id: str, since_ms: int) -> list[KinesisRecord]:
    """The first ``SAMPLED_ROWS`` user records of the shard from ``since_ms``, fewer at its tip."""
    shard = ShardClient(kinesis, stream_name, shard_id, limit=SAMPLED_ROWS, max_retries=3, sleep=time.sleep)
    pager = Pager(shard, {"ShardIteratorType": "AT_TIMESTAMP", "Timestamp": timestamp_of_ms(since_ms)})
    records: list[KinesisRecord] = []
    for _ in range(SAMPLE_CALLS_PER_SHARD):
        page = pager.next_page()
        records.extend(user_records(page.records, shard_id))
        if len(records) >= SAMPLED_ROWS or page.at_tip or page.next_iterator is None:
            break
    return records[:SAMPLED_ROWS]


def sampled_fields_item(kinesis: Any, config: PipelineConfig, now_ms: int) -> PreflightItem:
    """The check command's item: the stream's records of the last hour, mapped as the loader maps
    them, against the table's columns; fatal where the loader would refuse them
    (``unmatched_fields="fail"``)."""
    if config.table_columns is None:
        return PreflightItem(RECORD_FIELDS_CHECK, CheckStatus.NOT_VERIFIABLE, f"not compared: {_not_matched_by_name(config)}")
    try:
        sample = sample_stream(kinesis, config.stream_name, config.mapping, now_ms - SAMPLE_LOOKBACK_MS)
    except (ClientError, KinesisDorisError) as exc:
        reason = aws_error_code(exc) if isinstance(exc, ClientError) else str(exc)
        return PreflightItem(RECORD_FIELDS_CHECK, CheckStatus.NOT_VERIFIABLE,
                             f"reading recent records of stream {config.stream_name} failed: {reason}")  # fmt: skip
    return fields_item(sample, config.table_columns, config.unmatched_fields)


def _not_matched_by_name(config: PipelineConfig) -> str:
    """Why the pipeline has no columns to compare the records with (``table_columns`` is None)."""
    if config.decoder == CSV:
        return "decoder 'csv' names its fields by the table's columns"
    if config.load_options.columns or config.load_options.jsonpaths:
        return "load options 'columns'/'jsonpaths' map the records' members to columns, not their names"
    return "DESC of the table failed (see the table columns item)"


def fields_item(sample: StreamSample, columns: Sequence[str], unmatched_fields: str) -> PreflightItem:
    """``sample``'s members against ``columns``: not verifiable without a row to compare."""
    if not sample.records:
        return PreflightItem(RECORD_FIELDS_CHECK, CheckStatus.NOT_VERIFIABLE, (
            f"no record arrived in the last hour on stream {sample.stream_name} (open shards read: {sample.shards}, "
            f"at most {SAMPLE_CALLS_PER_SHARD} GetRecords calls each): the records' fields were not compared with "
            "the table's columns; check again once the stream has traffic"
        ))  # fmt: skip
    read = f"{sample.records} records of the last hour (open shards read: {sample.shards}), mapped as the loader maps them,"
    if not sample.members:
        dead = sample.dead_letters
        why = f"{len(dead)} dead letters, the first: {dead[0].reason}" if dead else "each makes no row by design"
        return PreflightItem(RECORD_FIELDS_CHECK, CheckStatus.NOT_VERIFIABLE, f"{read} made no row to compare ({why})")
    mismatch = compare(sample.members, columns)
    if not (mismatch.members_without_column or mismatch.columns_without_member):
        return PreflightItem(RECORD_FIELDS_CHECK, CheckStatus.OK, f"{read} fill every column and hold no member without one")
    refused = unmatched_fields == "fail" and bool(mismatch.members_without_column)
    outcome = ("the task would send nothing of such a chunk (unmatched_fields='fail')." if refused
               else "the task would load such records with those columns NULL (or their default).")  # fmt: skip
    return PreflightItem(RECORD_FIELDS_CHECK, CheckStatus.WRONG, f"{read} hold {mismatch.describe()}: {outcome}",
                         fix=_fix(mismatch), fatal=refused)  # fmt: skip


def _fix(mismatch: FieldMismatch) -> str:
    if mismatch.members_without_column:
        return f"{RENAME_OR_ADD} (a renamed field is the usual cause)."
    return "Fill the columns (a field of the records, a metadata column, a transform), unless their default is meant."
