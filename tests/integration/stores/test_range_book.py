"""The range book alone (on a shard ledger for its cuts), on both stores: ranges planned once with
their cuts and marked loaded once, chunk limits and the floor fixed by the first writer, the
interval grid refusing a misaligned interval, adoptions replayed by retries, the prune horizon
raised only forward."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from airflow_provider_kinesis_doris.core.errors import CheckpointNotFound
from airflow_provider_kinesis_doris.core.model import Boundary, BoundaryKind, ChunkLimits, Position, RangeState, ShardRange
from airflow_provider_kinesis_doris.core.stores.primitives import StoreItems
from airflow_provider_kinesis_doris.core.stores.range_book import RangeBook
from airflow_provider_kinesis_doris.core.stores.shard_ledger import ShardLedger

pytestmark = pytest.mark.integration

OpenItems = Callable[[], StoreItems]
SHARD = "shardId-000000000000"
IV = 60_000


def _book(open_items: OpenItems) -> RangeBook:
    """A range book of another run, on a table where the shard's start cut is stored."""
    items = open_items()
    ledger = ShardLedger(items)
    ledger.put_boundary(Boundary(SHARD, 0, BoundaryKind.SHARD_START))
    return RangeBook(items, ledger)


def _at(instant_ms: int, sequence: int) -> Boundary:
    return Boundary(SHARD, instant_ms, BoundaryKind.AT, Position(sequence))


def _range(start_ms: int, end: Boundary, *, limits: ChunkLimits | None = ChunkLimits(10, 1000)) -> ShardRange:
    start = Boundary(SHARD, start_ms, BoundaryKind.SHARD_START)
    return ShardRange("orders-to-doris", "orders", SHARD, start_ms, start_ms + IV, start, end, chunk_limits=limits)


def _planned(book: RangeBook, end: Boundary) -> ShardRange:
    return book.create_range(_range(0, end), with_end=True)


def test_a_range_is_planned_once_with_its_end_and_a_later_planner_gets_the_first(open_items: OpenItems) -> None:
    run_a, run_b = _book(open_items), _book(open_items)

    planned = _planned(run_a, _at(IV, 5))
    again = run_b.create_range(_range(0, _at(IV, 6), limits=ChunkLimits(20, 2000)), with_end=True)

    assert again == planned and planned.end == _at(IV, 5) and planned.chunk_limits == ChunkLimits(10, 1000)
    assert run_b.get_range(SHARD, 0) == planned and run_b.ranges_at([SHARD, "shardId-other"], 0) == {SHARD: planned}


def test_a_range_is_marked_loaded_once_with_its_counts(open_items: OpenItems) -> None:
    run_a, run_b = _book(open_items), _book(open_items)
    _planned(run_a, _at(IV, 5))

    loaded = run_a.mark_range_loaded(SHARD, 0, {"records": 3})
    again = run_b.mark_range_loaded(SHARD, 0, {"records": 99})

    assert loaded.state is RangeState.LOADED and again == loaded
    assert run_b.range_counts(SHARD, 0) == {"records": 3}
    assert run_b.recent_loaded_counts(SHARD, 5) == {0: {"records": 3}}
    with pytest.raises(CheckpointNotFound, match="No range of shard shardId-000000000000 for interval start"):
        run_b.mark_range_loaded(SHARD, IV)


def test_the_first_loader_fixes_the_chunk_limits_of_a_range(open_items: OpenItems) -> None:
    run_a, run_b = _book(open_items), _book(open_items)
    run_a.create_range(_range(0, _at(IV, 5), limits=None), with_end=True)

    assert run_a.settle_chunk_limits(SHARD, 0, ChunkLimits(10, 1000)) == ChunkLimits(10, 1000)
    assert run_b.settle_chunk_limits(SHARD, 0, ChunkLimits(20, 2000)) == ChunkLimits(10, 1000)


def test_the_grid_refuses_an_interval_that_overlaps_a_registered_one_without_matching_it(open_items: OpenItems) -> None:
    run_a, run_b = _book(open_items), _book(open_items)

    assert run_a.register_interval(0, IV) is None
    assert run_b.register_interval(IV // 2, IV + IV // 2) == (0, IV)
    assert run_b.register_interval(0, IV) is None and run_b.register_interval(IV, 2 * IV) is None
    assert run_a.intervals_before(2 * IV) == [(0, IV), (IV, 2 * IV)] and run_a.latest_interval_start() == IV
    run_b.advance_gapless(IV)
    assert run_a.intervals_before(2 * IV) == [(IV, 2 * IV)]


def test_a_retry_takes_on_the_intervals_its_first_attempt_adopted(open_items: OpenItems) -> None:
    first, retry = _book(open_items), _book(open_items)
    adopted = [(0, IV), (IV, 2 * IV)]

    assert first.settle_adopted(2 * IV, adopted) == (adopted, [])
    first.mark_adopted_loaded(2 * IV, (0, IV))

    assert retry.settle_adopted(2 * IV, [(IV, 2 * IV)]) == ([(IV, 2 * IV)], [(0, IV)])
    assert retry.settle_adopted(3 * IV, []) == ([], [])


def test_the_floor_and_the_prune_horizon_are_fixed_by_the_first_and_raised_only_forward(open_items: OpenItems) -> None:
    run_a, run_b = _book(open_items), _book(open_items)

    assert run_a.settle_floor(0, IV) == run_b.settle_floor(IV, 2 * IV) == run_b.get_floor()
    assert run_a.raise_prune_horizon(2 * IV) and not run_b.raise_prune_horizon(IV)
    assert run_b.raise_prune_horizon(3 * IV) and run_a.prune_horizon() == 3 * IV
