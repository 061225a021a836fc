"""The label-window canary (core.label_window) over the in-memory store and Doris: which label is
kept and when, which one is asked, and what a forgotten one does."""

from __future__ import annotations

import pytest

from airflow_provider_kinesis_doris.core.errors import LabelWindowBroken, RetryableStreamLoadError
from airflow_provider_kinesis_doris.core.label_window import LabelWindowWatch, trusted_window_seconds
from airflow_provider_kinesis_doris.core.stores.items import LabelCanary
from airflow_provider_kinesis_doris.core.stores.memory import memory_store
from airflow_provider_kinesis_doris.testing.memory_doris import MemoryDoris

KEEP_SECONDS = 4_600  # a trusted window of 4,000 s: 1,000 s a quarter
WINDOW_MS = trusted_window_seconds(KEEP_SECONDS) * 1000
T0 = 1_800_000_000_000


class World:
    def __init__(self) -> None:
        self.now = T0
        self.store = memory_store("p", clock=lambda: self.now)
        self.doris = MemoryDoris()
        self.asked: list[str] = []
        ask = self.doris.get_load_state
        self.doris.get_load_state = lambda database, label: self.asked.append(label) or ask(database, label)  # type: ignore[method-assign]

    def load(self, label: str) -> None:
        """A Stream Load Doris made visible now."""
        self.doris.load_idempotently("db", "t", label, b'{"a": 1}\n')

    def task(self, *labels: str) -> LabelWindowWatch:
        """A task that checks, then loads ``labels``, offering each."""
        watch = LabelWindowWatch(self.store.chunks, self.doris, "db", KEEP_SECONDS, lambda: self.now)
        watch.check()
        for label in labels:
            self.load(label)
            watch.offer(label)
        return watch


def test_the_first_label_a_task_loads_is_kept_and_later_tasks_ask_doris_about_it() -> None:
    world = World()
    world.task("kd:1", "kd:2")
    assert world.store.chunks.label_canaries() == [LabelCanary("kd:1", T0)]

    world.now += 10_000
    world.task("kd:3")

    assert world.asked == ["kd:1"]
    assert world.store.chunks.label_canaries() == [LabelCanary("kd:1", T0)]  # the next is due after a quarter window


def test_a_new_canary_is_kept_each_quarter_window_and_the_oldest_inside_the_window_is_asked() -> None:
    world = World()
    for step in range(6):
        world.now = T0 + step * (WINDOW_MS // 4)
        world.task(f"kd:{step}")

    canaries = world.store.chunks.label_canaries()
    # Canaries outside the window are dropped; the oldest one kept is asked.
    assert [c.label for c in canaries] == ["kd:2", "kd:3", "kd:4", "kd:5"]
    assert world.asked[-1] == "kd:2"


def test_a_label_doris_forgot_inside_the_window_fails_the_task_before_it_loads() -> None:
    world = World()
    world.task("kd:1")
    world.now += WINDOW_MS - 1
    world.doris.forget_labels()  # label_num_threshold evicted it, or a shorter streaming_label_keep_max_second

    with pytest.raises(LabelWindowBroken) as broken:
        world.task("kd:2")

    message = str(broken.value)
    assert "kd:1" in message and "2027-01-15T08:00:00+00:00" in message and "3999 s ago" in message
    assert "label_keep_seconds is 4600" in message and "streaming_label_keep_max_second" in message
    assert world.doris.tally("t", "a")[1] == 1  # kd:2 was never sent


def test_a_canary_past_the_window_proves_nothing_and_is_not_asked() -> None:
    world = World()
    world.task("kd:1")
    world.now += WINDOW_MS
    world.doris.forget_labels()

    world.task("kd:2")

    assert world.asked == []
    assert world.store.chunks.label_canaries() == [LabelCanary("kd:2", world.now)]


def test_a_task_that_lost_the_race_to_keep_a_canary_keeps_the_other_tasks() -> None:
    world = World()
    first, second = (LabelWindowWatch(world.store.chunks, world.doris, "db", KEEP_SECONDS, lambda: world.now) for _ in range(2))
    first.check()
    second.check()
    for watch, label in ((first, "kd:a"), (second, "kd:b")):
        world.load(label)
        watch.offer(label)

    assert world.store.chunks.label_canaries() == [LabelCanary("kd:a", T0)]


def test_doris_unreachable_at_the_check_fails_the_task_retryably() -> None:
    world = World()
    world.task("kd:1")
    world.doris.down = True

    with pytest.raises(RetryableStreamLoadError):
        world.task()
