"""The ``decoder`` setting (issue 19, item 5): gzip+json with CloudWatch Logs envelopes, csv, a
user's ``module:function``; a record's rows stay in one chunk, counted as one record, and a
record that fails to decode is one dead letter (I6). Also the refusal of ``load_options`` that
contradict the JSON-lines body."""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_provider_kinesis_doris.testing.builders import kinesis_record, pipeline_config
from airflow_provider_kinesis_doris.core.chunks import cut_chunks
from airflow_provider_kinesis_doris.core.model import ChunkLimits
from airflow_provider_kinesis_doris.core.decoders import (
    CLOUDWATCH_COLUMNS,
    build_decoder,
    check_decoder,
    check_load_options,
    gunzip,
    plain_columns,
)
from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.core.load_job import LoadJob
from airflow_provider_kinesis_doris.core.mapping import DeadLetter, RecordMapping, Row, map_record
from airflow_provider_kinesis_doris.core.model import Position


def mapped(data: bytes, decoder: str, columns: tuple[str, ...] | None = None, **mapping: Any) -> Row | DeadLetter:
    return map_record(kinesis_record(data), RecordMapping(decoder=build_decoder(decoder, columns), **mapping))


def rows_of(item: Row | DeadLetter) -> list[dict[str, Any]]:
    assert isinstance(item, Row), item
    return [json.loads(line) for line in item.line.split(b"\n")] if item.lines else []


def cloudwatch(kind: str = "DATA_MESSAGE", events: list[Any] | None = None) -> bytes:
    """A CloudWatch Logs subscription record as Kinesis receives it: gzip of the envelope."""
    if events is None:
        events = [{"id": f"3719{i:052d}", "timestamp": 1_700_000_000_000 + i, "message": f"GET /item/{i} 200"} for i in range(3)]
    if kind == "CONTROL_MESSAGE":
        events = [{"id": "", "timestamp": 1_700_000_000_000, "message": "CWL CONTROL MESSAGE: Checking health of destination Kinesis stream."}]
    envelope = {
        "messageType": kind,
        "owner": "123456789012" if kind == "DATA_MESSAGE" else "CloudwatchLogs",
        "logGroup": "/aws/lambda/checkout" if kind == "DATA_MESSAGE" else "",
        "logStream": "2026/01/01/[$LATEST]abc" if kind == "DATA_MESSAGE" else "",
        "subscriptionFilters": ["to-kinesis"] if kind == "DATA_MESSAGE" else [],
        "logEvents": events,
    }
    return gzip.compress(json.dumps(envelope).encode())


# --- gzip+json ------------------------------------------------------------------------------------


def test_a_cloudwatch_data_message_is_one_row_per_log_event_with_the_documented_columns() -> None:
    item = mapped(cloudwatch(), "gzip+json", metadata_columns=("_kinesis_sequence",))

    rows = rows_of(item)
    assert isinstance(item, Row) and item.lines == 3
    assert [tuple(row) for row in rows] == [(*CLOUDWATCH_COLUMNS, "_kinesis_sequence")] * 3
    assert [(row["log_group"], row["log_stream"], row["owner"]) for row in rows] == [
        ("/aws/lambda/checkout", "2026/01/01/[$LATEST]abc", "123456789012")
    ] * 3
    assert [(row["timestamp"], row["message"]) for row in rows] == [(1_700_000_000_000 + i, f"GET /item/{i} 200") for i in range(3)]
    assert {row["_kinesis_sequence"] for row in rows} == {"100:0"}


def test_a_control_message_makes_no_row_and_no_dead_letter() -> None:
    item = mapped(cloudwatch("CONTROL_MESSAGE"), "gzip+json")

    assert isinstance(item, Row) and (item.lines, item.line) == (0, b"")


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b'{"plain": "json, not gzip"}', "payload is not gzip: "),
        (gzip.compress(b'{"a": 1}')[:-6], "payload is not gzip: the stream is truncated"),
        (gzip.compress(b"\xff\xfe"), "gunzipped payload is not UTF-8 text"),
        (gzip.compress(b"[1, 2]"), "gunzipped payload is JSON list, expected an object"),
        (cloudwatch(events=[{"id": "1", "timestamp": 1}]), "CloudWatch Logs log event lacks id, timestamp or message"),
        (cloudwatch("SOMETHING_ELSE"), "CloudWatch Logs messageType 'SOMETHING_ELSE'"),
    ],
    ids=["not-gzip", "truncated", "not-utf8", "array", "event-without-message", "unknown-type"],
)
def test_malformed_gzip_payloads_are_dead_letters_with_their_reason(data: bytes, reason: str) -> None:
    item = mapped(data, "gzip+json")

    assert isinstance(item, DeadLetter) and item.reason.startswith(reason), item
    assert item.record.data == data  # the raw bytes go to the dead-letter table


def test_gzip_of_a_plain_object_is_one_row_and_a_bomb_is_refused() -> None:
    assert rows_of(mapped(gzip.compress(b'{"event_id": 7}'), "gzip+json")) == [{"event_id": 7}]
    with pytest.raises(ValueError, match="larger than 1000 bytes"):
        gunzip(gzip.compress(b"0" * 5000), limit=1000)
    assert gunzip(gzip.compress(b"ab") + gzip.compress(b"cd")) == b"abcd"  # several members


def test_one_row_failing_required_fields_dead_letters_the_whole_record() -> None:
    events = [{"id": "1", "timestamp": 1, "message": "ok"}, {"id": "2", "timestamp": 2, "message": "dropped"}]

    def only_ok(row: dict[str, Any]) -> dict[str, Any] | None:
        return row if row["message"] == "ok" else None

    rejected = mapped(cloudwatch(events=events), "gzip+json", transform=only_ok)

    assert isinstance(rejected, DeadLetter) and rejected.reason == "transform rejected the record"


# --- csv ------------------------------------------------------------------------------------------


def test_csv_lines_become_rows_named_by_the_columns_with_quotes_and_nulls() -> None:
    data = b'1,"Z\xc3\xbcrich, CH",\\N\n2,plain,"say ""hi"""\n\n'

    rows = rows_of(mapped(data, "csv", ("event_id", "city", "note")))

    assert rows == [
        {"event_id": "1", "city": "Zürich, CH", "note": None},
        {"event_id": "2", "city": "plain", "note": 'say "hi"'},
    ]


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"1,2\n3,4,5\n", "CSV line has 3 fields, expected 2 (a, b)"),
        (b"\xff,1", "payload is not UTF-8 text"),
        (b"\n\n", "payload holds no CSV line"),
        (b'1,"open', "payload is not CSV"),
    ],
)
def test_bad_csv_records_are_dead_letters(data: bytes, reason: str) -> None:
    item = mapped(data, "csv", ("a", "b"))

    assert isinstance(item, DeadLetter) and item.reason.startswith(reason), item


def test_csv_needs_columns_and_load_options_columns_give_their_plain_names() -> None:
    with pytest.raises(ConfigurationError, match="decoder 'csv' needs the table's columns"):
        build_decoder("csv", None)
    assert plain_columns(("event_id", " `city` ", "amount_cents = amount * 100")) == ("event_id", "city")


# --- module:function ------------------------------------------------------------------------------


def pipe_separated(data: bytes) -> Iterator[dict[str, Any]]:
    """A user's binary format: ``id|name`` pairs separated by ``;``."""
    for pair in data.decode().split(";"):
        key, _, name = pair.partition("|")
        yield {"id": int(key), "name": name}


def one_object(data: bytes) -> Any:
    return {"size": len(data)} if data != b"none" else None


def not_rows(data: bytes) -> Any:
    return [{"ok": 1}, "oops"] if data == b"mixed" else 42


def test_a_user_decoder_returns_one_dict_or_many() -> None:
    assert rows_of(mapped(b"1|a;2|b", f"{__name__}:pipe_separated")) == [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]
    assert rows_of(mapped(b"abc", f"{__name__}:one_object")) == [{"size": 3}]


@pytest.mark.parametrize(
    ("data", "decoder", "reason"),
    [
        (b"x|a", "pipe_separated", "decoder raised ValueError: invalid literal for int()"),
        (b"none", "one_object", "decoder returned NoneType, expected a dict or an iterable of dicts"),
        (b"int", "not_rows", "decoder returned int, expected a dict or an iterable of dicts"),
        (b"mixed", "not_rows", "decoder returned str as row 1, expected a dict"),
    ],
)
def test_a_user_decoder_that_raises_or_returns_no_rows_dead_letters_the_record(data: bytes, decoder: str, reason: str) -> None:
    item = mapped(data, f"{__name__}:{decoder}")

    assert isinstance(item, DeadLetter) and item.reason.startswith(reason), item


def test_decoder_names_are_checked_and_a_bad_path_fails_before_anything_runs() -> None:
    assert check_decoder("gzip+json") == "gzip+json"
    with pytest.raises(ConfigurationError, match=r"decoder must be one of \['json', 'gzip\+json', 'csv'\]"):
        check_decoder("gzip")
    with pytest.raises(ConfigurationError, match="Cannot import decoder 'kd_no_such_module:f': ModuleNotFoundError"):
        build_decoder("kd_no_such_module:f")


# --- chunks: a record's rows stay together, limits count records ------------------------------------


def test_a_records_rows_stay_in_one_chunk_and_a_replay_cuts_the_same_chunks() -> None:
    records = [kinesis_record(cloudwatch("CONTROL_MESSAGE"), 1)] + [kinesis_record(cloudwatch(), sequence) for sequence in range(2, 9)]
    records.append(kinesis_record(b"not gzip", 50))  # a dead letter, last
    mapping = RecordMapping(decoder=build_decoder("gzip+json"))

    def cut(recorded: list[tuple[Position, Position]] = ()) -> list[Any]:  # type: ignore[assignment]
        return list(cut_chunks((map_record(r, mapping) for r in records), ChunkLimits(chunk_max_rows=3), recorded))

    chunks = cut()

    assert [c.record_count for c in chunks] == [3, 3, 3]  # records, not rows, count toward chunk_max_rows
    assert [c.line_count for c in chunks] == [6, 9, 6]
    assert [len(c.dead_letters) for c in chunks] == [0, 0, 1]
    assert [c.skipped for c in chunks] == [1, 0, 0]
    assert [len(c.body.split(b"\n")) - 1 for c in chunks] == [c.line_count for c in chunks]
    # Lines map back to their records (Doris refusing a line dead-letters that record).
    assert chunks[0].line_records() == [1, 1, 1, 2, 2, 2]
    # A replay with the first attempt's spans, or with none, cuts the same chunks.
    spans = [(c.first, c.last) for c in chunks]
    assert [(c.first, c.last, c.body) for c in cut(spans)] == [(c.first, c.last, c.body) for c in chunks]
    assert [(c.first, c.last, c.body) for c in cut()] == [(c.first, c.last, c.body) for c in chunks]


def test_json_records_keep_one_line_each_and_no_line_map() -> None:
    chunks = list(cut_chunks((map_record(kinesis_record(b'{"a": %d}' % i, i), RecordMapping()) for i in range(1, 5)), ChunkLimits()))

    assert [(c.row_count, c.line_count, c.row_lines, c.skipped) for c in chunks] == [(4, 4, None, 0)]


# --- load_options that contradict the body ------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"format": "csv"}, "load.options format='csv' contradicts the body"),
        ({"format": "csv_with_names"}, "load.options format='csv_with_names'"),
        ({"strip_outer_array": True}, "load.options strip_outer_array=True"),
        ({"strip_outer_array": "true"}, "load.options strip_outer_array='true'"),
        ({"read_json_by_line": False}, "load.options read_json_by_line=False"),
    ],
)
@pytest.mark.parametrize("decoder", ["json", "gzip+json", "csv"])
def test_load_options_that_contradict_the_json_lines_body_are_refused_naming_option_and_decoder(
    options: dict[str, Any], named: str, decoder: str
) -> None:
    with pytest.raises(ConfigurationError) as refused:
        check_load_options(options, decoder)

    assert str(refused.value).startswith(named)
    assert f"with decoder={decoder!r}" in str(refused.value)


def test_agreeing_or_templated_load_options_pass() -> None:
    check_load_options({"format": "JSON", "read_json_by_line": True, "strip_outer_array": False, "columns": ["a"]}, "csv")
    check_load_options({"format": "{{ params.format }}"}, "json", skip_templates=True)
    with pytest.raises(ConfigurationError):
        check_load_options({"format": "{{ params.format }}"}, "json")


def test_the_pipeline_config_carries_the_decoder_to_executors() -> None:
    csv_config = pipeline_config(decoder="csv", csv_columns=("a", "b"))
    job = LoadJob(csv_config, (), ())

    on_executor = LoadJob.from_json(job.to_json()).pipeline

    assert (on_executor.decoder, on_executor.csv_columns) == ("csv", ("a", "b"))
    assert rows_of(map_record(kinesis_record(b"1,x"), on_executor.mapping)) == [{"a": "1", "b": "x"}]
    assert isinstance(map_record(kinesis_record(base64.b64encode(b"1,x")), on_executor.mapping), DeadLetter)


def test_the_decoder_reasons_in_docs_usage_are_what_the_code_produces() -> None:
    from pathlib import Path

    usage = (Path(__file__).resolve().parents[2] / "docs" / "usage.md").read_text()
    produced = [
        mapped(b'{"plain": "json"}', "gzip+json"),
        mapped(cloudwatch(events=[{"id": "1"}]), "gzip+json"),
        mapped(b"1,2,3", "csv", ("a", "b")),
        mapped(b"none", f"{__name__}:one_object"),
    ]
    for item in produced:
        assert isinstance(item, DeadLetter) and f"`{item.reason}`" in usage, item
