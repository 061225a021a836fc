"""Hostile Doris names (issue 19, item 6): ``doris_table`` and ``dead_letter_table`` are templated,
so a DAG run's conf can set them. When the task runs, a name Doris could not have fails the task
naming the argument, before any connection is used: a counting loopback server standing in for
both Doris and AWS sees no request at all. A legal name reaches it, so the count can fail.

The operator runs in a child process, as in ``test_operator_arguments.py`` (building one in the
test process outside a DAG would set up Airflow's ORM before the suite's fixtures do).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

pytestmark = pytest.mark.airflow

HOSTILE_TABLES = ["d.a`b", "d.t; DROP TABLE x", "d.t -- c", "d.t/*x*/", "d`x.t", "d.t\nDROP"]
HOSTILE_DEAD_LETTER_TABLES = ["a`b", "t; DROP TABLE x", "t -- c", "t/*x*/"]

RUN = """
import json, sys
from datetime import datetime, timedelta, timezone
from airflow_provider_kinesis_doris import InProcessRunner, ReadConfig, StateConfig
from airflow_provider_kinesis_doris.operators.kinesis_to_doris import KinesisToDorisOperator

class TaskInstance:
    def xcom_push(self, key, value):
        pass

end = datetime.now(timezone.utc) - timedelta(hours=1)
context = {"data_interval_start": end - timedelta(minutes=10), "data_interval_end": end, "ti": TaskInstance()}

def run(doris_table, dead_letter_table):
    loader = KinesisToDorisOperator(
        task_id="load", stream_name="s", doris_table="d.t", checkpoint_table="c", runner=InProcessRunner(),
        state=StateConfig(create_checkpoint_table=False), read=ReadConfig(seal_grace=timedelta(0)),
    )
    # What rendering the templates of a run whose conf names the tables does.
    loader.doris_table, loader.mapping.dead_letter_table = doris_table, dead_letter_table
    try:
        loader.execute({**context, "task": loader})
    except Exception as error:
        return type(error).__name__ + ": " + str(error)
    return "no error"

print(json.dumps([run(table, dead_letter) for table, dead_letter in json.loads(sys.argv[1])]))
"""


class _Counting(BaseHTTPRequestHandler):
    hits: list[str] = []

    def _count(self) -> None:
        self.hits.append(f"{self.command} {self.path}")
        body = b'{"msg": "counting server", "code": 1}'
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = _count

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's signature
        pass


@pytest.fixture
def counting_server() -> Iterator[tuple[int, list[str]]]:
    hits: list[str] = []
    handler = type("Handler", (_Counting,), {"hits": hits})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], hits
    finally:
        server.shutdown()
        server.server_close()


def _run(port: int, cases: list[tuple[str, str | None]]) -> list[str]:
    environment = {
        **os.environ,
        "AIRFLOW_CONN_DORIS_DEFAULT": json.dumps(
            {"conn_type": "doris", "host": "127.0.0.1", "port": port, "login": "loader", "password": "pw", "schema": "d"}
        ),
        "AIRFLOW_CONN_AWS_DEFAULT": json.dumps({"conn_type": "aws", "login": "k", "password": "s", "extra": {
            "region_name": "us-east-1", "endpoint_url": f"http://127.0.0.1:{port}"}}),  # fmt: skip
    }
    ran = subprocess.run(
        [sys.executable, "-c", RUN, json.dumps(cases)], capture_output=True, text=True, timeout=180, env=environment
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    return json.loads(ran.stdout.strip().splitlines()[-1])


def test_hostile_names_fail_the_task_naming_the_argument_and_nothing_reaches_doris_or_aws(
    counting_server: tuple[int, list[str]],
) -> None:
    port, hits = counting_server
    cases: list[tuple[str, str | None]] = [(table, None) for table in HOSTILE_TABLES]
    cases += [("d.t", dead_letter) for dead_letter in HOSTILE_DEAD_LETTER_TABLES]
    cases.append(("d." + "t" * 60, None))  # legal, but its default dead-letter table is too long

    messages = _run(port, cases)

    prefix = "AirflowException: The operator's settings are invalid; nothing was planned or loaded: "
    for (table, dead_letter), message in zip(cases, messages):
        assert message.startswith(prefix), message
        if dead_letter is not None:
            assert message[len(prefix):].startswith(f"mapping.dead_letter_table: {dead_letter!r} is not a valid Doris name")
        elif table.startswith("d.tttt"):
            assert "mapping.dead_letter_table (default '<table>_dead_letter')" in message and "more than Doris's 64" in message
        else:
            part = "database" if "`x" in table else "table"
            assert message[len(prefix):].startswith(f"doris_table {table!r}, its {part}: "), message
    assert hits == [], f"a statement or request reached the server: {hits}"


def test_a_legal_name_does_reach_the_server_so_the_count_above_can_fail(counting_server: tuple[int, list[str]]) -> None:
    port, hits = counting_server

    (message,) = _run(port, [("d.t--c", "t-dl")])

    assert "settings are invalid" not in message, message
    # The preflight's first calls (AWS, then Doris's statements) reach it before the table check.
    assert hits, message
