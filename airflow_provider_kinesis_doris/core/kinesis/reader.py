"""Read one shard range ``[start, end)`` exactly as its persisted boundaries cut it (``docs/design.md``).

A ``RangeReader`` yields the range's user records (KPL aggregates unpacked) lazily, page by page,
and afterwards reports how the read ended in ``outcome``. How each boundary is met:

- start ``SHARD_START``: TRIM_HORIZON. ``AT(p)`` / ``AFTER(p)``: AT_SEQUENCE_NUMBER(p), dropping
  the records below / at-or-below ``p`` (KCL style, and it proves ``p`` still exists; if it does
  not, retention trimmed it: ``DataTrimmed``, never a skip). One exception: an ``AFTER(p)`` start
  whose instant the stream still keeps (a shard quiet for longer than its retention period, ``p``
  its last record) reads on from TRIM_HORIZON, as every record after ``p`` arrived after that
  instant and none of them can have been trimmed. ``PENDING``: re-read from the store;
  if still pending, find the first record at or after the instant with AT_TIMESTAMP, propose it,
  and read from whatever the store then holds. AT_TIMESTAMP lands on the first record still kept,
  so an instant older than the stream's trim horizon is ``DataTrimmed``, as for the planner's probe.
- end ``AT(q)``: stop before ``q``. ``AFTER(q)``: stop after ``q``. ``SHARD_END``: stop when
  NextShardIterator is null (never compared with EndingSequenceNumber). ``PENDING``: stop at the
  first record arriving at or after the instant, at the tip (MillisBehindLatest 0 and an empty
  page) or at a null iterator; propose the cut with ``resolve_pending`` and follow the stored
  answer, reading on if another writer placed it later. A sweep (start ``SHARD_START``) that met
  no record before it cuts it after whatever retention deleted: an end instant older than the
  stream's trim horizon is then ``DataTrimmed``.

A record is handed out only once it is known to lie before the end: with a PENDING end, any cut
another writer can store is at a record arriving at/after the instant, or after records it read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_kinesis_doris.core.errors import (
    BoundaryConflict,
    BoundaryNotFound,
    ConfigurationError,
    DataTrimmed,
)
from airflow_provider_kinesis_doris.core.kinesis.shard_pages import (
    Page,
    Pager,
    ShardClient,
    record_arrival_ms,
    record_data,
    sequence_request,
    timestamp_of_ms,
)
from airflow_provider_kinesis_doris.core.kinesis.kpl import deaggregate, may_be_aggregate
from airflow_provider_kinesis_doris.core.kinesis.subscription import SubscriptionPager
from airflow_provider_kinesis_doris.core.kinesis.topology import kept_from, trim_horizon
from airflow_provider_kinesis_doris.core.model import (
    describe_instant,
    Boundary,
    BoundaryKind,
    KinesisRecord,
    Position,
    SHARD_START_INSTANT_MS,
    ShardRange,
)
from airflow_provider_kinesis_doris.core.stores.shard_ledger import BoundaryStore

log = logging.getLogger(__name__)

MAX_RECORDS_PER_CALL = 10_000
# Kinesis allows 5 GetRecords calls per second per shard: pause this long after an empty page
# that is not the end, and never between pages that carry records.
IDLE_PAUSE_S = 0.2
PROGRESS_EVERY_RECORDS = 100_000
PROGRESS_EVERY_S = 10.0
MIN_RETENTION_MS = 24 * 3_600_000
"""Kinesis's shortest retention period: a PENDING start more recent than this is inside any
stream's retention, so locating it asks no DescribeStreamSummary."""


@dataclass(frozen=True, slots=True)
class ReadOutcome:
    """How a range read ended.

    :param start: the start boundary read from (made concrete if it was PENDING and a record at
        or after its instant exists).
    :param end: the settled end boundary; concrete unless the range is empty and still PENDING.
    :param drained: NextShardIterator came back null: the closed shard was read to its end (also
        true for a range that starts at SHARD_END).
    :param last_position: the last record handed out, or None for an empty range.
    :param records: how many user records were handed out.
    :param get_records_calls: GetRecords calls made, throttled ones included.
    :param millis_behind_latest: MillisBehindLatest of the last page, if any page was read.
    :param subscribe_calls: SubscribeToShard calls made (enhanced fan-out), refused ones included.
    """

    start: Boundary
    end: Boundary
    drained: bool
    last_position: Position | None
    records: int
    get_records_calls: int
    millis_behind_latest: int | None
    subscribe_calls: int = 0


def iterator_request(start: Boundary) -> dict[str, Any]:
    """GetShardIterator arguments (besides stream and shard) that open a read at ``start``.

    AT and AFTER both open AT the sequence number, so that the first record returned proves the
    boundary's record still exists.

    :param start: a SHARD_START, AT, AFTER or PENDING boundary.
    :raises ValueError: for SHARD_END, which no record follows.
    """
    if start.kind is BoundaryKind.SHARD_START:
        return {"ShardIteratorType": "TRIM_HORIZON"}
    if start.kind is BoundaryKind.PENDING:
        return {"ShardIteratorType": "AT_TIMESTAMP", "Timestamp": timestamp_of_ms(start.instant_ms)}
    if start.kind in (BoundaryKind.AT, BoundaryKind.AFTER):
        assert start.position is not None
        return sequence_request("AT_SEQUENCE_NUMBER", start.position.sequence)
    raise ValueError(f"No record follows the {start.kind.value} boundary of shard {start.shard_id}")


def before_start(position: Position, start: Boundary) -> bool:
    """Whether a record the opening iterator returned belongs to an earlier range than ``start``.

    :param position: the record's position.
    :param start: the concrete start boundary the read was opened at.
    """
    if start.kind is BoundaryKind.AT:
        return position < start.position  # type: ignore[operator]
    if start.kind is BoundaryKind.AFTER:
        return position <= start.position  # type: ignore[operator]
    return False


def beyond_end(record: KinesisRecord, end: Boundary) -> bool:
    """Whether ``record`` lies at or past ``end``, i.e. belongs to a later range.

    For a PENDING end that is a record arriving at or after the end instant: the first such
    record is where the end gets cut.

    :param record: a record of the shard, read in sequence order.
    :param end: the end boundary of the range being read.
    """
    if end.kind is BoundaryKind.AT:
        return record.position >= end.position  # type: ignore[operator]
    if end.kind is BoundaryKind.AFTER:
        return record.position > end.position  # type: ignore[operator]
    if end.kind is BoundaryKind.PENDING:
        return record.arrival_ms >= end.instant_ms
    return end.kind is BoundaryKind.SHARD_START


class RangeReader:
    """The user records of one shard range, in shard order, read lazily.

    Iterate once; then ``outcome`` tells how the read ended. Memory holds one GetRecords page.

    :param kinesis_client: a boto3 Kinesis client.
    :param shard_range: the range to read; its boundaries may be PENDING.
    :param consumer_arn: a registered stream consumer to read through with enhanced fan-out
        (``SubscribeToShard``), instead of GetRecords. Either way the same records are handed out
        and the same boundaries are cut.
    :param boundaries: where boundaries are stored; PENDING ones are settled through it.
    :param limit: records per GetRecords call, 1..10000.
    :param max_throttle_retries: retries of one throttled call before its error is raised.
    :param sleep: ``time.sleep`` (injectable for tests).
    :param clock: ``time.time`` (injectable for tests): whether the end is sealed, and the trim
        horizon a PENDING start is checked against.
    :param end_read: ``shard_range.end`` is what ``boundaries`` held moments ago (the loader reads
        the ends of its ranges in batches): a PENDING end is not read again before the read. What
        another writer settles after that is followed when this reader proposes its cut, as
        anything settled while it reads is.
    :raises ConfigurationError: a bad limit, boundaries of another shard, or a PENDING end whose
        instant is still in the future (the interval is not sealed).
    """

    def __init__(
        self,
        kinesis_client: Any,
        shard_range: ShardRange,
        boundaries: BoundaryStore,
        *,
        consumer_arn: str | None = None,
        limit: int = MAX_RECORDS_PER_CALL,
        max_throttle_retries: int = 10,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
        end_read: bool = False,
    ) -> None:
        _check_range(shard_range, clock)
        if not 1 <= limit <= MAX_RECORDS_PER_CALL:
            raise ConfigurationError(f"limit must be 1..{MAX_RECORDS_PER_CALL}, got {limit}")
        self._range = shard_range
        self._kinesis = kinesis_client
        self._consumer_arn = consumer_arn
        self._store = boundaries
        self._sleep = sleep
        self._clock = clock
        self._end_read = end_read
        self._shard = ShardClient(
            kinesis_client, shard_range.stream_name, shard_range.shard_id, limit, max_throttle_retries, sleep
        )
        self._outcome: ReadOutcome | None = None

    @property
    def outcome(self) -> ReadOutcome:
        """How the read ended; available once iteration has finished."""
        if self._outcome is None:
            raise RuntimeError(f"The read of shard {self._range.shard_id} has not finished")
        return self._outcome

    def __iter__(self) -> Iterator[KinesisRecord]:
        return self._read()

    def _read(self) -> Iterator[KinesisRecord]:
        end = self._range.end if self._end_read else self._stored(self._range.end)
        state = _ReadState(self._stored(self._range.start), end)
        if state.start.kind is BoundaryKind.PENDING:
            state.start = self._locate_pending_start(state.start)
        elif state.start.kind is BoundaryKind.SHARD_START and state.start.instant_ms != SHARD_START_INSTANT_MS:
            # Not the floor's sweep (whose start is the pipeline's): a cut that found no record
            # before its instant, so every record from it on is the range's, read from TRIM_HORIZON.
            self._check_start_within_retention(state.start, "the shard's start, no record having arrived before that instant")
        if state.start.kind is BoundaryKind.SHARD_END:
            state.drained = True
            if state.end.kind is BoundaryKind.PENDING:
                state.end = self._settle_end(state, self._cut(state.end, BoundaryKind.SHARD_END))
        elif state.start.is_concrete and not _is_empty(state.start, state.end):
            yield from self._read_records(state)
        self._outcome = state.outcome(self._shard.get_records_calls, self._shard.subscribe_calls)
        log.info(
            "Read %d records of shard %s (%s): %s .. %s, drained=%s, %d GetRecords and %d SubscribeToShard "
            "calls, %s ms behind",
            state.records, self._range.shard_id, self._range.stream_name, state.start.describe(),
            state.end.describe(), state.drained, self._shard.get_records_calls, self._shard.subscribe_calls,
            state.millis_behind,
        )  # fmt: skip

    def _pager(self, opening: dict[str, Any]) -> Pager | SubscriptionPager:
        if self._consumer_arn:
            return SubscriptionPager(self._shard, self._consumer_arn, opening)
        return Pager(self._shard, opening)

    def _read_records(self, state: _ReadState) -> Iterator[KinesisRecord]:
        try:
            yield from self._read_from(iterator_request(state.start), state, start_record=state.start.position is not None)
        except _StartRecordGone as gone:
            # Raised before any record was handed out: the read starts over, or fails.
            if state.start.kind is not BoundaryKind.AFTER or not self._kept_from(state.start.instant_ms):
                # Its own cause (the refused iterator's ClientError) stays; this frame's is noise.
                raise gone.trimmed from gone.trimmed.__cause__
            log.warning(
                "Shard %s: %s; every record after it arrived after %s, which the stream still keeps (a shard "
                "quiet for longer than its retention period): reading from its trim horizon",
                self._range.shard_id, gone.trimmed, describe_instant(state.start.instant_ms),
            )  # fmt: skip
            yield from self._read_from({"ShardIteratorType": "TRIM_HORIZON"}, state, start_record=False)

    def _read_from(self, opening: dict[str, Any], state: _ReadState, *, start_record: bool) -> Iterator[KinesisRecord]:
        pager = self._pager(opening)
        try:
            yield from self._page_through(pager, state, start_record)
        finally:
            pager.close()  # frees the consumer's subscription to the shard for the next reader

    def _page_through(self, pager: Pager | SubscriptionPager, state: _ReadState, start_record: bool) -> Iterator[KinesisRecord]:
        """Page through the shard from the concrete start until the end is met and settled.

        :param start_record: the read opened AT the start's own record, which must come first
            (else :class:`_StartRecordGone`)."""
        progress = _ProgressLog(self._range.shard_id, self._clock)
        expected = state.start.position.sequence if start_record and state.start.position is not None else None
        while True:
            page = self._first_page(pager) if expected is not None else pager.next_page()
            state.millis_behind = page.millis_behind
            for record in user_records(page.records, self._range.shard_id):
                if expected is not None:
                    self._check_not_trimmed(state.start, record.position.sequence)
                    expected = None
                if before_start(record.position, state.start):
                    continue
                if beyond_end(record, state.end) and not state.end.is_concrete:
                    proposal = self._cut(state.end, BoundaryKind.AT, record.position, record.arrival_ms)
                    state.end = self._settle_end(state, proposal)
                if beyond_end(record, state.end):
                    return
                yield record
                state.last_position = record.position
                state.records += 1
            progress.page(len(page.records), state)
            if expected is not None and (page.next_iterator is None or page.at_tip):
                self._check_not_trimmed(state.start, None)
            if page.next_iterator is None:
                self._finish_at_shard_end(state)
                return
            if state.end.is_concrete and _is_at_cut(state.end, state):
                return
            if page.records:
                continue
            if page.at_tip:
                self._settle_end_at_tip(state)
                if _is_at_cut(state.end, state):
                    return
            self._sleep(IDLE_PAUSE_S)

    def _locate_pending_start(self, start: Boundary) -> Boundary:
        """Make a PENDING start concrete: AT the first record at or after its instant, or
        SHARD_END if the closed shard has none; still PENDING at the tip of an open shard."""
        self._check_start_within_retention(start, "its first record arriving at or after that instant, a cut no reader has made yet")
        with closing(self._pager(iterator_request(start))) as pager:
            return self._first_cut_at_or_after(pager, start)

    def _first_cut_at_or_after(self, pager: Pager | SubscriptionPager, start: Boundary) -> Boundary:
        while True:
            page = pager.next_page()
            if page.records:
                first = user_records(page.records[:1], self._range.shard_id)[0]
                return self._settle(self._cut(start, BoundaryKind.AT, first.position, first.arrival_ms))
            if page.next_iterator is None:
                return self._settle(self._cut(start, BoundaryKind.SHARD_END))
            if page.at_tip:
                log.debug("Shard %s has no record at or after %s yet; start stays pending",
                          start.shard_id, describe_instant(start.instant_ms))  # fmt: skip
                return start
            self._sleep(IDLE_PAUSE_S)

    def _finish_at_shard_end(self, state: _ReadState) -> None:
        state.drained = True
        if state.end.kind is BoundaryKind.PENDING:
            state.end = self._settle_end(state, self._cut(state.end, BoundaryKind.SHARD_END))
        if state.end.kind is not BoundaryKind.SHARD_END and not _is_at_cut(state.end, state):
            raise self._end_not_found(state, "end")

    def _settle_end_at_tip(self, state: _ReadState) -> None:
        """At the tip no record at/after the end instant exists yet; the interval is sealed, so the
        end is right after the last record read (or at the start, if there was none)."""
        if state.end.is_concrete:
            raise self._end_not_found(state, "tip")
        if state.last_position is None:
            proposal = self._cut(state.end, state.start.kind, state.start.position)
        else:
            proposal = self._cut(state.end, BoundaryKind.AFTER, state.last_position)
        state.end = self._settle_end(state, proposal)

    def _settle_end(self, state: _ReadState, proposal: Boundary) -> Boundary:
        """Settle the PENDING end with ``proposal``; the stored answer may lie later (another
        writer read further), but never before a record already handed out."""
        if state.start.kind is BoundaryKind.SHARD_START and state.last_position is None:
            self._check_end_within_retention(proposal)
        settled = self._settle(proposal)
        if _cuts_before(settled, state.last_position):
            raise BoundaryConflict(
                f"End boundary of shard {self._range.shard_id} at {describe_instant(settled.instant_ms)} was stored as "
                f"{settled.describe()}, before record {_describe_position(state.last_position)} already read"
            )
        return settled

    def _settle(self, proposal: Boundary) -> Boundary:
        settled = self._store.resolve_pending(proposal)
        if not settled.is_concrete:
            raise BoundaryConflict(
                f"Boundary store kept {settled.describe()} pending after proposing {proposal.describe()}"
            )
        if settled != proposal:
            log.info("Boundary of shard %s: proposed %s, another writer stored %s; following it",
                     proposal.shard_id, proposal.describe(),
                     settled.describe())  # fmt: skip
        return settled

    def _stored(self, boundary: Boundary) -> Boundary:
        """A PENDING boundary may have been made concrete since the range was planned."""
        if boundary.is_concrete:
            return boundary
        return self._store.get_boundary(boundary.shard_id, boundary.instant_ms) or boundary

    def _horizon_past(self, instant_ms: int) -> int | None:
        """The stream's trim horizon if ``instant_ms`` is older than it (records arriving at or
        after the instant may be deleted), else None."""
        now_ms = int(self._clock() * 1000)
        if instant_ms >= now_ms - MIN_RETENTION_MS:
            return None
        horizon_ms = trim_horizon(self._kinesis, self._range.stream_name, lambda: now_ms)
        return horizon_ms if instant_ms < horizon_ms else None

    def _check_start_within_retention(self, start: Boundary, located: str) -> None:
        self._check_within_retention(
            start.instant_ms,
            f"starts at {located}",
            "records of the range may have been deleted before they were loaded",
        )

    def _check_end_within_retention(self, proposal: Boundary) -> None:
        """A sweep read from TRIM_HORIZON that met nothing before its PENDING end would cut the end
        at the first record still kept (or at the tip, or the shard's end): if the end's instant is
        older than the trim horizon, records arriving from it may have been deleted unseen, and the
        next interval's range, which starts at this same cut, would skip them green. A record read
        before the end proves the contrary (retention deletes the oldest first), hence only here."""
        if proposal.position is not None and proposal.arrival_ms is not None:
            holds = f"record {proposal.position.encode()} first, arriving at {describe_instant(proposal.arrival_ms)}"
        else:
            holds = "no record"
        end = describe_instant(proposal.instant_ms)
        self._check_within_retention(
            proposal.instant_ms,
            f"sweeps it from its start and ends at its first record arriving at or after {end}, a cut no reader "
            f"has made yet, and the shard holds {holds} after its start",
            f"records of the next interval arriving from {end} on may have been deleted before they were loaded",
        )

    def _check_within_retention(self, instant_ms: int, located: str, at_risk: str) -> None:
        """A cut found by time at an instant older than the trim horizon lands past records that
        retention deleted unseen: AT_TIMESTAMP for a start left PENDING by a run that failed before
        its reader reached the tip, TRIM_HORIZON for a SHARD_START cut of a shard that had no record
        before the instant, a sweep's PENDING end; then retried after an outage longer than retention.

        :param located: how the cut is found, for the message.
        :param at_risk: which records may be gone, for the message."""
        horizon_ms = self._horizon_past(instant_ms)
        if horizon_ms is not None:
            raise DataTrimmed(
                f"The range of shard {self._range.shard_id} in stream {self._range.stream_name} for the interval "
                f"from {describe_instant(self._range.interval_start_ms)} {located}. "
                f"{describe_instant(instant_ms)} is older than the stream's trim horizon "
                f"{describe_instant(horizon_ms)} (its retention period before now): {at_risk}, so they cannot be "
                "loaded exactly once. Raise the stream's retention period so retries run inside it, and reload "
                "those records from a backup if you keep one"
            )

    @staticmethod
    def _first_page(pager: Pager | SubscriptionPager) -> Page:
        """The pager's next page while the start's record has not come: a sequence number the
        shard no longer holds, refused as it opens, is that record gone."""
        try:
            return pager.next_page()
        except DataTrimmed as refused:
            raise _StartRecordGone(refused) from refused

    def _check_not_trimmed(self, start: Boundary, first_sequence: int | None) -> None:
        assert start.position is not None
        if first_sequence != start.position.sequence:
            found = "no record" if first_sequence is None else f"record {first_sequence}"
            raise _StartRecordGone(DataTrimmed(
                f"Range of shard {self._range.shard_id} in stream {self._range.stream_name} starts at "
                f"{start.describe()}, but the shard holds {found} there: its records were trimmed by "
                "retention before they were loaded"
            ))  # fmt: skip

    def _kept_from(self, instant_ms: int) -> bool:
        """Whether the stream surely still keeps every record arriving from ``instant_ms`` on
        (:func:`~.topology.kept_from`); a DescribeStreamSummary only for an instant near the
        shortest retention's horizon."""
        now_ms = int(self._clock() * 1000)
        if kept_from(instant_ms, now_ms - MIN_RETENTION_MS):
            return True
        return kept_from(instant_ms, trim_horizon(self._kinesis, self._range.stream_name, lambda: now_ms))

    def _end_not_found(self, state: _ReadState, reached: str) -> BoundaryNotFound:
        return BoundaryNotFound(
            f"Reached the {reached} of shard {self._range.shard_id} of stream {self._range.stream_name} "
            f"after {_describe_position(state.last_position)} without meeting end boundary "
            f"{state.end.describe()}"
        )

    @staticmethod
    def _cut(
        pending: Boundary, kind: BoundaryKind, position: Position | None = None, arrival: int | None = None
    ) -> Boundary:
        return Boundary(pending.shard_id, pending.instant_ms, kind, position, arrival)


class _StartRecordGone(Exception):
    """The record an AT or AFTER start opened at is not in the shard: retention took it. Raised
    before the read hands out any record; ``trimmed`` is the error to raise when that loses
    records (an AT start's record is the range's own; an AFTER start's only when retention may
    also have taken records after it)."""

    def __init__(self, trimmed: DataTrimmed) -> None:
        super().__init__(str(trimmed))
        self.trimmed = trimmed


@dataclass(slots=True)
class _ReadState:
    start: Boundary
    end: Boundary
    last_position: Position | None = None
    records: int = 0
    drained: bool = False
    millis_behind: int | None = None

    def outcome(self, get_records_calls: int, subscribe_calls: int) -> ReadOutcome:
        return ReadOutcome(self.start, self.end, self.drained, self.last_position, self.records,
                           get_records_calls, self.millis_behind, subscribe_calls)  # fmt: skip


@dataclass(slots=True)
class _ProgressLog:
    """INFO every ``PROGRESS_EVERY_RECORDS`` records or ``PROGRESS_EVERY_S`` seconds, DEBUG per page."""

    shard_id: str
    clock: Callable[[], float]
    _logged_at: float = field(init=False)
    _logged_records: int = 0

    def __post_init__(self) -> None:
        self._logged_at = self.clock()

    def page(self, size: int, state: _ReadState) -> None:
        now = self.clock()
        due = (
            state.records - self._logged_records >= PROGRESS_EVERY_RECORDS
            or now - self._logged_at >= PROGRESS_EVERY_S
        )
        level = logging.INFO if due else logging.DEBUG
        log.log(level, "Shard %s: page of %d records; %d read, at %s, %s ms behind latest",
                self.shard_id, size, state.records, _describe_position(state.last_position),
                state.millis_behind)  # fmt: skip
        if due:
            self._logged_at, self._logged_records = now, state.records


def user_records(records: list[dict[str, Any]], shard_id: str) -> list[KinesisRecord]:
    """The user records of a page of GetRecords records, in shard order."""
    users: list[KinesisRecord] = []
    for record in records:
        sequence = int(record["SequenceNumber"])
        arrival = record_arrival_ms(record)
        data = record_data(record)
        if not may_be_aggregate(data):
            users.append(KinesisRecord(shard_id, Position(sequence), arrival, record["PartitionKey"], data))
            continue
        users.extend(
            KinesisRecord(shard_id, Position(sequence, user.sub_sequence), arrival, user.partition_key, user.data)
            for user in deaggregate(data, record["PartitionKey"])
        )
    return users


def positions_between(
    kinesis_client: Any, stream_name: str, shard_id: str, first: Position, last: Position,
    *, sleep: Callable[[float], None] = time.sleep,
) -> list[Position]:  # fmt: skip
    """The positions of a shard's user records from ``first`` through ``last``, read again from
    Kinesis: the audit names the records of a chunk that Doris lacks with them.

    :raises DataTrimmed: retention deleted ``first`` since it was loaded.
    """
    shard = ShardClient(kinesis_client, stream_name, shard_id, MAX_RECORDS_PER_CALL, 10, sleep)
    pager = Pager(shard, sequence_request("AT_SEQUENCE_NUMBER", first.sequence))
    found: list[Position] = []
    while True:
        page = pager.next_page()
        for record in user_records(page.records, shard_id):
            if record.position > last:
                return found
            if record.position >= first:
                found.append(record.position)
        if page.next_iterator is None or page.at_tip:
            return found
        if not page.records:
            sleep(IDLE_PAUSE_S)


def _is_empty(start: Boundary, end: Boundary) -> bool:
    """Ranges known to be empty without reading: ending at the shard's start, or from a cut to itself."""
    if end.kind is BoundaryKind.SHARD_START:
        return True
    return start.same_cut(end)


def holds_a_record(start: Boundary, end: Boundary) -> bool:
    """Whether ``[start, end)`` is known to hold a record without reading it: a start AT a record
    keeps it unless the end is that same cut (a PENDING end means no record at or after the end's
    instant existed when it was probed, so that record arrived before it); two different AFTER
    cuts hold the later one's record."""
    if start.kind is BoundaryKind.AT:
        return end.kind is not BoundaryKind.SHARD_START and not start.same_cut(end)
    return start.kind is BoundaryKind.AFTER and end.kind is BoundaryKind.AFTER and not start.same_cut(end)


def _is_at_cut(end: Boundary, state: _ReadState) -> bool:
    """Whether ``end`` cuts right after the last record handed out (at the start if none was)."""
    if state.last_position is None:
        return (end.kind, end.position) == (state.start.kind, state.start.position)
    return ends_after(end, state.last_position)


def ends_after(end: Boundary, position: Position) -> bool:
    """Whether ``end`` cuts right after the record at ``position``: no record of the range follows it."""
    return end.kind is BoundaryKind.AFTER and end.position == position


def _cuts_before(end: Boundary, last_position: Position | None) -> bool:
    """Whether ``end`` would exclude a record already handed out."""
    if last_position is None:
        return False
    if end.kind is BoundaryKind.AT:
        return end.position <= last_position  # type: ignore[operator]
    if end.kind is BoundaryKind.AFTER:
        return end.position < last_position  # type: ignore[operator]
    return end.kind is BoundaryKind.SHARD_START


def _describe_position(position: Position | None) -> str:
    return "the start" if position is None else position.encode()


def _check_range(shard_range: ShardRange, clock: Callable[[], float]) -> None:
    for boundary in (shard_range.start, shard_range.end):
        if boundary.shard_id != shard_range.shard_id:
            raise ConfigurationError(
                f"Range of shard {shard_range.shard_id} has a boundary of shard {boundary.shard_id}"
            )
    if shard_range.end.kind is BoundaryKind.PENDING and shard_range.end.instant_ms > clock() * 1000:
        raise ConfigurationError(
            f"Range of shard {shard_range.shard_id} ends at {describe_instant(shard_range.end.instant_ms)}, which is in the "
            "future: only a sealed interval can be read"
        )
