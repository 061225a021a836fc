"""The stand-in's SQL endpoint returns at most ``limit`` rows (1000 unless the request sends
``limit``); when a query matches more it says so: the result is marked ``truncated`` and the
stand-in logs a warning naming the limit and the query (docs/usage.md, "Querying the tables")."""

from __future__ import annotations

import logging

import pytest
import requests

from kinesis_doris_devstack.doris_sql import truncation_message
from tests.conftest import DORIS_PASSWORD, DORIS_USER

DB = "usage_limit"
COUNT_TO = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {n}) SELECT x FROM c"


@pytest.fixture
def query(doris_server):  # type: ignore[no-untyped-def]
    doris_server.execute_sql("", f"CREATE DATABASE IF NOT EXISTS {DB}")
    url = f"http://127.0.0.1:{doris_server.fe_port}/api/query/default_cluster/{DB}"

    def post(body: dict) -> list:  # type: ignore[type-arg]
        reply = requests.post(url, json=body, auth=(DORIS_USER, DORIS_PASSWORD), headers={"X-Doris-Stream": "false"}, timeout=30)
        reply.raise_for_status()
        return reply.json()["data"]["data"]

    return post


def test_a_query_over_the_default_limit_is_truncated_and_says_so(query, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    statement = COUNT_TO.format(n=1500)
    with caplog.at_level(logging.WARNING, logger="kinesis_doris_devstack.doris_sql"):
        rows = query({"stmt": statement})

    assert len(rows) == 1000
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert warnings == [
        f"Doris stand-in: the query in database '{DB}' matched more than 1000 rows; only the first 1000 are "
        f'returned (truncated). Ask for more with "limit" in the SQL endpoint\'s request body (default 1000), '
        f"or count with SELECT COUNT(*): {statement}"
    ]


def test_a_query_within_its_limit_is_whole_and_quiet(query, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    with caplog.at_level(logging.WARNING, logger="kinesis_doris_devstack.doris_sql"):
        assert len(query({"stmt": COUNT_TO.format(n=1500), "limit": 5000})) == 1500
        assert len(query({"stmt": COUNT_TO.format(n=1000)})) == 1000  # exactly the limit: nothing cut
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]


def test_the_in_process_result_is_marked_truncated(doris_server) -> None:  # type: ignore[no-untyped-def]
    doris_server.execute_sql("", f"CREATE DATABASE IF NOT EXISTS {DB}")
    cluster = doris_server._running()
    assert cluster.execute_sql(DB, COUNT_TO.format(n=30), 10).truncated is True
    assert cluster.execute_sql(DB, COUNT_TO.format(n=10), 10).truncated is False


def test_the_message_shortens_a_long_statement() -> None:
    statement = "SELECT " + ", ".join(f"c{i}" for i in range(200)) + " FROM t"
    message = truncation_message("db", statement, 1000)
    assert message.endswith("...")
    assert len(message.split("SELECT COUNT(*): ", 1)[1]) == 200
