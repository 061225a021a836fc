"""``boundary(t)`` carried forward from an earlier AT boundary's arrival stamp, without Kinesis."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_kinesis_doris.core.kinesis.boundaries import carried_forward, resolve_boundary
from airflow_provider_kinesis_doris.core.model import Boundary, BoundaryKind, Position, ShardInfo
from airflow_provider_kinesis_doris.core.stores.memory import memory_store

SHARD = ShardInfo("shard-a", (), 0, 2**128 - 1, 1, is_open=True)


class NoKinesis:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"Kinesis was called: {name}")


def at(instant_ms: int, arrival_ms: int | None) -> Boundary:
    return Boundary(SHARD.shard_id, instant_ms, BoundaryKind.AT, Position(7), arrival_ms)


@pytest.mark.parametrize("end_ms", [1_001, 1_500, 2_000])
def test_an_at_boundary_whose_record_arrived_at_or_after_the_end_is_the_end(end_ms: int) -> None:
    carried = carried_forward(at(1_000, 2_000), end_ms)

    assert carried == Boundary(SHARD.shard_id, end_ms, BoundaryKind.AT, Position(7))
    assert carried is not None and carried.arrival_ms == 2_000


@pytest.mark.parametrize(
    "earlier, end_ms",
    [
        (at(1_000, 1_999), 2_000),  # the record arrived before the end: records before the end may follow
        (at(1_000, None), 2_000),  # an item written without the stamp
        (at(2_000, 3_000), 2_000),  # not an earlier instant
        (Boundary(SHARD.shard_id, 1_000, BoundaryKind.AFTER, Position(7)), 2_000),
        (Boundary(SHARD.shard_id, 1_000, BoundaryKind.PENDING), 2_000),
        (None, 2_000),
    ],
)
def test_anything_else_needs_a_probe(earlier: Boundary | None, end_ms: int) -> None:
    assert carried_forward(earlier, end_ms) is None


def test_resolve_boundary_stores_the_carried_cut_once_without_kinesis() -> None:
    store = memory_store("pipe")
    start = store.ledger.put_boundary(at(1_000, 5_000))

    end = resolve_boundary(NoKinesis(), store.ledger, "stream", SHARD, 2_000, earlier=start)

    assert end == store.ledger.get_boundary(SHARD.shard_id, 2_000) == at(2_000, None)
    assert store.ledger.get_boundary(SHARD.shard_id, 2_000).arrival_ms == 5_000


def test_a_stored_boundary_wins_over_the_carried_one() -> None:
    store = memory_store("pipe")
    stored = store.ledger.put_boundary(Boundary(SHARD.shard_id, 2_000, BoundaryKind.AFTER, Position(6)))

    assert resolve_boundary(NoKinesis(), store.ledger, "stream", SHARD, 2_000, earlier=at(1_000, 5_000)) == stored


def test_only_at_boundaries_take_an_arrival_stamp() -> None:
    with pytest.raises(ValueError, match="no arrival_ms"):
        Boundary(SHARD.shard_id, 1_000, BoundaryKind.AFTER, Position(7), 5_000)
