"""Put-once writes from the driver's pool, sent in groups.

Planning resolves the cuts of many shards at once (``driver_concurrency`` threads), and each cut
is a put-once item. :class:`GroupedPuts` lets the puts that arrive while one group is on its way
wait and go together in the next (group commit): no timer, so a lone writer waits for nothing, and
a group is as large as the writes that queue during one round trip.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any


class _Entry:
    def __init__(self, item: dict[str, Any]) -> None:
        self.item = item
        self.ready = threading.Event()
        self.written: bool | None = None
        self.error: BaseException | None = None
        self.lead = False
        """Woken to send the next group instead of with its answer."""


class GroupedPuts:
    """:param send: put each item unless its key exists; the answer per item, in order (True:
        written). It may write some and fail: the items of a group then all raise its error.
    :param max_items: items per group."""

    def __init__(self, send: Callable[[Sequence[dict[str, Any]]], list[bool]], max_items: int) -> None:
        self._send = send
        self._max_items = max_items
        self._lock = threading.Lock()
        self._queue: list[_Entry] = []
        self._sending = False

    def put_new(self, item: dict[str, Any]) -> bool:
        """Store ``item`` unless its key exists; False if it existed."""
        entry = _Entry(item)
        with self._lock:
            self._queue.append(entry)
            entry.lead, self._sending = not self._sending, True
        while not entry.lead:
            entry.ready.wait()
            entry.ready.clear()
            if entry.error is not None:
                raise entry.error
            if entry.written is not None:
                return entry.written
        self._send_groups_until(entry)
        if entry.error is not None:
            raise entry.error
        assert entry.written is not None
        return entry.written

    def _send_groups_until(self, own: _Entry) -> None:
        """Send groups from the head of the queue until ``own`` is answered, then hand the
        sending to the next waiting writer, if any."""
        while own.written is None and own.error is None:
            with self._lock:
                group, self._queue = self._queue[: self._max_items], self._queue[self._max_items :]
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
                if entry is not own:
                    entry.ready.set()
        with self._lock:
            if self._queue:
                self._queue[0].lead = True
                self._queue[0].ready.set()
            else:
                self._sending = False
