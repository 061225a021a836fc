"""Read → map → chunk → load for planned ranges. Runs inside a Spark task (or any process).

Chunk k is loaded in one background thread while this thread reads, maps and cuts chunk k+1: at
most one load in flight and at most two chunks in memory. Loads are submitted in chunk order and
each waits for the one before it, so intents and outcomes are recorded in order; a failed load
stops the range before any later chunk is loaded.

Each chunk follows the intent log of invariant I7: record the intent in DynamoDB, load under the
chunk's label (Doris drops a duplicate label), record the outcome. On a replay, a chunk whose
outcome is recorded is skipped without asking Doris, and a chunk with an intent but no outcome is
resolved through ``get_load_state`` before anything is sent again, whatever its age. An intent
older than Doris's label window whose label Doris no longer knows cannot be resolved: it is
reported, never guessed. A load that provably did not reach Doris is recorded ``NOT_LOADED`` and
sent again under a fresh intent. See docs/checkpoints.md, "Chunks", for what this proves.
"""

from __future__ import annotations

import itertools
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import Any, NoReturn

from airflow_provider_kinesis_doris.core.aws_clients import aws_client
from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
from airflow_provider_kinesis_doris.core.stores.dynamodb import dynamo_store
from airflow_provider_kinesis_doris.core.stores.items import CHUNK_INTENT, CHUNK_NOT_LOADED, ChunkRecord
from airflow_provider_kinesis_doris.core.chunks import Chunk, ChunkContent, cut_chunks, follow_contents
from airflow_provider_kinesis_doris.core.fields import refuse_unmatched, sample_members
from airflow_provider_kinesis_doris.core.errors import (
    ChunkContentSettledElsewhere,
    DataTrimmed,
    KinesisDorisError,
    RangeFailure,
    PermanentStreamLoadError,
    RowsRefused,
    StreamLoadError,
    UnresolvableLoad,
)
from airflow_provider_kinesis_doris.core.load_job import LoadJob, boundary_to_dict
from airflow_provider_kinesis_doris.core.settings import Credentials
from airflow_provider_kinesis_doris.core.doris.labels import DEAD_LETTER_NAMESPACE, chunk_label, dead_letter_label
from airflow_provider_kinesis_doris.core.label_window import (
    CLOCK_SKEW_MARGIN_SECONDS,
    LabelWindowWatch,
    trusted_window_seconds,
)
from airflow_provider_kinesis_doris.core.model import Boundary, BoundaryKind, ChunkLimits, KinesisRecord, Position, ShardRange, describe_instant
from airflow_provider_kinesis_doris.core.kinesis.reader import RangeReader, ends_after
from airflow_provider_kinesis_doris.core.kinesis.shard_pages import skip_record_parsing
from airflow_provider_kinesis_doris.core.doris.rejections import find_refused_rows, refused_rows
from airflow_provider_kinesis_doris.core.doris.client import DorisStreamLoadClient
from airflow_provider_kinesis_doris.core.doris.options import StreamLoadOptions
from airflow_provider_kinesis_doris.core.doris.result import LabelState, StreamLoadResult
from airflow_provider_kinesis_doris.core.mapping import map_record
from airflow_provider_kinesis_doris.core.report import RangeReport

log = logging.getLogger(__name__)

_LOADED_STATES = frozenset({LabelState.VISIBLE.value, LabelState.COMMITTED.value})


FEW_REFUSED_ROWS = 10
"""Fewer rows refused in a chunk are dead-lettered whatever their share (a small chunk at the end of
an interval may hold one bad record and little else); from this many, ``max_bad_record_ratio``
applies."""


_RECORD_SPECIFIC = re.compile(r": |, src value is |\. first 32 bytes of input str")


def reason_kind(reason: str) -> str:
    """A dead letter's reason without what is specific to its record (the decoder's position,
    the exception's text, the refused value): what to count and alert on."""
    return _RECORD_SPECIFIC.split(reason, maxsplit=1)[0][:200]




@dataclass
class LoadClients:
    """The clients one task uses, built once per task from the job and the credentials."""

    job: LoadJob
    kinesis: Any
    store: CheckpointStore
    doris: DorisStreamLoadClient
    clock_ms: Callable[[], int] = field(default=lambda: int(time.time() * 1000))
    label_window: LabelWindowWatch = field(init=False)

    def __post_init__(self) -> None:
        pipeline = self.job.pipeline
        self.label_window = LabelWindowWatch(
            self.store, self.doris, pipeline.doris_database, pipeline.doris.label_keep_seconds, self.clock_ms
        )

    @classmethod
    def from_job(cls, job: LoadJob, credentials: Credentials) -> LoadClients:
        pipeline = job.pipeline
        kinesis = aws_client("kinesis", pipeline.aws.kinesis_endpoint_url, pipeline.aws, credentials)
        skip_record_parsing(kinesis)
        dynamodb = aws_client("dynamodb", pipeline.aws.dynamodb_endpoint_url, pipeline.aws, credentials)
        return cls(
            job=job,
            kinesis=kinesis,
            store=dynamo_store(dynamodb, pipeline.checkpoint_table, pipeline.pipeline_id),
            doris=DorisStreamLoadClient(job.doris_config(credentials), retry_policy=pipeline.retry_policy),
        )


def check_label_window(
    job: LoadJob, store: CheckpointStore, credentials: Credentials, clock_ms: Callable[[], int], *, doris: Any | None = None
) -> None:
    """The run's label-window canary (``core.label_window``), asked in the driver once before the
    runner starts, with the driver's own store: lanes and Spark partitions then only offer their
    labels. The loaders' AWS credentials (``executor_credentials``) may hold only on the
    executors, so the canary never builds AWS clients from them.

    :param doris: the client to ask; None: one built from the job and ``credentials``' password.
    :raises LabelWindowBroken: Doris forgot a label younger than ``label_keep_seconds``.
    """
    pipeline = job.pipeline
    client = doris if doris is not None else DorisStreamLoadClient(job.doris_config(credentials), retry_policy=pipeline.retry_policy)
    try:
        LabelWindowWatch(store, client, pipeline.doris_database, pipeline.doris.label_keep_seconds, clock_ms).check()
    finally:
        if doris is None:
            client.close()


def load_range_group(job: LoadJob, indices: Iterable[int], credentials: Credentials | None = None) -> Iterator[RangeReport]:
    """Load the ranges ``indices`` of ``job`` one after the other (parents first)."""
    clients = LoadClients.from_job(job, credentials or Credentials.load(job.credentials_file))
    try:
        yield from load_ranges(clients, indices)
    finally:
        clients.doris.close()


def load_ranges(clients: LoadClients, indices: Iterable[int] | None = None) -> Iterator[RangeReport]:
    """Load the ranges ``indices`` (default: every range, partition by partition) of the clients'
    job one after the other, with these clients."""
    job = clients.job
    order = list(indices) if indices is not None else [i for group in job.groups for i in group]
    ends = _stored_pending_ends(clients.store, {index: job.ranges[index] for index in order})
    for index in order:
        shard_range, end = job.ranges[index], ends.get(index)
        yield load_range(
            clients, replace(shard_range, end=end or shard_range.end), fresh=index in job.fresh, end_read=end is not None
        )  # fmt: skip


def _stored_pending_ends(store: CheckpointStore, ranges: Mapping[int, ShardRange]) -> dict[int, Boundary]:
    """What the store holds now for the PENDING ends of ``ranges`` (by index), read in batches:
    this execution's readers follow a cut an earlier execution or a concurrent run settled without
    a read each. One settled after this read is met when the reader proposes its own, as it is
    when settled during the read."""
    pending = {index: r for index, r in ranges.items() if r.end.kind is BoundaryKind.PENDING}
    by_instant: dict[int, list[str]] = {}
    for shard_range in pending.values():
        by_instant.setdefault(shard_range.end.instant_ms, []).append(shard_range.shard_id)
    stored = {instant: store.ledger.read_boundaries(shard_ids, instant) for instant, shard_ids in by_instant.items()}
    return {
        index: end for index, r in pending.items() if (end := stored[r.end.instant_ms].get(r.shard_id)) is not None
    }


def load_range_group_or_failure(job: LoadJob, indices: Sequence[int], credentials: Credentials | None = None) -> list[RangeReport]:
    """:func:`load_range_group` for a Spark executor: a typed error ends the group with a report
    carrying it (the ranges after it, a failed parent's children among them, are not loaded), so
    the driver raises the same class with
    :func:`~airflow_provider_kinesis_doris.core.report.raise_first_failure`."""
    reports: list[RangeReport] = []
    try:
        reports.extend(load_range_group(job, indices, credentials))
    except KinesisDorisError as error:
        failed = job.ranges[indices[len(reports)]]
        failure = RangeFailure.of(error, failed.shard_id)
        reports.append(RangeReport(failed.shard_id, failed.interval_start_ms, failure=asdict(failure)))
    return reports


def load_range(
    clients: LoadClients, shard_range: ShardRange, *, fresh: bool = False, end_read: bool = False
) -> RangeReport:
    """Read ``shard_range`` and load it, chunk by chunk, exactly once.

    A chunk whose rows Doris refuses (data quality) gets those records settled as dead letters
    with Doris's reasons, and the range is read again: the chunk goes out under the same labels
    without them (nothing of it was visible), the chunks before it are not loaded again.

    :param end_read: the range's end is as the store held it moments ago (``RangeReader``).
    """
    started = time.monotonic()
    report = RangeReport(shard_range.shard_id, shard_range.interval_start_ms)
    sent: set[Position] = set()
    while True:
        try:
            outcome = _read_and_load(clients, shard_range, report, sent, fresh, end_read)
            break
        except RowsRefused as refused:
            log.warning("%s; reading the range again to load that chunk without them", refused)
            fresh = end_read = False  # chunks are recorded and a content was amended (by this run or another)
        except ChunkContentSettledElsewhere as changed:
            # Rows Doris refused, amended by a run that raced this pass or by a lost Spark task of
            # the same fresh job: the re-read follows the stored contents (it fails ChunkContentChanged
            # only if a stored row maps to a dead letter now).
            log.warning("%s; reading the range again following the settled contents", changed)
            fresh = end_read = False
    report.end = boundary_to_dict(outcome.end)
    report.drained = outcome.drained
    report.last_position = outcome.last_position.encode() if outcome.last_position else None
    report.millis_behind_latest = outcome.millis_behind_latest
    report.get_records_calls = outcome.get_records_calls
    report.subscribe_calls = outcome.subscribe_calls
    report.seconds = round(time.monotonic() - started, 3)
    log.info(
        "shard %s interval %s: %d records, %d rows loaded, %d filtered, %d dead-lettered, %d chunks (%d already loaded)",
        shard_range.shard_id, describe_instant(shard_range.interval_start_ms), report.records, report.rows_loaded,
        report.rows_filtered, report.dead_lettered, report.chunks, report.chunks_already_loaded,
    )  # fmt: skip
    return report


def _read_and_load(
    clients: LoadClients, shard_range: ShardRange, report: RangeReport, sent: set[Position], fresh: bool,
    end_read: bool,
) -> Any:
    """One pass over the range; chunks whose first position is in ``sent`` were loaded (and
    counted) by an earlier pass of this run; ``fresh``: nothing of the range is recorded yet but
    what concurrent runs write (``LoadJob.fresh``); ``end_read``: its end is as stored moments
    ago. Returns the reader's outcome."""
    pipeline, store = clients.job.pipeline, clients.store
    recorded = [] if fresh else store.chunks.chunks_for_range(
        shard_range.shard_id, shard_range.interval_start_ms, keyed_by_range=shard_range.chunk_limits is not None
    )  # fmt: skip
    limits = _settled_limits(store, shard_range, pipeline.chunk_limits)
    reader = RangeReader(
        clients.kinesis, shard_range, store.ledger, consumer_arn=pipeline.efo_consumer_arn,
        clock=lambda: clients.clock_ms() / 1000, end_read=end_read,
    )  # fmt: skip
    contents = {} if fresh else _settled_contents(store, shard_range)
    by_label = {chunk.label: chunk for chunk in recorded}
    spans = sorted({*((c.first, c.last) for c in recorded), *((c.first, c.last) for c in contents.values())})
    records = _past_a_trimmed_head(reader, spans, _loaded_spans(recorded, contents), shard_range)
    mapped = follow_contents((map_record(record, pipeline.mapping) for record in records), contents)
    # Only the load thread touches ``report``, ``clients.doris`` and the chunk log until the last
    # load is joined; this thread reads Kinesis (and the boundaries, through the thread-safe store).
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"load-{shard_range.shard_id}") as loads:
        in_flight: Future[None] | None = None
        for chunk in cut_chunks(mapped, limits, spans):
            if in_flight is not None:
                in_flight.result()
            if chunk.first in sent:
                continue
            in_flight = loads.submit(_load_chunk, clients, shard_range, chunk, by_label, report, sent)
        if in_flight is not None:
            in_flight.result()
    return reader.outcome


def _loaded_spans(
    recorded: list[ChunkRecord], contents: Mapping[Position, ChunkContent]
) -> set[tuple[Position, Position]]:
    """Spans whose every label is loaded: every recorded one, and the dead letters' one too when the
    settled content has dead letters. The rows' label is recorded before the dead letters' load
    starts, so a chunk whose run died between the two has its rows loaded and no dead-letter label
    recorded; a dead-letter label recorded without a rows' one is a chunk without rows."""
    spans: dict[tuple[Position, Position], bool] = {}
    with_dead_letters_label: set[tuple[Position, Position]] = set()
    for chunk in recorded:
        span = (chunk.first, chunk.last)
        spans[span] = spans.get(span, True) and chunk.state in _LOADED_STATES
        if chunk.label.startswith(f"{DEAD_LETTER_NAMESPACE}:"):
            with_dead_letters_label.add(span)
    return {
        span for span, loaded in spans.items()
        if loaded and (span in with_dead_letters_label or not _has_dead_letters(contents.get(span[0])))
    }  # fmt: skip


def _has_dead_letters(content: ChunkContent | None) -> bool:
    return content is not None and bool(content.dead)


def _past_a_trimmed_head(
    reader: RangeReader,
    spans: list[tuple[Position, Position]],
    loaded: set[tuple[Position, Position]],
    shard_range: ShardRange,
) -> Iterator[KinesisRecord]:
    """The reader's records, checked against the chunks earlier attempts cut (``spans``, sorted;
    ``loaded``: those whose every label is loaded).

    A range that starts at the shard's start (a TRIM_HORIZON sweep) is read from the first record
    retention still keeps, wherever that is now (ranges from a cut open at its record, which the
    reader checks). Retention deletes a shard's records oldest first, so the read still holds
    everything not known loaded only if it starts at or before the first record of the first chunk
    not known loaded, or, when every chunk cut is loaded, their last record: else records after it
    were deleted before they were loaded, ``DataTrimmed`` (I6). A read that starts inside a loaded
    chunk skips the rest of it: re-cut from there it would go out under a new label.
    """
    records = iter(reader)
    first = next(records, None)
    _check_unloaded_records_kept(first, reader, spans, loaded, shard_range)
    if first is None:
        return
    span = next((s for s in spans if s[0] < first.position <= s[1]), None)
    if span is not None:
        log.info("shard %s: retention trimmed the head of loaded chunk %s..%s; skipping the rest of it",
                 shard_range.shard_id, span[0].encode(), span[1].encode())  # fmt: skip
    for record in itertools.chain((first,), records):
        if span is None or record.position > span[1]:
            yield record


def _check_unloaded_records_kept(
    first: KinesisRecord | None,
    reader: RangeReader,
    spans: list[tuple[Position, Position]],
    loaded: set[tuple[Position, Position]],
    shard_range: ShardRange,
) -> None:
    """Raise ``DataTrimmed`` unless the read, whose first record is ``first`` (None: it found
    none), still holds the record the range must be loaded on from (see :func:`_past_a_trimmed_head`)."""
    unloaded = next((span for span in spans if span not in loaded), None)
    if unloaded is not None:
        needed = unloaded[0]
        chunk = f"{needed.encode()}..{unloaded[1].encode()}"
        what = f"the first record of chunk {chunk}, whose labels are not all known loaded"
    elif spans:
        needed = spans[-1][1]
        if first is None and ends_after(reader.outcome.end, needed):
            return  # every record of the range is loaded and trimmed since
        what = f"record {needed.encode()}, the last of the chunks loaded so far (the records after it are not loaded)"
    else:
        return
    if first is not None and first.position <= needed:
        return
    holds = "no record of the range" if first is None else f"record {first.position.encode()} first"
    raise DataTrimmed(
        f"Shard {shard_range.shard_id} of stream {shard_range.stream_name}, range of the interval from "
        f"{describe_instant(shard_range.interval_start_ms)}: earlier attempts cut chunks of it, and the retry must "
        f"still find {what}, but the shard now holds {holds}: retention deleted records of the range before they "
        "were loaded, so they cannot be loaded exactly once. Raise the stream's retention period so retries run "
        "inside it, and reload the range's missing records from a backup if you keep one"
    )


def _settled_limits(store: CheckpointStore, shard_range: ShardRange, proposed: ChunkLimits) -> ChunkLimits:
    """The limits stored with the range (by its planner, or else by its first loader): a
    concurrent run with other limits then still cuts the same chunks, under the same labels."""
    settled = shard_range.chunk_limits or store.ranges.settle_chunk_limits(
        shard_range.shard_id, shard_range.interval_start_ms, proposed
    )
    if settled != proposed:
        log.info(
            "shard %s interval %s keeps the chunk limits of its first run (%d rows, %d bytes), not %d rows, %d bytes",
            shard_range.shard_id, describe_instant(shard_range.interval_start_ms), settled.max_rows,
            settled.max_bytes, proposed.max_rows, proposed.max_bytes,
        )  # fmt: skip
    return settled


def _load_chunk(
    clients: LoadClients, shard_range: ShardRange, chunk: Chunk, recorded: Mapping[str, ChunkRecord],
    report: RangeReport, sent: set[Position],
) -> None:  # fmt: skip
    """Load one chunk's rows and dead letters; ``recorded``: the range's chunks by label, as this
    pass read them when it began."""
    pipeline = clients.job.pipeline
    report.records_skipped += chunk.skipped
    if not chunk.line_count and not chunk.dead_letters:
        # Only records that make no row: nothing to send, nothing to settle (a replay cuts the
        # same chunk again, since its records and the limits it was cut by are the same).
        report.records += chunk.record_count
        report.chunks += 1
        sent.add(chunk.first)
        return
    ids = (pipeline.pipeline_id, pipeline.stream_name, chunk.shard_id, chunk.first, chunk.last)
    first_label = chunk_label(*ids) if chunk.line_count else dead_letter_label(*ids)
    # Names this pass in the intents it writes: only the attempt that wrote an intent may record
    # that its send did not reach Doris.
    attempt = uuid.uuid4().hex
    settled, intent_put = _settle_content(clients.store, shard_range, chunk, first_label, recorded.get(first_label), attempt)
    if chunk.line_count:
        if not report.fields and pipeline.table_columns is not None:
            report.fields = sorted(sample_members(chunk.body))
            if pipeline.unmatched_fields == "fail":
                refuse_unmatched(report.fields, pipeline.table_columns, chunk.shard_id)
        label = chunk_label(*ids)
        try:
            loaded = _load_once(
                clients, shard_range, chunk, label, pipeline.doris_table, pipeline.load_options, chunk.body,
                recorded.get(label), report, attempt, intent_put=intent_put,
            )  # fmt: skip
        except PermanentStreamLoadError as error:
            if (failed := refused_rows(error)) is None:
                raise
            _settle_refused_rows(clients, shard_range, chunk, settled, failed, error, report)
        known = recorded.get(label)
        if loaded is None and chunk.dead_letters and (known is None or known.state not in _LOADED_STATES):
            _follow_an_amendment(clients.store, shard_range, chunk)
        report.labels.append(label)
        report.chunks_already_loaded += loaded is None
        if loaded is None:
            report.rows_already_loaded += chunk.line_count
        else:
            report.rows_loaded += loaded.number_loaded_rows
            report.rows_filtered += loaded.number_filtered_rows
            report.rows_unselected += loaded.number_unselected_rows
    if chunk.dead_letters:
        body = b"".join(dead.as_row(pipeline.stream_name) + b"\n" for dead in chunk.dead_letters)
        label = dead_letter_label(*ids)
        loaded = _load_once(
            clients, shard_range, chunk, label, pipeline.dead_letter_table, pipeline.dead_letter_options, body,
            recorded.get(label), report, attempt, intent_put=intent_put and label == first_label,
        )  # fmt: skip
        if loaded is None:
            report.dead_letters_already_loaded += len(chunk.dead_letters)
        else:
            report.dead_lettered += len(chunk.dead_letters)
            for dead_letter in chunk.dead_letters:
                kind = reason_kind(dead_letter.reason)
                report.dead_letter_reasons[kind] = report.dead_letter_reasons.get(kind, 0) + 1
    report.records += chunk.record_count
    report.chunks += 1
    sent.add(chunk.first)


def _settle_refused_rows(
    clients: LoadClients, shard_range: ShardRange, chunk: Chunk, settled: str, failed: StreamLoadResult,
    error: PermanentStreamLoadError, report: RangeReport,
) -> NoReturn:  # fmt: skip
    """Settle the rows Doris refused in ``chunk`` as dead letters (its load failed whole, so
    nothing of it is visible yet), unless so many are refused that the table and the records
    cannot match; then raise :class:`RowsRefused` to load the chunk again without them.

    :param report: counts the failed load and the probes (their labels enter Doris's label window).
    """
    report.loads_aborted += 1
    pipeline = clients.job.pipeline
    where = f"chunk {chunk.first.encode()}..{chunk.last.encode()} of shard {chunk.shard_id} (interval {describe_instant(shard_range.interval_start_ms)})"
    share = failed.number_filtered_rows / max(failed.number_total_rows, 1)
    if failed.number_filtered_rows >= FEW_REFUSED_ROWS and share > pipeline.max_bad_record_ratio:
        raise PermanentStreamLoadError(
            f"Doris refused {failed.number_filtered_rows} of {failed.number_total_rows} rows of {where}, more than "
            f"max_bad_record_ratio ({pipeline.max_bad_record_ratio:g}): the table {pipeline.doris_database}."
            f"{pipeline.doris_table} and the records probably do not match (a column's type, a NOT NULL column). "
            f"Nothing of the chunk was loaded; see Doris's error log {failed.error_url}",
            error_url=failed.error_url, result=failed,
        ) from error
    lines = chunk.body.split(b"\n")[:-1]
    found = find_refused_rows(clients.doris, pipeline.doris_database, pipeline.doris_table, pipeline.load_options, lines)
    report.probe_loads += found.probe_loads
    report.loads_aborted += found.probes_aborted
    refused = found.reasons
    if not refused:
        raise error
    # A refused line makes its whole record a dead letter (a record's rows load together or not).
    line_records = chunk.line_records()
    amended = ChunkContent.decode(settled).with_refused({line_records[index]: reason for index, reason in refused.items()})
    clients.store.chunks.amend_chunk_content(shard_range.shard_id, shard_range.interval_start_ms, chunk.first, settled, amended.encode())
    raise RowsRefused(f"Doris refused {len(refused)} of {len(lines)} rows of {where}; they are dead letters now")


def _follow_an_amendment(store: CheckpointStore, shard_range: ShardRange, chunk: Chunk) -> None:
    """Check, before the dead letters of ``chunk`` are sent, that its content is still the one this
    pass cut it by, when its rows turned out loaded by another run during this pass (Doris knew the
    label; a chunk recorded loaded when the pass began was cut by the contents read after that).
    That run may have found rows Doris refused, amended the content (:func:`_settle_refused_rows`)
    and loaded the rows without them: the dead letters this pass holds lack those records, and
    whichever run's dead-letter load reaches Doris first owns the label. The amendment is written
    before the load that made the rows visible, so this strongly consistent read sees it.

    :raises RowsRefused: the content changed; the range is read again, following it.
    """
    stored = store.chunks.chunk_content(shard_range.shard_id, shard_range.interval_start_ms, chunk.first)
    if stored is not None and ChunkContent.decode(stored) != chunk.content:
        raise RowsRefused(
            f"Another run amended the content of chunk {chunk.first.encode()}..{chunk.last.encode()} of shard "
            f"{chunk.shard_id} (interval {describe_instant(shard_range.interval_start_ms)}) after this run settled it, and loaded its "
            "rows without the rows Doris refused; its dead letters are sent as amended"
        )


def _settled_contents(store: CheckpointStore, shard_range: ShardRange) -> dict[Position, ChunkContent]:
    """The contents settled for the range's chunks, by first position."""
    stored = store.chunks.chunk_contents_for_range(shard_range.shard_id, shard_range.interval_start_ms)
    contents = (ChunkContent.decode(text) for text in stored)
    return {content.first: content for content in contents}


def _settle_content(
    store: CheckpointStore, shard_range: ShardRange, chunk: Chunk, first_label: str, known: ChunkRecord | None,
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
    if known is None and store.chunks.put_chunk_intent_with_content(
        first_label, chunk.shard_id, chunk.first, chunk.last, interval_start_ms, content, attempt=attempt
    ):
        return content, True
    stored = store.chunks.settle_chunk_content(shard_range.shard_id, interval_start_ms, chunk.first, content)
    if ChunkContent.decode(stored) != chunk.content:
        # Another attempt settled it first with another mapping outcome, or amended it for rows
        # Doris refused; the range's next pass follows it.
        raise ChunkContentSettledElsewhere(
            f"Chunk {chunk.first.encode()}..{chunk.last.encode()} of shard {chunk.shard_id} was settled by another "
            "run with other dead letters while this pass cut it; nothing of it is sent by this pass"
        )
    return stored, False


def _load_once(
    clients: LoadClients,
    shard_range: ShardRange,
    chunk: Chunk,
    label: str,
    table: str,
    options: StreamLoadOptions,
    body: bytes,
    known: ChunkRecord | None,
    report: RangeReport,
    attempt: str,
    *,
    intent_put: bool = False,
) -> Any:
    """Load ``body`` under ``label`` unless the intent log or Doris proves it loaded.

    :param known: the chunk as recorded when this pass began, or None. An intent another run
        records after that is not missed: ours is put once, so we then load as a run that did not
        settle every attempt (Doris refuses a label it holds).
    :param report: counts a load that needed more than one attempt (``chunks_retried``).
    :param attempt: names this pass in the intent it writes.
    :param intent_put: this pass put the label's intent already (with the chunk's content), as
        ``attempt``.
    :return: the Stream Load result of a load made now, or None if it was already loaded.
    """
    store, doris, database = clients.store, clients.doris, clients.job.pipeline.doris_database
    shard_id, interval_start_ms = shard_range.shard_id, shard_range.interval_start_ms
    if known is not None and known.state in _LOADED_STATES:
        return None
    if known is not None and known.state == CHUNK_INTENT:
        # An earlier attempt may have reached Doris, whenever it was: ask before sending again,
        # so a label Doris still knows is never loaded twice and its body never re-sent (I7).
        state = doris.get_load_state(database, label)
        if state.is_loaded:
            store.chunks.record_chunk_outcome(label, state.value, shard_id=shard_id, interval_start_ms=interval_start_ms)
            return None
        if state is LabelState.UNKNOWN and _past_label_window(clients, known):
            raise UnresolvableLoad(
                f"Chunk {label} of shard {chunk.shard_id} ({chunk.first.encode()}..{chunk.last.encode()}, range of "
                f"interval {describe_instant(interval_start_ms)}) was "
                f"sent more than {_label_window_seconds(clients)} s ago (label_keep_seconds "
                f"{clients.job.pipeline.doris.label_keep_seconds} less {CLOCK_SKEW_MARGIN_SECONDS} s the workers' "
                "clocks may disagree by) and Doris no longer "
                "knows its label: whether it was loaded cannot be decided. Check the table for these positions, "
                "then delete the chunk item from the checkpoint table to load it again, or record it as VISIBLE."
            )
        # UNKNOWN inside the window or ABORTED: the label is free and nothing of it is visible.
        # PREPARE: another attempt is still running; load_idempotently waits for it.
    # Whether this attempt owns the intent, so that no other send of this label can be under way:
    # only then can a failure of our own send prove the chunk not loaded. An intent found written
    # by another attempt is never taken over: that attempt may still be sending.
    owned = intent_put
    if known is None:
        if not intent_put:
            owned = store.chunks.put_chunk_intent(label, chunk.shard_id, chunk.first, chunk.last, interval_start_ms, attempt=attempt)
    elif known.state != CHUNK_INTENT:
        # Known not loaded (never sent, or refused for certain): a fresh intent, so the label window
        # of this attempt starts now; only over the chunk as this pass read it.
        owned = store.chunks.renew_chunk_intent(known, attempt)
        if not owned:
            current = store.chunks.get_chunk(label, shard_id, interval_start_ms)
            if current is not None and current.state in _LOADED_STATES:
                return None
    try:
        result = doris.load_idempotently(database, table, label, body, options)
    except StreamLoadError as error:
        if error.definitely_not_loaded and owned:
            # Provably not in Doris: a retry after the label window sends it again. Only while the
            # intent is still ours: an outcome another attempt recorded meanwhile stays.
            store.chunks.record_chunk_outcome(
                label, CHUNK_NOT_LOADED, shard_id=shard_id, interval_start_ms=interval_start_ms, owner=attempt
            )  # fmt: skip
        raise
    report.chunks_retried += result.attempts > 1
    txn_id = str(result.result.txn_id) if result.result is not None and result.result.txn_id is not None else None
    loaded = result.result
    store.chunks.record_chunk_outcome(
        label,
        result.state.value,
        txn_id,
        shard_id=shard_id,
        interval_start_ms=interval_start_ms,
        rows_loaded=loaded.number_loaded_rows if loaded else 0,
        rows_filtered=loaded.number_filtered_rows if loaded else 0,
    )
    if loaded is not None and result.state is LabelState.VISIBLE:
        clients.label_window.offer(label)
    return loaded


def _past_label_window(clients: LoadClients, chunk: ChunkRecord) -> bool:
    """Whether Doris may have forgotten ``chunk``'s label: its intent's ``updated_ms`` is the clock
    of the worker that wrote it, the age is measured on this worker's, so a label is taken as
    still remembered only while it is younger than ``label_keep_seconds`` by more than the two
    clocks can disagree (:data:`CLOCK_SKEW_MARGIN_SECONDS`)."""
    return clients.clock_ms() - chunk.updated_ms >= _label_window_seconds(clients) * 1000


def _label_window_seconds(clients: LoadClients) -> int:
    return trusted_window_seconds(clients.job.pipeline.doris.label_keep_seconds)
