"""``boundary(t)`` read forward in one page from an earlier cut AFTER a record (``scan_forward``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from airflow_provider_kinesis_doris.core.kinesis import boundaries
from airflow_provider_kinesis_doris.core.kinesis.boundaries import resolve_boundary, scan_forward
from airflow_provider_kinesis_doris.core.kinesis.topology import KEPT_MARGIN_MS
from airflow_provider_kinesis_doris.core.model import Boundary, BoundaryKind, Position, ShardInfo
from airflow_provider_kinesis_doris.core.stores.memory import memory_store
from airflow_provider_kinesis_doris.testing.counting import CountingClient
from airflow_provider_kinesis_doris.testing.fake_kinesis import FakeKinesis

STREAM = "events"
T0 = 1_700_000_000_000


def _stream(*arrivals_after_t0: int) -> tuple[FakeKinesis, ShardInfo, list[int]]:
    """One shard; a record at T0 + each offset; returns its sequence numbers."""
    kinesis = FakeKinesis(now_ms=T0)
    kinesis.create_stream(StreamName=STREAM, ShardCount=1)
    sequences = []
    for offset in arrivals_after_t0:
        kinesis.now_ms = T0 + offset
        sequences.append(int(kinesis.put_record(StreamName=STREAM, Data=b"{}", PartitionKey="k")["SequenceNumber"]))
    kinesis.now_ms = T0 + 60_000
    (listed,) = kinesis.list_shards(StreamName=STREAM)["Shards"]
    shard = ShardInfo(listed["ShardId"], (), 0, 2**128 - 1, sequences[0] if sequences else 0, is_open=True)
    return kinesis, shard, sequences


def _after(shard: ShardInfo, instant_ms: int, sequence: int) -> Boundary:
    return Boundary(shard.shard_id, instant_ms, BoundaryKind.AFTER, Position(sequence))


RETAINED_MS = T0 - 24 * 3_600_000
"""A trim horizon a day before T0: every record of these streams is kept."""
OPENINGS = pytest.mark.parametrize("horizon_ms", [None, RETAINED_MS], ids=["at-its-record", "after-its-record"])
"""A scan without a known trim horizon opens AT the earlier cut's record; one far from it, after it."""


def _scan(
    kinesis: Any, shard: ShardInfo, earlier: Boundary | None, instant_ms: int, horizon_ms: int | None = None
) -> Boundary | None:
    return scan_forward(kinesis, STREAM, shard, earlier, instant_ms, trim_horizon_ms=horizon_ms, clock=lambda: T0 + 60_000)


def test_a_quiet_shard_ends_where_it_started_after_its_record_and_an_empty_page() -> None:
    kinesis, shard, (last,) = _stream(1_000)
    counting = CountingClient(kinesis)

    cut = _scan(counting, shard, _after(shard, T0 + 10_000, last), T0 + 20_000)

    assert cut == _after(shard, T0 + 20_000, last)
    assert counting.calls == Counter(get_shard_iterator=1, get_records=2)


def test_a_quiet_shard_well_within_retention_is_read_after_its_record_in_one_empty_page() -> None:
    """The quiet interval's cost at a thousand shards (issue 46): the page that shows the earlier
    record again is left out where no record after it can have been trimmed."""
    kinesis, shard, (last,) = _stream(1_000)
    counting = CountingClient(kinesis)

    cut = _scan(counting, shard, _after(shard, T0 + 10_000, last), T0 + 20_000, RETAINED_MS)

    assert cut == _after(shard, T0 + 20_000, last)
    assert counting.calls == Counter(get_shard_iterator=1, get_records=1)


def test_a_cut_within_the_margin_of_the_trim_horizon_is_read_at_its_record_which_must_be_kept() -> None:
    kinesis, shard, sequences = _stream(1_000, 12_000)
    near = T0 + 10_000 - KEPT_MARGIN_MS + 1
    counting = CountingClient(kinesis)

    quiet = _scan(counting, shard, _after(shard, T0 + 10_000, sequences[1]), T0 + 20_000, near)
    gone = _scan(kinesis, shard, _after(shard, T0 + 10_000, sequences[0] + 1), T0 + 20_000, near)

    assert quiet == _after(shard, T0 + 20_000, sequences[1])
    assert counting.calls == Counter(get_shard_iterator=1, get_records=2)
    assert gone is None


class ZeroBehindWithRecords(CountingClient):
    """Kinesis as a page ending in the middle of one millisecond's records reports it: 0 behind."""

    def get_records(self, **kwargs: Any) -> dict[str, Any]:
        page = self._client.get_records(**kwargs)
        return {**page, "MillisBehindLatest": 0} if page["Records"] else page


@OPENINGS
def test_a_page_that_says_zero_behind_is_not_the_tip_while_records_follow(monkeypatch: pytest.MonkeyPatch, horizon_ms: int | None) -> None:
    """The exactly-once proof's finding (kinesis-mock, records put in one millisecond): ending the
    range after the last record of a page that said 0 behind lost the records after it. Only an
    empty page proves the tip, as in the reader."""
    monkeypatch.setattr(boundaries, "SCAN_PAGE_RECORDS", 2)
    kinesis, shard, sequences = _stream(1_000, 12_000, 12_000, 12_000)

    cut = _scan(ZeroBehindWithRecords(kinesis), shard, _after(shard, T0 + 10_000, sequences[0]), T0 + 20_000, horizon_ms)

    assert cut == _after(shard, T0 + 20_000, sequences[3])


@OPENINGS
def test_records_before_the_instant_only_end_after_the_last_of_them(horizon_ms: int | None) -> None:
    kinesis, shard, sequences = _stream(1_000, 12_000, 15_000)

    assert _scan(kinesis, shard, _after(shard, T0 + 10_000, sequences[0]), T0 + 20_000, horizon_ms) == _after(
        shard, T0 + 20_000, sequences[2]
    )


@OPENINGS
def test_the_first_record_arriving_at_or_after_the_instant_is_the_cut_with_its_stamp(horizon_ms: int | None) -> None:
    kinesis, shard, sequences = _stream(1_000, 12_000, 20_000, 25_000)

    cut = _scan(kinesis, shard, _after(shard, T0 + 10_000, sequences[0]), T0 + 20_000, horizon_ms)

    assert cut == Boundary(shard.shard_id, T0 + 20_000, BoundaryKind.AT, Position(sequences[2]))
    assert cut is not None and cut.arrival_ms == T0 + 20_000


@OPENINGS
def test_a_closed_shard_read_to_its_end_before_the_instant_ends_there(horizon_ms: int | None) -> None:
    kinesis, shard, sequences = _stream(1_000, 12_000)
    kinesis.split_shard(StreamName=STREAM, ShardToSplit=shard.shard_id, NewStartingHashKey=str(2**127))
    closed = ShardInfo(shard.shard_id, (), 0, 2**128 - 1, sequences[0], is_open=False)

    assert _scan(kinesis, closed, _after(shard, T0 + 10_000, sequences[0]), T0 + 20_000, horizon_ms) == Boundary(
        shard.shard_id, T0 + 20_000, BoundaryKind.SHARD_END
    )


@OPENINGS
def test_more_records_than_a_page_fall_back_to_the_probe(monkeypatch: pytest.MonkeyPatch, horizon_ms: int | None) -> None:
    monkeypatch.setattr(boundaries, "SCAN_PAGE_RECORDS", 1)
    monkeypatch.setattr(boundaries, "SCAN_PAGES", 2)
    kinesis, shard, sequences = _stream(1_000, 11_000, 12_000, 13_000)

    assert _scan(kinesis, shard, _after(shard, T0 + 10_000, sequences[0]), T0 + 20_000, horizon_ms) is None


def test_an_earlier_record_that_is_gone_falls_back_to_the_probe() -> None:
    kinesis, shard, sequences = _stream(1_000, 12_000)

    assert _scan(kinesis, shard, _after(shard, T0 + 10_000, sequences[0] + 1), T0 + 20_000) is None


@pytest.mark.parametrize(
    "earlier, instant_ms",
    [
        (Boundary("s", T0, BoundaryKind.AT, Position(1), T0 + 1), T0 + 20_000),  # a busy shard: the probe jumps
        (Boundary("s", T0, BoundaryKind.PENDING), T0 + 20_000),
        (Boundary("s", T0, BoundaryKind.SHARD_START), T0 + 20_000),
        (None, T0 + 20_000),
        (Boundary("s", T0, BoundaryKind.AFTER, Position(1)), T0 + 61_000),  # not sealed yet
    ],
)
def test_without_a_cut_after_a_record_or_before_the_seal_nothing_is_read(earlier: Boundary | None, instant_ms: int) -> None:
    kinesis, shard, _ = _stream(1_000)
    counting = CountingClient(kinesis)

    assert _scan(counting, shard, earlier, instant_ms) is None
    assert counting.calls == Counter()


def test_resolve_boundary_stores_the_scanned_cut_concrete_where_the_probe_left_it_pending() -> None:
    kinesis, shard, (last,) = _stream(1_000)
    store = memory_store("p")
    start = store.ledger.put_boundary(_after(shard, T0 + 10_000, last))

    scanned = resolve_boundary(kinesis, store.ledger, STREAM, shard, T0 + 20_000, earlier=start, clock=lambda: T0 + 60_000)
    probed = resolve_boundary(kinesis, store.ledger, STREAM, shard, T0 + 30_000, clock=lambda: T0 + 60_000)

    assert scanned == store.ledger.get_boundary(shard.shard_id, T0 + 20_000) == _after(shard, T0 + 20_000, last)
    assert probed.kind is BoundaryKind.PENDING


def test_a_probe_older_than_the_trim_horizon_names_both_instants_in_utc() -> None:
    from airflow_provider_kinesis_doris.core.errors import DataTrimmed

    kinesis, shard, _ = _stream(1_000)
    store = memory_store("p")

    with pytest.raises(DataTrimmed) as trimmed:
        resolve_boundary(kinesis, store.ledger, STREAM, shard, T0 + 20_000, trim_horizon_ms=T0 + 30_000, clock=lambda: T0 + 60_000)

    assert (
        f"Shard {shard.shard_id} of stream {STREAM} must be cut at 2023-11-14T22:13:40Z (1700000020000), which is "
        "older than the stream's trim horizon 2023-11-14T22:13:50Z (1700000030000) (its retention period before now)"
    ) in str(trimmed.value)
