"""Transactions and labels of the Doris stand-in (the FE ``DatabaseTransactionMgr`` part).

Per database, transactions live in the SQLite table ``__doris_txns`` next to the data, so a
commit applies the rows and marks the transaction VISIBLE in one SQLite transaction, and a
``--data-dir`` server keeps its labels across restarts. States and timers follow reference
PREPARE aborts after the load's ``timeout``, PRECOMMITTED after the
pre-commit timeout, finished transactions are forgotten after the label-keep window.
Timers are evaluated lazily: :meth:`TxnManager.sweep` runs before every operation.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kinesis_doris_devstack.doris_schema import DorisSqlError, TableSchema
from kinesis_doris_devstack.doris_sql import Storage, transaction
from kinesis_doris_devstack.doris_table_models import StagedRow, apply_rows

PREPARE, PRECOMMITTED, COMMITTED = "PREPARE", "PRECOMMITTED", "COMMITTED"
VISIBLE, ABORTED = "VISIBLE", "ABORTED"
LABEL_PATTERN = re.compile(r"^[-_A-Za-z0-9:]{1,128}$")
_EXISTING_JOB_STATUS = {
    PREPARE: "RUNNING", PRECOMMITTED: "PRECOMMITTED", COMMITTED: "FINISHED", VISIBLE: "FINISHED",
}
_FIRST_TXN_ID = 1000
_FE_DETAIL = "TStatus: errCode = 2, detailMessage = "
_NOT_FOUND_DETAIL = "TStatus: errCode = 7, detailMessage = "
# The reason DatabaseTransactionMgr.abortTransaction2PC records for a 2PC abort.
USER_ABORT_REASON = "User Abort"

TXN_BOOTSTRAP_DDL = (
    """CREATE TABLE IF NOT EXISTS __doris_txns (
        txn_id INTEGER PRIMARY KEY,
        label TEXT NOT NULL,
        table_name TEXT NOT NULL,
        state TEXT NOT NULL,
        created_at REAL NOT NULL,
        prepare_deadline REAL NOT NULL,
        precommit_deadline REAL,
        visible_at REAL,
        finished_at REAL,
        reason TEXT,
        staged_rows TEXT
    )""",
    "CREATE INDEX IF NOT EXISTS __doris_txns_by_label ON __doris_txns (label)",
)


class TxnError(Exception):
    """A transaction operation failed; ``code`` is the Doris status name, ``str()`` the detail."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code


class LabelAlreadyExists(TxnError):
    """A non-aborted transaction holds the label."""

    def __init__(self, label: str, txn_id: int, state: str) -> None:
        super().__init__(
            "LABEL_ALREADY_EXISTS",
            f"{_FE_DETAIL}Label [{label}] has already been used, relate to txn [{txn_id}]",
        )
        self.existing_job_status = _EXISTING_JOB_STATUS[state]


@dataclass(frozen=True)
class Txn:
    """One row of ``__doris_txns``."""

    txn_id: int
    label: str
    table_name: str
    state: str
    reason: str | None


def _encode_rows(rows: Sequence[StagedRow]) -> str:
    return json.dumps([[list(r.values), r.sequence, r.delete] for r in rows], default=str)


def _decode_rows(text: str | None) -> list[StagedRow]:
    decoded = json.loads(text or "[]")
    return [StagedRow(tuple(values), sequence, delete) for values, sequence, delete in decoded]


class TxnManager:
    """Labels and transaction states of every database in ``storage``.

    :param storage: the stand-in's storage; its lock guards every call.
    :param label_keep_seconds: how long a finished transaction (and its label) is remembered.
    :param precommit_timeout_seconds: after this, a PRECOMMITTED transaction is aborted.
    :param clock: wall-clock seconds (injectable for tests).
    """

    def __init__(
        self,
        storage: Storage,
        label_keep_seconds: float,
        precommit_timeout_seconds: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._storage = storage
        self._label_keep_seconds = label_keep_seconds
        self._precommit_timeout_seconds = precommit_timeout_seconds
        self._clock = clock
        stored = [self._stored_last_id(db) for db in storage.database_names()]
        self._last_txn_id = max([_FIRST_TXN_ID, *stored])
        # Rows applied per (db, table) since start: on a UNIQUE table a load applied twice leaves
        # no trace in the rows, so tests count applications here.
        self._applied_rows: Counter[tuple[str, str]] = Counter()

    def set_windows(self, label_keep_seconds: float | None = None, precommit_timeout_seconds: float | None = None) -> None:
        """Change the label window or the precommit timeout from now on, as ``ADMIN SET FRONTEND
        CONFIG`` changes ``streaming_label_keep_max_second`` / ``stream_load_default_precommit_timeout_second``."""
        with self._storage.lock:
            if label_keep_seconds is not None:
                self._label_keep_seconds = label_keep_seconds
            if precommit_timeout_seconds is not None:
                self._precommit_timeout_seconds = precommit_timeout_seconds

    def _stored_last_id(self, db: str) -> int:
        row = self._storage.connection(db).execute(
            "SELECT value FROM __doris_meta WHERE key = 'last_txn_id'"
        ).fetchone()
        return int(row[0]) if row else 0

    def abort_orphans(self) -> None:
        """Abort PREPARE transactions left by a previous process (their loads died with it),
        as FE aborts the transactions of a restarted coordinator BE."""
        with self._storage.lock:
            for db in self._storage.database_names():
                self._finish_where(db, "state = ?", (PREPARE,), ABORTED, "coordinate BE restarted")

    # --- begin / commit / abort -------------------------------------------------------

    def begin(self, db: str, table: str, label: str, timeout_seconds: float) -> int:
        """Create a PREPARE transaction for a stream load; returns its id.

        :raises TxnError: bad label, unknown database or table.
        :raises LabelAlreadyExists: a non-aborted transaction holds the label in ``db``.
        """
        if not LABEL_PATTERN.match(label):
            raise TxnError(
                "ANALYSIS_ERROR",
                f"{_FE_DETAIL}Label format error. regex: ^[-_A-Za-z0-9:]{{1,128}}$, label: {label}",
            )
        with self._storage.lock:
            self.sweep()
            if not self._storage.has_database(db):
                raise TxnError("NOT_FOUND", f"{_NOT_FOUND_DETAIL}unknown database, database={db}")
            if self._storage.table_schema(db, table) is None:
                raise TxnError("NOT_FOUND", f"{_NOT_FOUND_DETAIL}table not found, tableName={table}")
            holder = self._connection(db).execute(
                "SELECT txn_id, state FROM __doris_txns WHERE label = ? AND state != ? ORDER BY txn_id DESC",
                (label, ABORTED),
            ).fetchone()
            if holder is not None:
                raise LabelAlreadyExists(label, holder[0], holder[1])
            self._last_txn_id += 1
            now = self._clock()
            connection = self._connection(db)
            with transaction(connection):
                connection.execute(
                    "INSERT INTO __doris_txns (txn_id, label, table_name, state, created_at, "
                    "prepare_deadline) VALUES (?, ?, ?, ?, ?, ?)",
                    (self._last_txn_id, label, table, PREPARE, now, now + timeout_seconds),
                )
                connection.execute(
                    "INSERT OR REPLACE INTO __doris_meta VALUES ('last_txn_id', ?)", (str(self._last_txn_id),)
                )
            return self._last_txn_id

    def running_txn_count(self, db: str) -> int:
        with self._storage.lock:
            row = self._connection(db).execute(
                "SELECT count(*) FROM __doris_txns WHERE state IN (?, ?)", (PREPARE, PRECOMMITTED)
            ).fetchone()
            return int(row[0])

    def commit(self, db: str, txn_id: int, rows: Sequence[StagedRow]) -> None:
        """Apply the rows and make the transaction VISIBLE.

        :raises TxnError: the transaction is no longer PREPARE (e.g. aborted by its timeout).
        """
        with self._storage.lock:
            txn = self._prepared(db, txn_id)
            connection = self._connection(db)
            with transaction(connection):
                self._apply(db, txn.table_name, rows)
                self._set_state(connection, txn_id, VISIBLE, finished_at=self._clock())

    def precommit(self, db: str, txn_id: int, rows: Sequence[StagedRow]) -> None:
        """Keep the rows invisible until a 2PC commit (two_phase_commit: true)."""
        with self._storage.lock:
            self._prepared(db, txn_id)
            connection = self._connection(db)
            with transaction(connection):
                deadline = self._clock() + self._precommit_timeout_seconds
                connection.execute(
                    "UPDATE __doris_txns SET state = ?, staged_rows = ?, precommit_deadline = ? "
                    "WHERE txn_id = ?",
                    (PRECOMMITTED, _encode_rows(rows), deadline, txn_id),
                )

    def commit_publish_later(
        self, db: str, txn_id: int, rows: Sequence[StagedRow], delay_seconds: float
    ) -> None:
        """COMMITTED now, VISIBLE after ``delay_seconds`` (a publish timeout)."""
        with self._storage.lock:
            self._prepared(db, txn_id)
            connection = self._connection(db)
            with transaction(connection):
                connection.execute(
                    "UPDATE __doris_txns SET state = ?, staged_rows = ?, visible_at = ? WHERE txn_id = ?",
                    (COMMITTED, _encode_rows(rows), self._clock() + delay_seconds, txn_id),
                )

    def abort(self, db: str, txn_id: int, reason: str) -> None:
        """Roll a PREPARE or PRECOMMITTED transaction back (its label becomes reusable)."""
        with self._storage.lock:
            if self._storage.has_database(db):
                self._finish_where(db, "txn_id = ? AND state IN (?, ?)", (txn_id, PREPARE, PRECOMMITTED),
                                   ABORTED, reason)

    def _prepared(self, db: str, txn_id: int) -> Txn:
        self.sweep()
        txn = self._find(db, txn_id)
        if txn is None:
            raise TxnError("NOT_FOUND", f"{_FE_DETAIL}transaction [{txn_id}] not found")
        if txn.state != PREPARE:
            raise TxnError("CANCELLED", f"transaction [{txn_id}] is {txn.state}: {txn.reason or 'aborted'}")
        return txn

    # --- two-phase commit ---------------------------------------------------------------

    def commit_or_abort(self, db: str, operation: str, txn_id: int | None, label: str | None,
                        authorize: Callable[[str], None]) -> None:
        """Phase 2 of a 2PC load, by ``txn_id`` (which wins when both are sent) or by ``label``.

        :param authorize: called with the transaction's table once it is found, before acting
            (``loadTxn2PCImpl`` checks LOAD on the transaction's tables); raises to refuse.
        :raises TxnError: unknown transaction or a state that does not allow the operation.
        """
        with self._storage.lock:
            self.sweep()
            if not self._storage.has_database(db):
                raise TxnError("ANALYSIS_ERROR", f"{_FE_DETAIL}unknown database, database={db}")
            if txn_id is None:
                txn = self._running_for_label(db, label or "", operation)
            else:
                txn = self._find(db, txn_id)
                if txn is None:
                    raise TxnError("ANALYSIS_ERROR", f"{_FE_DETAIL}transaction [{txn_id}] not found")
            authorize(txn.table_name)
            if operation == "commit":
                self._commit_precommitted(db, txn)
            else:
                self._abort_by_user(db, txn)

    def _running_for_label(self, db: str, label: str, operation: str) -> Txn:
        """The label's transaction a 2PC operation may act on, as FE ``loadTxn2PCImpl`` looks it
        up through ``DatabaseTransactionMgr.getTransactionIdByLabel``: only a PRECOMMITTED one for
        a commit, a PRECOMMITTED or PREPARE one for an abort. A finished transaction is never
        found by label, so a repeated commit is refused whatever the label's state."""
        wanted = (PRECOMMITTED,) if operation == "commit" else (PRECOMMITTED, PREPARE)
        rows = self._connection(db).execute(
            "SELECT txn_id, label, table_name, state, reason FROM __doris_txns WHERE label = ? "
            "ORDER BY txn_id",
            (label,),
        ).fetchall()
        if not rows:
            raise TxnError("ANALYSIS_ERROR", f"{_FE_DETAIL}transaction not found, label={label}")
        running = [Txn(*row) for row in rows if row[3] in wanted]
        if not running:
            raise TxnError("ANALYSIS_ERROR", f"{_FE_DETAIL}running transaction not found, label={label}")
        return running[0]

    def _commit_precommitted(self, db: str, txn: Txn) -> None:
        # Texts of DatabaseTransactionMgr.checkTransactionStateBeforeCommit with is2PC = true.
        if txn.state != PRECOMMITTED:
            detail = {
                VISIBLE: "is already visible, not pre-committed.",
                COMMITTED: "is already committed, not pre-committed.",
                ABORTED: f"is already aborted. abort reason: {txn.reason}",
                PREPARE: "is prepare, not pre-committed.",
            }[txn.state]
            raise TxnError("ANALYSIS_ERROR", f"{_FE_DETAIL}transaction [{txn.txn_id}] {detail}")
        if self._storage.table_schema(db, txn.table_name) is None:
            raise TxnError("ANALYSIS_ERROR", f"{_FE_DETAIL}table not found, tableName={txn.table_name}")
        self._publish(db, txn.txn_id)

    def _abort_by_user(self, db: str, txn: Txn) -> None:
        # Texts of DatabaseTransactionMgr.unprotectAbortTransaction: the state is printed as the
        # enum name (upper case), and an aborted one with a comma where commit has a period.
        if txn.state in (VISIBLE, COMMITTED):
            detail = f"is already {txn.state}, could not abort."
            raise TxnError("ANALYSIS_ERROR", f"{_FE_DETAIL}transaction [{txn.txn_id}] {detail}")
        if txn.state == ABORTED:
            detail = f"is already aborted, abort reason: {txn.reason}"
            raise TxnError("ANALYSIS_ERROR", f"{_FE_DETAIL}transaction [{txn.txn_id}] {detail}")
        self._finish_where(db, "txn_id = ?", (txn.txn_id,), ABORTED, USER_ABORT_REASON)

    # --- queries ------------------------------------------------------------------------

    def label_state(self, db: str, label: str) -> str:
        """State of the newest transaction carrying ``label``, or ``UNKNOWN``.

        :raises TxnError: unknown database.
        """
        with self._storage.lock:
            self.sweep()
            if not self._storage.has_database(db):
                raise TxnError("NOT_FOUND", f"unknown database, database={db}")
            txn = self._newest_for_label(db, label)
            return txn.state if txn else "UNKNOWN"

    def txn(self, db: str, txn_id: int) -> Txn | None:
        with self._storage.lock:
            self.sweep()
            return self._find(db, txn_id) if self._storage.has_database(db) else None

    def _find(self, db: str, txn_id: int) -> Txn | None:
        row = self._connection(db).execute(
            "SELECT txn_id, label, table_name, state, reason FROM __doris_txns WHERE txn_id = ?", (txn_id,)
        ).fetchone()
        return Txn(*row) if row else None

    def _newest_for_label(self, db: str, label: str) -> Txn | None:
        row = self._connection(db).execute(
            "SELECT txn_id, label, table_name, state, reason FROM __doris_txns WHERE label = ? "
            "ORDER BY txn_id DESC LIMIT 1",
            (label,),
        ).fetchone()
        return Txn(*row) if row else None

    # --- timers -----------------------------------------------------------------------

    def sweep(self) -> None:
        """Fire every due timer: PREPARE/PRECOMMITTED timeouts, delayed publishes, label expiry."""
        with self._storage.lock:
            now = self._clock()
            for db in self._storage.database_names():
                with transaction(self._connection(db)) as connection:
                    self._finish(connection, "state = ? AND prepare_deadline <= ?", (PREPARE, now), ABORTED,
                                 "timeout by txn manager")
                    self._finish(connection, "state = ? AND precommit_deadline <= ?", (PRECOMMITTED, now),
                                 ABORTED, "precommit timeout")
                    connection.execute(
                        "DELETE FROM __doris_txns WHERE state IN (?, ?) AND finished_at <= ?",
                        (VISIBLE, ABORTED, now - self._label_keep_seconds),
                    )
                due = self._connection(db).execute(
                    "SELECT txn_id FROM __doris_txns WHERE state = ? AND visible_at <= ? ORDER BY txn_id",
                    (COMMITTED, now),
                ).fetchall()
                for (txn_id,) in due:
                    self._publish(db, txn_id)

    # --- helpers -------------------------------------------------------------------------

    def _connection(self, db: str) -> sqlite3.Connection:
        return self._storage.connection(db)

    def _publish(self, db: str, txn_id: int) -> None:
        """Apply the staged rows of a PRECOMMITTED/COMMITTED transaction and make it VISIBLE."""
        connection = self._connection(db)
        row = connection.execute(
            "SELECT table_name, staged_rows FROM __doris_txns WHERE txn_id = ?", (txn_id,)
        ).fetchone()
        with transaction(connection):
            self._apply(db, row[0], _decode_rows(row[1]))
            self._set_state(connection, txn_id, VISIBLE, finished_at=self._clock())

    def _apply(self, db: str, table: str, rows: Sequence[StagedRow]) -> None:
        schema: TableSchema | None = self._storage.table_schema(db, table)
        if schema is None:
            return  # the table was dropped while the load ran: Doris drops its data too
        try:
            apply_rows(self._connection(db), schema, rows)
        except sqlite3.Error as exc:
            raise DorisSqlError(f"failed to write rows of table {table}: {exc}") from exc
        self._applied_rows[(db, table)] += len(rows)

    def applied_row_count(self, db: str, table: str) -> int:
        """Rows that committed loads applied to ``db.table`` since this manager started (each
        application counts, even when a UNIQUE key replaced an earlier row)."""
        with self._storage.lock:
            self.sweep()
            return self._applied_rows[(db, table)]

    def _set_state(self, connection: sqlite3.Connection, txn_id: int, state: str, finished_at: float) -> None:
        connection.execute(
            "UPDATE __doris_txns SET state = ?, finished_at = ?, staged_rows = NULL WHERE txn_id = ?",
            (state, finished_at, txn_id),
        )

    def _finish_where(
        self, db: str, condition: str, params: tuple[Any, ...], state: str, reason: str
    ) -> None:
        """Finish the matching transactions in one SQLite transaction."""
        with transaction(self._connection(db)) as connection:
            self._finish(connection, condition, params, state, reason)

    def _finish(self, connection: sqlite3.Connection, condition: str, params: tuple[Any, ...],
                state: str, reason: str) -> None:
        connection.execute(
            "UPDATE __doris_txns SET state = ?, reason = ?, finished_at = ?, staged_rows = NULL "
            f"WHERE {condition}",
            (state, reason, self._clock(), *params),
        )
