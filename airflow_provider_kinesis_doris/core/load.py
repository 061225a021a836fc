"""Read → map → chunk → load for planned ranges. Runs inside a Spark task (or any process):
:func:`run_here` is the runner without Spark, the job's range groups in lanes of this process.

Chunk k is loaded in one background thread while this thread reads, maps and cuts chunk k+1: at
most one load in flight and at most two chunks in memory. Loads are submitted in chunk order and
each waits for the one before it, so intents and outcomes are recorded in order; a failed load
stops the range before any later chunk is loaded.

Each chunk is loaded under the intent log of invariant I7 (``core.chunk_load``). On a replay the
reader follows the chunks and contents earlier attempts settled (``core.chunks``), and a read that
no longer holds a record not known loaded is ``DataTrimmed`` (I6). See docs/checkpoints.md,
"Chunks", for what this proves.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from airflow_provider_kinesis_doris.core.aws_clients import aws_client
from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
from airflow_provider_kinesis_doris.core.stores.dynamodb import dynamo_store
from airflow_provider_kinesis_doris.core.stores.items import ChunkRecord
from airflow_provider_kinesis_doris.core.chunk_load import LOADED_STATES, load_chunk
from airflow_provider_kinesis_doris.core.concurrency import DEFAULT_DRIVER_CONCURRENCY, map_bounded
from airflow_provider_kinesis_doris.core.chunks import ChunkContent, cut_chunks, follow_contents, settled_contents
from airflow_provider_kinesis_doris.core.errors import (
    ChunkContentSettledElsewhere,
    DataTrimmed,
    KinesisDorisError,
    RangeFailure,
    RowsRefused,
)
from airflow_provider_kinesis_doris.core.load_job import LoadJob, boundary_to_dict
from airflow_provider_kinesis_doris.core.settings import Credentials
from airflow_provider_kinesis_doris.core.doris.labels import DEAD_LETTER_NAMESPACE
from airflow_provider_kinesis_doris.core.label_window import LabelWindowWatch
from airflow_provider_kinesis_doris.core.model import Boundary, BoundaryKind, ChunkLimits, KinesisRecord, Position, ShardRange, describe_instant
from airflow_provider_kinesis_doris.core.kinesis.reader import RangeReader, ends_after
from airflow_provider_kinesis_doris.core.kinesis.shard_pages import skip_record_parsing
from airflow_provider_kinesis_doris.core.doris.client import DorisStreamLoadClient
from airflow_provider_kinesis_doris.core.mapping import map_record
from airflow_provider_kinesis_doris.core.report import RangeReport

log = logging.getLogger(__name__)


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
            self.store.chunks, self.doris, pipeline.doris_database, pipeline.doris.label_keep_seconds, self.clock_ms
        )

    @classmethod
    def from_job(cls, job: LoadJob, credentials: Credentials, aws: LoaderAws | None = None) -> LoadClients:
        """The clients of one range group's loader: ``aws`` shared with other lanes of this
        process, else its own; always its own Doris client (a ``requests.Session`` is not thread-safe)."""
        pipeline = job.pipeline
        aws = aws or LoaderAws.of(job, credentials)
        return cls(
            job=job,
            kinesis=aws.kinesis,
            store=aws.store,
            doris=DorisStreamLoadClient(job.doris_config(credentials), retry_policy=pipeline.retry_policy),
        )


@dataclass(frozen=True)
class LoaderAws:
    """A loader's Kinesis client and checkpoint store. Botocore clients are thread-safe and the
    driver's threads share one store, so the lanes of :func:`run_here` share these: per lane they
    cost two clients' construction (~11 ms of CPU) and the store's first read of the layout item."""

    kinesis: Any
    store: CheckpointStore

    @classmethod
    def of(cls, job: LoadJob, credentials: Credentials, *, threads: int = 1) -> LoaderAws:
        """:param threads: lanes that will share the clients: their connection pools hold as many."""
        pipeline = job.pipeline
        kinesis = aws_client("kinesis", pipeline.aws.kinesis_endpoint_url, pipeline.aws, credentials, connections=threads)
        skip_record_parsing(kinesis)
        dynamodb = aws_client("dynamodb", pipeline.aws.dynamodb_endpoint_url, pipeline.aws, credentials, connections=threads)
        return cls(kinesis, dynamo_store(dynamodb, pipeline.checkpoint_table, pipeline.pipeline_id))


def load_range_group(
    job: LoadJob, indices: Iterable[int], credentials: Credentials | None = None, aws: LoaderAws | None = None
) -> Iterator[RangeReport]:
    """Load the ranges ``indices`` of ``job`` one after the other (parents first)."""
    clients = LoadClients.from_job(job, credentials or Credentials.load(job.credentials_file), aws)
    try:
        yield from load_ranges(clients, indices)
    finally:
        clients.doris.close()


def run_here(job: LoadJob, credentials: Credentials, *, lanes: int = DEFAULT_DRIVER_CONCURRENCY) -> list[RangeReport]:
    """A runner without Spark: the job's range groups in this process, in ``lanes`` threads side by
    side, each loading its share of the groups one after the other with its own Doris client and
    the Kinesis and DynamoDB clients they share (a range group's ranges stay in order, parents
    first, as in a Spark partition).

    :param lanes: groups loaded at the same time. Each lane holds at most two chunks in memory
        (``chunk_max_bytes`` each), and spends most of its time waiting on Kinesis, Doris and
        DynamoDB, so a stream of many small ranges loads about ``lanes`` times faster.
    """
    groups = job.partition_groups()
    count = max(1, min(lanes, len(groups)))  # lanes: InProcessRunner checked it
    shares = [[index for group in groups[lane::count] for index in group] for lane in range(count)]
    aws = LoaderAws.of(job, credentials, threads=count)
    loaded = map_bounded(lambda share: list(load_range_group(job, share, credentials, aws)), shares, count)
    return [report for reports in loaded for report in reports]


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


Share = list[list[int]]
"""Range groups (lists of range indices, parents first) that one process or Spark partition loads."""


def load_share_here(job: LoadJob, share: Share, credentials: Credentials, lanes: int, where: str) -> list[RangeReport]:
    """The groups of ``share`` loaded in this process (a loader process's share, a Spark
    partition's), in up to ``lanes`` lanes that share one Kinesis client and store
    (:func:`load_share`); a typed error ends its group only. ``where``: the process, as a failure
    names it."""
    aws = LoaderAws.of(job, credentials, threads=lanes)
    return load_share(lambda: LoadClients.from_job(job, credentials, aws), share, lanes, where)


def load_share(make_clients: Callable[[], LoadClients], share: Share, lanes: int, where: str) -> list[RangeReport]:
    """Load the groups of ``share`` in ``lanes`` threads, each lane with the clients
    ``make_clients`` gives it, its groups one after the other; a typed error ends its group with a
    report carrying it (the ranges after it, a failed parent's children among them, are not
    loaded), so the driver raises the same class with
    :func:`~airflow_provider_kinesis_doris.core.report.raise_first_failure`."""
    count = max(1, min(lanes, len(share)))

    def lane(groups: Share) -> list[RangeReport]:
        clients = make_clients()
        try:
            return [report for group in groups for report in reports_or_failure(
                clients.job, group, load_ranges(clients, group), where)]  # fmt: skip
        finally:
            clients.doris.close()

    return [report for reports in map_bounded(lane, [share[i::count] for i in range(count)], count) for report in reports]


SPARK_EXECUTOR = "on a Spark executor"
"""Where a range failed, as :class:`RangeFailure` says it."""


def reports_or_failure(job: LoadJob, indices: Sequence[int], reports: Iterator[RangeReport], where: str) -> list[RangeReport]:
    """The reports of the group ``indices`` of ``job`` as ``reports`` yields them, one a range; a
    typed error ends them with the failed range's report carrying it (``where``: the process that
    loaded it, for the driver's message)."""
    done: list[RangeReport] = []
    try:
        done.extend(reports)
    except KinesisDorisError as error:
        failed = job.ranges[indices[len(done)]]
        failure = RangeFailure.of(error, failed.shard_id, where)
        done.append(RangeReport(failed.shard_id, failed.interval_start_ms, failure=asdict(failure)))
    return done


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
    recorded = [] if fresh else store.chunks.chunks_for_range(shard_range.shard_id, shard_range.interval_start_ms)
    chunk_limits = _settled_chunk_limits(store, shard_range, pipeline.chunk_limits)
    reader = RangeReader(
        clients.kinesis, shard_range, store.ledger, consumer_arn=pipeline.efo_consumer_arn,
        clock=lambda: clients.clock_ms() / 1000, end_read=end_read,
    )  # fmt: skip
    contents = {} if fresh else settled_contents(store.chunks, shard_range)
    by_label = {chunk.label: chunk for chunk in recorded}
    spans = sorted({*((c.first, c.last) for c in recorded), *((c.first, c.last) for c in contents.values())})
    records = _past_a_trimmed_head(reader, spans, _loaded_spans(recorded, contents), shard_range)
    mapped = follow_contents((map_record(record, pipeline.mapping) for record in records), contents)
    # Only the load thread touches ``report``, ``clients.doris`` and the chunk log until the last
    # load is joined; this thread reads Kinesis (and the boundaries, through the thread-safe store).
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"load-{shard_range.shard_id}") as loads:
        in_flight: Future[None] | None = None
        for chunk in cut_chunks(mapped, chunk_limits, spans):
            if in_flight is not None:
                in_flight.result()
            if chunk.first in sent:
                continue
            in_flight = loads.submit(load_chunk, clients, shard_range, chunk, by_label, report, sent)
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
        spans[span] = spans.get(span, True) and chunk.state in LOADED_STATES
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


def _settled_chunk_limits(store: CheckpointStore, shard_range: ShardRange, proposed: ChunkLimits) -> ChunkLimits:
    """The limits stored with the range (by its planner, or else by its first loader): a
    concurrent run with other limits then still cuts the same chunks, under the same labels."""
    settled = shard_range.chunk_limits or store.ranges.settle_chunk_limits(
        shard_range.shard_id, shard_range.interval_start_ms, proposed
    )
    if settled != proposed:
        log.info(
            "shard %s interval %s keeps the chunk limits of its first run (%d rows, %d bytes), not %d rows, %d bytes",
            shard_range.shard_id, describe_instant(shard_range.interval_start_ms), settled.chunk_max_rows,
            settled.chunk_max_bytes, proposed.chunk_max_rows, proposed.chunk_max_bytes,
        )  # fmt: skip
    return settled

