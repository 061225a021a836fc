"""An in-memory Doris with Stream Load label semantics, for proofs that search thousands of run
orders (the HTTP stand-in in ``doris_server`` is the one that speaks Doris's wire protocol).

It has the surface the loader uses (``load_idempotently``, ``get_load_state``, ``close``): a label
loads once per database, a repeated label is answered ALREADY_LOADED, and rows land per table as
JSON objects. ``down`` makes every call fail as an unreachable Doris does, before anything is sent.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import Counter
from typing import Any

from airflow_provider_kinesis_doris.core.errors import RetryableStreamLoadError
from airflow_provider_kinesis_doris.core.doris.result import IdempotentLoadResult, LoadDisposition
from airflow_provider_kinesis_doris.core.doris.options import StreamLoadOptions
from airflow_provider_kinesis_doris.core.doris.result import LabelState, LoadOutcome, StreamLoadResult


class MemoryDoris:
    """Labels per database and JSON rows per table; thread-safe."""

    def __init__(self) -> None:
        self.labels: dict[tuple[str, str], LabelState] = {}
        self.rows: dict[str, list[dict[str, Any]]] = {}
        self.down = False
        self.loads = 0
        self._txn = itertools.count(1)
        self._lock = threading.Lock()

    def load_idempotently(
        self, database: str, table: str, label: str, body: bytes, options: StreamLoadOptions | None = None, **_: Any
    ) -> IdempotentLoadResult:
        with self._lock:
            self._check_up(label)
            state = self.labels.get((database, label))
            if state is not None and state.is_loaded:
                return IdempotentLoadResult(label, LoadDisposition.ALREADY_LOADED, state, None, 1)
            lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
            self.loads += 1
            self.labels[(database, label)] = LabelState.VISIBLE
            self.rows.setdefault(table, []).extend(lines)
            result = StreamLoadResult(
                outcome=LoadOutcome.SUCCESS, status="Success", message="OK", label=label, txn_id=next(self._txn),
                number_total_rows=len(lines), number_loaded_rows=len(lines),
            )  # fmt: skip
            return IdempotentLoadResult(label, LoadDisposition.LOADED, LabelState.VISIBLE, result, 1)

    def get_load_state(self, database: str, label: str) -> LabelState:
        with self._lock:
            self._check_up(label)
            return self.labels.get((database, label), LabelState.UNKNOWN)

    def forget_labels(self) -> None:
        """Doris's label window passed: every label is unknown again (rows stay)."""
        with self._lock:
            self.labels.clear()

    def tally(self, table: str, field: str) -> Counter[Any]:
        """How often each value of ``field`` is in ``table``."""
        with self._lock:
            return Counter(row.get(field) for row in self.rows.get(table, []))

    def close(self) -> None:
        """Nothing to release (the client's interface)."""

    def _check_up(self, label: str) -> None:
        if self.down:
            error = RetryableStreamLoadError(f"Doris unreachable for label {label}: connection refused")
            error.definitely_not_loaded = True
            raise error
