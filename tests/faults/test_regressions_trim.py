"""Records retention trimmed before they were loaded, found by the third round of reproductions
(/work/shared/repro/replay-contract-3: repro_trimmed_past_recorded_chunks and
repro_pending_start_read_after_trim), each pinned by a test that failed before its fix: a retry
must fail with ``DataTrimmed`` (I6), never end green without them. The real planner, loader and
commit (``run_interval``) over the in-memory fakes; retention trims a shard by deleting its oldest
records, as the fake's docstring says."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from airflow_provider_kinesis_doris.core.errors import DataTrimmed, RetryableStreamLoadError
from airflow_provider_kinesis_doris.core.kinesis.reader import RangeReader
from airflow_provider_kinesis_doris.core.report import RangeReport
from airflow_provider_kinesis_doris.core.load_job import LoadJob
from airflow_provider_kinesis_doris.core.settings import Credentials, PipelineConfig
from airflow_provider_kinesis_doris.core.model import Boundary, BoundaryKind, RangeState, ShardRange
from airflow_provider_kinesis_doris.core.pipeline import IntervalResult, Runner, run_interval
from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
from airflow_provider_kinesis_doris.core.stores.memory import memory_store
from airflow_provider_kinesis_doris.testing.fake_kinesis import FakeKinesis
from airflow_provider_kinesis_doris.testing.faults import FailOnNthCall, InjectedCrash
from airflow_provider_kinesis_doris.testing.memory_doris import MemoryDoris
from airflow_provider_kinesis_doris.testing.builders import load_in_thread, pipeline_config
from tests.faults.memory_world import IV, SHARD, STREAM, T0

HOUR_MS = 3_600_000





def _run(config: PipelineConfig, k: int, kinesis: FakeKinesis, store: Any, runner: Runner, doris: Any) -> IntervalResult:
    return run_interval(
        config, T0 + k * IV, T0 + (k + 1) * IV, kinesis=kinesis, store=store, credentials=Credentials(),
        runner=runner, clock=lambda: kinesis.now_ms, doris=doris,
    )  # fmt: skip


def _put(kinesis: FakeKinesis, at_ms: int, data: bytes) -> None:
    kinesis.now_ms = max(kinesis.now_ms, at_ms)
    kinesis.put_record(StreamName=STREAM, Data=data, PartitionKey="k")


def _event(event_id: int) -> bytes:
    return json.dumps({"event_id": event_id}).encode()


def _trim(kinesis: FakeKinesis, records: int) -> None:
    del kinesis.shard(STREAM, SHARD).records[:records]


# --- the head of a TRIM_HORIZON sweep trimmed past its recorded chunks ----------------------------


def _sweep(events: list[bytes]) -> tuple[FakeKinesis, CheckpointStore, MemoryDoris]:
    """A stream whose ``events`` arrived before the first interval: a TRIM_HORIZON pipeline's floor
    range (from SHARD_START) sweeps them."""
    kinesis = FakeKinesis(now_ms=T0 - 10_000)
    kinesis.create_stream(StreamName=STREAM, ShardCount=1)
    for offset, data in enumerate(events):
        _put(kinesis, T0 - 5_000 + offset, data)
    kinesis.now_ms = T0 + 2 * IV
    return kinesis, memory_store("p", clock=lambda: kinesis.now_ms), MemoryDoris()


SWEEP = pipeline_config(initial_position="TRIM_HORIZON")


def test_a_sweep_whose_failed_chunk_retention_trimmed_whole_fails_with_data_trimmed() -> None:
    """Variant 1: chunk [0,1] is VISIBLE, chunk [2,3] recorded NOT_LOADED (Doris refused the
    connection); retention trims events 0..3 before the retry. The retry read from event 4, in no
    recorded chunk, so the old guard (a first record strictly inside a recorded chunk) did not fire:
    events 2 and 3 were lost and the retry was green."""
    kinesis, store, doris = _sweep([_event(n) for n in range(6)])

    def down(method: str, call: int) -> RetryableStreamLoadError:
        error = RetryableStreamLoadError("Doris unreachable: connection refused")
        error.definitely_not_loaded = True
        return error

    with pytest.raises(RetryableStreamLoadError):
        _run(SWEEP, 0, kinesis, store, load_in_thread(kinesis, store, FailOnNthCall(doris, "load_idempotently", 2, down)), doris)
    assert [chunk.state for chunk in store.chunks.chunks_for_range(SHARD, T0)] == ["VISIBLE", "NOT_LOADED"]
    _trim(kinesis, 4)

    with pytest.raises(DataTrimmed, match=r"first record of chunk .*, whose labels are not all known loaded"):
        _run(SWEEP, 0, kinesis, store, load_in_thread(kinesis, store, doris), doris)

    assert doris.tally("t", "event_id") == Counter({0: 1, 1: 1})
    assert store.ranges.get_range(SHARD, T0).state is RangeState.PLANNED


def test_a_sweep_killed_before_its_next_chunk_was_recorded_fails_with_data_trimmed_past_its_loaded_chunks() -> None:
    """Variant 2: chunk [0,1] is VISIBLE and the task is killed before chunk [2,3]'s first write
    (chunk k+1 is read while chunk k loads); retention trims events 0..2. Event 2 was lost green."""
    kinesis, store, doris = _sweep([_event(n) for n in range(6)])
    killed = FailOnNthCall(store, "chunks.put_chunk_intent_with_content", 2)
    with pytest.raises(InjectedCrash):
        _run(SWEEP, 0, kinesis, store, load_in_thread(kinesis, killed, doris), doris)
    _trim(kinesis, 3)

    with pytest.raises(DataTrimmed, match=r"the last of the chunks loaded so far .* holds record \S+ first"):
        _run(SWEEP, 0, kinesis, store, load_in_thread(kinesis, store, doris), doris)

    assert doris.tally("t", "event_id") == Counter({0: 1, 1: 1})


def test_a_sweep_whose_chunk_rows_loaded_without_its_dead_letters_fails_with_data_trimmed() -> None:
    """Variant 3: chunk [0,1,2] (event 1 a dead letter of the mapping) has its rows VISIBLE; the
    task is killed before its dead letters' intent; retention trims event 0. The chunk counted as
    loaded (every *recorded* label was), its rest was skipped, and the dead letter of event 1 was
    in neither table, green."""
    kinesis, store, doris = _sweep([_event(0), b"not json: event 1", _event(2), _event(3), _event(4)])
    sweep = replace(SWEEP, chunk_max_rows=3)
    with pytest.raises(InjectedCrash):
        _run(sweep, 0, kinesis, store, load_in_thread(kinesis, FailOnNthCall(store, "chunks.put_chunk_intent", 1), doris), doris)
    assert [(chunk.label[:3], chunk.state) for chunk in store.chunks.chunks_for_range(SHARD, T0)] == [("kd:", "VISIBLE")]
    _trim(kinesis, 1)

    with pytest.raises(DataTrimmed, match=r"first record of chunk .*, whose labels are not all known loaded"):
        _run(sweep, 0, kinesis, store, load_in_thread(kinesis, store, doris), doris)

    assert doris.tally("t", "event_id") == Counter({0: 1, 2: 1})
    assert doris.rows.get("t_dl", []) == []


def test_a_sweep_retried_after_retention_trimmed_only_loaded_records_loads_the_rest_once() -> None:
    """Control: the same kill as variant 2, but retention trims only events 0 and 1, which are
    loaded: event 2, the first not loaded, is still kept, so nothing is lost and the retry loads
    the rest once."""
    kinesis, store, doris = _sweep([_event(n) for n in range(6)])
    killed = FailOnNthCall(store, "chunks.put_chunk_intent_with_content", 2)
    with pytest.raises(InjectedCrash):
        _run(SWEEP, 0, kinesis, store, load_in_thread(kinesis, killed, doris), doris)
    _trim(kinesis, 1)  # event 0: the retry starts inside the loaded chunk [0,1] and skips its rest

    _run(SWEEP, 0, kinesis, store, load_in_thread(kinesis, store, doris), doris)

    assert doris.tally("t", "event_id") == Counter(range(6))


def test_a_sweep_loaded_whole_whose_commit_died_commits_after_retention_trimmed_all_of_it() -> None:
    """Control: every record of the sweep is loaded and its end cut right after the last one, but
    the run dies before the commit; retention then trims all of it. Nothing of the range can be
    missing, so the retry commits it without DataTrimmed."""
    kinesis, store, doris = _sweep([_event(n) for n in range(4)])
    loads = load_in_thread(kinesis, store, doris)

    def dies_before_the_commit(job: LoadJob, credentials: Credentials) -> list[RangeReport]:
        loads(job, credentials)
        raise InjectedCrash("killed after the loads, before the commit")

    with pytest.raises(InjectedCrash):
        _run(SWEEP, 0, kinesis, store, dies_before_the_commit, doris)
    end = store.ledger.get_boundary(SHARD, T0 + IV)
    assert end is not None and end.kind is BoundaryKind.AFTER
    _trim(kinesis, 4)
    _put(kinesis, T0 + 2 * IV, _event(4))  # the stream goes on

    _run(SWEEP, 0, kinesis, store, load_in_thread(kinesis, store, doris), doris)

    assert store.ranges.get_range(SHARD, T0).state is RangeState.LOADED
    assert doris.tally("t", "event_id") == Counter(range(4))


# --- a PENDING start first read after retention -----------------------------------------------


def test_a_pending_start_read_after_retention_trimmed_its_records_fails_with_data_trimmed() -> None:
    """repro_pending_start_read_after_trim: interval 0's run dies before its reader reaches the tip,
    so interval 1's start cut stays PENDING; interval 1's run plans and dies before reading. A day
    later retention (24 h) has trimmed events 0..6. The retry of interval 1 located its start with
    AT_TIMESTAMP, on event 7 (the first record still kept), and ended green with event 6 lost.

    The driver's empty check reads with the wall clock (``run_interval`` gives the reader no clock),
    years past the fake's, so the stream keeps everything until the outage and 24 h after it."""
    kinesis = FakeKinesis(now_ms=T0)
    kinesis.create_stream(StreamName=STREAM, ShardCount=1)
    for event_id in range(6):
        _put(kinesis, T0 + 1_000 + event_id, _event(event_id))
    kinesis.now_ms = T0 + IV + 100
    store, doris = memory_store("p", clock=lambda: kinesis.now_ms), MemoryDoris()
    doris.down = True
    with pytest.raises(RetryableStreamLoadError):
        _run(pipeline_config(), 0, kinesis, store, load_in_thread(kinesis, store, doris), doris)
    doris.down = False
    _put(kinesis, T0 + IV + 1_000, _event(6))
    kinesis.now_ms = T0 + 2 * IV + 100
    planned_only = FailOnNthCall(kinesis, "get_shard_iterator", 2)  # planning's probe, then the empty check
    with pytest.raises(InjectedCrash):
        run_interval(
            pipeline_config(), T0 + IV, T0 + 2 * IV, kinesis=planned_only, store=store, credentials=Credentials(),
            runner=load_in_thread(kinesis, store, doris), clock=lambda: kinesis.now_ms, doris=doris,
        )  # fmt: skip
    pending = Boundary(SHARD, T0 + IV, BoundaryKind.PENDING)
    assert store.ranges.get_range(SHARD, T0 + IV).start == pending
    kinesis.now_ms += 25 * HOUR_MS
    kinesis.retention_hours = 24
    _trim(kinesis, 7)
    _put(kinesis, kinesis.now_ms, _event(7))

    instant = r"2023-11-14T22:14:20Z \(1700000060000\)"
    with pytest.raises(DataTrimmed, match=rf"from {instant} starts at .* a cut no reader has made"):
        _run(pipeline_config(), 1, kinesis, store, load_in_thread(kinesis, store, doris), doris)

    assert store.ledger.get_boundary(SHARD, T0 + IV) == pending, "the start must not be cut after the trimmed records"
    assert doris.tally("t", "event_id") == Counter()


def _pending_start_range(store: CheckpointStore) -> ShardRange:
    start = store.ledger.put_boundary(Boundary(SHARD, T0, BoundaryKind.PENDING))
    end = store.ledger.put_boundary(Boundary(SHARD, T0 + IV, BoundaryKind.PENDING))
    return ShardRange("p", STREAM, SHARD, T0, T0 + IV, start, end)


@pytest.mark.parametrize("age_hours", [23, 47])
def test_a_pending_start_inside_retention_is_located_and_read(age_hours: int) -> None:
    """Control: a PENDING start younger than Kinesis's shortest retention (24 h) is located without
    asking for the stream's retention; an older one inside the stream's (48 h) is located too."""
    kinesis = FakeKinesis(now_ms=T0, retention_hours=48)
    kinesis.create_stream(StreamName=STREAM, ShardCount=1)
    _put(kinesis, T0 + 1_000, _event(0))
    kinesis.now_ms = T0 + age_hours * HOUR_MS
    store = memory_store("p")
    reader = RangeReader(kinesis, _pending_start_range(store), store.ledger, clock=lambda: kinesis.now_ms / 1000)

    assert [json.loads(record.data)["event_id"] for record in reader] == [0]
    assert reader.outcome.start.kind is BoundaryKind.AT
    assert kinesis.calls["describe_stream_summary"] == (age_hours >= 24)


def test_a_pending_start_older_than_the_stream_retention_is_data_trimmed_before_reading() -> None:
    kinesis = FakeKinesis(now_ms=T0, retention_hours=48)
    kinesis.create_stream(StreamName=STREAM, ShardCount=1)
    _put(kinesis, T0 + 1_000, _event(0))
    kinesis.now_ms = T0 + 49 * HOUR_MS
    store = memory_store("p")
    reader = RangeReader(kinesis, _pending_start_range(store), store.ledger, clock=lambda: kinesis.now_ms / 1000)

    with pytest.raises(DataTrimmed, match=r"older than the stream's trim horizon 2023-11-14T23:13:20Z"):
        list(reader)
    assert kinesis.calls["get_shard_iterator"] == 0


# --- the PENDING end of a sweep, first read after retention --------------------------------------


def _sweep_planned_only(closes: bool = False) -> tuple[FakeKinesis, CheckpointStore, MemoryDoris]:
    """Events 0 and 1 before the first interval (the TRIM_HORIZON floor range sweeps them); its
    first run plans at the tip, so the sweep's end at ``T0 + IV`` is stored PENDING, and dies before
    reading. Events 2 and 3 arrive in interval 1, the shard is split if ``closes``, and a day passes:
    with a retention of 24 h, the sweep's end is past the trim horizon, interval 1's end is not,
    and events 0..3 may be deleted (they are older than the horizon)."""
    kinesis = FakeKinesis(now_ms=T0 - 10_000)
    kinesis.create_stream(StreamName=STREAM, ShardCount=1)
    _put(kinesis, T0 - 5_000, _event(0))
    _put(kinesis, T0 - 4_000, _event(1))
    kinesis.now_ms = T0 + IV + 100
    store, doris = memory_store("p", clock=lambda: kinesis.now_ms), MemoryDoris()
    planned_only = FailOnNthCall(kinesis, "get_shard_iterator", 2)  # planning's probe, then the empty check
    with pytest.raises(InjectedCrash):
        run_interval(
            SWEEP, T0, T0 + IV, kinesis=planned_only, store=store, credentials=Credentials(),
            runner=load_in_thread(kinesis, store, doris), clock=lambda: kinesis.now_ms, doris=doris,
        )  # fmt: skip
    assert store.ranges.get_range(SHARD, T0).end == Boundary(SHARD, T0 + IV, BoundaryKind.PENDING)
    _put(kinesis, T0 + IV + 1_000, _event(2))
    _put(kinesis, T0 + IV + 2_000, _event(3))
    if closes:
        kinesis.split_shard(StreamName=STREAM, ShardToSplit=SHARD, NewStartingHashKey=str(2**127))
    kinesis.now_ms = T0 + IV + 24 * HOUR_MS + 10_000
    kinesis.retention_hours = 24
    return kinesis, store, doris


@pytest.mark.parametrize(
    ("trimmed", "closes", "first"),
    [
        (3, False, r"the shard holds record \S+ first, arriving at 2023-11-14T22:14:22Z"),
        (4, False, "the shard holds no record"),
        (4, True, "the shard holds no record"),
    ],
    ids=["past-the-first-record-of-the-next-interval", "all-of-an-open-shard", "all-of-a-closed-shard"],
)
@pytest.mark.parametrize("order", ["sweep-first", "next-interval-first"])
def test_a_sweep_whose_pending_end_is_first_read_after_retention_trimmed_past_it_fails_with_data_trimmed(
    trimmed: int, closes: bool, first: str, order: str
) -> None:
    """Retention deletes the sweep's events and the next interval's first ones (``trimmed``) before
    any reader cut the sweep's end. The sweep read from TRIM_HORIZON met event 3 first, past its
    end's instant, and cut the end AT it (or, with nothing kept, at the shard's start or end), after
    event 2: the sweep and interval 1, which starts at that same cut, both ended green without event 2
    and no DataTrimmed. Interval 1 run first fails on its PENDING start (older than the trim horizon)
    but left the cut to the sweep. Whatever the read meets first, the sweep must fail loudly
    (the end's instant is past the trim horizon, and no record of the read shows that nothing after
    it was deleted) and leave its end PENDING."""
    kinesis, store, doris = _sweep_planned_only(closes)
    _trim(kinesis, trimmed)
    if order == "next-interval-first":
        with pytest.raises(DataTrimmed, match="a cut no reader has made"):
            _run(SWEEP, 1, kinesis, store, load_in_thread(kinesis, store, doris), doris)

    end = r"2023-11-14T22:14:20Z \(1700000060000\)"
    swept_to = rf"{SHARD} .* sweeps it from its start and ends at its first record arriving at or after {end}"
    with pytest.raises(DataTrimmed, match=rf"{swept_to}.*{first}"):
        _run(SWEEP, 0, kinesis, store, load_in_thread(kinesis, store, doris), doris)
    with pytest.raises(DataTrimmed):
        _run(SWEEP, 1, kinesis, store, load_in_thread(kinesis, store, doris), doris)

    assert store.ledger.get_boundary(SHARD, T0 + IV) == Boundary(SHARD, T0 + IV, BoundaryKind.PENDING)
    assert doris.tally("t", "event_id") == Counter()


def test_a_sweep_whose_pending_end_is_read_after_retention_trimmed_only_its_own_head_loads_the_rest() -> None:
    """Control: retention deleted only event 0, which no attempt read (before the pipeline's start).
    Event 1 is kept, so every record after it is too (retention deletes the oldest first): the sweep
    loads event 1 and cuts its end at event 2 though its instant is past the trim horizon, and
    interval 1 loads events 2 and 3, once."""
    kinesis, store, doris = _sweep_planned_only()
    _trim(kinesis, 1)

    _run(SWEEP, 0, kinesis, store, load_in_thread(kinesis, store, doris), doris)
    _run(SWEEP, 1, kinesis, store, load_in_thread(kinesis, store, doris), doris)

    assert doris.tally("t", "event_id") == Counter({1: 1, 2: 1, 3: 1})


# --- a shard quiet for longer than the stream's retention ----------------------------------------


class StartsAtTheTrimHorizon(FakeKinesis):
    """AWS's other reported answer to an iterator at a sequence number retention deleted: one at
    the shard's trim horizon (FakeKinesis refuses it, as harlow/kinesis-consumer#175 quotes AWS)."""

    def _iterator_index(self, shard: Any, kwargs: dict[str, Any]) -> int:
        wanted = kwargs.get("StartingSequenceNumber")
        return 0 if wanted is not None and int(wanted) in self.trimmed else super()._iterator_index(shard, kwargs)


@pytest.mark.parametrize("kinesis_class", [FakeKinesis, StartsAtTheTrimHorizon], ids=["refused", "at-the-horizon"])
def test_a_shard_quiet_for_longer_than_retention_loads_its_next_records_once(kinesis_class: type[FakeKinesis]) -> None:
    """Every quiet interval's cut lies AFTER the shard's last record. Once retention (24 h) took that
    record, the range from such a cut to the next record failed with DataTrimmed, in every run for
    good, though nothing after the record was ever at risk: it all arrived after the cut's recent
    instant. Hourly intervals run for 26 hours without a record, then one arrives."""
    hour = 3_600_000
    kinesis = kinesis_class(now_ms=T0 - 1_000, retention_hours=24)
    kinesis.create_stream(StreamName=STREAM, ShardCount=1)
    store, doris = memory_store("p", clock=lambda: kinesis.now_ms), MemoryDoris()
    config = pipeline_config()

    def run(k: int) -> IntervalResult:
        kinesis.now_ms = max(kinesis.now_ms, T0 + (k + 1) * hour + 60_000)
        return run_interval(
            config, T0 + k * hour, T0 + (k + 1) * hour, kinesis=kinesis, store=store, credentials=Credentials(),
            runner=load_in_thread(kinesis, store, doris), clock=lambda: kinesis.now_ms, doris=doris,
        )  # fmt: skip

    _put(kinesis, T0 + 1_000, _event(1))
    for k in range(26):
        run(k)
    last = store.ledger.get_boundary(SHARD, T0 + 26 * hour)
    assert last is not None and last.kind is BoundaryKind.AFTER  # the record's own cut, 25 hours on
    assert kinesis.trim(STREAM, SHARD, 1)[0].sequence == last.position.sequence
    _put(kinesis, T0 + 26 * hour + 1_800_000, _event(2))

    loaded = run(26)
    run(27)

    assert [report.records for report in loaded.reports] == [1]
    assert doris.tally("t", "event_id") == Counter({1: 1, 2: 1})
