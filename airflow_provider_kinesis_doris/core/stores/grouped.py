"""Conditional writes from the driver's pool, sent in groups.

Planning stores the cuts and ranges of many shards at once (``driver_concurrency`` threads), and
the commit marks their ranges loaded and moves their marks the same way; each is a conditional
write of one item. :class:`GroupedWrites` lets the writes that arrive while the groups in flight
are on their way wait and go together in the next one (group commit): no timer, so a lone writer
waits for nothing, and a group is as large as the writes that queue during one round trip.

Up to ``in_flight`` groups are on their way at once: with one, a shard's write waits for the whole
round trip of the group before it and then its own, and a thousand shards' writes go one round
trip after another. Two groups in flight never name one item (nor does one group twice: a
transaction may name an item once), so the writes of one item still go one after another, in the
order they queued, as they would with one group in flight.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Any


class _Entry:
    def __init__(self, item: Any, key: Hashable, writer: object, ready: threading.Event) -> None:
        self.item = item
        self.key = key
        self.writer = writer
        """Shared by the writes kept whole: one group holds them all, or they wait together."""
        self.ready = ready
        """Shared by the entries of one call: set when one of them is answered, or when it may send."""
        self.written: bool | None = None
        self.error: BaseException | None = None

    @property
    def answered(self) -> bool:
        return self.written is not None or self.error is not None


class GroupedWrites:
    """:param send: apply each write whose condition holds; the answer per write, in order (True:
        written, False: its condition failed). It may write some and fail: the writes of a group
        then all raise its error. Called from up to ``in_flight`` threads at once.
    :param max_items: writes per group.
    :param key: the item a write names.
    :param in_flight: groups on their way at once."""

    def __init__(
        self, send: Callable[[Sequence[Any]], list[bool]], max_items: int, key: Callable[[Any], Hashable],
        in_flight: int = 1,
    ) -> None:  # fmt: skip
        if in_flight < 1:
            raise ValueError(f"in_flight must be at least 1, got {in_flight}")
        self._send = send
        self._max_items = max_items
        self._key = key
        self._in_flight = in_flight
        self._lock = threading.Lock()
        self._queue: list[_Entry] = []
        self._sending: list[list[_Entry]] = []
        """The groups on their way."""

    def write(self, item: Any) -> bool:
        """Apply the write ``item`` if its condition holds; False if it did not."""
        return self.write_all([item])[0]

    def write_all(self, items: Sequence[Any]) -> list[bool]:
        """Apply each write of ``items`` whose condition holds (in one group when they fit); the
        answer per write. A group's error is raised once every write of ``items`` is answered."""
        return self.write_units([items])[0]

    def write_units(self, units: Sequence[Sequence[Any]]) -> list[list[bool]]:
        """:meth:`write_all` of each unit, handed over at once: each unit is kept whole as one
        call's writes are, and units go together in groups as the writes of many threads do. The
        answers per unit; a group's error is raised once every write of every unit is answered."""
        ready = threading.Event()
        queued = [self._entries(unit, ready) for unit in units]
        entries = [entry for unit in queued for entry in unit]
        with self._lock:
            self._queue.extend(entries)
        while not all(entry.answered for entry in entries):
            # Clear before looking: a group answered or a slot freed meanwhile sets it again.
            ready.clear()
            group = self._take_group()
            if group:
                self._send_group(group)
            elif not all(entry.answered for entry in entries):
                ready.wait()
        error = next((entry.error for entry in entries if entry.error is not None), None)
        if error is not None:
            raise error
        return [[bool(entry.written) for entry in unit] for unit in queued]

    def _entries(self, unit: Sequence[Any], ready: threading.Event) -> list[_Entry]:
        writer = object()  # the unit's: kept whole
        return [_Entry(item, self._key(item), writer, ready) for item in unit]

    def _take_group(self) -> list[_Entry]:
        """The next group to send from the queue, taken off it and counted in flight, if a group
        may go now and one can; else nothing."""
        with self._lock:
            if len(self._sending) >= self._in_flight or not self._queue:
                return []
            group, self._queue = self._next_group()
            if group:
                self._sending.append(group)
            return group

    def _send_group(self, group: list[_Entry]) -> None:
        """Send ``group``, answer its writes, and wake its writers and the writer at the head of
        the queue (a slot is free: it may send the next group)."""
        try:
            answers = self._send([entry.item for entry in group])
            if len(answers) != len(group):
                raise RuntimeError(f"{len(group)} items were sent and {len(answers)} answered")
        except BaseException as error:  # noqa: BLE001 - every writer of the group gets it
            for entry in group:
                entry.error = error
        else:
            for entry, written in zip(group, answers):
                entry.written = written
        with self._lock:
            self._sending.remove(group)
            head = self._queue[0].ready if self._queue else None
        for entry in group:
            entry.ready.set()
        if head is not None:
            head.set()

    def _next_group(self) -> tuple[list[_Entry], list[_Entry]]:
        """The group to send from the queue, and what stays queued.

        A writer's writes go whole into one group, or wait whole for a later one: split, a group
        that failed could leave some of them applied by the next one (a range stored without its
        end cut). Only writes that never fit one group (more than it holds, or an item twice) go
        over several, in order, their head first once they reach the front of the queue, one
        group in flight at a time. A writer with a write of an item in flight waits whole."""
        busy_writers = {entry.writer for group in self._sending for entry in group}
        keys: set[Hashable] = {entry.key for group in self._sending for entry in group}
        writers: dict[object, list[_Entry]] = {}
        for entry in self._queue:
            writers.setdefault(entry.writer, []).append(entry)
        group: list[_Entry] = []
        rest: list[_Entry] = []
        for writer, own in writers.items():
            named = set(keys)
            fitting = 0
            while fitting < min(len(own), self._max_items - len(group)) and own[fitting].key not in named:
                named.add(own[fitting].key)
                fitting += 1
            if writer in busy_writers:
                taken = 0
            elif fitting == len(own) or (not group and self._never_fits(own)):
                taken = fitting
            else:
                taken = 0
            # A later writer of one of these items waits for them: an item's writes keep their order.
            keys.update(entry.key for entry in own)
            group.extend(own[:taken])
            rest.extend(own[taken:])
        return group, rest

    def _never_fits(self, own: Sequence[_Entry]) -> bool:
        return len(own) > self._max_items or len({entry.key for entry in own}) < len(own)
