"""The DynamoDB checkpoint store on moto (server mode): conditional writes, fencing, races, paging."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from airflow_provider_kinesis_doris.core.errors import CheckpointNotFound, ShardNotDrained
from airflow_provider_kinesis_doris.core.prune import prune_shard
from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
from airflow_provider_kinesis_doris.core.stores.dynamodb import dynamo_store
from airflow_provider_kinesis_doris.core.stores.items import CHUNK_INTENT, range_sk
from airflow_provider_kinesis_doris.core.stores.high_water_marks import MarkAdvance
from airflow_provider_kinesis_doris.core.stores.range_book import LoadedRange
from airflow_provider_kinesis_doris.core.errors import CheckpointConflict
from airflow_provider_kinesis_doris.core.model import (
    Boundary,
    BoundaryKind,
    Position,
    RangeState,
    ShardInfo,
    ShardRange,
    ShardState,
)

pytestmark = pytest.mark.integration

PIPELINE = "orders-to-doris"
SHARD = "shardId-000000000000"
SEQ = 49_600_000_000_000_000_000_000_000_000_000_000_000_000_000_000_000_000_000  # 56 digits


@pytest.fixture
def table_name(dynamodb_client: Any) -> str:
    name = f"checkpoints-{uuid.uuid4().hex[:8]}"
    dynamo_store(dynamodb_client, name, PIPELINE).items.create_table_if_missing()
    return name


@pytest.fixture
def store(dynamodb_client: Any, table_name: str) -> CheckpointStore:
    return dynamo_store(dynamodb_client, table_name, PIPELINE)


def _info(shard_id: str = SHARD, *, is_open: bool = True, parents: tuple[str, ...] = ()) -> ShardInfo:
    return ShardInfo(shard_id, parents, 0, 2**128 - 1, SEQ, is_open)


def _at(instant_ms: int, offset: int, shard_id: str = SHARD) -> Boundary:
    return Boundary(shard_id, instant_ms, BoundaryKind.AT, Position(SEQ + offset))


def _planned_range(store: CheckpointStore, start: Boundary, end: Boundary, interval_start_ms: int) -> ShardRange:
    start, end = store.ledger.put_boundary(start), store.ledger.put_boundary(end)
    proposed = ShardRange(PIPELINE, "orders", start.shard_id, interval_start_ms, interval_start_ms + 1000, start, end)
    return store.ranges.create_range(proposed)


def _count_calls(client: Any, operation: str) -> list[int]:
    calls = [0]

    def count(**_: Any) -> None:
        calls[0] += 1

    client.meta.events.register(f"before-call.dynamodb.{operation}", count)
    return calls


def test_create_table_is_idempotent_and_leaves_an_active_pk_sk_table(dynamodb_client: Any, table_name: str) -> None:
    dynamo_store(dynamodb_client, table_name, PIPELINE).items.create_table_if_missing()

    table = dynamodb_client.describe_table(TableName=table_name)["Table"]
    assert table["TableStatus"] == "ACTIVE"
    assert {k["AttributeName"]: k["KeyType"] for k in table["KeySchema"]} == {"pk": "HASH", "sk": "RANGE"}
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"


def test_a_shard_is_registered_once_with_its_lineage(dynamodb_client: Any, table_name: str) -> None:
    first = dynamo_store(dynamodb_client, table_name, PIPELINE)
    second = dynamo_store(dynamodb_client, table_name, PIPELINE)
    child = _info("shardId-000000000003", parents=("shardId-000000000001", "shardId-000000000002"))

    registered = first.ledger.register_shard(child)
    again = second.ledger.register_shard(_info("shardId-000000000003", is_open=False))

    assert again == registered
    assert registered.parent_ids == ("shardId-000000000001", "shardId-000000000002")
    assert registered.state is ShardState.OPEN and registered.lease_counter == 0
    assert registered.ending_hash_key == 2**128 - 1  # 39 digits: stored as text, read back exactly


def test_two_writers_cannot_both_advance_a_shard(dynamodb_client: Any, table_name: str) -> None:
    run_a = dynamo_store(dynamodb_client, table_name, PIPELINE)
    run_b = dynamo_store(dynamodb_client, table_name, PIPELINE)
    run_a.ledger.register_shard(_info())
    _planned_range(run_a, _at(1000, 0), _at(2000, 10), 1000)
    run_a.ranges.mark_range_loaded(SHARD, 1000, {"records": 10})
    counter_seen_by_both = run_b.ledger.get_shard(SHARD).lease_counter  # type: ignore[union-attr]

    advanced = run_a.marks.advance_high_water_mark(SHARD, expected_counter=counter_seen_by_both, last_lag_ms=40)

    with pytest.raises(CheckpointConflict, match=SHARD):
        run_b.marks.advance_high_water_mark(SHARD, expected_counter=counter_seen_by_both)
    assert advanced.high_water_mark == _at(2000, 10)
    assert advanced.lease_counter == counter_seen_by_both + 1 and advanced.last_lag_ms == 40


def test_the_conditional_write_fences_a_writer_that_read_before_the_other_wrote(
    dynamodb_client: Any, table_name: str
) -> None:
    """Run B passes its own read check, then run A writes before B's UpdateItem reaches DynamoDB:
    only the table's condition can stop B."""
    run_a = dynamo_store(dynamodb_client, table_name, PIPELINE)
    run_b = dynamo_store(dynamodb_client, table_name, PIPELINE)
    run_a.ledger.register_shard(_info())
    _planned_range(run_a, _at(1000, 0), _at(2000, 10), 1000)
    run_a.ranges.mark_range_loaded(SHARD, 1000)
    _run_once_before(dynamodb_client, "UpdateItem", lambda: run_a.marks.advance_high_water_mark(SHARD, expected_counter=0))

    with pytest.raises(CheckpointConflict, match=f"Shard {SHARD}: expected lease counter 0, stored counter is 1"):
        run_b.marks.advance_high_water_mark(SHARD, expected_counter=0, last_lag_ms=5)
    assert run_b.ledger.get_shard(SHARD).last_lag_ms is None  # type: ignore[union-attr]


def _run_once_before(client: Any, operation: str, action: Callable[[], object]) -> None:
    """Run ``action`` (on another client) right before this client's next ``operation`` call."""
    pending = [action]

    def interleave(**_: Any) -> None:
        if pending:
            pending.pop()()

    client.meta.events.register(f"before-call.dynamodb.{operation}", interleave)


def test_the_high_water_mark_ends_the_contiguous_loaded_run_and_only_moves_forward(
    store: CheckpointStore,
) -> None:
    store.ledger.register_shard(_info())
    _planned_range(store, _at(1000, 0), _at(2000, 10), 1000)
    _planned_range(store, _at(2000, 10), _at(3000, 20), 2000)
    _planned_range(store, _at(3000, 20), _at(4000, 30), 3000)
    store.ranges.mark_range_loaded(SHARD, 1000)
    store.ranges.mark_range_loaded(SHARD, 3000)

    after_gap = store.marks.advance_high_water_mark(SHARD, expected_counter=0)
    store.ranges.mark_range_loaded(SHARD, 2000)
    filled = store.marks.advance_high_water_mark(SHARD, expected_counter=1)
    _planned_range(store, _at(0, -10), _at(1000, 0), 0)  # a backfill before the floor, not loaded yet
    unchanged = store.marks.advance_high_water_mark(SHARD, expected_counter=2)

    assert after_gap.high_water_mark == _at(2000, 10)
    assert filled.high_water_mark == _at(4000, 30)
    assert unchanged.high_water_mark == _at(4000, 30) and unchanged.lease_counter == 2


def test_a_boundary_is_written_once_whoever_races(dynamodb_client: Any, table_name: str) -> None:
    stores = [dynamo_store(dynamodb_client, table_name, PIPELINE) for _ in range(6)]
    proposals = [_at(5000, offset) for offset in range(6)]

    results = _race([lambda s=s, p=p: s.ledger.put_boundary(p) for s, p in zip(stores, proposals)])

    assert len(set(results)) == 1 and results[0] in proposals
    assert stores[0].ledger.get_boundary(SHARD, 5000) == results[0]


def test_a_pending_boundary_is_resolved_once_whoever_races(dynamodb_client: Any, table_name: str) -> None:
    # Rounds, each on its own shard: one round of plain moto's unlocked server let two writers
    # win about one time in thirteen; 30 rounds catch that almost always.
    stores = [dynamo_store(dynamodb_client, table_name, PIPELINE) for _ in range(6)]
    for shard_id in (f"shardId-{round_:012d}" for round_ in range(30)):
        stores[0].ledger.put_boundary(Boundary(shard_id, 5000, BoundaryKind.PENDING))
        proposals = [_at(5000, offset, shard_id) for offset in range(5)]
        proposals.append(Boundary(shard_id, 5000, BoundaryKind.SHARD_END))

        results = _race([lambda s=s, p=p: s.ledger.resolve_pending(p) for s, p in zip(stores, proposals)])

        assert len(set(results)) == 1 and results[0] in proposals, shard_id
        assert stores[0].ledger.resolve_pending(_at(5000, 99, shard_id)) == results[0]  # too late: the stored one wins


def _race(actions: list[Callable[[], Boundary]]) -> list[Boundary]:
    barrier = threading.Barrier(len(actions))
    results: list[Boundary | None] = [None] * len(actions)

    def run(index: int) -> None:
        barrier.wait()
        results[index] = actions[index]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(actions))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert all(result is not None for result in results)
    return results  # type: ignore[return-value]


def test_reads_follow_query_pages_and_stay_in_the_pipeline_partition(dynamodb_client: Any, table_name: str) -> None:
    paged = dynamo_store(dynamodb_client, table_name, PIPELINE, page_size=3)
    other_pipeline = dynamo_store(dynamodb_client, table_name, "another-pipeline")
    for index in range(10):
        _planned_range(paged, _at(index * 1000, index), _at((index + 1) * 1000, index + 1), index * 1000)
    _planned_range(other_pipeline, _at(0, 0), _at(1000, 1), 0)
    queries = _count_calls(dynamodb_client, "Query")
    scans = _count_calls(dynamodb_client, "Scan")

    ranges = paged.ranges.ranges_for_shard(SHARD)

    assert [r.interval_start_ms for r in ranges] == [i * 1000 for i in range(10)]
    assert all(a.end == b.start for a, b in zip(ranges, ranges[1:]))
    assert queries[0] >= 4 + 4  # 11 boundaries and 10 ranges, 3 per page
    assert scans[0] == 0
    assert len(other_pipeline.ranges.ranges_for_shard(SHARD)) == 1


def test_a_range_is_created_once_and_a_replay_reads_the_stored_one(store: CheckpointStore) -> None:
    created = _planned_range(store, _at(1000, 0), _at(2000, 10), 1000)
    store.ledger.put_boundary(_at(3000, 20))
    competing = ShardRange(PIPELINE, "orders", SHARD, 1000, 2000, _at(1000, 0), _at(3000, 20))

    assert store.ranges.create_range(competing) == created
    assert store.ranges.get_range(SHARD, 1000) == created
    loaded = store.ranges.mark_range_loaded(SHARD, 1000, {"records": 10, "rows_loaded": 9})
    assert loaded.state is RangeState.LOADED
    assert store.ranges.mark_range_loaded(SHARD, 1000, {"records": 0}).state is RangeState.LOADED
    assert store.ranges.range_counts(SHARD, 1000) == {"records": 10, "rows_loaded": 9}
    with pytest.raises(CheckpointNotFound, match=r"interval start 1970-01-01T00:00:07Z \(7000\)"):
        store.ranges.mark_range_loaded(SHARD, 7000)


def test_a_shard_is_drained_only_after_its_last_range_is_loaded(store: CheckpointStore) -> None:
    store.ledger.register_shard(_info())
    _planned_range(store, _at(1000, 0), Boundary(SHARD, 2000, BoundaryKind.SHARD_END), 1000)
    with pytest.raises(ShardNotDrained, match="state OPEN"):
        store.marks.mark_drained(SHARD)
    closed = store.ledger.mark_closed(SHARD)
    with pytest.raises(ShardNotDrained, match="high-water mark none"):
        store.marks.mark_drained(SHARD)

    store.ranges.mark_range_loaded(SHARD, 1000)
    store.marks.advance_high_water_mark(SHARD, expected_counter=closed.lease_counter, last_lag_ms=0)
    drained = store.marks.mark_drained(SHARD)

    assert closed.state is ShardState.CLOSED
    assert drained.state is ShardState.DRAINED and drained.last_lag_ms is None
    assert store.marks.mark_drained(SHARD) == drained


def test_chunk_intents_and_outcomes_are_durable_per_range(store: CheckpointStore) -> None:
    store.chunks.put_chunk_intent("kd:p:s:bbb", SHARD, Position(SEQ + 5), Position(SEQ + 9), interval_start_ms=1000, attempt="a1")
    store.chunks.put_chunk_intent("kd:p:s:aaa", SHARD, Position(SEQ), Position(SEQ + 4), interval_start_ms=1000, attempt="a1")
    store.chunks.put_chunk_intent("kd:p:s:ccc", SHARD, Position(SEQ + 10), Position(SEQ + 12), interval_start_ms=2000, attempt="a1")
    store.chunks.put_chunk_intent("kd:p:s:aaa", SHARD, Position(SEQ), Position(SEQ + 4), interval_start_ms=1000, attempt="a1")
    replayed_intent = store.chunks.get_chunk("kd:p:s:aaa", SHARD, 1000)

    outcome = store.chunks.record_chunk_outcome(
        "kd:p:s:aaa", "VISIBLE", "txn-17", shard_id=SHARD, interval_start_ms=1000, rows_loaded=5, rows_filtered=0
    )

    chunks = store.chunks.chunks_for_range(SHARD, 1000)
    assert [c.label for c in chunks] == ["kd:p:s:aaa", "kd:p:s:bbb"]
    assert replayed_intent is not None and replayed_intent.state == CHUNK_INTENT
    assert (outcome.state, outcome.txn_id, outcome.rows_loaded) == ("VISIBLE", "txn-17", 5)
    assert chunks[1].state == CHUNK_INTENT and chunks[1].last == Position(SEQ + 9)
    with pytest.raises(CheckpointNotFound, match="kd:p:s:zzz"):
        store.chunks.record_chunk_outcome("kd:p:s:zzz", "VISIBLE", shard_id=SHARD, interval_start_ms=1000)


def test_topology_versions_are_fenced(dynamodb_client: Any, table_name: str) -> None:
    sensor_a = dynamo_store(dynamodb_client, table_name, PIPELINE)
    sensor_b = dynamo_store(dynamodb_client, table_name, PIPELINE)

    first = sensor_a.ledger.save_topology(["s1", "s0"], {"s0": 0, "s1": 1}, expected_version=None)
    second = sensor_b.ledger.save_topology(["s2", "s3"], {"s2": 0, "s3": 0}, expected_version=first.version)

    with pytest.raises(CheckpointConflict, match="expected version 1, stored version is 2"):
        sensor_a.ledger.save_topology(["s9"], {}, expected_version=first.version)
    with pytest.raises(CheckpointConflict, match="expected version None"):
        sensor_a.ledger.save_topology(["s9"], {}, expected_version=None)
    assert first.shard_ids == ("s0", "s1") and first.version == 1
    assert sensor_a.ledger.get_topology() == second and dict(second.assignment) == {"s2": 0, "s3": 0}


def test_a_chunks_content_is_settled_once_and_outcomes_can_be_conditional(store: CheckpointStore) -> None:
    first = Position(SEQ)
    assert store.chunks.settle_chunk_content(SHARD, 1000, first, "0-2,7") == "0-2,7"
    assert store.chunks.settle_chunk_content(SHARD, 1000, first, "") == "0-2,7", "the first writer's content stays"
    assert store.chunks.chunk_contents_for_range(SHARD, 1000) == ["0-2,7"] and store.chunks.chunk_contents_for_range(SHARD, 2000) == []

    assert store.chunks.put_chunk_intent("kd:p:s:ddd", SHARD, first, Position(SEQ + 3), 1000, attempt="a1") is True
    assert store.chunks.put_chunk_intent("kd:p:s:ddd", SHARD, first, Position(SEQ + 3), 1000, attempt="a2") is False
    # Content and intent together: both are put, or neither (here the content existed).
    assert store.chunks.put_chunk_intent_with_content("kd:p:s:eee", SHARD, first, Position(SEQ + 3), 1000, "", attempt="a1") is False
    assert store.chunks.get_chunk("kd:p:s:eee", SHARD, 1000) is None
    other = Position(SEQ + 4)
    assert store.chunks.put_chunk_intent_with_content("kd:p:s:fff", SHARD, other, Position(SEQ + 6), 1000, "1", attempt="a1") is True
    assert store.chunks.settle_chunk_content(SHARD, 1000, other, "") == "1"
    assert store.chunks.get_chunk("kd:p:s:fff", SHARD, 1000).state == "INTENT"  # type: ignore[union-attr]
    assert store.chunks.put_chunk_intent_with_content("kd:p:s:fff", SHARD, other, Position(SEQ + 6), 1000, "1", attempt="a2") is False
    store.chunks.record_chunk_outcome("kd:p:s:ddd", "VISIBLE", shard_id=SHARD, interval_start_ms=1000)
    kept = store.chunks.record_chunk_outcome(
        "kd:p:s:ddd", "NOT_LOADED", shard_id=SHARD, interval_start_ms=1000, owner="a1"
    )
    assert kept.state == "VISIBLE"


def test_pruning_deletes_the_loaded_history_below_the_horizon_in_batches_and_nothing_else(
    dynamodb_client: Any, table_name: str
) -> None:
    """Twenty loaded ranges with a chunk each, one PLANNED after them; a second pipeline's items in
    the same table. Pruning below range 15 deletes ranges 0–14, their chunks and the cuts before
    15's start (45 items: two BatchWriteItem calls), records the span on the shard first, and the
    rest still reads: the mark, the remaining ranges, their cuts, the other pipeline."""
    store = dynamo_store(dynamodb_client, table_name, PIPELINE)
    other = dynamo_store(dynamodb_client, table_name, "other-pipeline")
    for pipeline_store in (store, other):
        pipeline_store.ledger.register_shard(_info())
        for k in range(21):
            _planned_range(pipeline_store, _at(1000 * (k + 1), 10 * k), _at(1000 * (k + 2), 10 * (k + 1)), 1000 * (k + 1))
            if k < 20:
                label = f"kd:p:s:{k:03d}"
                pipeline_store.chunks.put_chunk_intent(label, SHARD, Position(SEQ + 10 * k), Position(SEQ + 10 * k + 9), interval_start_ms=1000 * (k + 1), attempt="a1")
                pipeline_store.chunks.record_chunk_outcome(label, "VISIBLE", shard_id=SHARD, interval_start_ms=1000 * (k + 1))
                pipeline_store.ranges.mark_range_loaded(SHARD, 1000 * (k + 1))
        pipeline_store.marks.advance_high_water_mark(SHARD)
    batches = _count_calls(dynamodb_client, "BatchWriteItem")

    deleted = prune_shard(store, store.ledger.get_shard(SHARD), horizon_ms=16_000)

    shard = store.ledger.get_shard(SHARD)
    # Each part forgets its own items: the chunk log, the range book and the ledger, one batch each.
    assert deleted == 15 + 15 + 15 and batches == [3]
    assert (shard.pruned_from_ms, shard.pruned_through_ms) == (1000, 16_000)
    assert [r.interval_start_ms for r in store.ranges.ranges_for_shard(SHARD)] == [1000 * k for k in range(16, 22)]
    assert [b.instant_ms for b in store.ledger.boundaries_for_shard(SHARD)] == [1000 * k for k in range(16, 23)]
    assert store.chunks.chunks_for_range(SHARD, 15_000) == [] and len(store.chunks.chunks_for_range(SHARD, 16_000)) == 1
    assert store.marks.loaded_through(SHARD, shard.high_water_mark) == _at(21_000, 200)
    assert len(other.ranges.ranges_for_shard(SHARD)) == 21 and len(other.ledger.boundaries_for_shard(SHARD)) == 22
    # Again at a later horizon: the mark stops it before the PLANNED range, whatever the horizon.
    assert prune_shard(store, store.ledger.get_shard(SHARD), horizon_ms=99_000) == 5 + 5 + 5
    assert store.ledger.get_shard(SHARD).pruned_through_ms == 21_000
    assert [r.interval_start_ms for r in store.ranges.ranges_for_shard(SHARD)] == [21_000]


def test_the_cuts_at_an_instant_are_read_in_batches_and_then_from_memory(dynamodb_client: Any, table_name: str) -> None:
    """150 shards, 120 of them cut at the instant (one PENDING): two BatchGetItem calls read them,
    after which the concrete cuts cost no read and the PENDING one and the missing ones do."""
    writer = dynamo_store(dynamodb_client, table_name, PIPELINE)
    shards = [f"shardId-{n:012d}" for n in range(150)]
    for n, shard_id in enumerate(shards[:120]):
        kind = BoundaryKind.PENDING if n == 7 else BoundaryKind.AT
        writer.ledger.put_boundary(Boundary(shard_id, 5000, kind, Position(SEQ + n) if n != 7 else None))
    reader = dynamo_store(dynamodb_client, table_name, PIPELINE)
    reader.items.layout.to_read("boundary#")  # its pipeline's layout, read once by each store
    batches = _count_calls(dynamodb_client, "BatchGetItem")
    gets = _count_calls(dynamodb_client, "GetItem")

    reader.ledger.read_boundaries(shards, 5000)
    cuts = {shard_id: reader.ledger.get_boundary(shard_id, 5000) for shard_id in shards}

    assert batches == [2]
    assert gets == [1 + 30]  # the PENDING cut, and the shards without a cut
    assert cuts[shards[0]] == Boundary(shards[0], 5000, BoundaryKind.AT, Position(SEQ))
    assert cuts[shards[7]].kind is BoundaryKind.PENDING and cuts[shards[149]] is None


def test_cuts_put_by_many_threads_go_in_transactions_and_each_gets_the_stored_one(
    dynamodb_client: Any, table_name: str
) -> None:
    """64 threads put a cut each, 16 of them at an instant whose cut another writer stored first:
    puts that queue while one request is on its way go together in one TransactWriteItems, the
    transaction cancelled by the stored cuts is sent again without them, and every thread gets
    the cut that is stored (ours, or the first writer's)."""
    first = dynamo_store(dynamodb_client, table_name, PIPELINE)
    shards = [f"shardId-{n:012d}" for n in range(64)]
    for shard_id in shards[:16]:
        first.ledger.put_boundary(Boundary(shard_id, 5000, BoundaryKind.AT, Position(SEQ)))
    store = dynamo_store(dynamodb_client, table_name, PIPELINE)
    puts, transactions = _count_calls(dynamodb_client, "PutItem"), _count_calls(dynamodb_client, "TransactWriteItems")
    barrier = threading.Barrier(len(shards))
    answers: dict[str, Boundary] = {}

    def put(n: int) -> None:
        barrier.wait()
        answers[shards[n]] = store.ledger.put_boundary(Boundary(shards[n], 5000, BoundaryKind.AFTER, Position(SEQ + n)))

    threads = [threading.Thread(target=put, args=(n,)) for n in range(len(shards))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert answers == {
        shard_id: Boundary(shard_id, 5000, *((BoundaryKind.AT, Position(SEQ)) if n < 16 else (BoundaryKind.AFTER, Position(SEQ + n))))
        for n, shard_id in enumerate(shards)
    }
    assert {shard_id: store.ledger.get_boundary(shard_id, 5000) for shard_id in shards} == answers
    assert puts[0] + transactions[0] < len(shards) // 2, (puts, transactions)
    assert transactions[0] >= 1


def test_a_commit_marks_its_ranges_loaded_in_transactions_of_a_hundred(dynamodb_client: Any, table_name: str) -> None:
    """120 planned ranges marked loaded at once, 8 of them marked already by another run: two
    transactions (100 and 20), the ones cancelled by the loaded ranges sent again without them, no
    write of one item; each range comes back LOADED, with the counts of the run that marked it."""
    store = dynamo_store(dynamodb_client, table_name, PIPELINE)
    shards = [f"shardId-{n:012d}" for n in range(120)]
    for n, shard_id in enumerate(shards):
        _planned_range(store, _at(1000, 2 * n, shard_id), _at(2000, 2 * n + 1, shard_id), 1000)
    other = dynamo_store(dynamodb_client, table_name, PIPELINE)
    for shard_id in shards[::15]:
        other.ranges.mark_range_loaded(shard_id, 1000, {"records": 99})
    updates, transactions = _count_calls(dynamodb_client, "UpdateItem"), _count_calls(dynamodb_client, "TransactWriteItems")

    marked = store.ranges.mark_ranges_loaded([LoadedRange(shard_id, 1000, {"records": 1}) for shard_id in shards])

    assert [(r.shard_id, r.state) for r in marked] == [(shard_id, RangeState.LOADED) for shard_id in shards]
    assert (updates[0], transactions[0]) == (0, 4)  # each of the two cancelled once, then sent without the loaded ones
    stored = dynamo_store(dynamodb_client, table_name, PIPELINE).items.get_many([range_sk(s, 1000) for s in shards])
    assert [(item["state"], item["counts"]["records"]) for item in (stored[range_sk(s, 1000)] for s in shards)] == [
        (RangeState.LOADED.value, 99 if n % 15 == 0 else 1) for n in range(len(shards))
    ]


def test_a_commit_moves_its_marks_in_transactions_and_hands_back_the_races_it_lost(
    dynamodb_client: Any, table_name: str
) -> None:
    """110 shards, each with a loaded range, their marks moved at once on the shards as read
    before; another run moved 5 of them meanwhile: two transactions (100 and 10; the first, holding
    the 5, cancelled and sent again without them), no write of one item; the 5 come back as None,
    unchanged, the rest with their marks."""
    store = dynamo_store(dynamodb_client, table_name, PIPELINE)
    shards = [f"shardId-{n:012d}" for n in range(110)]
    for n, shard_id in enumerate(shards):
        store.ledger.register_shard(_info(shard_id))
        _planned_range(store, _at(1000, 2 * n, shard_id), _at(2000, 2 * n + 1, shard_id), 1000)
    store.ranges.mark_ranges_loaded([LoadedRange(shard_id, 1000, {}) for shard_id in shards])
    read = {shard.shard_id: shard for shard in store.ledger.list_shard_checkpoints()}
    rival = dynamo_store(dynamodb_client, table_name, PIPELINE)
    for shard_id in shards[::22]:
        rival.ledger.fenced_update(read[shard_id], {"last_lag_ms": 1}, extra_expected={})
    updates, transactions = _count_calls(dynamodb_client, "UpdateItem"), _count_calls(dynamodb_client, "TransactWriteItems")

    moved = store.marks.advance_high_water_marks(
        [MarkAdvance(shard_id, 7, read[shard_id]) for shard_id in shards], last_interval_start_ms=None, concurrency=8
    )

    lost = [n for n in range(len(shards)) if n % 22 == 0]
    assert [n for n, shard in enumerate(moved) if shard is None] == lost
    assert all(shard.high_water_mark == _at(2000, 2 * n + 1, shards[n]) and shard.last_lag_ms == 7
               for n, shard in enumerate(moved) if shard is not None)  # fmt: skip
    assert (updates[0], transactions[0]) == (0, 3)
    stored = {shard.shard_id: shard for shard in rival.ledger.list_shard_checkpoints()}
    assert [stored[shards[n]].high_water_mark for n in lost] == [None] * len(lost)
    assert {stored[shard_id].last_lag_ms for n, shard_id in enumerate(shards) if n not in lost} == {7}
