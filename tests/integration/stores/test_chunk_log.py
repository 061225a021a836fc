"""The chunk log alone, on both stores: an intent put once before a chunk is loaded, its outcome
recorded only over the state expected, a chunk's content settled by the first writer and amended
only over it, the label canaries replaced only over those read."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from airflow_provider_kinesis_doris.core.errors import CheckpointNotFound
from airflow_provider_kinesis_doris.core.model import Position
from airflow_provider_kinesis_doris.core.stores.chunk_log import ChunkLog
from airflow_provider_kinesis_doris.core.stores.items import CHUNK_INTENT, LabelCanary
from airflow_provider_kinesis_doris.core.stores.primitives import StoreItems

pytestmark = pytest.mark.integration

OpenItems = Callable[[], StoreItems]
SHARD = "shardId-000000000000"
START = 60_000


def _intent(log: ChunkLog, label: str, first: int, last: int, start_ms: int = START, attempt: str = "a1") -> bool:
    return log.put_chunk_intent(label, SHARD, Position(first), Position(last), start_ms, attempt=attempt)


def test_an_intent_is_put_once_and_the_range_lists_its_chunks_by_first_position(open_items: OpenItems) -> None:
    run_a, run_b = ChunkLog(open_items()), ChunkLog(open_items())

    assert _intent(run_a, "kd:b", 20, 29) and _intent(run_a, "kd:a", 10, 19)
    assert not _intent(run_b, "kd:b", 20, 25)
    _intent(run_a, "kd:next", 30, 39, start_ms=2 * START)

    chunks = run_b.chunks_for_range(SHARD, START)
    assert [(c.label, c.first, c.last, c.state) for c in chunks] == [
        ("kd:a", Position(10), Position(19), CHUNK_INTENT), ("kd:b", Position(20), Position(29), CHUNK_INTENT),
    ]  # fmt: skip


def test_an_outcome_only_the_sender_knows_is_recorded_only_by_the_attempt_owning_the_intent(open_items: OpenItems) -> None:
    run_a, run_b = ChunkLog(open_items()), ChunkLog(open_items())
    _intent(run_a, "kd:a", 10, 19, attempt="a1")

    refused_elsewhere = run_b.record_chunk_outcome("kd:a", "NOT_LOADED", shard_id=SHARD, interval_start_ms=START, owner="b1")
    assert refused_elsewhere.state == CHUNK_INTENT and refused_elsewhere.attempt == "a1"
    visible = run_a.record_chunk_outcome("kd:a", "VISIBLE", "7", shard_id=SHARD, interval_start_ms=START,
                                         rows_loaded=10, owner="a1")  # fmt: skip
    lost = run_a.record_chunk_outcome("kd:a", "NOT_LOADED", shard_id=SHARD, interval_start_ms=START, owner="a1")

    assert lost == visible and visible.state == "VISIBLE" and visible.txn_id == "7" and visible.rows_loaded == 10
    assert run_b.get_chunk("kd:a", SHARD, START) == visible
    with pytest.raises(CheckpointNotFound, match="No intent recorded for chunk kd:none in pipeline orders-to-doris"):
        run_b.record_chunk_outcome("kd:none", "VISIBLE", shard_id=SHARD, interval_start_ms=START)


def test_a_fresh_intent_is_written_only_over_the_chunk_as_it_was_read(open_items: OpenItems) -> None:
    run_a, run_b = ChunkLog(open_items()), ChunkLog(open_items())
    _intent(run_a, "kd:a", 10, 19, attempt="a1")
    not_loaded = run_a.record_chunk_outcome("kd:a", "NOT_LOADED", shard_id=SHARD, interval_start_ms=START, owner="a1")

    # Both read NOT_LOADED; b renews first and owns the chunk, a's renewal finds it changed.
    assert run_b.renew_chunk_intent(not_loaded, "b1")
    assert not run_a.renew_chunk_intent(not_loaded, "a2")
    owned_by_b = run_a.get_chunk("kd:a", SHARD, START)
    assert owned_by_b is not None and (owned_by_b.state, owned_by_b.attempt) == (CHUNK_INTENT, "b1")
    # A VISIBLE recorded by anyone is never turned back into an intent.
    visible = run_a.record_chunk_outcome("kd:a", "VISIBLE", shard_id=SHARD, interval_start_ms=START)
    assert not run_a.renew_chunk_intent(not_loaded, "a3") and not run_b.renew_chunk_intent(owned_by_b, "b2")
    assert run_b.get_chunk("kd:a", SHARD, START) == visible


def test_a_content_is_settled_by_the_first_writer_and_amended_only_over_it(open_items: OpenItems) -> None:
    run_a, run_b = ChunkLog(open_items()), ChunkLog(open_items())
    first = Position(10)

    assert run_a.settle_chunk_content(SHARD, START, first, "dead:1") == "dead:1"
    assert run_b.settle_chunk_content(SHARD, START, first, "dead:2") == "dead:1"
    assert run_b.amend_chunk_content(SHARD, START, first, "dead:1", "dead:1,3") == "dead:1,3"
    assert run_a.amend_chunk_content(SHARD, START, first, "dead:1", "dead:1,4") == "dead:1,3"
    assert run_a.chunk_contents_for_range(SHARD, START) == ["dead:1,3"]


def test_an_intent_with_its_content_is_put_whole_or_not_at_all(open_items: OpenItems) -> None:
    run_a, run_b = ChunkLog(open_items()), ChunkLog(open_items())
    run_a.settle_chunk_content(SHARD, START, Position(10), "dead:1")

    stored = run_b.put_chunk_intent_with_content("kd:a", SHARD, Position(10), Position(19), START, "dead:2", attempt="b1")

    assert not stored and run_b.get_chunk("kd:a", SHARD, START) is None
    assert run_b.put_chunk_intent_with_content("kd:b", SHARD, Position(20), Position(29), START, "dead:", attempt="b1")
    assert run_a.chunk_content(SHARD, START, Position(20)) == "dead:" and run_a.get_chunk("kd:b", SHARD, START)


def test_the_label_canaries_are_replaced_only_over_those_read(open_items: OpenItems) -> None:
    run_a, run_b = ChunkLog(open_items()), ChunkLog(open_items())
    kept = [LabelCanary("kd:a", 1_000)]

    assert run_a.replace_label_canaries([], kept)
    assert not run_b.replace_label_canaries([], [LabelCanary("kd:b", 2_000)])
    assert run_b.replace_label_canaries(kept, [*kept, LabelCanary("kd:c", 3_000)])
    assert run_a.label_canaries() == [LabelCanary("kd:a", 1_000), LabelCanary("kd:c", 3_000)]
