"""Retrying: the one backoff curve and the one retry-on-conflict loop of the data path.

Two kinds of retry exist. A throttled or dropped call is sent again after a pause that grows
exponentially with jitter (:func:`backoff_seconds`; Kinesis reads and Stream Loads use the same
curve with their own numbers). A fenced write that lost a race (:class:`CheckpointConflict`) is
attempted again at once, by a step that re-reads what it fences on (:func:`retry_on_conflict`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from airflow_provider_kinesis_doris.core.errors import CheckpointConflict

log = logging.getLogger(__name__)

CONFLICT_ATTEMPTS = 5
"""How often a fenced step is attempted before its CheckpointConflict reaches the caller."""

T = TypeVar("T")


def backoff_seconds(
    failures: int, *, initial: float, cap: float, multiplier: float = 2.0, jitter: float = 0.5, unit_random: float
) -> float:
    """The pause after ``failures`` consecutive failures (from 1): ``initial * multiplier ** (failures - 1)``
    capped at ``cap``, of which the share ``jitter`` is drawn at random so parallel writers spread out.

    :param unit_random: a random number in [0, 1).
    """
    ceiling = min(cap, initial * multiplier ** (failures - 1))
    return ceiling * (1 - jitter) + ceiling * jitter * unit_random


def retry_on_conflict(step: Callable[[], T], what: str, *, attempts: int = CONFLICT_ATTEMPTS) -> T:
    """``step()``, attempted again while it raises :class:`CheckpointConflict`, at most ``attempts``
    times. ``step`` must re-read the state it fences on, so each attempt acts on the fresh state.

    :param what: names the contended item in the log (e.g. ``"shard shardId-0001"``).
    :raises CheckpointConflict: the last attempt's conflict.
    """
    for attempt in range(1, attempts + 1):
        try:
            return step()
        except CheckpointConflict:
            if attempt == attempts:
                raise
            log.info("%s changed concurrently; attempt %d of %d on the fresh state", what, attempt + 1, attempts)
    raise AssertionError("unreachable")
