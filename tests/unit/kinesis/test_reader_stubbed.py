"""RangeReader against faults no emulator produces, with botocore's Stubber: throttling, expired
iterators, empty pages, out-of-order arrival stamps, trimmed starts, KPL aggregates cut in the
middle, and boundaries settled by a competing writer. The boundary store is the real in-memory one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import boto3
import pytest
from aws_kinesis_agg.aggregator import RecordAggregator
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from airflow_provider_kinesis_doris.core.kinesis import reader as reader_module
from airflow_provider_kinesis_doris.core.errors import (
    BoundaryConflict,
    BoundaryNotFound,
    ConfigurationError,
    DataTrimmed,
)
from airflow_provider_kinesis_doris.core.model import (
    Boundary,
    BoundaryKind,
    KinesisRecord,
    Position,
    ShardRange,
)
from airflow_provider_kinesis_doris.core.kinesis.reader import (
    IDLE_PAUSE_S,
    RangeReader,
    ReadOutcome,
    iterator_request,
)
from airflow_provider_kinesis_doris.core.kinesis.topology import KEPT_MARGIN_MS
from airflow_provider_kinesis_doris.core.kinesis.shard_pages import BACKOFF_BASE_S, BACKOFF_CAP_S, arrival_ms, backoff_delay
from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
from airflow_provider_kinesis_doris.core.stores.memory import MemoryItems, memory_store
from airflow_provider_kinesis_doris.core.stores.shard_ledger import ShardLedger

STREAM = "events"
SHARD = "shardId-000000000000"
PIPELINE = "pipe"
LIMIT = 500
START_MS = 1_700_000_000_000  # interval [START_MS, END_MS)
END_MS = START_MS + 60_000
NOW_S = (END_MS + 3_600_000) / 1000
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
SEQUENCE_BASE = 49_650_000_000_000_000_000_000_000_000_000_000_000_000_000_000_000


def seq(n: int) -> int:
    """The n-th sequence number of the shard: large, and not contiguous (as in Kinesis)."""
    return SEQUENCE_BASE + n * 1_000_003


def at(n: int, sub: int = 0, instant: int = START_MS) -> Boundary:
    return Boundary(SHARD, instant, BoundaryKind.AT, Position(seq(n), sub))


def after(n: int, sub: int = 0, instant: int = START_MS) -> Boundary:
    return Boundary(SHARD, instant, BoundaryKind.AFTER, Position(seq(n), sub))


def cut(kind: BoundaryKind, instant: int) -> Boundary:
    return Boundary(SHARD, instant, kind)


FROM_SHARD_START = cut(BoundaryKind.SHARD_START, START_MS)
TO_SHARD_END = cut(BoundaryKind.SHARD_END, END_MS)
PENDING_START = cut(BoundaryKind.PENDING, START_MS)
PENDING_END = cut(BoundaryKind.PENDING, END_MS)
SHARD_KEYS = {"StreamName": STREAM, "ShardId": SHARD}


def shard_range(start: Boundary, end: Boundary) -> ShardRange:
    return ShardRange(PIPELINE, STREAM, SHARD, START_MS, END_MS, start, end)


def raw(n: int, arrival: int, data: bytes | None = None, partition_key: str = "pk") -> dict[str, Any]:
    """A GetRecords record as Kinesis sends it."""
    return {
        "SequenceNumber": str(seq(n)),
        "ApproximateArrivalTimestamp": EPOCH + timedelta(milliseconds=arrival),
        "Data": data if data is not None else f"record-{n}".encode(),
        "PartitionKey": partition_key,
    }


def positions(records: list[KinesisRecord]) -> list[Position]:
    return [record.position for record in records]


def plain(*numbers: int) -> list[Position]:
    return [Position(seq(n)) for n in numbers]


class Kinesis:
    """A boto3 Kinesis client whose calls are answered, in order, by the Stubber."""

    def __init__(self) -> None:
        self.client = boto3.client("kinesis", region_name="us-east-1")
        self.stubber = Stubber(self.client)

    def iterator(self, request: dict[str, Any], iterator: str = "it-0") -> None:
        self.stubber.add_response(
            "get_shard_iterator", {"ShardIterator": iterator}, {**SHARD_KEYS, **request}
        )

    def page(
        self, iterator: str, records: list[dict[str, Any]], next_iterator: str | None, behind: int = 0
    ) -> None:
        response: dict[str, Any] = {"Records": records, "MillisBehindLatest": behind}
        if next_iterator is not None:
            response["NextShardIterator"] = next_iterator
        self.stubber.add_response("get_records", response, {"ShardIterator": iterator, "Limit": LIMIT})

    def error(self, operation: str, code: str, params: dict[str, Any], message: str = "") -> None:
        self.stubber.add_client_error(operation, code, message, http_status_code=400, expected_params=params)

    def records_error(self, iterator: str, code: str) -> None:
        self.error("get_records", code, {"ShardIterator": iterator, "Limit": LIMIT})


@pytest.fixture
def kinesis() -> Iterator[Kinesis]:
    stubbed = Kinesis()
    with stubbed.stubber:
        yield stubbed
        stubbed.stubber.assert_no_pending_responses()


@pytest.fixture
def store() -> CheckpointStore:
    return memory_store(PIPELINE)


class Sleeps(list[float]):
    """An injected ``sleep`` that records instead of waiting."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def read(
    kinesis: Kinesis, store: CheckpointStore, start: Boundary, end: Boundary, **options: Any
) -> tuple[list[KinesisRecord], ReadOutcome, Sleeps]:
    sleeps = Sleeps()
    reader = RangeReader(
        kinesis.client, shard_range(start, end), store.ledger, limit=LIMIT, sleep=sleeps, clock=lambda: NOW_S,
        **options,
    )
    records = list(reader)
    return records, reader.outcome, sleeps


AT_SEQUENCE = "AT_SEQUENCE_NUMBER"
SUMMARY = {
    "StreamName": STREAM, "StreamARN": "arn:aws:kinesis:us-east-1:123456789012:stream/events", "StreamStatus": "ACTIVE",
    "RetentionPeriodHours": 24, "StreamCreationTimestamp": EPOCH, "EnhancedMonitoring": [], "OpenShardCount": 1,
}  # fmt: skip


def at_sequence(n: int) -> dict[str, Any]:
    return {"ShardIteratorType": AT_SEQUENCE, "StartingSequenceNumber": str(seq(n))}


# --- pure decisions ------------------------------------------------------------------------------


def test_iterator_request_matches_the_start_boundary() -> None:
    assert iterator_request(FROM_SHARD_START) == {"ShardIteratorType": "TRIM_HORIZON"}
    assert iterator_request(at(7, 3)) == at_sequence(7)
    assert iterator_request(after(7)) == at_sequence(7)
    pending = iterator_request(cut(BoundaryKind.PENDING, 1_700_000_000_123))
    assert pending["ShardIteratorType"] == "AT_TIMESTAMP"
    assert arrival_ms(pending["Timestamp"]) == 1_700_000_000_123
    with pytest.raises(ValueError, match="SHARD_END"):
        iterator_request(cut(BoundaryKind.SHARD_END, START_MS))


def test_backoff_grows_exponentially_with_jitter_and_is_capped() -> None:
    for attempt in range(12):
        step = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2**attempt)
        delays = [backoff_delay(attempt) for _ in range(50)]
        assert all(step / 2 <= delay <= step for delay in delays)
        assert len(set(delays)) > 1  # jittered


# --- boundaries met ---------------------------------------------------------------------------------


def test_after_to_after_drops_the_start_record_and_stops_with_no_extra_call(kinesis, store) -> None:
    kinesis.iterator(at_sequence(1))
    kinesis.page("it-0", [raw(n, START_MS + n) for n in (1, 2, 3, 4)], "it-1", behind=5000)
    records, outcome, sleeps = read(kinesis, store, after(1), after(3, instant=END_MS))
    assert positions(records) == plain(2, 3)
    assert [r.data for r in records] == [b"record-2", b"record-3"]
    assert records[0].arrival_ms == START_MS + 2 and records[0].shard_id == SHARD
    assert outcome == ReadOutcome(after(1), after(3, instant=END_MS), False, Position(seq(3)), 2, 1, 5000)
    assert sleeps == []


def test_at_end_stops_before_its_record_and_full_pages_follow_without_sleep(kinesis, store) -> None:
    kinesis.iterator(at_sequence(1))
    kinesis.page("it-0", [raw(1, START_MS), raw(2, START_MS)], "it-1", behind=9000)
    kinesis.page("it-1", [raw(3, START_MS), raw(4, START_MS)], "it-2", behind=9000)
    records, outcome, sleeps = read(kinesis, store, at(1), at(4, instant=END_MS))
    assert positions(records) == plain(1, 2, 3)
    assert outcome.get_records_calls == 2 and not outcome.drained
    assert sleeps == []


def test_shard_end_reads_until_the_iterator_is_null(kinesis, store) -> None:
    kinesis.iterator({"ShardIteratorType": "TRIM_HORIZON"})
    kinesis.page("it-0", [raw(1, START_MS)], "it-1", behind=100)
    kinesis.page("it-1", [raw(2, START_MS)], None)
    records, outcome, _ = read(kinesis, store, FROM_SHARD_START, TO_SHARD_END)
    assert positions(records) == plain(1, 2)
    assert outcome.drained and outcome.end.kind is BoundaryKind.SHARD_END


def test_range_starting_at_shard_end_is_empty_and_makes_no_call(kinesis, store) -> None:
    store.ledger.put_boundary(PENDING_END)
    records, outcome, _ = read(kinesis, store, cut(BoundaryKind.SHARD_END, START_MS), PENDING_END)
    assert records == [] and outcome.drained and outcome.get_records_calls == 0
    assert outcome.end == TO_SHARD_END == store.ledger.get_boundary(SHARD, END_MS)


# --- throttling, expiry, empty pages --------------------------------------------------------------


def test_throttling_backs_off_then_succeeds_with_no_sleep_between_full_pages(kinesis, store) -> None:
    kinesis.error("get_shard_iterator", "LimitExceededException", {**SHARD_KEYS, **at_sequence(1)})
    kinesis.iterator(at_sequence(1))
    kinesis.records_error("it-0", "ProvisionedThroughputExceededException")
    kinesis.records_error("it-0", "ProvisionedThroughputExceededException")
    kinesis.page("it-0", [raw(1, START_MS), raw(2, START_MS)], "it-1", behind=3000)
    kinesis.page("it-1", [raw(3, START_MS)], None)
    records, outcome, sleeps = read(kinesis, store, at(1), TO_SHARD_END)
    assert positions(records) == plain(1, 2, 3)
    assert outcome.get_records_calls == 4  # two throttled, two that returned pages
    # One back-off for the iterator, then two growing ones for GetRecords; none between the pages.
    assert len(sleeps) == 3
    assert BACKOFF_BASE_S / 2 <= sleeps[0] <= BACKOFF_BASE_S
    assert BACKOFF_BASE_S / 2 <= sleeps[1] <= BACKOFF_BASE_S
    assert BACKOFF_BASE_S <= sleeps[2] <= 2 * BACKOFF_BASE_S


def test_throttling_beyond_the_retry_budget_raises_the_throttling_error(kinesis, store) -> None:
    kinesis.iterator(at_sequence(1))
    for _ in range(3):
        kinesis.records_error("it-0", "ProvisionedThroughputExceededException")
    with pytest.raises(ClientError, match="ProvisionedThroughputExceeded"):
        read(kinesis, store, at(1), TO_SHARD_END, max_throttle_retries=2)


def test_expired_iterator_is_renewed_after_the_last_record_read(kinesis, store) -> None:
    kinesis.iterator(at_sequence(1))
    kinesis.page("it-0", [raw(1, START_MS), raw(2, START_MS)], "it-1", behind=1000)
    kinesis.records_error("it-1", "ExpiredIteratorException")
    after_record_2 = {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "StartingSequenceNumber": str(seq(2))}
    kinesis.iterator(after_record_2, "it-9")
    kinesis.page("it-9", [raw(3, START_MS)], None)
    records, outcome, _ = read(kinesis, store, at(1), TO_SHARD_END)
    assert positions(records) == plain(1, 2, 3)  # nothing twice, nothing skipped
    assert outcome.drained


def test_expired_iterator_before_any_record_reopens_at_the_start(kinesis, store) -> None:
    kinesis.iterator(at_sequence(4))
    kinesis.records_error("it-0", "ExpiredIteratorException")
    kinesis.iterator(at_sequence(4), "it-5")
    kinesis.page("it-5", [raw(4, START_MS), raw(5, START_MS)], None)
    records, _, _ = read(kinesis, store, after(4), TO_SHARD_END)
    assert positions(records) == plain(5)


def test_empty_pages_before_data_are_followed_with_a_short_pause_each(kinesis, store) -> None:
    store.ledger.put_boundary(PENDING_END)
    kinesis.iterator({"ShardIteratorType": "TRIM_HORIZON"})
    kinesis.page("it-0", [], "it-1", behind=86_000_000)
    kinesis.page("it-1", [], "it-2", behind=40_000_000)
    kinesis.page("it-2", [raw(1, START_MS + 5)], "it-3", behind=0)
    kinesis.page("it-3", [], "it-4", behind=0)
    records, outcome, sleeps = read(kinesis, store, FROM_SHARD_START, PENDING_END)
    assert positions(records) == plain(1)
    assert sleeps == [IDLE_PAUSE_S, IDLE_PAUSE_S]  # after the two empty pages behind the tip only
    assert outcome.end == after(1, instant=END_MS) == store.ledger.get_boundary(SHARD, END_MS)
    assert outcome.millis_behind_latest == 0 and outcome.get_records_calls == 4


# --- PENDING ends ---------------------------------------------------------------------------------


def test_pending_end_is_cut_at_the_first_record_arriving_at_or_after_it_despite_later_earlier_stamps(
    kinesis, store
) -> None:
    store.ledger.put_boundary(PENDING_END)
    kinesis.iterator(at_sequence(1))
    # Arrival stamps are not monotonic: record 3 carries an earlier stamp than record 2.
    kinesis.page("it-0", [raw(1, END_MS - 100), raw(2, END_MS), raw(3, END_MS - 50)], "it-1", behind=0)
    records, outcome, _ = read(kinesis, store, at(1), PENDING_END)
    assert positions(records) == plain(1)
    assert outcome.end == at(2, instant=END_MS) == store.ledger.get_boundary(SHARD, END_MS)


def test_pending_end_at_the_tip_settles_after_the_last_record(kinesis, store) -> None:
    store.ledger.put_boundary(PENDING_END)
    kinesis.iterator(at_sequence(1))
    kinesis.page("it-0", [raw(1, START_MS), raw(2, START_MS + 1)], "it-1", behind=0)
    kinesis.page("it-1", [], "it-2", behind=0)
    records, outcome, sleeps = read(kinesis, store, at(1), PENDING_END)
    assert positions(records) == plain(1, 2)
    assert outcome.end == after(2, instant=END_MS) == store.ledger.get_boundary(SHARD, END_MS)
    assert sleeps == []


def test_pending_end_of_an_empty_range_at_the_tip_is_the_start_cut(kinesis, store) -> None:
    store.ledger.put_boundary(PENDING_END)
    kinesis.iterator(at_sequence(1))
    kinesis.page("it-0", [raw(1, START_MS - 10)], "it-1", behind=0)
    kinesis.page("it-1", [], "it-2", behind=0)
    records, outcome, _ = read(kinesis, store, after(1), PENDING_END)
    assert records == [] and outcome.last_position is None
    assert outcome.end == after(1, instant=END_MS) == store.ledger.get_boundary(SHARD, END_MS)


def test_pending_end_on_a_closed_shard_settles_to_shard_end(kinesis, store) -> None:
    store.ledger.put_boundary(PENDING_END)
    kinesis.iterator(at_sequence(1))
    kinesis.page("it-0", [raw(1, START_MS), raw(2, START_MS)], None)
    records, outcome, _ = read(kinesis, store, at(1), PENDING_END)
    assert positions(records) == plain(1, 2)
    assert outcome.drained and outcome.end == TO_SHARD_END == store.ledger.get_boundary(SHARD, END_MS)


class RacingLedger(ShardLedger):
    """The real ledger on in-memory items, where a competing writer settles a boundary first: just
    before this reader's own proposal for the same (shard, instant)."""

    def __init__(self, competitor: Boundary) -> None:
        super().__init__(MemoryItems(PIPELINE))
        self.competitor = competitor
        self.proposals: list[Boundary] = []

    def resolve_pending(self, proposed: Boundary) -> Boundary:
        if proposed.instant_ms == self.competitor.instant_ms:
            super().resolve_pending(self.competitor)
        self.proposals.append(proposed)
        return super().resolve_pending(proposed)


def racing_store(competitor: Boundary) -> CheckpointStore:
    """A store whose ledger is a :class:`RacingLedger` (the reader uses the ledger alone)."""
    store = memory_store(PIPELINE)
    store.ledger = RacingLedger(competitor)
    return store


def test_pending_end_settled_later_by_a_competing_writer_is_read_up_to(kinesis) -> None:
    store = racing_store(competitor=at(4, instant=END_MS))
    store.ledger.put_boundary(PENDING_END)
    kinesis.iterator(at_sequence(1))
    kinesis.page("it-0", [raw(1, END_MS - 10)], "it-1", behind=100)
    kinesis.page("it-1", [raw(n, END_MS + n) for n in (2, 3, 4, 5)], "it-2")
    records, outcome, _ = read(kinesis, store, at(1), PENDING_END)
    assert store.ledger.proposals == [at(2, instant=END_MS)]
    assert positions(records) == plain(1, 2, 3)
    assert outcome.end == at(4, instant=END_MS)


def test_pending_end_settled_before_a_record_already_read_is_a_conflict(kinesis) -> None:
    store = racing_store(competitor=at(1, instant=END_MS))
    store.ledger.put_boundary(PENDING_END)
    kinesis.iterator(at_sequence(1))
    kinesis.page("it-0", [raw(1, END_MS - 10), raw(2, END_MS + 1)], "it-1")
    with pytest.raises(BoundaryConflict, match="already read"):
        read(kinesis, store, at(1), PENDING_END)


def test_concrete_end_not_met_before_the_tip_is_an_error(kinesis, store) -> None:
    kinesis.iterator(at_sequence(1))
    kinesis.page("it-0", [raw(1, START_MS)], "it-1", behind=0)
    kinesis.page("it-1", [], "it-2", behind=0)
    with pytest.raises(BoundaryNotFound, match="tip"):
        read(kinesis, store, at(1), at(9, instant=END_MS))


# --- PENDING starts -------------------------------------------------------------------------------


def test_pending_start_is_located_with_at_timestamp_proposed_and_read_from(kinesis, store) -> None:
    store.ledger.put_boundary(PENDING_START)
    timestamp = {"ShardIteratorType": "AT_TIMESTAMP", "Timestamp": EPOCH + timedelta(milliseconds=START_MS)}
    kinesis.iterator(timestamp, "ts-0")
    kinesis.page("ts-0", [], "ts-1", behind=500)
    kinesis.page("ts-1", [raw(3, START_MS + 2), raw(4, START_MS + 3)], "ts-2", behind=0)
    kinesis.iterator(at_sequence(3))
    kinesis.page("it-0", [raw(3, START_MS + 2), raw(4, START_MS + 3)], "it-1", behind=0)
    records, outcome, _ = read(kinesis, store, PENDING_START, after(4, instant=END_MS))
    assert positions(records) == plain(3, 4)
    assert outcome.start == at(3) == store.ledger.get_boundary(SHARD, START_MS)


def test_pending_start_already_settled_in_the_store_is_read_from_directly(kinesis, store) -> None:
    store.ledger.put_boundary(PENDING_START)
    store.ledger.resolve_pending(after(2))
    kinesis.iterator(at_sequence(2))
    kinesis.page("it-0", [raw(2, START_MS - 1), raw(3, START_MS + 2)], None)
    records, outcome, _ = read(kinesis, store, PENDING_START, TO_SHARD_END)
    assert positions(records) == plain(3)
    assert outcome.start == after(2)


def test_pending_start_settled_earlier_by_a_competing_writer_is_followed(kinesis) -> None:
    # The previous range's reader cut the boundary right after record 2 first.
    store = racing_store(competitor=after(2))
    store.ledger.put_boundary(PENDING_START)
    timestamp = {"ShardIteratorType": "AT_TIMESTAMP", "Timestamp": EPOCH + timedelta(milliseconds=START_MS)}
    kinesis.iterator(timestamp, "ts-0")
    kinesis.page("ts-0", [raw(5, START_MS + 1)], "ts-1")
    kinesis.iterator(at_sequence(2))
    arrivals = {2: START_MS - 5, 3: START_MS + 3, 4: START_MS - 1, 5: START_MS + 1}
    kinesis.page("it-0", [raw(n, arrival) for n, arrival in arrivals.items()], None)
    records, outcome, _ = read(kinesis, store, PENDING_START, TO_SHARD_END)
    assert positions(records) == plain(3, 4, 5)
    assert outcome.start == after(2)


def test_pending_start_at_the_tip_leaves_the_range_empty_and_pending(kinesis, store) -> None:
    for instant in (START_MS, END_MS):
        store.ledger.put_boundary(cut(BoundaryKind.PENDING, instant))
    timestamp = {"ShardIteratorType": "AT_TIMESTAMP", "Timestamp": EPOCH + timedelta(milliseconds=START_MS)}
    kinesis.iterator(timestamp, "ts-0")
    kinesis.page("ts-0", [], "ts-1", behind=0)
    records, outcome, _ = read(kinesis, store, PENDING_START, PENDING_END)
    assert records == []
    assert outcome.start == PENDING_START == store.ledger.get_boundary(SHARD, START_MS)
    assert outcome.end == PENDING_END == store.ledger.get_boundary(SHARD, END_MS)


# --- trimmed data --------------------------------------------------------------------------------


def test_start_record_missing_from_the_page_means_data_was_trimmed(kinesis, store) -> None:
    kinesis.iterator(at_sequence(1))
    kinesis.page("it-0", [raw(5, START_MS)], "it-1")  # the service moved the start to what it still holds
    with pytest.raises(DataTrimmed, match=str(seq(5))):
        read(kinesis, store, at(1), TO_SHARD_END)


def test_start_record_absent_from_an_empty_shard_means_data_was_trimmed(kinesis, store) -> None:
    """An AFTER start whose instant lies within an hour of the stream's trim horizon: records after
    its record may have been trimmed too, so its record's absence is a loss."""
    now_ms = int(NOW_S * 1000)
    near = after(1, instant=now_ms - 24 * 3_600_000 + KEPT_MARGIN_MS - 1)
    kinesis.iterator(at_sequence(1))
    kinesis.page("it-0", [], "it-1", behind=0)
    kinesis.stubber.add_response(
        "describe_stream_summary", {"StreamDescriptionSummary": SUMMARY}, {"StreamName": STREAM}
    )  # fmt: skip
    with pytest.raises(DataTrimmed, match="no record"):
        read(kinesis, store, near, TO_SHARD_END)


@pytest.mark.parametrize("gone", ["first record another", "no record", "iterator refused"])
def test_an_after_start_whose_record_retention_took_reads_on_from_the_trim_horizon_while_its_instant_is_kept(
    kinesis, store, gone: str
) -> None:
    """A shard quiet for longer than the stream's retention period: its last record, after which
    each quiet interval's cut lies, is trimmed; the records after it arrived after the start's
    recent instant, so none is lost: read from the trim horizon, not DataTrimmed (which failed
    every run of such a shard for good)."""
    if gone == "iterator refused":  # AWS (harlow/kinesis-consumer#175)
        message = f"StartingSequenceNumber {seq(1)} used in GetShardIterator is invalid"
        kinesis.error("get_shard_iterator", "InvalidArgumentException", {**SHARD_KEYS, **at_sequence(1)}, message)
    else:  # an iterator at the shard's trim horizon, its first page the first record kept, or none
        kinesis.iterator(at_sequence(1))
        kinesis.page("it-0", [raw(2, START_MS + 5_000)] if gone == "first record another" else [], "it-1")
    kinesis.iterator({"ShardIteratorType": "TRIM_HORIZON"}, "it-2")
    kinesis.page("it-2", [raw(2, START_MS + 5_000), raw(3, START_MS + 6_000)], None)

    records, outcome, _ = read(kinesis, store, after(1), TO_SHARD_END)

    assert positions(records) == plain(2, 3)
    assert outcome.start == after(1) and outcome.records == 2 and outcome.drained


@pytest.mark.parametrize(
    ("code", "message"),
    [
        # kinesis-mock 0.6.2, measured (tests/integration/kinesis/test_reader_kinesis.py checks it live)
        (
            "ResourceNotFoundException",
            f"Unable to find record with provided SequenceNumber SequenceNumber({seq(1)}) in stream Some(x)",
        ),
        # AWS (harlow/kinesis-consumer#175)
        ("InvalidArgumentException", f"StartingSequenceNumber {seq(1)} used in GetShardIterator is invalid"),
    ],
)
def test_iterator_refused_for_a_vanished_sequence_number_means_trimmed(kinesis, store, code, message) -> None:
    kinesis.error("get_shard_iterator", code, {**SHARD_KEYS, **at_sequence(1)}, message)
    with pytest.raises(DataTrimmed, match=str(seq(1))) as raised:
        read(kinesis, store, at(1), TO_SHARD_END)
    # Kinesis's own answer stays with it, for the log's traceback.
    assert isinstance(raised.value.__cause__, ClientError) and code in str(raised.value.__cause__)


def test_sequence_number_of_another_shard_is_not_reported_as_trimmed(kinesis, store) -> None:
    message = (
        "Invalid StartingSequenceNumber. It encodes shardId-000000000007, "
        "while it was used in a call to shardId-000000000000"
    )
    kinesis.error("get_shard_iterator", "InvalidArgumentException", {**SHARD_KEYS, **at_sequence(1)}, message)
    with pytest.raises(ClientError, match="encodes") as raised:
        read(kinesis, store, at(1), TO_SHARD_END)
    assert not isinstance(raised.value, DataTrimmed)


# --- KPL aggregates --------------------------------------------------------------------------------


def kpl_record(n: int, arrival: int, user_records: list[tuple[str, bytes]]) -> dict[str, Any]:
    aggregator = RecordAggregator()
    for partition_key, data in user_records:
        aggregator.add_user_record(partition_key, data)
    partition_key, _, blob = aggregator.clear_and_get().get_contents()
    return raw(n, arrival, blob, partition_key)


USERS = [(f"user-{i}", f'{{"i": {i}}}'.encode()) for i in range(5)]


def stub_shard_with_aggregate(kinesis: Kinesis, opening: int, iterator: str) -> None:
    """Shard: plain record 1, aggregate 2 (five user records), plain record 3; read from ``opening``."""
    records = [raw(1, START_MS), kpl_record(2, START_MS + 1, USERS), raw(3, START_MS + 2)]
    kinesis.iterator(at_sequence(opening), iterator)
    kinesis.page(iterator, records[opening - 1 :], None)


def test_ranges_cut_inside_an_aggregate_tile_it_without_gap_or_overlap(kinesis, store) -> None:
    middle = at(2, 2, instant=END_MS)
    stub_shard_with_aggregate(kinesis, 1, "it-a")
    first, first_outcome, _ = read(kinesis, store, at(1), middle)
    stub_shard_with_aggregate(kinesis, 2, "it-b")  # the later range resumes AT the aggregate
    second, second_outcome, _ = read(kinesis, store, middle, cut(BoundaryKind.SHARD_END, END_MS + 60_000))
    aggregate = [Position(seq(2), sub) for sub in range(5)]
    assert positions(first) == [Position(seq(1)), *aggregate[:2]]
    assert positions(second) == [*aggregate[2:], Position(seq(3))]
    assert [(r.partition_key, r.data) for r in first[1:] + second[:3]] == USERS  # raw bytes, not base64
    assert first_outcome.last_position == Position(seq(2), 1) and second_outcome.drained


def test_after_a_sub_record_resumes_at_the_next_sub_record(kinesis, store) -> None:
    stub_shard_with_aggregate(kinesis, 2, "it-0")
    records, _, _ = read(kinesis, store, after(2, 3), TO_SHARD_END)
    assert positions(records) == [Position(seq(2), 4), Position(seq(3))]


def test_pending_end_at_the_tip_after_an_aggregate_is_after_its_last_sub_record(kinesis, store) -> None:
    store.ledger.put_boundary(PENDING_END)
    kinesis.iterator(at_sequence(2))
    kinesis.page("it-0", [kpl_record(2, START_MS, USERS)], "it-1", behind=0)
    kinesis.page("it-1", [], "it-2", behind=0)
    records, outcome, _ = read(kinesis, store, at(2), PENDING_END)
    assert len(records) == 5
    assert outcome.end == after(2, 4, instant=END_MS)


# --- configuration and logging ---------------------------------------------------------------------


@pytest.mark.parametrize("limit", [0, 10_001])
def test_limit_outside_what_kinesis_accepts_is_refused(kinesis, store, limit) -> None:
    with pytest.raises(ConfigurationError, match="limit"):
        RangeReader(kinesis.client, shard_range(at(1), after(2)), store.ledger, limit=limit)


def test_open_interval_with_a_pending_end_is_refused(kinesis, store) -> None:
    with pytest.raises(ConfigurationError, match="future"):
        RangeReader(kinesis.client, shard_range(at(1), PENDING_END), store.ledger, clock=lambda: (END_MS - 1) / 1000)


def test_boundary_of_another_shard_is_refused(kinesis, store) -> None:
    foreign = Boundary("shardId-000000000009", END_MS, BoundaryKind.SHARD_END)
    with pytest.raises(ConfigurationError, match="shardId-000000000009"):
        RangeReader(kinesis.client, shard_range(at(1), foreign), store.ledger)


def test_outcome_is_only_available_after_the_read(kinesis, store) -> None:
    reader = RangeReader(kinesis.client, shard_range(at(1), at(1)), store.ledger)
    with pytest.raises(RuntimeError, match="not finished"):
        reader.outcome  # noqa: B018
    assert list(reader) == [] and reader.outcome.records == 0


def test_progress_is_logged_at_info_only_for_long_reads(kinesis, store, caplog) -> None:
    ticks = iter(range(0, 1000, 6))  # six seconds pass between clock readings
    kinesis.iterator(at_sequence(1))
    kinesis.page("it-0", [raw(1, START_MS)], "it-1", behind=7)
    kinesis.page("it-1", [raw(2, START_MS)], "it-2", behind=7)
    kinesis.page("it-2", [raw(3, START_MS)], None)
    reader = RangeReader(
        kinesis.client, shard_range(at(1), TO_SHARD_END), store.ledger, limit=LIMIT, clock=lambda: float(next(ticks))
    )
    with caplog.at_level(logging.DEBUG, logger=reader_module.__name__):
        assert len(list(reader)) == 3
    pages = [r for r in caplog.records if "page of" in r.getMessage()]
    assert [r.levelno for r in pages] == [logging.DEBUG, logging.INFO, logging.DEBUG]
    assert SHARD in pages[1].getMessage() and "7 ms behind" in pages[1].getMessage()
