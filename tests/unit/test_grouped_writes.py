"""Group commit of conditional writes (``core.stores.grouped``): who sends, what waits, what fails."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from airflow_provider_kinesis_doris.core.stores.grouped import GroupedWrites


def _sk(item: dict[str, Any]) -> str:
    return str(item["sk"])


class SlowTable:
    """Put-once on a dict; each request takes as long as the test holds ``gate``."""

    def __init__(self) -> None:
        self.items: dict[str, Any] = {"taken": 0}
        self.groups: list[list[str]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.fail_next: Exception | None = None

    def send(self, items: Sequence[dict[str, Any]]) -> list[bool]:
        self.gate.wait()
        self.groups.append([item["sk"] for item in items])
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error
        answers = [item["sk"] not in self.items for item in items]
        for item, new in zip(items, answers):
            if new:
                self.items[item["sk"]] = item
        return answers


class Writers:
    """One thread per key, each putting it and keeping the answer (or the error)."""

    def __init__(self, grouped: GroupedWrites, sks: list[str]) -> None:
        self.answers: dict[str, Any] = {}
        self.threads = [threading.Thread(target=self._put, args=(grouped, sk)) for sk in sks]
        for thread in self.threads:
            thread.start()

    def _put(self, grouped: GroupedWrites, name: str) -> None:
        try:
            # "<sk>~<n>": another write of the item <sk>.
            self.answers[name] = grouped.write({"sk": name.split("~")[0]})
        except Exception as error:  # noqa: BLE001 - the answer under test
            self.answers[name] = error

    @classmethod
    def behind_one(cls, table: SlowTable, grouped: GroupedWrites, sks: list[str]) -> dict[str, Any]:
        """A writer's request held on its way while ``sks`` queue behind it; then released.

        :return: every answer, the first writer's under "first"."""
        table.gate.clear()
        first = cls(grouped, ["first"])
        while not grouped._sending:
            pass
        queued = cls(grouped, sks)
        while len(grouped._queue) < len(sks):
            pass
        table.gate.set()
        return first.join() | queued.join()

    def join(self) -> dict[str, Any]:
        for thread in self.threads:
            thread.join(timeout=10)
            assert not thread.is_alive()
        return self.answers


def test_a_lone_writer_sends_at_once_and_gets_its_answer() -> None:
    table = SlowTable()
    grouped = GroupedWrites(table.send, key=_sk, max_items=100)
    assert grouped.write({"sk": "a"}) is True
    assert grouped.write({"sk": "a"}) is False and grouped.write({"sk": "taken"}) is False
    assert table.groups == [["a"], ["a"], ["taken"]]


def test_writes_that_queue_while_a_request_is_on_its_way_go_together() -> None:
    table = SlowTable()
    grouped = GroupedWrites(table.send, key=_sk, max_items=4)
    answers = Writers.behind_one(table, grouped, [f"q{n}" for n in range(6)] + ["taken"])
    assert answers == {"first": True, **{f"q{n}": True for n in range(6)}, "taken": False}
    assert table.groups[0] == ["first"] and [len(group) for group in table.groups[1:]] == [4, 3]
    assert not grouped._sending and grouped._queue == []


def test_every_writer_of_a_failed_group_gets_the_error_and_the_next_group_is_sent() -> None:
    table = SlowTable()
    grouped = GroupedWrites(table.send, key=_sk, max_items=3)
    table.fail_next = RuntimeError("throttled")
    answers = Writers.behind_one(table, grouped, ["a", "b", "c", "d", "e"])
    failed = [sk for sk, answer in answers.items() if isinstance(answer, RuntimeError)]
    assert failed == ["first"]
    assert {sk: answers[sk] for sk in "abcde"} == dict.fromkeys("abcde", True)
    with pytest.raises(RuntimeError, match="throttled"):
        table.fail_next = RuntimeError("throttled")
        grouped.write({"sk": "z"})


def test_two_writes_of_one_item_never_share_a_group() -> None:
    table = SlowTable()
    grouped = GroupedWrites(table.send, key=_sk, max_items=10)
    answers = Writers.behind_one(table, grouped, ["d~1", "d~2", "e"])
    assert table.groups[1:] == [["d", "e"], ["d"]]
    assert answers["e"] is True and sorted([answers["d~1"], answers["d~2"]]) == [False, True]


def test_the_writes_of_one_writer_go_in_one_group_and_are_answered_each() -> None:
    table = SlowTable()
    grouped = GroupedWrites(table.send, key=_sk, max_items=10)
    assert grouped.write_all([{"sk": "end"}, {"sk": "range"}, {"sk": "taken"}]) == [True, True, False]
    assert table.groups == [["end", "range", "taken"]]
    # Two writes of one item: the second goes in the next group.
    assert grouped.write_all([{"sk": "again"}, {"sk": "again"}]) == [True, False]
    assert table.groups[1:] == [["again"], ["again"]]


def test_units_handed_over_at_once_share_groups_and_none_is_split() -> None:
    """Five units of two (a range and its end cut) in groups of five: two units to a group, never
    a range in one group and its cut in the next; each unit answered in its place."""
    table = SlowTable()
    grouped = GroupedWrites(table.send, key=_sk, max_items=5)
    units = [[{"sk": f"end{n}"}, {"sk": f"range{n}"}] for n in range(5)]
    units[3][1] = {"sk": "taken"}

    answers = grouped.write_units(units)

    assert answers == [[True, True]] * 3 + [[True, False]] + [[True, True]]
    assert table.groups == [["end0", "range0", "end1", "range1"], ["end2", "range2", "end3", "taken"], ["end4", "range4"]]


def test_writers_of_several_writes_each_queued_behind_one_another_all_get_their_answers() -> None:
    """Sixteen threads, each with a range and its cut (two writes), and a slow request in front:
    every write is answered, in groups, none twice, and the sending is handed on to the end."""
    table = SlowTable()
    grouped = GroupedWrites(table.send, key=_sk, max_items=5)
    table.gate.clear()
    answers: dict[int, Any] = {}

    def write(n: int) -> None:
        answers[n] = grouped.write_all([{"sk": f"cut{n}"}, {"sk": f"range{n}"}, {"sk": "taken"}])

    threads = [threading.Thread(target=write, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    time.sleep(0.2)  # let the writers queue behind the first request
    table.gate.set()
    for thread in threads:
        thread.join(timeout=10)
        assert not thread.is_alive()
    assert answers == {n: [True, True, False] for n in range(16)}
    sent = [sk for group in table.groups for sk in group]
    assert sorted(sk for sk in sent if sk != "taken") == sorted(f"{kind}{n}" for kind in ("cut", "range") for n in range(16))
    assert all(len(group) <= 5 and len(set(group)) == len(group) for group in table.groups)
    assert not grouped._sending and grouped._queue == []


class CountingTable(SlowTable):
    """SlowTable that keeps, per group, the groups on their way beside it when it was sent."""

    def __init__(self) -> None:
        super().__init__()
        self.on_the_way: list[str] = []
        self.beside: list[tuple[list[str], list[str]]] = []
        self._lock = threading.Lock()

    def send(self, items: Sequence[dict[str, Any]]) -> list[bool]:
        sks = [item["sk"] for item in items]
        with self._lock:
            self.beside.append((sks, list(self.on_the_way)))
            self.on_the_way.extend(sks)
        try:
            return super().send(items)
        finally:
            with self._lock:
                for sk in sks:
                    self.on_the_way.remove(sk)


def _until(condition: Any) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "the writers did not get there"
        time.sleep(0.001)


def _started(grouped: GroupedWrites, sks: list[str], *, then: Any) -> Writers:
    """Writers of ``sks``, once ``then()`` holds (they got as far as the test needs)."""
    writers = Writers(grouped, sks)
    _until(then)
    return writers


def test_up_to_in_flight_groups_are_on_their_way_at_once_and_the_next_waits_for_a_slot() -> None:
    table = CountingTable()
    grouped = GroupedWrites(table.send, key=_sk, max_items=10, in_flight=2)
    table.gate.clear()
    first = _started(grouped, ["a"], then=lambda: len(grouped._sending) == 1)
    second = _started(grouped, ["b"], then=lambda: len(grouped._sending) == 2)
    queued = _started(grouped, ["c", "d"], then=lambda: len(grouped._queue) == 2)
    assert [sorted(on) for _, on in table.beside] == [[], ["a"]]
    table.gate.set()
    assert first.join() | second.join() | queued.join() == dict.fromkeys("abcd", True)
    # c and d queued while both slots were taken: they went together once one was free.
    assert sorted(sorted(sks) for sks, _ in table.beside) == [["a"], ["b"], ["c", "d"]]
    assert grouped._sending == [] and grouped._queue == []


def test_writes_of_one_item_are_never_on_their_way_at_once_and_keep_their_order() -> None:
    table = CountingTable()
    grouped = GroupedWrites(table.send, key=_sk, max_items=10, in_flight=4)
    table.gate.clear()
    first = _started(grouped, ["d~1"], then=lambda: len(grouped._sending) == 1)
    # d~2 queues first, then e: e may go beside d~1, d~2 may not (nor may e jump an item's queue).
    later = _started(grouped, ["d~2"], then=lambda: len(grouped._queue) == 1)
    other = _started(grouped, ["e"], then=lambda: len(grouped._sending) == 2)
    assert grouped._queue[0].item == {"sk": "d"}
    table.gate.set()
    answers = first.join() | later.join() | other.join()
    assert answers == {"d~1": True, "d~2": False, "e": True}
    assert all(sks.count("d") + on.count("d") <= 1 for sks, on in table.beside)


def test_a_writer_over_several_groups_has_one_on_its_way_at_a_time_in_order() -> None:
    """Five writes in groups of two: while the first is on its way, another writer's write takes
    the free slot, not the rest of the five."""
    table = CountingTable()
    grouped = GroupedWrites(table.send, key=_sk, max_items=2, in_flight=3)
    table.gate.clear()
    answers: list[list[bool]] = []
    several = threading.Thread(target=lambda: answers.append(grouped.write_all([{"sk": f"w{n}"} for n in range(5)])))
    several.start()
    _until(lambda: len(grouped._sending) == 1)
    other = _started(grouped, ["x"], then=lambda: len(grouped._sending) == 2)
    table.gate.set()
    several.join(timeout=10)
    assert other.join() == {"x": True} and answers == [[True] * 5]
    assert [sks for sks, _ in table.beside if sks != ["x"]] == [["w0", "w1"], ["w2", "w3"], ["w4"]]
    assert all(not any(sk.startswith("w") for sk in on) for sks, on in table.beside if sks != ["x"])


def test_many_writers_with_groups_in_flight_all_get_their_answers_once() -> None:
    """Twenty-four threads of three writes each (two of their own, one item all share), four
    groups in flight: every write answered, the shared item written once, none in two groups at once."""
    table = CountingTable()
    grouped = GroupedWrites(table.send, key=_sk, max_items=5, in_flight=4)
    answers: dict[int, Any] = {}

    def write(n: int) -> None:
        answers[n] = grouped.write_all([{"sk": f"cut{n}"}, {"sk": f"range{n}"}, {"sk": "shared"}])

    threads = [threading.Thread(target=write, args=(n,)) for n in range(24)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
        assert not thread.is_alive()
    assert sorted(answer[:2] == [True, True] for answer in answers.values()) == [True] * 24
    assert sum(answer[2] for answer in answers.values()) == 1
    assert all(not set(sks) & set(on) for sks, on in table.beside)
    assert grouped._sending == [] and grouped._queue == []


def test_in_flight_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="in_flight must be at least 1, got 0"):
        GroupedWrites(SlowTable().send, key=_sk, max_items=10, in_flight=0)
