"""Labels and transactions: uniqueness per database, Label Already
Exists with ExistingJobStatus, reuse after ABORTED, expiry, 2PC and its timers, restarts."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from doris_raw import DB, EVENTS_DDL, RawDoris, events_server, start_server

from kinesis_doris_devstack.doris_server import DorisServer

pytestmark = pytest.mark.integration

_ROW = b"1\ta\t1\n"


def _in_background(target, *args, **kwargs) -> tuple[threading.Thread, dict]:
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(target(*args, **kwargs)))
    thread.start()
    return thread, result


def _wait_for_state(raw: RawDoris, label: str, state: str, seconds: float = 5) -> None:
    deadline = time.monotonic() + seconds
    while raw.load_state(label) != state:
        assert time.monotonic() < deadline, f"{label} never reached {state}"
        time.sleep(0.05)


def test_duplicate_label_reports_finished_with_txn_minus_one(raw: RawDoris, dup_table: str) -> None:
    first = raw.stream_load(dup_table, _ROW, label="dup_1")
    second = raw.stream_load(dup_table, _ROW, label="dup_1")
    assert (second["Status"], second["ExistingJobStatus"], second["TxnId"]) == (
        "Label Already Exists", "FINISHED", -1)
    assert second["Message"] == ("[LABEL_ALREADY_EXISTS]TStatus: errCode = 2, detailMessage = Label [dup_1] "
                                 f"has already been used, relate to txn [{first['TxnId']}]")
    assert raw.rows(f"SELECT count(*) FROM {dup_table}") == [[1]]


def test_labels_are_unique_per_database_not_per_table(
        raw: RawDoris, doris: DorisServer, dup_table: str) -> None:
    doris.execute_sql(DB, EVENTS_DDL.replace("events", "events2"))
    doris.execute_sql("", "CREATE DATABASE other")
    doris.execute_sql("other", EVENTS_DDL)
    raw.stream_load(dup_table, _ROW, label="scope_1")
    assert raw.stream_load("events2", _ROW, label="scope_1")["Status"] == "Label Already Exists"
    assert raw.stream_load("events", _ROW, db="other", label="scope_1")["Status"] == "Success"


def test_running_load_holds_its_label(raw: RawDoris, dup_table: str) -> None:
    raw.server.inject_fault("slow", seconds=1.0)
    thread, first = _in_background(raw.stream_load, dup_table, _ROW, label="run_1")
    _wait_for_state(raw, "run_1", "PREPARE")
    second = raw.stream_load(dup_table, _ROW, label="run_1")
    assert (second["Status"], second["ExistingJobStatus"]) == ("Label Already Exists", "RUNNING")
    thread.join()
    assert first["Status"] == "Success" and raw.load_state("run_1") == "VISIBLE"


def test_failed_load_aborts_and_its_label_is_reusable(raw: RawDoris, dup_table: str) -> None:
    assert raw.stream_load(dup_table, b"x\ta\t1\n", label="reuse_1", strict_mode="true")["Status"] == "Fail"
    assert raw.load_state("reuse_1") == "ABORTED"
    assert raw.stream_load(dup_table, _ROW, label="reuse_1")["Status"] == "Success"
    assert raw.load_state("reuse_1") == "VISIBLE"


def test_labels_expire_after_the_keep_window() -> None:
    with events_server(label_keep_seconds=0.3) as raw:
        raw.stream_load("events", _ROW, label="exp_1")
        assert raw.load_state("exp_1") == "VISIBLE"
        time.sleep(0.4)
        assert raw.load_state("exp_1") == "UNKNOWN"
        assert raw.stream_load("events", _ROW, label="exp_1")["Status"] == "Success"
        assert raw.rows("SELECT count(*) FROM events") == [[2]]


def test_two_phase_commit_by_txn_id(raw: RawDoris, dup_table: str) -> None:
    first = raw.stream_load(dup_table, _ROW, label="2pc_1", two_phase_commit="true")
    assert (first["Status"], first["TwoPhaseCommit"], first["CommitAndPublishTimeMs"]) == (
        "Success", "true", 0)
    assert raw.load_state("2pc_1") == "PRECOMMITTED"
    assert raw.rows(f"SELECT count(*) FROM {dup_table}") == [[0]]
    again = raw.stream_load(dup_table, _ROW, label="2pc_1")
    assert (again["Status"], again["ExistingJobStatus"]) == ("Label Already Exists", "PRECOMMITTED")
    committed = raw.two_pc("commit", txn_id=str(first["TxnId"]))
    assert committed == {"status": "Success", "msg": f"transaction [{first['TxnId']}] commit successfully."}
    assert raw.rows(f"SELECT count(*) FROM {dup_table}") == [[1]]
    assert raw.load_state("2pc_1") == "VISIBLE"
    twice = raw.two_pc("commit", via_fe=False, txn_id=str(first["TxnId"]))
    assert twice["status"] != "Success" and "is already visible, not pre-committed" in twice["msg"]


def test_two_phase_abort_by_label_frees_the_label(raw: RawDoris, dup_table: str) -> None:
    raw.stream_load(dup_table, _ROW, label="2pc_2", two_phase_commit="true")
    aborted = raw.two_pc("abort", label="2pc_2")
    assert aborted == {"status": "Success", "msg": "label [2pc_2] abort successfully."}
    assert raw.load_state("2pc_2") == "ABORTED"
    assert raw.rows(f"SELECT count(*) FROM {dup_table}") == [[0]]
    assert raw.stream_load(dup_table, _ROW, label="2pc_2")["Status"] == "Success"


def test_two_phase_errors(raw: RawDoris, dup_table: str) -> None:
    unknown = raw.two_pc("commit", via_fe=False, txn_id="424242")
    assert unknown["status"] == "ANALYSIS_ERROR" and "transaction [424242] not found" in unknown["msg"]
    bad_op = raw.two_pc("Commit", via_fe=False, txn_id="1")
    assert bad_op["msg"] == "transaction operation should be 'commit' or 'abort'"
    bad_id = raw.two_pc("commit", via_fe=False, txn_id="abc")
    assert bad_id == {"status": "INTERNAL_ERROR", "msg": "convert txn_id [abc] failed, reason=stoull"}


def test_precommitted_transaction_is_aborted_after_the_precommit_timeout() -> None:
    with events_server(precommit_timeout_seconds=0.3) as raw:
        txn_id = raw.stream_load("events", _ROW, label="pc_t", two_phase_commit="true")["TxnId"]
        time.sleep(0.4)
        assert raw.load_state("pc_t") == "ABORTED"
        late = raw.two_pc("commit", txn_id=str(txn_id))
        assert f"transaction [{txn_id}] is already aborted. abort reason: " in late["msg"]
        assert raw.rows("SELECT count(*) FROM events") == [[0]]


def test_prepare_transaction_aborts_after_the_load_timeout(raw: RawDoris, dup_table: str) -> None:
    raw.server.inject_fault("slow", seconds=1.2)
    body = raw.stream_load(dup_table, _ROW, label="to_1", timeout="1")
    assert body["Status"] == "Fail" and "timeout" in body["Message"]
    assert raw.load_state("to_1") == "ABORTED"
    assert raw.rows(f"SELECT count(*) FROM {dup_table}") == [[0]]


def test_data_and_labels_survive_a_restart_with_a_data_dir(tmp_path: Path) -> None:
    with events_server(data_dir=str(tmp_path)) as first:
        txn_id = first.stream_load("events", _ROW, label="keep_1")["TxnId"]
    second = start_server(data_dir=str(tmp_path))
    try:
        raw = RawDoris(second)
        assert raw.rows("SELECT id, name FROM events") == [[1, "a"]]
        assert raw.load_state("keep_1") == "VISIBLE"
        again = raw.stream_load("events", _ROW, label="keep_1")
        assert again["Status"] == "Label Already Exists"
        assert raw.stream_load("events", _ROW, label="keep_2")["TxnId"] > txn_id
    finally:
        second.stop()
