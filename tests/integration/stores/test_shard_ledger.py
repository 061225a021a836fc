"""The shard ledger alone, on both stores: shards registered once and written fenced on their
lease counter, cuts put once and a PENDING one resolved once, the shard set versioned."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from airflow_provider_kinesis_doris.core.errors import CheckpointConflict, CheckpointNotFound
from airflow_provider_kinesis_doris.core.model import Boundary, BoundaryKind, Position, ShardInfo, ShardState
from airflow_provider_kinesis_doris.core.stores.dynamodb import DynamoItems
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


def test_cuts_handed_over_at_once_are_each_put_once_in_transactions_of_a_hundred(open_items: OpenItems) -> None:
    """A plan's quiet end cuts go to the store at once: each is put once (a cut another run stored
    first wins, in its place in the answer), and on DynamoDB a hundred to a transaction rather
    than a request a cut."""
    ledger = ShardLedger(items := open_items())
    cuts = [Boundary(f"shardId-{n:012d}", 1000, BoundaryKind.AFTER, Position(n)) for n in range(150)]
    first = ShardLedger(open_items()).put_boundary(replace(cuts[7], position=Position(70)))
    sent: list[str] = []

    def count(model: Any, **_: Any) -> None:
        sent.append(model.name)

    events = items._client.meta.events if isinstance(items, DynamoItems) else None
    if events is not None:
        events.register("before-call.dynamodb.*", count)
    try:
        stored = ledger.put_boundaries(cuts)
    finally:
        if events is not None:
            events.unregister("before-call.dynamodb.*", count)

    assert stored == [first if n == 7 else cut for n, cut in enumerate(cuts)]
    assert ShardLedger(open_items()).read_boundaries([cut.shard_id for cut in cuts], 1000) == {cut.shard_id: cut for cut in stored}
    if isinstance(items, DynamoItems):
        # Two transactions of the 150, one sent again without the cut that lost (and reads: the
        # table's layout on a first write, the cut that won).
        assert sent.count("TransactWriteItems") == 3 and "PutItem" not in sent, sent


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
