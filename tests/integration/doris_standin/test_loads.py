"""Row semantics of a stream load: CSV/JSON readers, gzip, ``columns`` mapping and derived
expressions, ``where``, the filter ratio, strict mode and type conversion."""

from __future__ import annotations

import datetime as dt
import gzip
import json

import pytest
from doris_raw import DB, RawDoris

from kinesis_doris_devstack.doris_server import DorisServer

pytestmark = pytest.mark.integration


@pytest.fixture
def typed_table(doris: DorisServer) -> str:
    doris.execute_sql(DB, """
        CREATE TABLE typed (
            id INT NOT NULL,
            small TINYINT,
            price DECIMAL(5, 2),
            ratio DOUBLE,
            day DATE,
            ts DATETIME,
            flag BOOLEAN,
            doc JSON,
            code CHAR(3),
            note STRING DEFAULT 'none'
        ) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS AUTO""")
    return "typed"


def test_csv_with_custom_separators_and_null_marker(raw: RawDoris, dup_table: str) -> None:
    body = raw.stream_load(dup_table, b"1|a|\\N#2|b|7#", column_separator="|", line_delimiter="#")
    assert (body["Status"], body["NumberTotalRows"], body["NumberLoadedRows"]) == ("Success", 2, 2)
    assert raw.rows(f"SELECT id, name, amount FROM {dup_table} ORDER BY id") == [[1, "a", None], [2, "b", 7]]


def test_csv_hex_separator_and_skip_lines(raw: RawDoris, dup_table: str) -> None:
    body = raw.stream_load(dup_table, b"header\n1\x01a\x013\n", column_separator="\\x01", skip_lines="1")
    assert body["NumberLoadedRows"] == 1
    assert raw.rows(f"SELECT id, name, amount FROM {dup_table}") == [[1, "a", 3]]


def test_csv_with_names_skips_the_header_line(raw: RawDoris, dup_table: str) -> None:
    body = raw.stream_load(dup_table, b"id,name,amount\n4,d,1\n", format="csv_with_names",
                           column_separator=",")
    assert (body["NumberTotalRows"], body["NumberLoadedRows"]) == (1, 1)


def test_wrong_column_count_is_filtered(raw: RawDoris, dup_table: str) -> None:
    body = raw.stream_load(dup_table, b"1\ta\t1\n2\tb\n3\tc\t3\textra\n", max_filter_ratio="0.9")
    assert (body["NumberTotalRows"], body["NumberLoadedRows"], body["NumberFilteredRows"]) == (3, 1, 2)


def test_json_is_read_by_line_by_default(raw: RawDoris, dup_table: str) -> None:
    lines = b'{"id": 1, "name": "a", "amount": 2}\n{"id": 2, "name": "b"}\n'
    body = raw.stream_load(dup_table, lines, format="json")
    assert (body["Status"], body["NumberLoadedRows"]) == ("Success", 2)
    assert raw.rows(f"SELECT id, name, amount FROM {dup_table} ORDER BY id") == [[1, "a", 2], [2, "b", None]]


def test_json_strip_outer_array(raw: RawDoris, dup_table: str) -> None:
    data = json.dumps([{"id": 1, "name": "a"}, {"id": 2, "name": "b"}], indent=2).encode()
    body = raw.stream_load(dup_table, data, format="json", strip_outer_array="true")
    assert body["NumberLoadedRows"] == 2


def test_json_array_without_strip_outer_array_is_filtered(raw: RawDoris, dup_table: str) -> None:
    body = raw.stream_load(dup_table, b'[{"id": 1}]\n', format="json")
    assert body["Status"] == "Fail" and body["NumberFilteredRows"] == 1


def test_json_paths_and_root(raw: RawDoris, dup_table: str) -> None:
    data = b'{"payload": {"key": {"v": 9}, "who": "zed", "n": [5, 6]}}\n'
    body = raw.stream_load(dup_table, data, format="json", json_root="$.payload",
                           jsonpaths='["$.key.v", "$.who", "$.n[1]"]', columns="id, name, amount")
    assert body["Status"] == "Success", body
    assert raw.rows(f"SELECT id, name, amount FROM {dup_table}") == [[9, "zed", 6]]


def test_several_json_objects_on_one_line_fail_the_load(raw: RawDoris, dup_table: str) -> None:
    body = raw.stream_load(dup_table, b'{"id": 1} {"id": 2}\n', format="json", max_filter_ratio="1")
    assert body["Message"] == "[DATA_QUALITY_ERROR]Multiple JSON objects in a single line"


def test_malformed_json_line_is_a_filtered_row(raw: RawDoris, dup_table: str) -> None:
    body = raw.stream_load(dup_table, b'{"id": 1}\n{"id": \n', format="json", max_filter_ratio="0.5")
    assert (body["Status"], body["NumberLoadedRows"], body["NumberFilteredRows"]) == ("Success", 1, 1)
    log = raw.be("GET", body["ErrorURL"].split(str(raw.server.be_port), 1)[1]).body.decode()
    assert "Parse json data for JsonDoc failed" in log


def test_gzip_body(raw: RawDoris, dup_table: str) -> None:
    body = raw.stream_load(dup_table, gzip.compress(b"1\ta\t1\n2\tb\t2\n"), compress_type="gz")
    assert body["NumberLoadedRows"] == 2
    bad = raw.stream_load(dup_table, b"not gzip", compress_type="gz")
    assert bad["Status"] == "Fail" and "decompress" in bad["Message"]


def test_columns_mapping_with_derived_expressions(raw: RawDoris, typed_table: str) -> None:
    stamp = 1_700_000_000
    data = f"7,{stamp},12.5,abc\n".encode()
    body = raw.stream_load(
        typed_table, data, column_separator=",",
        columns="id, epoch, p, tmp, price = p * 2, ts = from_unixtime(epoch), "
                "small = cast(id as int) * 3, code = upper(tmp), note = concat(tmp, '-', id)")
    assert body["Status"] == "Success", body
    expected_ts = dt.datetime.fromtimestamp(stamp, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    assert raw.rows(f"SELECT id, price, ts, small, code, note FROM {typed_table}") == [
        [7, 25.0, expected_ts, 21, "ABC", "abc-7"]]


def test_from_unixtime_honours_the_timezone_header(raw: RawDoris, typed_table: str) -> None:
    raw.stream_load(typed_table, b"1,0\n", column_separator=",", timezone="Asia/Shanghai",
                    columns="id, e, ts = from_unixtime(e)")
    assert raw.rows(f"SELECT ts FROM {typed_table}") == [["1970-01-01 08:00:00"]]


def test_unlisted_columns_take_defaults_and_not_null_without_default_is_a_plan_error(
        raw: RawDoris, typed_table: str) -> None:
    assert raw.stream_load(typed_table, b"1\n", columns="id")["Status"] == "Success"
    assert raw.rows(f"SELECT note, price FROM {typed_table}") == [["none", None]]
    failed = raw.stream_load(typed_table, b"x\n", columns="note")
    assert failed["Status"] == "Fail" and "Column has no default value. column: id" in failed["Message"]


def test_where_counts_unselected_rows(raw: RawDoris, dup_table: str) -> None:
    body = raw.stream_load(dup_table, b"1\ta\t5\n2\tb\t50\n3\tc\t\\N\n", where="amount > 10")
    assert (body["NumberTotalRows"], body["NumberLoadedRows"], body["NumberUnselectedRows"]) == (3, 1, 2)
    assert raw.rows(f"SELECT id FROM {dup_table}") == [[2]]


def test_all_rows_unselected_still_succeeds(raw: RawDoris, dup_table: str) -> None:
    body = raw.stream_load(dup_table, b"1\ta\t5\n", where="id = 99")
    assert (body["Status"], body["NumberLoadedRows"], body["NumberUnselectedRows"]) == ("Success", 0, 1)


@pytest.mark.parametrize("ratio, status", [("0.5", "Success"), ("0.49", "Fail")])
def test_filter_ratio_excludes_unselected_rows(
        raw: RawDoris, dup_table: str, ratio: str, status: str) -> None:
    # 6 rows: 2 unselected by where, 2 filtered (id not a number), 2 loaded: 2 / (6 - 2) = 0.5
    data = b"1\ta\t1\nx\tb\t1\n3\tc\t1\ny\td\t1\n5\te\t0\n6\tf\t0\n"
    body = raw.stream_load(dup_table, data, where="amount > 0", max_filter_ratio=ratio, strict_mode="true")
    counts = (body["NumberTotalRows"], body["NumberFilteredRows"], body["NumberUnselectedRows"])
    assert (body["Status"], counts) == (status, (6, 2, 2))
    assert "ErrorURL" in body
    if status == "Fail":
        assert body["Message"] == "[DATA_QUALITY_ERROR]too many filtered rows"
        assert body["NumberLoadedRows"] == 0
        assert raw.rows(f"SELECT count(*) FROM {dup_table}") == [[0]]
    else:
        assert body["NumberLoadedRows"] == 2


def test_junk_max_filter_ratio_means_zero(raw: RawDoris, dup_table: str) -> None:
    body = raw.stream_load(dup_table, b"1\ta\t1\n2\ttoo-long-name\t1\n", max_filter_ratio="abc")
    assert body["Status"] == "Fail"


def test_non_strict_conversion_failure_becomes_null(raw: RawDoris, typed_table: str) -> None:
    data = b"1\t300\tabc\tnope\t2024-13-01\tjunk\tmaybe\t{bad\tab\tn\n"
    body = raw.stream_load(typed_table, data)
    assert body["Status"] == "Success", body
    assert raw.rows(f"SELECT small, price, ratio, day, ts, flag, doc FROM {typed_table}") == [[None] * 7]


def test_strict_mode_filters_conversion_failures(raw: RawDoris, typed_table: str) -> None:
    body = raw.stream_load(typed_table, b"1\t300\t1\t1\t\\N\t\\N\t\\N\t\\N\tab\tn\n", strict_mode="true")
    assert (body["Status"], body["NumberFilteredRows"]) == ("Fail", 1)


def test_not_null_and_too_long_values_are_filtered_even_without_strict_mode(
        raw: RawDoris, typed_table: str) -> None:
    data = b"\\N\t1\t1\t1\t\\N\t\\N\t\\N\t\\N\tab\tn\n2\t1\t1\t1\t\\N\t\\N\t\\N\t\\N\tabcd\tn\n"
    body = raw.stream_load(typed_table, data, max_filter_ratio="1")
    assert (body["NumberFilteredRows"], body["NumberLoadedRows"]) == (2, 0)
    log = raw.be("GET", body["ErrorURL"].split(str(raw.server.be_port), 1)[1]).body.decode()
    assert "column(id) values is null while columns is not nullable" in log
    assert "the length of input is too long than schema" in log


def test_decimal_precision_overflow_is_filtered(raw: RawDoris, typed_table: str) -> None:
    body = raw.stream_load(typed_table, b'{"id": 1, "price": 1234.5}\n{"id": 2, "price": 999.994}\n',
                           format="json", max_filter_ratio="1")
    assert (body["NumberFilteredRows"], body["NumberLoadedRows"]) == (1, 1)
    assert raw.rows(f"SELECT price FROM {typed_table}") == [[999.99]]


def test_typed_values_are_normalised(raw: RawDoris, typed_table: str) -> None:
    data = json.dumps({"id": 1, "small": -5, "price": "3.456", "ratio": 0.25, "day": "20240229",
                       "ts": "2024-02-29T10:11:12", "flag": True, "doc": {"a": [1, 2]},
                       "code": "xy"}).encode()
    assert raw.stream_load(typed_table, data, format="json")["Status"] == "Success"
    assert raw.rows(f"SELECT small, price, ratio, day, ts, flag, doc, code, note FROM {typed_table}") == [
        [-5, 3.46, 0.25, "2024-02-29", "2024-02-29 10:11:12", 1, '{"a":[1,2]}', "xy", "none"]]


def test_json_missing_key_of_not_null_column_is_filtered(raw: RawDoris, typed_table: str) -> None:
    body = raw.stream_load(typed_table, b'{"small": 1}\n', format="json", max_filter_ratio="1")
    assert body["NumberFilteredRows"] == 1
    log = raw.be("GET", body["ErrorURL"].split(str(raw.server.be_port), 1)[1]).body.decode()
    assert "The column `id` is not nullable, but it's not found in jsondata." in log
