"""Injected faults (each affects the next ``count`` stream loads) and concurrent loads into one
table: every row exactly once, duplicate labels refused."""

from __future__ import annotations

import http.client
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from doris_raw import DB, RawDoris

pytestmark = pytest.mark.integration

_ROW = b"1\ta\t1\n"


def _count(raw: RawDoris, table: str) -> int:
    return raw.rows(f"SELECT count(*) FROM {table}")[0][0]


def test_publish_timeout_commits_and_becomes_visible_soon(raw: RawDoris, dup_table: str) -> None:
    raw.server.inject_fault("publish_timeout", visible_after_seconds=0.3)
    body = raw.stream_load(dup_table, _ROW, label="pt_1")
    assert body["Status"] == "Publish Timeout" and body["Message"].startswith("[PUBLISH_TIMEOUT]")
    assert raw.load_state("pt_1") == "COMMITTED"
    assert _count(raw, dup_table) == 0
    time.sleep(0.4)
    assert raw.load_state("pt_1") == "VISIBLE" and _count(raw, dup_table) == 1
    again = raw.stream_load(dup_table, _ROW, label="pt_1")
    assert again["ExistingJobStatus"] == "FINISHED"


def test_http_500_commits_nothing(raw: RawDoris, dup_table: str) -> None:
    raw.server.inject_fault("http_500", count=2)
    path = f"/api/{DB}/{dup_table}/_stream_load"
    for _ in range(2):
        assert raw.be("PUT", path, _ROW, **raw.load_headers(label="h5")).status == 500
    assert raw.load_state("h5") == "UNKNOWN" and _count(raw, dup_table) == 0
    assert raw.stream_load(dup_table, _ROW, label="h5")["Status"] == "Success"


def test_reset_before_commit_aborts(raw: RawDoris, dup_table: str) -> None:
    raw.server.inject_fault("reset_before_commit")
    with pytest.raises((ConnectionError, http.client.RemoteDisconnected)):
        raw.be("PUT", f"/api/{DB}/{dup_table}/_stream_load", _ROW, **raw.load_headers(label="rb_1"))
    assert raw.load_state("rb_1") == "ABORTED" and _count(raw, dup_table) == 0


def test_reset_after_commit_is_an_ambiguous_success(raw: RawDoris, dup_table: str) -> None:
    raw.server.inject_fault("reset_after_commit")
    with pytest.raises((ConnectionError, http.client.RemoteDisconnected)):
        raw.be("PUT", f"/api/{DB}/{dup_table}/_stream_load", _ROW, **raw.load_headers(label="ra_1"))
    assert raw.load_state("ra_1") == "VISIBLE" and _count(raw, dup_table) == 1
    retry = raw.stream_load(dup_table, _ROW, label="ra_1")
    assert (retry["Status"], retry["ExistingJobStatus"]) == ("Label Already Exists", "FINISHED")


def test_too_many_versions_fails_with_minus_235_and_frees_the_label(raw: RawDoris, dup_table: str) -> None:
    raw.server.inject_fault("too_many_versions")
    body = raw.stream_load(dup_table, _ROW, label="v_1")
    assert body["Status"] == "Fail" and body["Message"].startswith("[E-235]failed to init rowset builder")
    assert body["TxnId"] > 0 and raw.load_state("v_1") == "ABORTED"
    assert raw.stream_load(dup_table, _ROW, label="v_1")["Status"] == "Success"


def test_running_txn_limit_fails_before_a_transaction_begins(raw: RawDoris, dup_table: str) -> None:
    raw.server.inject_fault("running_txn_limit")
    body = raw.stream_load(dup_table, _ROW, label="rt_1")
    assert body["Status"] == "Fail" and body["TxnId"] == -1
    assert "current running txns on db" in body["Message"] and "larger than limit" in body["Message"]
    assert raw.load_state("rt_1") == "UNKNOWN"


def test_slow_reply_beyond_the_client_timeout_keeps_the_txn_prepare(raw: RawDoris, dup_table: str) -> None:
    raw.server.inject_fault("slow", seconds=0.8)
    connection = http.client.HTTPConnection("127.0.0.1", raw.server.be_port, timeout=0.3)
    connection.request("PUT", f"/api/{DB}/{dup_table}/_stream_load", _ROW, raw.load_headers(label="slow_1"))
    with pytest.raises(TimeoutError):
        connection.getresponse()
    connection.close()
    assert raw.load_state("slow_1") == "PREPARE"
    time.sleep(0.8)
    assert raw.load_state("slow_1") == "VISIBLE"


def test_fault_count_is_honoured(raw: RawDoris, dup_table: str) -> None:
    raw.server.inject_fault("too_many_versions", count=2)
    statuses = [raw.stream_load(dup_table, _ROW)["Status"] for _ in range(3)]
    assert statuses == ["Fail", "Fail", "Success"]
    with pytest.raises(ValueError, match="seconds"):
        raw.server.inject_fault("slow")


def test_concurrent_loads_keep_every_row_exactly_once(raw: RawDoris, dup_table: str) -> None:
    batches = {f"batch_{i}": "".join(f"{i * 100 + j}\tn\t{j}\n" for j in range(50)).encode()
               for i in range(16)}
    attempts = [(label, body) for label, body in batches.items()] * 2  # every label sent twice, concurrently
    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(lambda item: raw.stream_load(dup_table, item[1], label=item[0]), attempts))
    by_label: dict[str, list[str]] = {}
    for (label, _), result in zip(attempts, results):
        by_label.setdefault(label, []).append(result["Status"])
    assert all(sorted(s) == ["Label Already Exists", "Success"] for s in by_label.values()), by_label
    assert raw.rows(f"SELECT count(*), count(DISTINCT id) FROM {dup_table}") == [[16 * 50, 16 * 50]]
