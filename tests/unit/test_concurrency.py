"""The driver's bounded pool: order kept, bound kept, a failure stops the step like a crash would."""

from __future__ import annotations

import threading
import time

import pytest

from airflow_provider_kinesis_doris.core.concurrency import map_bounded


def test_results_keep_the_order_of_the_items_whatever_order_the_calls_finish_in() -> None:
    def slower_first(item: int) -> int:
        time.sleep(0.01 * (5 - item))
        return item * 10

    assert map_bounded(slower_first, [0, 1, 2, 3, 4], 5) == [0, 10, 20, 30, 40]


@pytest.mark.parametrize("concurrency", [1, 3])
def test_no_more_calls_in_flight_than_the_bound_and_as_many_as_it_allows(concurrency: int) -> None:
    lock, in_flight, peak = threading.Lock(), [0], [0]

    def call(item: int) -> int:
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        time.sleep(0.02)
        with lock:
            in_flight[0] -= 1
        return item

    assert map_bounded(call, list(range(12)), concurrency) == list(range(12))
    assert peak[0] == concurrency


@pytest.mark.parametrize("concurrency", [1, 2])
def test_a_failure_is_raised_and_items_not_started_are_never_started(concurrency: int) -> None:
    started: list[int] = []

    def call(item: int) -> int:
        started.append(item)
        if item == 1:
            raise ValueError("shard 1 failed")
        time.sleep(0.05)
        return item

    with pytest.raises(ValueError, match="shard 1 failed"):
        map_bounded(call, list(range(20)), concurrency)
    # Sequentially the step stops at the failing item; with a pool, only calls already handed to a
    # worker run (at most one more per worker), never the whole list.
    assert len(started) <= 2 + concurrency
    assert 1 in started

