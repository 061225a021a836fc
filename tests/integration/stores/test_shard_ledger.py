"""The shard ledger alone, on both stores: shards registered once and written fenced on their
lease counter, cuts put once and a PENDING one resolved once, the shard set versioned."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from airflow_provider_kinesis_doris.core.errors import CheckpointConflict, CheckpointNotFound
from airflow_provider_kinesis_doris.core.model import Boundary, BoundaryKind, Position, ShardInfo, ShardState
from airflow_provider_kinesis_doris.core.stores.items import boundary_sk
from airflow_provider_kinesis_doris.core.stores.primitives import StoreItems
from airflow_provider_kinesis_doris.core.stores.shard_ledger import ShardLedger

pytestmark = pytest.mark.integration

OpenItems = Callable[[], StoreItems]

SHARD = "shardId-000000000000"


def _info(*, is_open: bool = True) -> ShardInfo:
    return ShardInfo(SHARD, ("shardId-parent",), 0, 2**128 - 1, 1, is_open)


def _at(instant_ms: int, sequence: int) -> Boundary:
    return Boundary(SHARD, instant_ms, BoundaryKind.AT, Position(sequence))


def test_a_shard_is_registered_once_and_the_later_registration_gets_the_first(open_items: OpenItems) -> None:
    first, second = ShardLedger(open_items()), ShardLedger(open_items())

    registered = first.register_shard(_info())
    again = second.register_shard(_info(is_open=False))

    assert again == registered and registered.state is ShardState.OPEN and registered.lease_counter == 0
    assert registered.parent_ids == ("shardId-parent",) and registered.ending_hash_key == 2**128 - 1
    assert [shard.shard_id for shard in second.list_shard_checkpoints()] == [SHARD]


def test_a_write_fenced_on_a_counter_read_before_another_writer_raises(open_items: OpenItems) -> None:
    run_a, run_b = ShardLedger(open_items()), ShardLedger(open_items())
    run_a.register_shard(_info())
    seen_by_both = run_b.require_shard(SHARD)

    closed = run_a.mark_closed(SHARD)

    with pytest.raises(CheckpointConflict, match=f"Shard {SHARD}: expected lease counter 0, stored counter is 1"):
        run_b.fenced_update(seen_by_both, {"last_lag_ms": 5}, extra_expected={})
    assert closed.state is ShardState.CLOSED and closed.lease_counter == 1
    assert run_b.require_shard(SHARD).last_lag_ms is None


def test_an_unregistered_shard_is_named(open_items: OpenItems) -> None:
    with pytest.raises(CheckpointNotFound, match=f"Shard {SHARD} is not registered in pipeline orders-to-doris"):
        ShardLedger(open_items()).require_shard(SHARD)


def test_a_cut_is_put_once_and_a_pending_one_resolved_once(open_items: OpenItems) -> None:
    run_a, run_b = ShardLedger(open_items()), ShardLedger(open_items())
    assert run_a.put_boundary(_at(1000, 5)) == _at(1000, 5)
    assert run_b.put_boundary(_at(1000, 6)) == _at(1000, 5)
    pending = Boundary(SHARD, 2000, BoundaryKind.PENDING)
    run_a.put_boundary(pending)

    assert run_a.resolve_pending(_at(2000, 9)) == _at(2000, 9)
    assert run_b.resolve_pending(_at(2000, 7)) == _at(2000, 9)  # follow the stored cut, not the proposal
    assert run_b.boundaries_for_shard(SHARD) == [_at(1000, 5), _at(2000, 9)]
    assert run_b.boundary_at_or_before(SHARD, 1999) == _at(1000, 5)


def test_a_concrete_cut_is_remembered_and_a_pending_one_read_again(open_items: OpenItems) -> None:
    """Concrete cuts never change, so the ledger answers them from memory; a PENDING one may be
    resolved by another run, so it is read again."""
    items = open_items()
    ledger, other = ShardLedger(items), ShardLedger(open_items())
    ledger.put_boundary(_at(1000, 5))
    ledger.put_boundary(Boundary(SHARD, 2000, BoundaryKind.PENDING))
    assert ledger.read_boundaries([SHARD, "shardId-other"], 2000) == {SHARD: Boundary(SHARD, 2000, BoundaryKind.PENDING)}

    other.resolve_pending(_at(2000, 9))
    items.delete([boundary_sk(SHARD, 1000)])

    assert ledger.get_boundary(SHARD, 1000) == _at(1000, 5)
    assert ledger.get_boundary(SHARD, 2000) == _at(2000, 9)


def test_the_shard_set_is_saved_only_over_the_version_read(open_items: OpenItems) -> None:
    run_a, run_b = ShardLedger(open_items()), ShardLedger(open_items())
    saved = run_a.save_topology([SHARD, "shardId-a"], {SHARD: 0, "shardId-a": 1}, expected_version=None)

    with pytest.raises(CheckpointConflict, match="expected version None, stored version is 1"):
        run_b.save_topology([SHARD], {SHARD: 0}, expected_version=None)
    assert run_b.save_topology([SHARD], {SHARD: 0}, expected_version=1).version == 2
    assert saved.shard_ids == (SHARD, "shardId-a") and saved.assignment == {SHARD: 0, "shardId-a": 1}
