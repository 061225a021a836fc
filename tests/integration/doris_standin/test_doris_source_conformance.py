"""Ten answers of the stand-in checked against Apache Doris's own source (issue 20).

Each test names the apache/doris file (and function) whose behaviour it pins, so a reader can
check the stand-in against Doris rather than against itself. Paths are those of the master tree
(BE HTTP code under ``be/src/service/http/...``; older releases keep it under ``be/src/http/...``).
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from doris_raw import DB, RawDoris, basic

pytestmark = pytest.mark.integration

_ROW = b"1\ta\t1\n"
_FE_DETAIL = "TStatus: errCode = 2, detailMessage = "


def _error_log(raw: RawDoris, url: str) -> str:
    reply = raw.be("GET", url.split(str(raw.server.be_port), 1)[1])
    assert reply.status == 200
    return reply.body.decode()


# --- 1. 2PC by label looks only at running transactions ---------------------------------------


def test_2pc_by_label_finds_only_running_transactions(raw: RawDoris, dup_table: str) -> None:
    """fe/fe-core/src/main/java/org/apache/doris/service/FrontendServiceImpl.java (loadTxn2PCImpl)
    resolves a label through fe/fe-core/src/main/java/org/apache/doris/transaction/
    DatabaseTransactionMgr.java (getTransactionIdByLabel with [PRECOMMITTED] for commit,
    [PRECOMMITTED, PREPARE] for abort): a finished transaction is not found, so a retried commit
    by label gets "running transaction not found", never "already visible" (the
    doris-flink-connector's fixture shows the same reply)."""
    raw.stream_load(dup_table, _ROW, label="lbl_1", two_phase_commit="true")
    assert raw.two_pc("commit", label="lbl_1")["status"] == "Success"
    again = raw.two_pc("commit", label="lbl_1")
    assert again == {"status": "ANALYSIS_ERROR",
                     "msg": _FE_DETAIL + "running transaction not found, label=lbl_1"}
    abort_visible = raw.two_pc("abort", label="lbl_1")
    assert abort_visible["msg"].endswith("running transaction not found, label=lbl_1")
    never = raw.two_pc("commit", label="never_used")
    assert never["msg"] == _FE_DETAIL + "transaction not found, label=never_used"
    assert raw.load_state("lbl_1") == "VISIBLE"
    assert raw.rows(f"SELECT count(*) FROM {dup_table}") == [[1]]


def test_2pc_abort_by_label_reaches_a_running_load(raw: RawDoris, dup_table: str) -> None:
    """Same source: abort by label also accepts a PREPARE transaction, so it rolls back a load
    still receiving its body (which then fails), while commit by label refuses it."""
    raw.server.inject_fault("slow", seconds=1.0)
    result: dict = {}
    loading = threading.Thread(target=lambda: result.update(
        raw.stream_load(dup_table, _ROW, label="run_2pc")))
    loading.start()
    deadline = time.monotonic() + 5
    while raw.load_state("run_2pc") != "PREPARE":
        assert time.monotonic() < deadline, "the load never started"
        time.sleep(0.05)
    commit = raw.two_pc("commit", label="run_2pc")
    assert commit["msg"].endswith("running transaction not found, label=run_2pc")
    assert raw.two_pc("abort", label="run_2pc")["status"] == "Success"
    loading.join()
    assert result["Status"] == "Fail"
    assert raw.load_state("run_2pc") == "ABORTED"
    assert raw.rows(f"SELECT count(*) FROM {dup_table}") == [[0]]


# --- 2. columns made only of derived expressions ------------------------------------------------


def test_columns_with_only_derived_expressions_read_the_schema_as_file_fields(
        raw: RawDoris, dup_table: str) -> None:
    """fe/fe-core/src/main/java/org/apache/doris/load/Load.java (initColumns: when no plain column
    names a file field, specifyFileFieldNames is false and the table's columns become the file's
    field names); regression-test/suites/load_p0/stream_load/test_json_load.groovy cases 2 and 7
    (``columns: k1 = k1 * 10`` style mappings) with their .out files."""
    csv = raw.stream_load(dup_table, b"1\ta\t5\n", label="derived_csv", columns="id= id * 10")
    assert (csv["Status"], csv["NumberLoadedRows"]) == ("Success", 1)
    doc = b'{"id": 2, "name": "b", "amount": 7}\n'
    js = raw.stream_load(dup_table, doc, format="json", read_json_by_line="true",
                         columns="id = id * 10, amount = amount + 1")
    assert (js["Status"], js["NumberLoadedRows"]) == ("Success", 1)
    assert raw.rows(f"SELECT id, name, amount FROM {dup_table} ORDER BY id") == [[10, "a", 5], [20, "b", 8]]


# --- 3. BE 2PC argument errors -------------------------------------------------------------------


def test_2pc_argument_errors_are_be_internal_errors(raw: RawDoris) -> None:
    """be/src/service/http/action/stream_load_2pc.cpp (StreamLoad2PCAction::handle): the txn_id is
    converted with std::stoull first, then the operation must be exactly 'commit' or 'abort';
    both fail with Status::InternalError, whose to_json gives status INTERNAL_ERROR."""
    bad_id = raw.two_pc("commit", via_fe=False, txn_id="abc")
    assert bad_id == {"status": "INTERNAL_ERROR", "msg": "convert txn_id [abc] failed, reason=stoull"}
    bad_op = raw.two_pc("Commit", via_fe=False, txn_id="1")
    assert bad_op == {"status": "INTERNAL_ERROR",
                      "msg": "transaction operation should be 'commit' or 'abort'"}
    both_bad = raw.two_pc("publish", via_fe=False, txn_id="x1")
    assert both_bad["msg"] == "convert txn_id [x1] failed, reason=stoull"
    # stoull reads the leading digits and ignores the rest, so "7abc" names transaction 7.
    prefix = raw.two_pc("commit", via_fe=False, txn_id="7abc")
    assert prefix["msg"] == _FE_DETAIL + "transaction [7] not found"


# --- 4. abort of a finished transaction ------------------------------------------------------------


def test_abort_of_a_visible_transaction_names_the_state_in_upper_case(raw: RawDoris, dup_table: str) -> None:
    """fe/fe-core/src/main/java/org/apache/doris/transaction/DatabaseTransactionMgr.java
    (unprotectAbortTransaction) prints the TransactionStatus enum: "is already VISIBLE, could not
    abort."."""
    txn_id = raw.stream_load(dup_table, _ROW, label="ab_vis", two_phase_commit="true")["TxnId"]
    assert raw.two_pc("commit", txn_id=str(txn_id))["status"] == "Success"
    refused = raw.two_pc("abort", txn_id=str(txn_id))
    assert refused == {"status": "ANALYSIS_ERROR",
                       "msg": _FE_DETAIL + f"transaction [{txn_id}] is already VISIBLE, could not abort."}
    assert raw.rows(f"SELECT count(*) FROM {dup_table}") == [[1]]


# --- 5. commit of an aborted transaction -------------------------------------------------------------


def test_commit_of_a_user_aborted_transaction(raw: RawDoris, dup_table: str) -> None:
    """fe/fe-core/src/main/java/org/apache/doris/transaction/DatabaseTransactionMgr.java
    (checkTransactionStateBeforeCommit: "is already aborted. abort reason: " with a period;
    abortTransaction2PC records the reason "User Abort"); the reply is quoted in apache/doris
    PR #37916. Aborting it again uses unprotectAbortTransaction's comma instead."""
    txn_id = raw.stream_load(dup_table, _ROW, label="cm_ab", two_phase_commit="true")["TxnId"]
    assert raw.two_pc("abort", txn_id=str(txn_id))["status"] == "Success"
    late = raw.two_pc("commit", txn_id=str(txn_id))
    detail = f"transaction [{txn_id}] is already aborted. abort reason: User Abort"
    assert late == {"status": "ANALYSIS_ERROR", "msg": _FE_DETAIL + detail}
    twice = raw.two_pc("abort", txn_id=str(txn_id))
    assert twice["msg"].endswith(f"transaction [{txn_id}] is already aborted, abort reason: User Abort")


# --- 6. unknown format --------------------------------------------------------------------------------


def test_unknown_format_prints_the_negative_error_code(raw: RawDoris, dup_table: str) -> None:
    """be/src/service/http/action/stream_load.cpp (_on_header: Status::Error<DATA_FILE_TYPE_ERROR>
    "unknown data format, format={}") and be/src/common/status.h (negative codes print as
    E<code>; DATA_FILE_TYPE_ERROR is -1101). Refused in the header phase: no transaction."""
    body = raw.stream_load(dup_table, _ROW, label="fmt_xml", format="xml")
    assert (body["Status"], body["Message"], body["TxnId"]) == (
        "Fail", "[E-1101]unknown data format, format=xml", -1)
    assert raw.load_state("fmt_xml") == "UNKNOWN"


# --- 7. bad group_commit header at the FE ------------------------------------------------------------


def test_bad_group_commit_header_at_the_fe(raw: RawDoris) -> None:
    """fe/fe-core/src/main/java/org/apache/doris/httpv2/rest/LoadAction.java (streamLoad)."""
    reply = raw.fe("PUT", f"/api/{DB}/events/_stream_load", b"1", Authorization=basic(),
                   Expect="100-continue", group_commit="fast_mode")
    assert reply.json() == {
        "status": "FAILED",
        "msg": "Header `group_commit` can only be `sync_mode`, `async_mode` or `off_mode`.",
    }


# --- 8. CSV line with more fields than columns ---------------------------------------------------------


def test_csv_line_with_too_many_fields_is_logged_with_doris_spacing(raw: RawDoris, dup_table: str) -> None:
    """be/src/vec/exec/format/csv/csv_reader.cpp (_line_split_to_values formats "{} {} {}" around
    "more than", giving two spaces on each side); regression-test/suites/load_p0/stream_load/
    test_stream_load_error_url.groovy asserts that text in the error log."""
    body = raw.stream_load(dup_table, b"1\ta\t1\textra\n")
    assert body["Status"] == "Fail" and body["NumberFilteredRows"] == 1
    log = _error_log(raw, body["ErrorURL"])
    assert ("actual column number in csv file is  more than  schema column number."
            "actual number: 4, schema column number: 3") in log
    fewer = raw.stream_load(dup_table, b"1\ta\n")
    assert "actual column number in csv file is  less than  schema column number." in _error_log(
        raw, fewer["ErrorURL"])


# --- 9. JSON line mode default ---------------------------------------------------------------------------


def test_strip_outer_array_false_alone_reads_one_document(raw: RawDoris, dup_table: str) -> None:
    """be/src/service/http/action/stream_load.cpp (_process_put, master): read_json_by_line defaults
    to true only when neither read_json_by_line nor strip_outer_array is sent; otherwise it is
    what the header says, absent meaning false. So ``strip_outer_array: false`` alone reads the
    body as one JSON document (a pretty-printed object loads), while no header reads lines."""
    pretty = json.dumps({"id": 1, "name": "a", "amount": 2}, indent=2).encode()
    one_document = raw.stream_load(dup_table, pretty, format="json", strip_outer_array="false")
    assert (one_document["Status"], one_document["NumberLoadedRows"]) == ("Success", 1)
    two_lines = b'{"id": 2, "name": "b"}\n{"id": 3, "name": "c"}\n'
    as_document = raw.stream_load(dup_table, two_lines, format="json", strip_outer_array="false")
    assert as_document["Status"] == "Fail"  # two values are not one document
    by_line = raw.stream_load(dup_table, two_lines, format="json")
    assert (by_line["Status"], by_line["NumberLoadedRows"]) == ("Success", 2)
    assert raw.rows(f"SELECT id FROM {dup_table} ORDER BY id") == [[1], [2], [3]]


# --- 10. headers checked after the transaction began --------------------------------------------------------


@pytest.mark.parametrize("headers, message", [
    ({"strict_mode": "yes"}, "[INVALID_ARGUMENT]Invalid strict mode format. Must be bool type"),
    ({"merge_type": "UPSERT"}, "[INVALID_ARGUMENT]Invalid merge type UPSERT"),
    ({"skip_lines": "-1"}, "[INVALID_ARGUMENT]Invalid 'skip_lines': -1"),
])
def test_put_phase_headers_fail_a_begun_transaction(
        raw: RawDoris, dup_table: str, headers: dict[str, str], message: str) -> None:
    """be/src/service/http/action/stream_load.cpp: strict_mode, merge_type and skip_lines are read
    in _process_put, which runs after begin_txn; the failed load carries its real TxnId and the
    transaction is rolled back, so the label is ABORTED (and free), not UNKNOWN."""
    label = "put_" + next(iter(headers))
    body = raw.stream_load(dup_table, _ROW, label=label, **headers)
    assert (body["Status"], body["Message"]) == ("Fail", message)
    assert body["TxnId"] > 0
    assert raw.load_state(label) == "ABORTED"
    assert raw.stream_load(dup_table, _ROW, label=label)["Status"] == "Success"


# --- the error log of filtered rows (issue 21) ----------------------------------------------------


def test_the_error_log_has_no_source_line_for_sink_errors_and_stops_after_fifty(raw: RawDoris, dup_table: str) -> None:
    """BE's RuntimeState::append_error_msg_to_file writes "Reason: {}. src line [{}]; " for the
    first MAX_ERROR_NUM (50) rows, then "TOO MUCH ERROR! already reach 50. show no more next
    error.". The table sink's validation ("column_name[...]" messages: a string too long, NULL in a
    NOT NULL column) passes no source line: Doris's own documentation shows "src line []" for both
    (stream load manual, insert-into manual). A scanner error (a value that does not convert under
    strict mode) keeps the line."""
    too_long = b"".join(b"%d\tmuch-too-long\t1\n" % i for i in range(60))
    reply = raw.stream_load(dup_table, too_long + b"61\tok\tx\n", strict_mode="true", max_filter_ratio="1")
    lines = _error_log(raw, reply["ErrorURL"]).splitlines()
    assert reply["NumberFilteredRows"] == 61 and len(lines) == 51
    assert lines[0] == (
        "Reason: column_name[name], the length of input is too long than schema. first 32 bytes of input str: "
        "[much-too-long] schema length: 8; actual length: 13; . src line []; "
    )
    assert lines[-1] == "TOO MUCH ERROR! already reach 50. show no more next error."
    scanner = raw.stream_load(dup_table, b"62\tok\tx\n", strict_mode="true", max_filter_ratio="1")
    assert _error_log(raw, scanner["ErrorURL"]).splitlines()[0].endswith(". src line [62\tok\tx]; ")
