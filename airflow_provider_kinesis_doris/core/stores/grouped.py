"""Conditional writes from the driver's pool, sent in groups.

Planning stores the cuts and ranges of many shards at once (``driver_concurrency`` threads), and
the commit marks their ranges loaded and moves their marks the same way; each is a conditional
write of one item. :class:`GroupedWrites` lets the writes that arrive while one group is on its
way wait and go together in the next (group commit): no timer, so a lone writer waits for nothing,
and a group is as large as the writes that queue during one round trip. Two writes of the same
item never share a group (a transaction may name an item once): the later one waits for the next.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Any


class _Entry:
    def __init__(self, item: Any, ready: threading.Event) -> None:
        self.item = item
        self.ready = ready
        """Shared by the entries of one writer: set when one of them is answered or made lead."""
        self.written: bool | None = None
        self.error: BaseException | None = None
        self.lead = False
        """Woken to send the next group instead of with its answer."""

    @property
    def answered(self) -> bool:
        return self.written is not None or self.error is not None


class GroupedWrites:
    """:param send: apply each write whose condition holds; the answer per write, in order (True:
        written, False: its condition failed). It may write some and fail: the writes of a group
        then all raise its error.
    :param max_items: writes per group.
    :param key: the item a write names."""

    def __init__(
        self, send: Callable[[Sequence[Any]], list[bool]], max_items: int, key: Callable[[Any], Hashable]
    ) -> None:
        self._send = send
        self._max_items = max_items
        self._key = key
        self._lock = threading.Lock()
        self._queue: list[_Entry] = []
        self._sending = False

    def write(self, item: Any) -> bool:
        """Apply the write ``item`` if its condition holds; False if it did not."""
        return self.write_all([item])[0]

    def write_all(self, items: Sequence[Any]) -> list[bool]:
        """Apply each write of ``items`` whose condition holds (in one group when they fit); the
        answer per write. A group's error is raised once every write of ``items`` is answered."""
        ready = threading.Event()
        entries = [_Entry(item, ready) for item in items]
        with self._lock:
            self._queue.extend(entries)
            entries[0].lead, self._sending = not self._sending, True
        while not all(entry.answered for entry in entries):
            if any(entry.lead for entry in entries):
                self._send_groups_until(entries)
            else:
                ready.wait()
                ready.clear()
        error = next((entry.error for entry in entries if entry.error is not None), None)
        if error is not None:
            raise error
        return [bool(entry.written) for entry in entries]

    def _send_groups_until(self, own: Sequence[_Entry]) -> None:
        """Send groups from the head of the queue until every entry of ``own`` is answered, then
        hand the sending to the next waiting writer, if any."""
        while not all(entry.answered for entry in own):
            with self._lock:
                group, self._queue = self._next_group()
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
            for entry in group:
                if entry not in own:
                    entry.ready.set()
        with self._lock:
            if self._queue:
                self._queue[0].lead = True
                self._queue[0].ready.set()
            else:
                self._sending = False

    def _next_group(self) -> tuple[list[_Entry], list[_Entry]]:
        """The group to send from the queue, and what stays queued.

        A writer's writes go whole into one group, or wait whole for the next: split, a group
        that failed could leave some of them applied by the next one (a range stored without its
        end cut). Only writes that never fit one group (more than it holds, or an item twice) go
        over several, in order, their head first once they reach the front of the queue."""
        writers: dict[threading.Event, list[_Entry]] = {}
        for entry in self._queue:
            writers.setdefault(entry.ready, []).append(entry)
        group: list[_Entry] = []
        rest: list[_Entry] = []
        keys: set[Hashable] = set()
        for own in writers.values():
            own_keys = [self._key(entry.item) for entry in own]
            named = set(keys)
            fitting = 0
            while fitting < min(len(own), self._max_items - len(group)) and own_keys[fitting] not in named:
                named.add(own_keys[fitting])
                fitting += 1
            taken = fitting if fitting == len(own) or not group else 0
            keys.update(own_keys[:taken])
            group.extend(own[:taken])
            rest.extend(own[taken:])
        return group, rest
