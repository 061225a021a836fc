"""Reply parsing and classification, load options and retry policy: no server involved.

The reply bodies are shaped as Doris sends them (``docs/doris.md``, "Outcomes and retries").
"""

from __future__ import annotations

import json

import pytest

from airflow_provider_kinesis_doris.core.errors import (
    ConfigurationError,
    PermanentStreamLoadError,
    UnrecognisedReply,
)
from airflow_provider_kinesis_doris.core.doris.options import StreamLoadOptions
from airflow_provider_kinesis_doris.core.doris.connection import DorisConnectionConfig, RetryPolicy
from airflow_provider_kinesis_doris.core.doris.result import (
    LabelState,
    LoadOutcome,
    StreamLoadResult,
    classify_failure_message,
)


def be_result(status: str, message: str, **extra: object) -> str:
    body = {
        "TxnId": extra.pop("TxnId", 1001),
        "Label": "kd:p:1:abc",
        "Comment": "",
        "TwoPhaseCommit": extra.pop("TwoPhaseCommit", "false"),
        "Status": status,
        "Message": message,
        "NumberTotalRows": 3,
        "NumberLoadedRows": 3 if status == "Success" else 0,
        "NumberFilteredRows": 0,
        "NumberUnselectedRows": 0,
        "LoadBytes": 42,
        "LoadTimeMs": 12,
        **extra,
    }
    # Doris pretty-prints with a trailing newline.
    return json.dumps(body, indent=4) + "\n"


def test_success_reply_is_parsed_with_counts() -> None:
    result = StreamLoadResult.from_http(200, be_result("Success", "OK"))
    assert result.outcome is LoadOutcome.SUCCESS
    parsed = (result.label, result.txn_id, result.number_loaded_rows, result.load_bytes)
    assert parsed == ("kd:p:1:abc", 1001, 3, 42)
    assert not result.is_publish_timeout and not result.two_phase_commit and result.http_status == 200


def test_publish_timeout_counts_as_success() -> None:
    result = StreamLoadResult.from_http(200, be_result("Publish Timeout", "[PUBLISH_TIMEOUT]publish timeout"))
    assert result.outcome is LoadOutcome.SUCCESS
    assert result.is_publish_timeout


def test_two_phase_commit_string_flag_is_read() -> None:
    result = StreamLoadResult.from_http(200, be_result("Success", "OK", TwoPhaseCommit="true"))
    assert result.two_phase_commit and result.is_precommitted


def test_duplicate_label_carries_the_existing_job_status() -> None:
    body = be_result(
        "Label Already Exists",
        "[LABEL_ALREADY_EXISTS]TStatus: errCode = 2, detailMessage = "
        "Label [kd:p:1:abc] has already been used, "
        "relate to txn [1000]",
        TxnId=-1,
        ExistingJobStatus="FINISHED",
    )
    result = StreamLoadResult.from_http(200, body)
    assert result.outcome is LoadOutcome.DUPLICATE_LABEL
    assert result.existing_job_status == "FINISHED"
    assert result.txn_id == -1


def test_data_quality_failure_is_permanent_and_keeps_error_url() -> None:
    url = "http://127.0.0.1:8040/api/_load_error_log?file=__shard_0/error_log_x"
    message = "[DATA_QUALITY_ERROR]too many filtered rows"
    body = be_result("Fail", message, ErrorURL=url, FirstErrorMsg="bad int")
    result = StreamLoadResult.from_http(200, body)
    assert result.outcome is LoadOutcome.PERMANENT
    assert result.error_url == url and result.first_error_msg == "bad int"
    assert url in result.describe()


TRANSIENT_FAILURES = [
    "[E-235]failed to init rowset builder. version count: 2001, exceed limit: 2000, tablet: 10087. "
    "Please reduce the frequency of loading data",
    "tablet writer write failed, tablet_id=1, txn_id=2, err=-235",
    "[ANALYSIS_ERROR]TStatus: errCode = 2, detailMessage = current running txns on db 10 is 1000, "
    "larger than limit 1000",
    "[ANALYSIS_ERROR]TStatus: errCode = 2, detailMessage = get tableList write lock timeout, tables=t",
    "[CANCELLED]load cancelled by timeout",
    "[NETWORK_ERROR]receive body don't equal with body bytes",
]
REQUEST_FAULTS_AND_UNKNOWN_FAILURES = [
    "[ANALYSIS_ERROR]TStatus: errCode = 2, detailMessage = unknown database, database=nope",
    "[NOT_FOUND]TStatus: errCode = 7, detailMessage = table not found, tableName=nope",
    "[NOT_AUTHORIZED]no valid Basic authorization",
    "[ANALYSIS_ERROR]TStatus: errCode = 2, detailMessage = Access denied for user 'root@127.0.0.1'",
    "[ANALYSIS_ERROR]Label format error. regex: ^[-_A-Za-z0-9:]{1,128}$, label: a.b",
    "[INVALID_ARGUMENT]Invalid timeout format",
    "[INVALID_ARGUMENT]label and group_commit can't be set at the same time",
    "[DATA_FILE_TYPE_ERROR]unknown data format, format=xml",
    # Doris's own text (status.h prints DATA_FILE_TYPE_ERROR, code -1101, as E-1101).
    "[E-1101]unknown data format, format=xml",
    "[INTERNAL_ERROR]something nobody has seen before",
]


@pytest.mark.parametrize(
    ("message", "outcome"),
    [(message, LoadOutcome.RETRYABLE) for message in TRANSIENT_FAILURES]
    + [(message, LoadOutcome.PERMANENT) for message in REQUEST_FAULTS_AND_UNKNOWN_FAILURES],
)
def test_transient_failures_are_retryable_and_the_rest_permanent(message: str, outcome: LoadOutcome) -> None:
    assert StreamLoadResult.from_http(200, be_result("Fail", message)).outcome is outcome


def test_fe_rest_base_result_is_classified_by_message() -> None:
    no_backend = StreamLoadResult.from_http(200, '{"status":"FAILED","msg":"No backend load available."}')
    no_expect = StreamLoadResult.from_http(200, '{"status":"FAILED","msg":"There is no 100-continue header"}')
    assert no_backend.outcome is LoadOutcome.RETRYABLE
    assert no_expect.outcome is LoadOutcome.PERMANENT
    assert no_expect.status == "FAILED" and "100-continue" in no_expect.message


@pytest.mark.parametrize(
    ("envelope", "outcome"),
    [
        ({"msg": "Unauthorized", "code": 401, "data": "Access denied for user 'root@1.2.3.4'", "count": 0},
         LoadOutcome.PERMANENT),
        ({"msg": "Bad Request", "code": 403, "data": "No label selected", "count": 0}, LoadOutcome.PERMANENT),
        ({"msg": "Internal Error", "code": 500, "data": "boom", "count": 0}, LoadOutcome.RETRYABLE),
        ({"msg": "success", "code": 0, "data": "VISIBLE", "count": 0}, LoadOutcome.SUCCESS),
        ({"msg": "Error", "code": 1, "data": "No backend available for load", "count": 0},
         LoadOutcome.RETRYABLE),
        ({"msg": "Error", "code": 1, "data": "unknown database, database=x", "count": 0},
         LoadOutcome.PERMANENT),
    ],
)
def test_fe_envelope_is_classified_by_code_and_data(envelope: dict, outcome: LoadOutcome) -> None:
    result = StreamLoadResult.from_http(200, json.dumps(envelope))
    assert result.outcome is outcome
    assert result.message == envelope["data"]


def test_two_phase_commit_lowercase_replies() -> None:
    pretty = '{\n    "status": "Success",\n    "msg": "transaction [7] commit successfully."\n}'
    ok = StreamLoadResult.from_http(200, pretty)
    not_found = '{"status": "ANALYSIS_ERROR", "msg": "transaction [8] not found"}'
    missing = StreamLoadResult.from_http(200, not_found)
    assert ok.outcome is LoadOutcome.SUCCESS and "commit successfully" in ok.message
    assert missing.outcome is LoadOutcome.PERMANENT and missing.status == "ANALYSIS_ERROR"


def test_json_keys_decide_even_when_http_status_disagrees() -> None:
    # A proxy may wrap a BE reply in a 5xx; the body still says what happened.
    result = StreamLoadResult.from_http(502, be_result("Success", "OK"))
    assert result.outcome is LoadOutcome.SUCCESS
    assert result.http_status == 502


@pytest.mark.parametrize(("status", "outcome"), [(500, LoadOutcome.RETRYABLE), (503, LoadOutcome.RETRYABLE),
                                                 (401, LoadOutcome.PERMANENT), (404, LoadOutcome.PERMANENT)])
def test_non_json_bodies_fall_back_on_http_status(status: int, outcome: LoadOutcome) -> None:
    result = StreamLoadResult.from_http(status, "<html>Bad Gateway</html>")
    assert result.outcome is outcome
    assert result.status == f"HTTP {status}"


def test_unrecognised_json_object_is_rejected_by_name() -> None:
    with pytest.raises(UnrecognisedReply, match="keys"):
        StreamLoadResult.from_json({"foo": 1})


def test_http_200_with_an_unknown_json_shape_is_a_typed_permanent_error() -> None:
    """Not a bare ValueError: callers catch the package's errors, and a ValueError escaping a
    load would be mistaken for a bug in the caller's own arguments."""
    with pytest.raises(UnrecognisedReply) as raised:
        StreamLoadResult.from_http(200, '{"result": "fine"}')
    assert isinstance(raised.value, PermanentStreamLoadError)
    assert not isinstance(raised.value, ValueError)
    assert not raised.value.definitely_not_loaded


def test_non_200_with_an_unknown_json_shape_falls_back_on_the_http_status() -> None:
    """A gateway's JSON error page: its HTTP status is the only thing that can be read."""
    result = StreamLoadResult.from_http(502, '{"message": "Bad Gateway"}')
    assert (result.outcome, result.status) == (LoadOutcome.RETRYABLE, "HTTP 502")


def test_classify_prefers_permanent_markers_over_retryable_words() -> None:
    mixed = "[DATA_QUALITY_ERROR]too many filtered rows; timeout"
    assert classify_failure_message(mixed) is LoadOutcome.PERMANENT
    assert classify_failure_message("publish timeout") is LoadOutcome.RETRYABLE


def test_label_state_predicates() -> None:
    assert {s for s in LabelState if s.is_loaded} == {LabelState.VISIBLE, LabelState.COMMITTED}
    assert {s for s in LabelState if s.is_free} == {LabelState.UNKNOWN, LabelState.ABORTED}


# --- options -----------------------------------------------------------------------------------


def test_options_render_typed_headers() -> None:
    options = StreamLoadOptions.json_lines(
        columns=("id", "v", "ts", "seq = ts"),
        where="id > 0",
        max_filter_ratio=0.1,
        strict_mode=True,
        timeout_seconds=600,
        jsonpaths=("$.id", "$.v"),
        json_root="$.rows",
        merge_type="merge",
        delete="v = 0",
        sequence_col="ts",
        partial_columns=False,
        two_phase_commit=True,
        gzip=True,
        extra_headers={"timezone": "UTC"},
    )
    assert options.headers() == {
        "format": "json",
        "read_json_by_line": "true",
        "columns": "id,v,ts,seq = ts",
        "where": "id > 0",
        "max_filter_ratio": "0.1",
        "strict_mode": "true",
        "timeout": "600",
        "jsonpaths": '["$.id", "$.v"]',
        "json_root": "$.rows",
        "merge_type": "MERGE",
        "delete": "v = 0",
        "function_column.sequence_col": "ts",
        "partial_columns": "false",
        "two_phase_commit": "true",
        "compress_type": "gz",
        "timezone": "UTC",
    }


def test_default_options_leave_server_defaults_alone() -> None:
    assert StreamLoadOptions().headers() == {"format": "json"}
    assert StreamLoadOptions.csv("|").headers() == {"format": "csv", "column_separator": "|"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"format": "xml"}, "format"),
        ({"merge_type": "UPSERT"}, "merge_type"),
        ({"merge_type": "MERGE"}, "delete condition"),
        ({"max_filter_ratio": 1.5}, "max_filter_ratio"),
        ({"timeout_seconds": 0}, "timeout_seconds"),
        ({"extra_headers": {"Label": "x"}}, "Label"),
        ({"extra_headers": {"group_commit": "async_mode"}}, "group_commit"),
        ({"extra_headers": {"columns": "a"}}, "columns"),
    ],
)
def test_bad_options_are_rejected_by_name(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        StreamLoadOptions(**kwargs)


# --- retry policy and config -------------------------------------------------------------------


def test_backoff_grows_exponentially_up_to_the_cap_with_bounded_jitter() -> None:
    policy = RetryPolicy(initial_backoff_seconds=2, multiplier=2, max_backoff_seconds=30, jitter=0.5)
    assert [policy.backoff_seconds(n, 1.0) for n in (1, 2, 3, 4, 5, 6)] == [2, 4, 8, 16, 30, 30]
    assert [policy.backoff_seconds(n, 0.0) for n in (1, 2, 5)] == [1, 2, 15]


def test_config_repr_shows_user_and_fe_only() -> None:
    config = DorisConnectionConfig(host="fe.example", port=8030, user="loader", password="s3cr3t-pw")
    assert repr(config) == "DorisConnectionConfig(user='loader', fe='fe.example:8030')"
    assert "s3cr3t-pw" not in str(config)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"host": ""}, "host"),
        ({"host": "h", "port": 0}, "port"),
        ({"host": "h", "be_hosts": ("be1",)}, "host:port"),
        ({"host": "h", "be_address_map": {"10.0.0.1:8040": "be1"}}, "host:port"),
        ({"host": "h", "label_keep_seconds": 0}, "label_keep_seconds"),
    ],
)
def test_bad_config_is_rejected_by_name(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        DorisConnectionConfig(**kwargs)
