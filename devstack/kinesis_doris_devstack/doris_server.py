"""A Stream Load compatible local Doris stand-in: an FE port that authenticates and answers
``307`` to a BE port, a BE port that runs the load, and the FE's MySQL protocol port
(``query_port``, :mod:`kinesis_doris_devstack.doris_mysql`), all backed by SQLite.

Behaviour follows Doris's Stream Load wire behaviour as ``docs/doris.md`` describes it; what is
and is not emulated is listed in ``docs/doris-standin.md``. Use it in-process::

    with DorisServer(password="secret") as doris:
        doris.execute_sql("", "CREATE DATABASE demo")
        ...  # PUT http://127.0.0.1:<doris.fe_port>/api/demo/<table>/_stream_load

or as a process: ``python -m kinesis_doris_devstack.doris_server --fe-port 0``
prints one JSON line ``{"fe_port": ..., "be_port": ..., "query_port": ..., "pid": ...}`` once it
listens.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kinesis_doris_devstack.doris_mysql import DorisMysqlServer
from kinesis_doris_devstack.doris_be_http import BackendHandler
from kinesis_doris_devstack.doris_cluster import Cluster
from kinesis_doris_devstack.doris_fe_http import FrontendHandler
from kinesis_doris_devstack.doris_http import StandInHTTPServer

log = logging.getLogger(__name__)


# --- public API -----------------------------------------------------------------------------


class DorisServer:
    """A local Doris stand-in with an FE and a BE HTTP port and the FE's MySQL protocol port.

    :param host: address every port binds to (keep it on loopback).
    :param fe_port: FE HTTP port; 0 picks a free one (read :attr:`fe_port` after :meth:`start`).
    :param be_port: BE HTTP port; 0 picks a free one.
    :param query_port: FE MySQL protocol port (Doris ``query_port``); 0 picks a free one.
    :param user: the one user that may log in.
    :param password: its password.
    :param data_dir: directory of the SQLite files; data and labels survive restarts. None keeps
        everything in a temporary directory removed by :meth:`stop`.
    :param label_keep_seconds: how long finished labels are remembered (Doris
        ``streaming_label_keep_max_second``, 12 h).
    :param precommit_timeout_seconds: when PRECOMMITTED 2PC transactions are aborted.
    :param be_advertised_host: host written into FE redirects and ErrorURLs (default ``host``).
    """

    def __init__(self, host: str = "127.0.0.1", fe_port: int = 0, be_port: int = 0,
                 user: str = "root", password: str = "", data_dir: str | None = None,
                 label_keep_seconds: float = 43200, precommit_timeout_seconds: float = 3600,
                 be_advertised_host: str | None = None, query_port: int = 0) -> None:
        self.host = host
        self.fe_port = fe_port
        self.be_port = be_port
        self.query_port = query_port
        self._user = user
        self._password = password
        self._data_dir = data_dir
        self._label_keep_seconds = label_keep_seconds
        self._precommit_timeout_seconds = precommit_timeout_seconds
        self._be_advertised_host = be_advertised_host or host
        self._temp_dir: tempfile.TemporaryDirectory[str] | None = None
        self._cluster: Cluster | None = None
        self._servers: list[StandInHTTPServer] = []
        self._threads: list[threading.Thread] = []
        self._mysql: DorisMysqlServer | None = None

    def __repr__(self) -> str:
        return (f"DorisServer(host={self.host!r}, fe_port={self.fe_port}, be_port={self.be_port}, "
                f"query_port={self.query_port}, user={self._user!r})")

    @property
    def fe_url(self) -> str:
        return f"http://{self.host}:{self.fe_port}"

    def start(self) -> DorisServer:
        """Bind the three ports and serve in background threads."""
        if self._data_dir is None:
            self._temp_dir = tempfile.TemporaryDirectory(prefix="doris-standin-")
            root, durable = Path(self._temp_dir.name), False
        else:
            root, durable = Path(self._data_dir), True
        cluster = Cluster(self._user, self._password, root, durable,
                           self._label_keep_seconds, self._precommit_timeout_seconds)
        self._cluster = cluster
        self._mysql = DorisMysqlServer(cluster.execute_unlimited, cluster.has_database, cluster.admin.password_of,
                                       self.host, self.query_port)
        try:
            self.query_port = self._mysql.start().port
        except BaseException:
            self.stop()
            raise
        backend = StandInHTTPServer((self.host, self.be_port), BackendHandler, cluster)
        frontend = StandInHTTPServer((self.host, self.fe_port), FrontendHandler, cluster)
        self._servers = [backend, frontend]
        self.be_port, self.fe_port = backend.server_address[1], frontend.server_address[1]
        cluster.be_host, cluster.be_port = self._be_advertised_host, self.be_port
        for server in self._servers:
            thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                                      name=f"doris-standin-{server.server_address[1]}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        """Stop serving, wake sleeping (``slow``) loads, close storage, remove a temp dir."""
        if self._cluster is not None:
            self._cluster.stopping.set()
        if self._mysql is not None:
            self._mysql.stop()
        for server in self._servers:
            server.shutdown()
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        if self._cluster is not None:
            self._cluster.storage.close()
        if self._temp_dir is not None:
            self._temp_dir.cleanup()
        self._servers, self._threads, self._cluster, self._temp_dir = [], [], None, None
        self._mysql = None

    def __enter__(self) -> DorisServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _running(self) -> Cluster:
        if self._cluster is None:
            raise RuntimeError("DorisServer is not started")
        return self._cluster

    def inject_fault(self, kind: str, count: int = 1, **params: Any) -> None:
        """Make the next ``count`` stream loads fail as ``kind`` (see
        :data:`~kinesis_doris_devstack.doris_faults.FAULT_KINDS`).

        :param kind: fault kind, e.g. ``publish_timeout`` or ``slow``.
        :param count: how many stream loads it affects.
        :param params: ``seconds`` for ``slow``; ``visible_after_seconds`` for ``publish_timeout``.
        :raises ValueError: unknown kind, bad count or missing parameter.
        """
        self._running().faults.add(kind, count, **params)

    def clear_faults(self) -> None:
        """Drop every pending fault."""
        self._running().faults.clear()

    def pending_faults(self) -> int:
        """How many stream loads queued faults would still affect (0: every fault struck)."""
        return self._running().faults.pending()

    def applied_row_count(self, db: str, table: str) -> int:
        """Rows committed loads applied to ``db.table`` since start, one per row per load: shows
        a load applied twice even on a UNIQUE KEY table, whose rows hide it.

        :param db: the database.
        :param table: the table.
        """
        return self._running().txns.applied_row_count(db, table)

    def set_fe_config(self, key: str, value: object) -> None:
        """Set an FE config as ``ADMIN SET FRONTEND CONFIG`` does; ``ADMIN SHOW FRONTEND CONFIG``
        answers it. ``streaming_label_keep_max_second`` and
        ``stream_load_default_precommit_timeout_second`` also take effect on the transactions;
        the others (``label_num_threshold``, ``max_running_txn_num_per_db``...) are only shown.
        """
        self._running().admin.set_fe_config(key, value)

    def set_be_config(self, key: str, value: object) -> None:
        """Set a BE config that ``SHOW BACKEND CONFIG`` answers (shown only: the stand-in's BE
        does not change behaviour, e.g. ``wait_internal_group_commit_finish``)."""
        self._running().admin.set_be_config(key, value)

    def advertise_be_host(self, host: str) -> None:
        """Make the FE advertise its BE as ``host`` from now on, as a BE registered under a name the
        client does not know: in redirects, ErrorURLs and ``SHOW BACKENDS``."""
        self._running().be_host = host

    def set_grants(self, grants: Mapping[str, Iterable[str]], user: str | None = None) -> None:
        """Give ``user`` (default: the stand-in's first user) exactly these privileges, by level
        (``"*"``, ``"db"``, ``"db.table"``), as ``GRANT`` would and ``SHOW GRANTS`` prints them.
        Statements, loads and 2PC operations are checked against them as Doris checks them."""
        self._running().admin.set_grants(grants, user)

    def execute_sql(self, db: str, stmt: str) -> list[tuple[Any, ...]]:
        """Run one statement of the SQL subset in-process, as the stand-in's first user but not
        checked against privileges (the test's own way in); rows for queries, [] otherwise.

        :param db: current database ("" for none, e.g. for CREATE DATABASE).
        :param stmt: the statement.
        :raises DorisSqlError: the statement fails as Doris would refuse it.
        """
        return list(self._running().execute_sql(db, stmt).rows)


# --- CLI ------------------------------------------------------------------------------------


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Stream Load compatible local Doris stand-in")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--fe-port", type=int, default=0)
    parser.add_argument("--be-port", type=int, default=0)
    parser.add_argument("--query-port", type=int, default=0, help="the MySQL protocol port (Doris query_port)")
    parser.add_argument("--user", default="root")
    parser.add_argument("--password", default=None,
                        help="default: env DORIS_STANDIN_PASSWORD, else empty")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--label-keep-seconds", type=float, default=43200)
    parser.add_argument("--precommit-timeout-seconds", type=float, default=3600)
    parser.add_argument("--be-advertised-host", default=None)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM/SIGINT; print the ports as one JSON line once listening."""
    args = _parse_args(argv)
    password = args.password if args.password is not None else os.environ.get("DORIS_STANDIN_PASSWORD", "")
    server = DorisServer(args.host, args.fe_port, args.be_port, args.user, password, args.data_dir,
                         args.label_keep_seconds, args.precommit_timeout_seconds, args.be_advertised_host,
                         args.query_port)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    server.start()
    try:
        announcement = {"fe_port": server.fe_port, "be_port": server.be_port, "query_port": server.query_port,
                        "pid": os.getpid()}
        print(json.dumps(announcement), flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
