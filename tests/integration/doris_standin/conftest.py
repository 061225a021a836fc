"""Fixtures of the Doris stand-in conformance suite: a fresh server per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from doris_raw import DB, EVENTS_DDL, RawDoris, start_server

from kinesis_doris_devstack.doris_server import DorisServer


@pytest.fixture
def doris() -> Iterator[DorisServer]:
    server = start_server(label_keep_seconds=43200)
    server.execute_sql("", f"CREATE DATABASE {DB}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def raw(doris: DorisServer) -> RawDoris:
    return RawDoris(doris)


@pytest.fixture
def dup_table(doris: DorisServer) -> str:
    """DUPLICATE KEY table ``events(id BIGINT NOT NULL, name VARCHAR(8), amount INT)``."""
    doris.execute_sql(DB, EVENTS_DDL)
    return "events"
