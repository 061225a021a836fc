"""The shared state of one Doris stand-in (:class:`Cluster`): what its FE, BE and MySQL protocol
ports share: credentials, storage, transactions, faults and error logs.
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from urllib.parse import quote

from kinesis_doris_devstack.doris_admin import FrontendAdmin, Session
from kinesis_doris_devstack.doris_dml import execute_dml
from kinesis_doris_devstack.doris_schema import INFORMATION_SCHEMA, DorisSqlError, StatementResult
from kinesis_doris_devstack.doris_sql import Storage
from kinesis_doris_devstack.doris_statements import execute_statement
from kinesis_doris_devstack.doris_txn import TXN_BOOTSTRAP_DDL, TxnManager
from kinesis_doris_devstack.doris_faults import FaultInjector


# --- the shared state of one stand-in ---------------------------------------------------------


class Cluster:
    """What both ports share: credentials, storage, transactions, faults and error logs."""

    def __init__(self, user: str, password: str, root: Path, durable: bool,
                 label_keep_seconds: float, precommit_timeout_seconds: float) -> None:
        self.storage = Storage(root, TXN_BOOTSTRAP_DDL, durable=durable)
        self.txns = TxnManager(self.storage, label_keep_seconds, precommit_timeout_seconds)
        self.txns.abort_orphans()
        self.faults = FaultInjector()
        self.admin = FrontendAdmin(user, password, on_fe_config=self._apply_fe_config, fe_configs={
            "streaming_label_keep_max_second": int(label_keep_seconds),
            "stream_load_default_precommit_timeout_second": int(precommit_timeout_seconds),
        })
        self.error_log_dir = root / "error_log"
        self.stopping = threading.Event()
        self.be_host = "127.0.0.1"
        self.be_port = 0

    def _apply_fe_config(self, key: str, value: str) -> None:
        """The FE configs the stand-in models take effect when set (``ADMIN SET FRONTEND CONFIG``
        or :meth:`DorisServer.set_fe_config`); the others are only shown."""
        if key == "streaming_label_keep_max_second":
            self.txns.set_windows(label_keep_seconds=float(value))
        elif key == "stream_load_default_precommit_timeout_second":
            self.txns.set_windows(precommit_timeout_seconds=float(value))

    def session(self, user: str, remote_ip: str = "127.0.0.1") -> Session:
        """A statement's runner: ``user`` from ``remote_ip``."""
        return Session(self.admin, user, remote_ip)

    def has_database(self, db: str) -> bool:
        with self.storage.lock:
            return self.storage.has_database(db)

    def execute_unlimited(self, user: str, db: str, stmt: str) -> StatementResult:
        """A statement of ``user`` on the MySQL port, which has no row limit."""
        return self.execute_sql(db, stmt, None, self.session(user))

    def credentials_valid(self, user: str, password: str) -> bool:
        return self.admin.authenticate(user, password)

    def write_error_log(self, lines: list[str]) -> str:
        """Store the rejected rows of a load; returns the ``file`` parameter of its ErrorURL."""
        name = f"__shard_{uuid.uuid4().int % 10}/error_log_insert_stmt_{uuid.uuid4().hex}"
        path = self.error_log_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        return name

    def read_error_log(self, name: str) -> str | None:
        path = (self.error_log_dir / name).resolve()
        if self.error_log_dir.resolve() not in path.parents or not path.is_file():
            return None
        return path.read_text(encoding="utf-8")

    def error_url(self, name: str) -> str:
        return f"http://{self.be_host}:{self.be_port}/api/_load_error_log?file={quote(name)}"

    def execute_sql(self, db: str, stmt: str, limit: int | None = 10000, session: Session | None = None) -> StatementResult:
        """Run a statement of ``session`` (default: the in-process API's, unchecked) with ``db`` as the session
        database, which must exist (as when FE's SQL endpoint opens its connection); "" means no
        database; ``limit`` None: every row."""
        runner = session or Session(self.admin, self.admin.user, unchecked=True)
        with self.storage.lock:
            self.txns.sweep()
            if db and db != INFORMATION_SCHEMA and not self.storage.has_database(db):
                raise DorisSqlError(f"Unknown database '{db}'", 1049)
            administrative = self.admin.execute(stmt, (self.be_host, self.be_port), runner)
            if administrative is not None:
                return administrative
            written = execute_dml(self.storage, self.txns, runner, db, stmt,
                                  lambda lines: self.error_url(self.write_error_log(lines)))
            if written is not None:
                return written
            return execute_statement(self.storage, db, stmt, runner, limit)
