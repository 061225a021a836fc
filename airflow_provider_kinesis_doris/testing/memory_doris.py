"""An in-memory Doris with Stream Load label semantics, for proofs that search thousands of run
orders (the HTTP stand-in in ``doris_server`` is the one that speaks Doris's wire protocol).

It has the surface the loader uses (``load_idempotently``, ``get_load_state``, ``close``): a label
loads once per database, a repeated label is answered ALREADY_LOADED, and rows land per table as
JSON objects. ``down`` makes every call fail as an unreachable Doris does, before anything is sent.

Columns named in ``not_null`` refuse a row without a value, as a NOT NULL column does: the load
fails whole for data quality (``[DATA_QUALITY_ERROR]too many filtered rows``, nothing visible, the
label free again) unless ``max_filter_ratio`` tolerates the share. The surface the bisection of
``core.doris.rejections`` probes with is there too: ``stream_load`` (two-phase: PRECOMMITTED,
invisible), ``abort_transaction`` and ``error_log``, whose lines carry Doris's reasons.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_provider_kinesis_doris.core.errors import PermanentStreamLoadError, RetryableStreamLoadError
from airflow_provider_kinesis_doris.core.doris.result import IdempotentLoadResult, LoadDisposition
from airflow_provider_kinesis_doris.core.doris.options import StreamLoadOptions
from airflow_provider_kinesis_doris.core.doris.result import LabelState, LoadOutcome, StreamLoadResult, TwoPhaseResult

DATA_QUALITY_ERROR = "[DATA_QUALITY_ERROR]too many filtered rows"


class MemoryDoris:
    """Labels per database and JSON rows per table; thread-safe."""

    def __init__(self, not_null: Mapping[str, Sequence[str]] | None = None) -> None:
        self.labels: dict[tuple[str, str], LabelState] = {}
        self.rows: dict[str, list[dict[str, Any]]] = {}
        self.not_null = {table: tuple(columns) for table, columns in (not_null or {}).items()}
        self.precommitted: dict[int, tuple[str, str]] = {}
        """Two-phase loads not yet committed or aborted, by transaction: (database, label)."""
        self.error_logs: dict[str, str] = {}
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
            result = self._load(database, table, label, body, options or StreamLoadOptions())
            if result.outcome is LoadOutcome.PERMANENT:
                error = PermanentStreamLoadError(
                    f"Stream Load of label {label} into {database}.{table} failed permanently: {result.describe()}",
                    error_url=result.error_url, result=result,
                )  # fmt: skip
                error.definitely_not_loaded = True
                raise error
            return IdempotentLoadResult(label, LoadDisposition.LOADED, LabelState.VISIBLE, result, 1)

    def stream_load(
        self, database: str, table: str, body: bytes, *, label: str, options: StreamLoadOptions | None = None
    ) -> StreamLoadResult:
        """One load, answered whatever it says (the client's raw call; probes load two-phase)."""
        with self._lock:
            self._check_up(label)
            return self._load(database, table, label, body, options or StreamLoadOptions())

    def abort_transaction(self, database: str, *, txn_id: int | None = None, label: str | None = None) -> TwoPhaseResult:
        """Abort a PRECOMMITTED load by ``txn_id``: its rows never become visible, its label is free."""
        with self._lock:
            self._check_up(label or str(txn_id))
            pending = self.precommitted.pop(txn_id, None) if txn_id is not None else None
            if pending is None:
                raise PermanentStreamLoadError(f"transaction {txn_id} (label {label}) of {database} is not PRECOMMITTED")
            self.labels[pending] = LabelState.ABORTED
            reply = StreamLoadResult(LoadOutcome.SUCCESS, "Success", f"transaction [{txn_id}] abort successfully.")
            return TwoPhaseResult("abort", reply, None)

    def error_log(self, error_url: str) -> str:
        """The filtered rows of a load, one ``Reason: ...`` line each (src line [] as for a NOT NULL column)."""
        with self._lock:
            return self.error_logs[error_url]

    def _load(self, database: str, table: str, label: str, body: bytes, options: StreamLoadOptions) -> StreamLoadResult:
        lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
        txn_id = next(self._txn)
        refusals = [self._refusal(table, row) for row in lines]
        reasons = [reason for reason in refusals if reason is not None]
        kept = [row for row, reason in zip(lines, refusals) if reason is None]
        filtered = len(reasons)
        error_url = None
        if reasons:
            error_url = f"http://be:8040/api/_load_error_log?file=__shard_{txn_id}/error_log"
            self.error_logs[error_url] = "".join(f"Reason: {reason}. src line []; \n" for reason in reasons)
        counts = {"number_total_rows": len(lines), "number_filtered_rows": filtered, "error_url": error_url}
        if lines and filtered / len(lines) > (options.max_filter_ratio or 0.0):
            self.labels[(database, label)] = LabelState.ABORTED
            return StreamLoadResult(
                outcome=LoadOutcome.PERMANENT, status="Fail", message=DATA_QUALITY_ERROR, label=label, txn_id=txn_id,
                raw={"TxnId": txn_id}, **counts,
            )  # fmt: skip
        if options.two_phase_commit:
            self.labels[(database, label)] = LabelState.PRECOMMITTED
            self.precommitted[txn_id] = (database, label)
        else:
            self.loads += 1
            self.labels[(database, label)] = LabelState.VISIBLE
            self.rows.setdefault(table, []).extend(kept)
        return StreamLoadResult(
            outcome=LoadOutcome.SUCCESS, status="Success", message="OK", label=label, txn_id=txn_id,
            two_phase_commit=options.two_phase_commit, number_loaded_rows=len(kept), **counts,
        )  # fmt: skip

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

    def _refusal(self, table: str, row: Mapping[str, Any]) -> str | None:
        """Why Doris filters ``row`` (the table sink's message for the first NOT NULL column it lacks)."""
        for column in self.not_null.get(table, ()):
            if row.get(column) is None:
                return f"column({column}) values is null while columns is not nullable"
        return None

    def rows_of(self, table: str) -> list[dict[str, Any]]:
        """A copy of the visible rows of ``table``."""
        with self._lock:
            return list(self.rows.get(table, []))

    def close(self) -> None:
        """Nothing to release (the client's interface)."""

    def _check_up(self, label: str) -> None:
        if self.down:
            error = RetryableStreamLoadError(f"Doris unreachable for label {label}: connection refused")
            error.definitely_not_loaded = True
            raise error
