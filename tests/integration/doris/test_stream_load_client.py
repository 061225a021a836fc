"""The Stream Load client against the Doris stand-in and its fault modes, over real HTTP.

Sleeps between retries are recorded instead of slept (the client takes an injectable ``sleep``),
except where the server needs wall time to finish a load.
"""

from __future__ import annotations

import base64
import gzip
import http.client
import http.server
import itertools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
import requests

from airflow_provider_kinesis_doris.core.errors import (
    PermanentStreamLoadError,
    RetryableStreamLoadError,
    UnrecognisedReply,
)
from airflow_provider_kinesis_doris.core.doris.labels import chunk_label
from airflow_provider_kinesis_doris.core.model import Position
from airflow_provider_kinesis_doris.core.doris.client import DorisStreamLoadClient
from airflow_provider_kinesis_doris.core.doris.result import LoadDisposition
from airflow_provider_kinesis_doris.core.doris.options import PrecommittedPolicy, StreamingBody, StreamLoadOptions
from airflow_provider_kinesis_doris.core.doris.connection import DorisConnectionConfig, RetryPolicy
from airflow_provider_kinesis_doris.core.errors import DorisSqlError, LoadOutcomeUnknown
from airflow_provider_kinesis_doris.core.doris.result import IdempotentLoadResult, LabelState, LoadOutcome
from kinesis_doris_devstack.doris_server import DorisServer

pytestmark = pytest.mark.integration

USER = "root"
PASSWORD = "pw-Zq81-never-shown"
DB = "kd_it"
TABLE = "events"
ROWS = b'{"id": 1, "v": "a"}\n{"id": 2, "v": "b"}\n{"id": 3, "v": "c"}\n'
JSON_LINES = StreamLoadOptions.json_lines()
FAST_RETRIES = RetryPolicy(max_attempts=4, initial_backoff_seconds=0.01, max_backoff_seconds=0.05,
                           running_wait_seconds=20, running_poll_seconds=0.1)


@pytest.fixture(scope="module")
def server() -> Iterator[DorisServer]:
    with DorisServer(host="127.0.0.1", fe_port=0, be_port=0, user=USER, password=PASSWORD) as srv:
        srv.execute_sql("", f"CREATE DATABASE IF NOT EXISTS {DB}")
        yield srv


_table_numbers = itertools.count()


@pytest.fixture
def table(server: DorisServer) -> Iterator[str]:
    """A fresh table per test: a delayed publish of an earlier test must not land in it."""
    server.clear_faults()
    name = f"{TABLE}_{next(_table_numbers)}"
    server.execute_sql(
        DB,
        f"CREATE TABLE {name} (id INT NOT NULL, v VARCHAR(16)) DUPLICATE KEY(id) "
        'DISTRIBUTED BY HASH(id) BUCKETS 1 PROPERTIES ("replication_num" = "1")',
    )
    yield name
    server.clear_faults()


@dataclass
class RecordedSleeps:
    seconds: list[float] = field(default_factory=list)

    def __call__(self, value: float) -> None:
        self.seconds.append(value)


def config_for(server: DorisServer, **overrides: Any) -> DorisConnectionConfig:
    base = DorisConnectionConfig(host="127.0.0.1", port=server.fe_port, user=USER, password=PASSWORD,
                                 read_timeout_seconds=10)
    return replace(base, **overrides)


def client_for(
    server: DorisServer, *, sleep: Callable[[float], None] | None = None, **overrides: Any
) -> DorisStreamLoadClient:
    return DorisStreamLoadClient(config_for(server, **overrides), retry_policy=FAST_RETRIES,
                                 sleep=sleep or RecordedSleeps())


def load_once(
    server: DorisServer, table: str, label: str, **client_settings: Any
) -> tuple[IdempotentLoadResult, LabelState]:
    """One idempotent load of ``ROWS`` under ``label`` by a fresh client (``client_settings`` as
    :func:`client_for` takes them): its outcome, and the label's state after it."""
    with client_for(server, **client_settings) as client:
        return client.load_idempotently(DB, table, label, ROWS, JSON_LINES), client.get_load_state(DB, label)


def row_count(server: DorisServer, table: str) -> int:
    return int(server.execute_sql(DB, f"SELECT COUNT(*) FROM {table}")[0][0])


def label_for(name: str, first: int = 1, last: int = 3) -> str:
    return chunk_label("it-pipeline", name, "shardId-000000000001", Position(first), Position(last))


# --- the happy path ----------------------------------------------------------------------------


def test_load_goes_through_the_fe_redirect_and_becomes_visible(server: DorisServer, table: str) -> None:
    label = label_for("happy")
    outcome, state = load_once(server, table, label)
    assert (outcome.disposition, outcome.state) == (LoadDisposition.LOADED, LabelState.VISIBLE)
    assert outcome.attempts == 1
    assert outcome.result is not None and outcome.result.number_loaded_rows == 3
    assert outcome.result.label == label
    assert state is LabelState.VISIBLE
    assert row_count(server, table) == 3


def test_same_label_again_is_reported_already_loaded_without_new_rows(
    server: DorisServer, table: str
) -> None:
    label = label_for("dup")
    with client_for(server) as client:
        client.load_idempotently(DB, table, label, ROWS, JSON_LINES)
        raw = client.stream_load(DB, table, ROWS, label=label, options=JSON_LINES)
        again = client.load_idempotently(DB, table, label, ROWS, JSON_LINES)
    assert raw.outcome is LoadOutcome.DUPLICATE_LABEL and raw.existing_job_status == "FINISHED"
    assert (again.disposition, again.state) == (LoadDisposition.ALREADY_LOADED, LabelState.VISIBLE)
    assert again.result is None
    assert row_count(server, table) == 3


def test_streaming_body_is_sent_with_content_length(server: DorisServer, table: str) -> None:
    pieces = [ROWS[:10], ROWS[10:25], ROWS[25:]]
    body = StreamingBody(length=len(ROWS), chunks=lambda: iter(pieces))
    with client_for(server) as client:
        outcome = client.load_idempotently(DB, table, label_for("streamed"), body, JSON_LINES)
    assert outcome.result is not None and outcome.result.load_bytes == len(ROWS)
    assert row_count(server, table) == 3


def test_gzip_csv_body_is_decompressed_by_the_server(server: DorisServer, table: str) -> None:
    options = StreamLoadOptions.csv(",", gzip=True)
    with client_for(server) as client:
        outcome = client.load_idempotently(DB, table, label_for("gzip"), b"1,a\n2,b\n", options)
    assert outcome.result is not None and outcome.result.number_loaded_rows == 2
    assert outcome.result.load_bytes == len(gzip.compress(b"1,a\n2,b\n", compresslevel=6))
    assert sorted(server.execute_sql(DB, f"SELECT id, v FROM {table}")) == [(1, "a"), (2, "b")]


def test_be_hosts_skip_the_fe_redirect(server: DorisServer, table: str) -> None:
    with client_for(server, be_hosts=(f"127.0.0.1:{server.be_port}",)) as client:
        outcome = client.load_idempotently(DB, table, label_for("direct"), ROWS, JSON_LINES)
    assert outcome.disposition is LoadDisposition.LOADED
    assert row_count(server, table) == 3


# --- faults ------------------------------------------------------------------------------------


def test_publish_timeout_counts_as_loaded(server: DorisServer, table: str) -> None:
    server.inject_fault("publish_timeout")
    label = label_for("publish")
    outcome, state = load_once(server, table, label)
    assert outcome.result is not None and outcome.result.is_publish_timeout
    assert (outcome.disposition, outcome.state) == (LoadDisposition.LOADED, LabelState.COMMITTED)
    assert outcome.attempts == 1
    assert state.is_loaded


TRANSIENT_FAULTS = ["http_500", "reset_before_commit", "too_many_versions", "running_txn_limit"]


@pytest.mark.parametrize("fault", TRANSIENT_FAULTS)
def test_transient_fault_is_retried_with_the_same_label_and_loads_once(
    server: DorisServer, table: str, fault: str
) -> None:
    server.inject_fault(fault)
    label = label_for(fault)
    sleeps = RecordedSleeps()
    outcome, state = load_once(server, table, label, sleep=sleeps)
    assert outcome.disposition is LoadDisposition.LOADED
    assert outcome.attempts == 2
    assert len(sleeps.seconds) == 1 and sleeps.seconds[0] > 0
    assert outcome.result is not None and outcome.result.label == label
    assert state is LabelState.VISIBLE
    assert row_count(server, table) == 3


@pytest.mark.parametrize("fault", ["too_many_versions", "running_txn_limit"])
def test_capacity_faults_are_classified_retryable_on_a_single_attempt(
    server: DorisServer, table: str, fault: str
) -> None:
    server.inject_fault(fault)
    with client_for(server) as client:
        result = client.stream_load(DB, table, ROWS, label=label_for(f"single-{fault}"), options=JSON_LINES)
    assert result.outcome is LoadOutcome.RETRYABLE
    assert row_count(server, table) == 0


def test_reset_after_commit_is_resolved_through_get_load_state(server: DorisServer, table: str) -> None:
    server.inject_fault("reset_after_commit")
    label = label_for("reset-after")
    with client_for(server) as client:
        with pytest.raises(LoadOutcomeUnknown):
            client.stream_load(DB, table, ROWS, label=label, options=JSON_LINES)
        server.inject_fault("reset_after_commit")
        outcome = client.load_idempotently(DB, table, label, ROWS, JSON_LINES)
    assert outcome.disposition is LoadDisposition.ALREADY_LOADED
    assert outcome.state is LabelState.VISIBLE
    assert row_count(server, table) == 3


def test_ambiguous_first_attempt_is_resolved_before_resending(server: DorisServer, table: str) -> None:
    server.inject_fault("reset_after_commit")
    outcome, _ = load_once(server, table, label_for("reset-then-resolve"))
    # The first load committed; the retry found it VISIBLE instead of sending the rows again.
    assert (outcome.disposition, outcome.attempts) == (LoadDisposition.ALREADY_LOADED, 2)
    assert row_count(server, table) == 3


def test_slow_be_beyond_the_client_timeout_is_resolved_without_duplicates(
    server: DorisServer, table: str
) -> None:
    server.inject_fault("slow", seconds=2.0)
    outcome, _ = load_once(server, table, label_for("slow"), sleep=time.sleep, read_timeout_seconds=0.5)
    assert outcome.state is LabelState.VISIBLE
    assert outcome.attempts >= 2
    assert row_count(server, table) == 3


def test_redirect_to_a_dead_be_is_retryable(server: DorisServer, table: str) -> None:
    server.inject_fault("redirect_dead_be")
    label = label_for("dead-be")
    with client_for(server) as client:
        with pytest.raises(RetryableStreamLoadError) as raised:
            client.stream_load(DB, table, ROWS, label=label, options=JSON_LINES)
        assert not isinstance(raised.value, LoadOutcomeUnknown)
        server.inject_fault("redirect_dead_be")
        outcome = client.load_idempotently(DB, table, label, ROWS, JSON_LINES)
    assert (outcome.disposition, outcome.attempts) == (LoadDisposition.LOADED, 2)
    assert row_count(server, table) == 3


def test_retries_give_up_with_a_retryable_error_naming_the_label(server: DorisServer, table: str) -> None:
    server.inject_fault("too_many_versions", count=FAST_RETRIES.max_attempts)
    label = label_for("give-up")
    with client_for(server) as client:
        with pytest.raises(RetryableStreamLoadError, match=f"{label}.*after 4 attempts.*-235"):
            client.load_idempotently(DB, table, label, ROWS, JSON_LINES)
        assert client.get_load_state(DB, label).is_free
    assert row_count(server, table) == 0


def test_data_quality_failure_is_permanent_and_carries_the_error_url(server: DorisServer, table: str) -> None:
    bad_rows = b'{"id": 1, "v": "a"}\n{"id": null, "v": "b"}\n'
    label = label_for("bad-data")
    sleeps = RecordedSleeps()
    with client_for(server, sleep=sleeps) as client:
        with pytest.raises(PermanentStreamLoadError, match="DATA_QUALITY_ERROR") as raised:
            client.load_idempotently(DB, table, label, bad_rows, JSON_LINES)
        state = client.get_load_state(DB, label)
    assert sleeps.seconds == []
    assert raised.value.error_url and raised.value.error_url.startswith("http://")
    error_log = requests.get(raised.value.error_url, timeout=5)
    assert error_log.status_code == 200 and error_log.text.strip()
    assert state is LabelState.ABORTED
    assert row_count(server, table) == 0


def test_unknown_table_is_permanent(server: DorisServer, table: str) -> None:
    with client_for(server) as client:
        with pytest.raises(PermanentStreamLoadError, match="nope"):
            client.load_idempotently(DB, "nope", label_for("no-table"), ROWS, JSON_LINES)


def test_expired_label_is_unknown_and_loads_again() -> None:
    with DorisServer(host="127.0.0.1", fe_port=0, be_port=0, user=USER, password=PASSWORD,
                     label_keep_seconds=1) as srv:
        srv.execute_sql("", f"CREATE DATABASE {DB}")
        srv.execute_sql(DB, f"CREATE TABLE {TABLE} (id INT, v VARCHAR(16)) DUPLICATE KEY(id) "
                            "DISTRIBUTED BY HASH(id) BUCKETS 1")
        label = label_for("expiry")
        with client_for(srv) as client:
            client.load_idempotently(DB, TABLE, label, ROWS, JSON_LINES)
            state = _wait_for_state(client, label, LabelState.UNKNOWN, seconds=10)
            again = client.load_idempotently(DB, TABLE, label, ROWS, JSON_LINES)
        # Past the label window Doris cannot deduplicate: the durable checkpoint must (I7).
        assert state is LabelState.UNKNOWN
        assert again.disposition is LoadDisposition.LOADED
        assert row_count(srv, TABLE) == 6


def _wait_for_state(
    client: DorisStreamLoadClient, label: str, wanted: LabelState, seconds: float
) -> LabelState:
    deadline = time.monotonic() + seconds
    state = client.get_load_state(DB, label)
    while state is not wanted and time.monotonic() < deadline:
        time.sleep(0.2)
        state = client.get_load_state(DB, label)
    return state


# --- two-phase commit --------------------------------------------------------------------------


TWO_PHASE = StreamLoadOptions.json_lines(two_phase_commit=True)


def test_two_phase_load_is_invisible_until_committed_by_txn_id(server: DorisServer, table: str) -> None:
    label = label_for("2pc-commit")
    with client_for(server) as client:
        outcome = client.load_idempotently(DB, table, label, ROWS, TWO_PHASE)
        assert (outcome.state, row_count(server, table)) == (LabelState.PRECOMMITTED, 0)
        assert client.get_load_state(DB, label) is LabelState.PRECOMMITTED
        assert outcome.result is not None and outcome.result.txn_id
        committed = client.commit_transaction(DB, txn_id=outcome.result.txn_id)
        # A repeat is settled by the label's state, whatever Doris's refusal says...
        repeated = client.commit_transaction(DB, txn_id=outcome.result.txn_id, label=label)
        # ...and without a label there is no state to ask, so the refusal stands.
        with pytest.raises(PermanentStreamLoadError, match="not pre-committed"):
            client.commit_transaction(DB, txn_id=outcome.result.txn_id)
        state = client.get_load_state(DB, label)
    assert committed.reply is not None and committed.reply.outcome is LoadOutcome.SUCCESS
    assert committed.state is None
    assert repeated.reply is not None and repeated.reply.outcome is not LoadOutcome.SUCCESS
    assert repeated.state is LabelState.VISIBLE
    assert state is LabelState.VISIBLE
    assert row_count(server, table) == 3


def test_two_phase_abort_by_label_frees_the_label(server: DorisServer, table: str) -> None:
    label = label_for("2pc-abort")
    with client_for(server) as client:
        client.load_idempotently(DB, table, label, ROWS, TWO_PHASE)
        client.abort_transaction(DB, label=label)
        aborted = client.get_load_state(DB, label)
        reloaded = client.load_idempotently(DB, table, label, ROWS, JSON_LINES)
    assert aborted is LabelState.ABORTED
    assert reloaded.disposition is LoadDisposition.LOADED
    assert row_count(server, table) == 3


def test_two_phase_commit_of_unknown_txn_is_permanent(server: DorisServer, table: str) -> None:
    with client_for(server) as client:
        with pytest.raises(PermanentStreamLoadError, match="987654"):
            client.commit_transaction(DB, txn_id=987654)


def test_precommitted_label_fails_by_default(server: DorisServer, table: str) -> None:
    label = label_for("pre-fail")
    with client_for(server) as client:
        client.load_idempotently(DB, table, label, ROWS, TWO_PHASE)
        with pytest.raises(PermanentStreamLoadError, match="PRECOMMITTED"):
            client.load_idempotently(DB, table, label, ROWS, JSON_LINES)
        assert client.get_load_state(DB, label) is LabelState.PRECOMMITTED
    assert row_count(server, table) == 0


@pytest.mark.parametrize(
    ("policy", "disposition"),
    [(PrecommittedPolicy.COMMIT, LoadDisposition.ALREADY_LOADED),
     (PrecommittedPolicy.ABORT_AND_RELOAD, LoadDisposition.LOADED)],
)
def test_precommitted_label_follows_the_policy_and_loads_once(
    server: DorisServer, table: str, policy: PrecommittedPolicy, disposition: LoadDisposition
) -> None:
    label = label_for(f"pre-{policy.value}")
    with client_for(server) as client:
        client.load_idempotently(DB, table, label, ROWS, TWO_PHASE)
        outcome = client.load_idempotently(DB, table, label, ROWS, JSON_LINES, precommitted_policy=policy)
        state = client.get_load_state(DB, label)
    assert outcome.disposition is disposition
    assert state is LabelState.VISIBLE
    assert row_count(server, table) == 3


# --- 2PC and replay settled by state, whatever the wording --------------------------------------

# What the stand-in answered before issue 20 (it acted on the label's newest transaction), and
# what no Doris ever said: the client must reach the same decision from every one of them.
FE_DETAIL = "TStatus: errCode = 2, detailMessage = "
OLD_VISIBLE = FE_DETAIL + "transaction [{txn}] is already visible, not pre-committed."
OLD_ABORTED = FE_DETAIL + "transaction [{txn}] is already aborted, abort reason: user abort"
OLD_NOT_ABORTABLE = FE_DETAIL + "transaction [{txn}] is already visible, could not abort."
UNFORESEEN = "[INTERNAL_ERROR]a wording no version of Doris has used"

Answer = Callable[[dict[str, Any]], "dict[str, Any] | None"]


def as_doris_says(reply: dict[str, Any]) -> dict[str, Any] | None:
    """The stand-in's own reply, which since issue 20 is Doris's wording."""
    return reply


def failures_reworded(msg: str) -> Answer:
    """Every 2PC reply but a Success gets ``msg`` (``{txn}`` is filled with the load's TxnId)."""
    def answer(reply: dict[str, Any]) -> dict[str, Any] | None:
        return reply if reply["status"] == "Success" else {"status": "ANALYSIS_ERROR", "msg": msg}
    return answer


def lose_first_reply(then: Answer = as_doris_says) -> Answer:
    """The first 2PC request takes effect at the BE, but its reply never comes back."""
    lost = itertools.count()

    def answer(reply: dict[str, Any]) -> dict[str, Any] | None:
        return None if next(lost) == 0 else then(reply)
    return answer


def refuse_after_effect(msg: str) -> Answer:
    """The operation took effect but the reply reports a failure (as after a publish wait that
    timed out, or from another version's wording)."""
    def answer(reply: dict[str, Any]) -> dict[str, Any] | None:
        return {"status": "ANALYSIS_ERROR", "msg": msg}
    return answer


class _BeProxy(http.server.BaseHTTPRequestHandler):
    """Stands between the client and the stand-in's BE: forwards every PUT and its reply, but
    hands each 2PC reply to ``answers[0]`` (each load reply to ``answers[1]``) first, which may
    reword it or lose it (``None``: the connection is closed unanswered after the BE acted)."""

    protocol_version = "HTTP/1.1"
    be_port: int
    answers: list[Answer]
    txn_id: list[int]

    def do_PUT(self) -> None:  # noqa: N802 (http.server naming)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        # Plain replies from the BE (no gzip), so 2PC replies can be read and rewritten here.
        dropped = ("host", "expect", "accept-encoding")
        headers = {k: v for k, v in self.headers.items() if k.lower() not in dropped}
        upstream = http.client.HTTPConnection("127.0.0.1", self.be_port, timeout=10)
        try:
            upstream.request("PUT", self.path, body=body, headers=headers)
            response = upstream.getresponse()
            status, payload = response.status, response.read()
        finally:
            upstream.close()
        if status == 200:
            answer = self.answers[0 if self.path.endswith("/_stream_load_2pc") else 1](json.loads(payload))
            if answer is None:
                self.close_connection = True
                return
            if "{txn}" in answer.get("msg", ""):
                answer = {**answer, "msg": answer["msg"].format(txn=self.txn_id[0])}
            payload = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server signature)
        return


@dataclass
class BeProxy:
    port: int
    answers: list[Answer]
    txn_id: list[int]

    def answer_with(self, answer: Answer, txn_id: int = 0) -> None:
        """Answer 2PC requests with ``answer``."""
        self.answers[0] = answer
        self.txn_id[0] = txn_id

    def answer_loads_with(self, answer: Answer) -> None:
        self.answers[1] = answer


@pytest.fixture
def be_proxy(server: DorisServer) -> Iterator[BeProxy]:
    answers: list[Answer] = [as_doris_says, as_doris_says]
    txn_id = [0]
    handler = type("Proxy", (_BeProxy,), {"be_port": server.be_port, "answers": answers, "txn_id": txn_id})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield BeProxy(int(httpd.server_address[1]), answers, txn_id)
    httpd.shutdown()
    httpd.server_close()


def proxied_client(server: DorisServer, proxy: BeProxy) -> DorisStreamLoadClient:
    """Through the FE, whose redirect to the stand-in's BE is mapped onto the proxy."""
    return client_for(server, be_address_map={f"127.0.0.1:{server.be_port}": f"127.0.0.1:{proxy.port}"})


def precommit(client: DorisStreamLoadClient, table: str, label: str) -> int:
    outcome = client.load_idempotently(DB, table, label, ROWS, TWO_PHASE)
    assert outcome.state is LabelState.PRECOMMITTED and outcome.result is not None
    assert outcome.result.txn_id is not None
    return outcome.result.txn_id


@contextmanager
def precommitted_behind(
    server: DorisServer, table: str, proxy: BeProxy, label: str, answer: Answer
) -> Iterator[DorisStreamLoadClient]:
    """A client through ``proxy`` with ``label`` precommitted; from then on ``answer`` answers
    the 2PC requests (``{txn}`` in its wording is the label's TxnId)."""
    with proxied_client(server, proxy) as client:
        proxy.answer_with(answer, precommit(client, table, label))
        yield client


@dataclass(frozen=True)
class RepeatedOperation:
    """The same 2PC operation by label twice (``"commit"`` or ``"abort"``), each reply of
    ``wordings``: the second is settled by the label's ``state``, and the table holds ``rows``."""

    operation: str
    wordings: dict[str, Answer]
    state: LabelState
    rows: int


REPEATED_OPERATIONS = {
    # Doris answers a second commit by label "running transaction not found"; the old stand-in
    # said "already visible". Either way the data is visible, and only the state says so.
    "recommit": RepeatedOperation("commit", {
        "doris": as_doris_says,
        "old": failures_reworded(OLD_VISIBLE),
        "unforeseen": failures_reworded(UNFORESEEN),
    }, LabelState.VISIBLE, 3),
    "reabort": RepeatedOperation("abort", {
        "doris": as_doris_says,
        "old": failures_reworded(OLD_ABORTED),
        "unforeseen": failures_reworded(UNFORESEEN),
    }, LabelState.ABORTED, 0),
}  # fmt: skip


@pytest.mark.parametrize(
    ("case", "wording"), [(case, wording) for case, op in REPEATED_OPERATIONS.items() for wording in sorted(op.wordings)]
)
def test_a_repeated_2pc_operation_by_label_is_settled_by_state(
    server: DorisServer, table: str, be_proxy: BeProxy, case: str, wording: str
) -> None:
    op = REPEATED_OPERATIONS[case]
    label = label_for(f"{case}-{wording}")
    with precommitted_behind(server, table, be_proxy, label, op.wordings[wording]) as client:
        first = getattr(client, f"{op.operation}_transaction")(DB, label=label)
        again = getattr(client, f"{op.operation}_transaction")(DB, label=label)
    assert first.state is None and first.reply is not None
    assert again.state is op.state
    assert again.reply is not None and again.reply.outcome is not LoadOutcome.SUCCESS
    assert row_count(server, table) == op.rows


@pytest.mark.parametrize("be_hosts", [False, True], ids=["via-fe", "be-hosts"])
def test_lost_commit_reply_is_settled_by_state(
    server: DorisServer, table: str, be_proxy: BeProxy, be_hosts: bool
) -> None:
    label = label_for(f"lost-commit-{be_hosts}")
    overrides: dict[str, Any] = (
        {"be_hosts": (f"127.0.0.1:{be_proxy.port}",)} if be_hosts
        else {"be_address_map": {f"127.0.0.1:{server.be_port}": f"127.0.0.1:{be_proxy.port}"}}
    )
    with client_for(server, **overrides) as client:
        txn_id = precommit(client, table, label)
        be_proxy.answer_with(lose_first_reply())
        result = client.commit_transaction(DB, txn_id=txn_id, label=label)
    assert (result.reply, result.state) == (None, LabelState.VISIBLE)
    assert row_count(server, table) == 3


def test_lost_reply_without_a_label_is_an_unknown_outcome(
    server: DorisServer, table: str, be_proxy: BeProxy
) -> None:
    label = label_for("lost-no-label")
    with proxied_client(server, be_proxy) as client:
        txn_id = precommit(client, table, label)
        be_proxy.answer_with(lose_first_reply())
        with pytest.raises(LoadOutcomeUnknown, match="no reply"):
            client.commit_transaction(DB, txn_id=txn_id)
        # The commit went through all the same: the state is the only witness.
        assert client.get_load_state(DB, label) is LabelState.VISIBLE


@dataclass(frozen=True)
class SecondOperation:
    """A 2PC operation refused after the other one settled the label: ``first`` then ``then``
    (``"commit"`` or ``"abort"``), each reply of ``wordings``; the refusal names ``state`` and the
    table holds ``rows``."""

    first: str
    then: str
    wordings: dict[str, Answer]
    state: str
    rows: int


SECOND_OPERATIONS = {
    "abort-after-commit": SecondOperation("commit", "abort", {
        "doris": as_doris_says,
        "old": failures_reworded(OLD_NOT_ABORTABLE),
        "unforeseen": failures_reworded(UNFORESEEN),
    }, "VISIBLE", 3),
    # Even a reply claiming "already visible" cannot make an aborted load count as committed.
    "commit-after-abort": SecondOperation("abort", "commit", {
        "doris": as_doris_says,
        "old": failures_reworded(OLD_ABORTED),
        "old-misleading": failures_reworded(OLD_VISIBLE),
    }, "ABORTED", 0),
}  # fmt: skip


@pytest.mark.parametrize(
    ("case", "wording"), [(case, wording) for case, op in SECOND_OPERATIONS.items() for wording in sorted(op.wordings)]
)
def test_a_2pc_operation_after_the_other_is_refused_by_state(
    server: DorisServer, table: str, be_proxy: BeProxy, case: str, wording: str
) -> None:
    op = SECOND_OPERATIONS[case]
    label = label_for(f"{case}-{wording}")
    with precommitted_behind(server, table, be_proxy, label, op.wordings[wording]) as client:
        getattr(client, f"{op.first}_transaction")(DB, label=label)
        with pytest.raises(PermanentStreamLoadError, match=f"is {op.state}"):
            getattr(client, f"{op.then}_transaction")(DB, label=label)
    assert row_count(server, table) == op.rows


def unknown_shape(reply: dict[str, Any]) -> dict[str, Any] | None:
    """HTTP 200 with a JSON object of none of Doris's reply shapes."""
    return {"result": "fine", "detail": reply}


def test_a_load_reply_of_unknown_shape_raises_a_typed_error(
    server: DorisServer, table: str, be_proxy: BeProxy
) -> None:
    label = label_for("unknown-shape-load")
    with proxied_client(server, be_proxy) as client:
        be_proxy.answer_loads_with(unknown_shape)
        with pytest.raises(UnrecognisedReply, match="keys") as raised:
            client.load_idempotently(DB, table, label, ROWS, JSON_LINES)
        # The load went through behind the unreadable reply: never claimed not loaded.
        assert not raised.value.definitely_not_loaded
        assert client.get_load_state(DB, label) is LabelState.VISIBLE


def test_a_2pc_reply_of_unknown_shape_is_settled_by_state_or_raised(
    server: DorisServer, table: str, be_proxy: BeProxy
) -> None:
    with proxied_client(server, be_proxy) as client:
        label = label_for("unknown-shape-2pc")
        precommit(client, table, label)
        be_proxy.answer_with(unknown_shape)
        settled = client.commit_transaction(DB, label=label)
        other = label_for("unknown-shape-2pc-txn")
        txn_id = precommit(client, table, other)
        with pytest.raises(UnrecognisedReply):
            client.abort_transaction(DB, txn_id=txn_id)
    assert (settled.reply, settled.state) == (None, LabelState.VISIBLE)
    assert row_count(server, table) == 3


# Factories: losing a reply is stateful, so each test gets a fresh answer.
REPLAY_ANSWERS: dict[str, Callable[[], Answer]] = {
    "lost": lose_first_reply,
    "doris-refusal": lambda: refuse_after_effect(FE_DETAIL + "running transaction not found, label=x"),
    "old-refusal": lambda: refuse_after_effect(OLD_VISIBLE),
}


@pytest.mark.parametrize("policy", [PrecommittedPolicy.COMMIT, PrecommittedPolicy.ABORT_AND_RELOAD],
                         ids=lambda policy: policy.value)
@pytest.mark.parametrize("answer", sorted(REPLAY_ANSWERS))
def test_replay_of_a_precommitted_label_is_settled_by_state(
    server: DorisServer, table: str, be_proxy: BeProxy, policy: PrecommittedPolicy, answer: str
) -> None:
    """The replay finds its label PRECOMMITTED and commits or aborts it; the 2PC operation takes
    effect but its reply is lost or reads as a refusal. The replay still ends with the rows
    visible exactly once."""
    label = label_for(f"replay-{policy.value}-{answer}")
    with precommitted_behind(server, table, be_proxy, label, REPLAY_ANSWERS[answer]()) as client:
        outcome = client.load_idempotently(DB, table, label, ROWS, JSON_LINES, precommitted_policy=policy)
        state = client.get_load_state(DB, label)
    committed = policy is PrecommittedPolicy.COMMIT
    assert outcome.disposition is (LoadDisposition.ALREADY_LOADED if committed else LoadDisposition.LOADED)
    assert state is LabelState.VISIBLE
    assert row_count(server, table) == 3


# --- SQL endpoint ------------------------------------------------------------------------------


def test_run_sql_returns_columns_and_rows(server: DorisServer, table: str) -> None:
    with client_for(server) as client:
        client.load_idempotently(DB, table, label_for("sql"), ROWS, JSON_LINES)
        result = client.run_sql(DB, f"SELECT id, v FROM {table} ORDER BY id")
    assert result.columns == ("id", "v")
    assert [tuple(row) for row in result.rows] == [(1, "a"), (2, "b"), (3, "c")]


def test_run_sql_error_names_the_problem(server: DorisServer, table: str) -> None:
    with client_for(server) as client:
        with pytest.raises(DorisSqlError, match="no_such_table"):
            client.run_sql(DB, "SELECT * FROM no_such_table")


# --- credentials and redirect safety -----------------------------------------------------------


@dataclass
class CapturedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class _CapturingHandler(http.server.BaseHTTPRequestHandler):
    """Plays a BE (records requests, answers Success) or an FE (answers 307 to ``redirect_to``)."""

    protocol_version = "HTTP/1.1"
    captured: list[CapturedRequest]
    redirect_to: str | None

    def do_PUT(self) -> None:  # noqa: N802 (http.server naming)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.captured.append(CapturedRequest("PUT", self.path, dict(self.headers.items()), body))
        if self.redirect_to is not None:
            self.send_response(307)
            self.send_header("Location", self.redirect_to + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        reply = json.dumps({"TxnId": 1, "Label": self.headers.get("label", ""), "TwoPhaseCommit": "false",
                            "Status": "Success", "Message": "OK", "NumberLoadedRows": 1}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server signature)
        return


@dataclass
class StandIn:
    """A tiny HTTP server on 127.0.0.1 of this test's own."""

    server: http.server.ThreadingHTTPServer
    captured: list[CapturedRequest]

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])


@pytest.fixture
def stand_ins() -> Iterator[Callable[[str | None], StandIn]]:
    started: list[StandIn] = []

    def start(redirect_to: str | None) -> StandIn:
        captured: list[CapturedRequest] = []
        handler = type("Handler", (_CapturingHandler,), {"captured": captured, "redirect_to": redirect_to})
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        started.append(StandIn(httpd, captured))
        return started[-1]

    yield start
    for stand_in in started:
        stand_in.server.shutdown()
        stand_in.server.server_close()


def expected_basic_auth() -> str:
    return "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


def fe_redirecting_to(stand_ins: Callable[[str | None], StandIn], advertised: str) -> StandIn:
    # Doris puts user:password into the Location userinfo; so does this FE stand-in.
    return stand_ins(f"http://{USER}:{PASSWORD}@{advertised}")


def test_redirect_to_a_host_not_allowed_never_receives_credentials(
    stand_ins
) -> None:  # type: ignore[no-untyped-def]
    be = stand_ins(None)
    fe = fe_redirecting_to(stand_ins, f"localhost:{be.port}")
    config = DorisConnectionConfig(host="127.0.0.1", port=fe.port, user=USER, password=PASSWORD)
    with DorisStreamLoadClient(config, sleep=RecordedSleeps()) as client:
        expected = f"localhost:{be.port}.*allowed_redirect_hosts"
        with pytest.raises(PermanentStreamLoadError, match=expected) as raised:
            client.stream_load(DB, TABLE, ROWS, label=label_for("not-allowed"), options=JSON_LINES)
    assert not any("Authorization" in request.headers for request in be.captured)
    assert be.captured == []
    assert PASSWORD not in str(raised.value)
    # The FE itself got the credentials it needs, and an empty probe body without the label.
    assert [(r.headers.get("Authorization"), r.body, "label" in r.headers) for r in fe.captured] == [
        (expected_basic_auth(), b"", False)
    ]


def test_redirect_to_an_allowed_host_gets_credentials_and_body_but_no_userinfo(
    stand_ins
) -> None:  # type: ignore[no-untyped-def]
    be = stand_ins(None)
    fe = fe_redirecting_to(stand_ins, f"localhost:{be.port}")
    config = DorisConnectionConfig(host="127.0.0.1", port=fe.port, user=USER, password=PASSWORD,
                                   allowed_redirect_hosts=("localhost",))
    label = label_for("allowed")
    with DorisStreamLoadClient(config) as client:
        result = client.stream_load(DB, TABLE, ROWS, label=label, options=JSON_LINES)
    assert result.outcome is LoadOutcome.SUCCESS
    [request] = be.captured
    assert request.headers["Authorization"] == expected_basic_auth()
    assert request.body == ROWS
    assert request.path == f"/api/{DB}/{TABLE}/_stream_load"
    assert (request.headers["label"], request.headers["group_commit"], request.headers["Expect"]) == (
        label, "off_mode", "100-continue")
    assert "Transfer-Encoding" not in request.headers and request.headers["Content-Length"] == str(len(ROWS))


def test_be_address_map_sends_the_load_to_the_reachable_address(
    stand_ins
) -> None:  # type: ignore[no-untyped-def]
    be = stand_ins(None)
    # 10.255.0.1 is never contacted: the map replaces it before any connection.
    fe = fe_redirecting_to(stand_ins, "10.255.0.1:8040")
    config = DorisConnectionConfig(host="127.0.0.1", port=fe.port, user=USER, password=PASSWORD,
                                   be_address_map={"10.255.0.1:8040": f"127.0.0.1:{be.port}"})
    with DorisStreamLoadClient(config) as client:
        result = client.stream_load(DB, TABLE, ROWS, label=label_for("mapped"), options=JSON_LINES)
    assert result.outcome is LoadOutcome.SUCCESS
    assert [request.body for request in be.captured] == [ROWS]


def test_an_fe_address_that_is_really_a_be_cannot_burn_the_label(server: DorisServer, table: str) -> None:
    label = label_for("be-as-fe")
    with client_for(server, port=server.be_port) as client:
        with pytest.raises(PermanentStreamLoadError, match="is a BE"):
            client.stream_load(DB, table, ROWS, label=label, options=JSON_LINES)
    with client_for(server) as client:
        assert client.get_load_state(DB, label) is LabelState.UNKNOWN


def test_password_never_appears_in_errors_reprs_or_logs(
    server: DorisServer, table: str, caplog: pytest.LogCaptureFixture, stand_ins
) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.DEBUG)
    texts: list[str] = []
    with client_for(server) as client:
        texts += [repr(client), repr(client.config), str(client.config)]
        server.inject_fault("redirect_dead_be")
        texts.append(_error_text(lambda: client.stream_load(DB, table, ROWS, label=label_for("pw1"))))
        server.inject_fault("reset_after_commit")
        texts.append(_error_text(lambda: client.stream_load(DB, table, ROWS, label=label_for("pw2"))))
    with client_for(server, password="wrong-" + PASSWORD) as wrong:
        texts.append(_error_text(lambda: wrong.load_idempotently(DB, table, label_for("pw3"), ROWS)))
        texts.append(_error_text(lambda: wrong.get_load_state(DB, "x")))
    with client_for(server, port=1) as unreachable:
        texts.append(_error_text(lambda: unreachable.get_load_state(DB, "x")))
    fe = fe_redirecting_to(stand_ins, "localhost:9")
    with client_for(server, port=fe.port) as redirected:
        texts.append(_error_text(lambda: redirected.stream_load(DB, table, ROWS, label=label_for("pw4"))))
    assert len(texts) == 9 and all(texts)
    assert texts[0] == f"DorisStreamLoadClient(user='{USER}', fe='127.0.0.1:{server.fe_port}')"
    for text in texts + [record.getMessage() for record in caplog.records]:
        assert PASSWORD not in text, text
    assert "Access denied" in texts[5] or "Unauthorized" in texts[5]


def _error_text(action: Callable[[], object]) -> str:
    try:
        action()
    except Exception as exc:  # noqa: BLE001 (the text of any error is what is checked)
        chain = [exc]
        while chain[-1].__cause__ is not None:
            chain.append(chain[-1].__cause__)
        return " | ".join(f"{type(e).__name__}: {e}" for e in chain)
    raise AssertionError("expected an error")
