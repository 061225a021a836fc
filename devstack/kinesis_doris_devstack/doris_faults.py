"""Fault injection of the Doris stand-in: the faults a test can ask for (:data:`FAULT_KINDS`) and
the queue the FE and BE ports take them from, one per load.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any


FAULT_KINDS = (
    "publish_timeout",
    "http_500",
    "reset_before_commit",
    "reset_after_commit",
    "too_many_versions",
    "running_txn_limit",
    "slow",
    "redirect_dead_be",
)
_FE_FAULTS = ("redirect_dead_be",)


# --- fault injection -------------------------------------------------------------------------


@dataclass
class Fault:
    """An injected fault: affects the next ``remaining`` stream loads."""

    kind: str
    remaining: int
    params: dict[str, Any] = field(default_factory=dict)


class FaultInjector:
    """FIFO of injected faults. A stream load takes at most one BE fault when it reaches BE;
    ``redirect_dead_be`` is taken by FE when it redirects a stream load."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []

    def add(self, kind: str, count: int = 1, **params: Any) -> None:
        """Queue a fault; :class:`ValueError` names a bad kind, count or parameter."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; expected one of {', '.join(FAULT_KINDS)}")
        if not isinstance(count, int) or count < 1:
            raise ValueError(f"fault count must be a positive integer, got {count!r}")
        if kind == "slow" and not isinstance(params.get("seconds"), (int, float)):
            raise ValueError("fault 'slow' needs a numeric 'seconds' parameter")
        with self._lock:
            self._faults.append(Fault(kind, count, dict(params)))

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def pending(self) -> int:
        """Uses of queued faults not taken yet."""
        with self._lock:
            return sum(fault.remaining for fault in self._faults)

    def take(self, at_fe: bool) -> Fault | None:
        """Consume one use of the oldest fault that acts at FE (``at_fe``) or at BE."""
        with self._lock:
            for fault in self._faults:
                if (fault.kind in _FE_FAULTS) == at_fe:
                    fault.remaining -= 1
                    if fault.remaining == 0:
                        self._faults.remove(fault)
                    return Fault(fault.kind, 1, fault.params)
        return None
