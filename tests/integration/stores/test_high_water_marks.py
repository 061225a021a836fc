"""The high-water marks alone (over a shard ledger and a range book), on both stores: a mark moves
over the contiguous loaded ranges, fenced on the counter read; it is rewound for a range before
it that is not loaded; a shard drains at its end; pruning deletes the loaded history behind it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from airflow_provider_kinesis_doris.core.errors import CheckpointConflict, PrunedHistory, ShardNotDrained
from airflow_provider_kinesis_doris.core.model import (
    ChunkLimits,
    Boundary,
    BoundaryKind,
    Position,
    ShardInfo,
    ShardRange,
    ShardState,
)
from airflow_provider_kinesis_doris.core.prune import prune_shard
from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
from airflow_provider_kinesis_doris.core.stores.chunk_log import ChunkLog
from airflow_provider_kinesis_doris.core.stores.high_water_marks import HighWaterMarks
from airflow_provider_kinesis_doris.core.stores.primitives import StoreItems
from airflow_provider_kinesis_doris.core.stores.range_book import RangeBook
from airflow_provider_kinesis_doris.core.stores.shard_ledger import ShardLedger

pytestmark = pytest.mark.integration

SHARD = "shardId-000000000000"
IV = 60_000
START_CUT = Boundary(SHARD, 0, BoundaryKind.SHARD_START)


@dataclass(frozen=True)
class _Run:
    """One run's parts on the pipeline's items."""

    ledger: ShardLedger
    ranges: RangeBook
    marks: HighWaterMarks

    @classmethod
    def open(cls, items: StoreItems) -> _Run:
        ledger = ShardLedger(items)
        ranges = RangeBook(items, ledger)
        return cls(ledger, ranges, HighWaterMarks(items, ledger, ranges))

    def plan(self, k: int, start: Boundary, end: Boundary) -> ShardRange:
        proposed = ShardRange(
            "orders-to-doris", "orders", SHARD, k * IV, (k + 1) * IV, start, end, chunk_limits=ChunkLimits(10, 100)
        )
        return self.ranges.create_range(proposed, with_end=True)


def _at(k: int, sequence: int) -> Boundary:
    return Boundary(SHARD, k * IV, BoundaryKind.AT, Position(sequence))


@pytest.fixture
def run(open_items: Callable[[], StoreItems]) -> _Run:
    """A registered shard with two planned ranges, ``[0, IV)`` and ``[IV, 2 IV)``."""
    run = _Run.open(open_items())
    run.ledger.register_shard(ShardInfo(SHARD, (), 0, 2**128 - 1, 1, True))
    run.ledger.put_boundary(START_CUT)
    run.plan(0, START_CUT, _at(1, 5))
    run.plan(1, _at(1, 5), _at(2, 9))
    return run


def test_the_mark_moves_over_the_contiguous_loaded_ranges_only(run: _Run) -> None:
    run.ranges.mark_range_loaded(SHARD, 0)
    assert run.marks.advance_high_water_mark(SHARD).high_water_mark == _at(1, 5)
    run.ranges.mark_range_loaded(SHARD, IV)

    advanced = run.marks.advance_high_water_mark(SHARD, last_lag_ms=40)

    assert advanced.high_water_mark == _at(2, 9) and advanced.last_lag_ms == 40 and advanced.lease_counter == 2
    assert run.marks.loaded_through(SHARD) == _at(2, 9)


def test_a_run_that_read_the_counter_before_another_advanced_cannot_move_the_mark(
    run: _Run, open_items: Callable[[], StoreItems]
) -> None:
    other = _Run.open(open_items())
    run.ranges.mark_range_loaded(SHARD, 0)
    seen_by_both = other.ledger.require_shard(SHARD)
    run.marks.advance_high_water_mark(SHARD, expected_counter=seen_by_both.lease_counter)
    run.ranges.mark_range_loaded(SHARD, IV)

    with pytest.raises(CheckpointConflict, match=f"Shard {SHARD}: expected lease counter 0, stored counter is 1"):
        other.marks.advance_high_water_mark(SHARD, known=seen_by_both)
    assert other.ledger.require_shard(SHARD).high_water_mark == _at(1, 5)


def test_a_shard_drains_only_once_closed_and_loaded_to_its_end(run: _Run) -> None:
    for k in (0, 1):
        run.ranges.mark_range_loaded(SHARD, k * IV)
    run.plan(2, _at(2, 9), Boundary(SHARD, 3 * IV, BoundaryKind.SHARD_END))
    run.ledger.mark_closed(SHARD)
    with pytest.raises(ShardNotDrained, match="state CLOSED, high-water mark none"):
        run.marks.mark_drained(SHARD)

    run.ranges.mark_range_loaded(SHARD, 2 * IV)
    run.marks.advance_high_water_mark(SHARD)
    drained = run.marks.mark_drained(SHARD)

    assert drained.state is ShardState.DRAINED and drained.high_water_mark is not None
    assert drained.high_water_mark.kind is BoundaryKind.SHARD_END


def test_a_range_before_the_mark_that_is_not_loaded_rewinds_it(run: _Run) -> None:
    for k in (0, 1):
        run.ranges.mark_range_loaded(SHARD, k * IV)
    run.marks.advance_high_water_mark(SHARD)

    assert run.marks.rewind_high_water_mark(SHARD, 2 * IV).high_water_mark == _at(2, 9)
    rewound = run.marks.rewind_high_water_mark(SHARD, IV)

    assert rewound.high_water_mark is None and rewound.lease_counter == 2


def test_pruning_deletes_the_loaded_history_behind_the_mark_and_a_rewind_into_it_is_refused(
    run: _Run, open_items: Callable[[], StoreItems]
) -> None:
    items = open_items()
    chunks = ChunkLog(items)
    chunks.put_chunk_intent("kd:a", SHARD, Position(5), Position(8), 0, attempt="a1")
    for k in (0, 1):
        run.ranges.mark_range_loaded(SHARD, k * IV)
    shard = run.marks.advance_high_water_mark(SHARD)

    deleted = prune_shard(CheckpointStore(items), shard, IV)

    fresh = _Run.open(items)
    assert deleted == 3  # the range of [0, IV), its chunk and its start cut
    assert fresh.ranges.get_range(SHARD, 0) is None and chunks.get_chunk("kd:a", SHARD, 0) is None
    assert fresh.ranges.get_range(SHARD, IV) is not None
    assert fresh.ledger.require_shard(SHARD).pruned_through_ms == IV
    with pytest.raises(PrunedHistory, match="pruned"):
        fresh.marks.rewind_high_water_mark(SHARD, 0)
