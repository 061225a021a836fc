"""Table models: DUPLICATE appends, UNIQUE upserts with sequence-column ordering,
AGGREGATE combines, and merge_type DELETE/MERGE on UNIQUE tables."""

from __future__ import annotations

import pytest
from doris_raw import DB, RawDoris

from kinesis_doris_devstack.doris_server import DorisServer

pytestmark = pytest.mark.integration


def _create(doris: DorisServer, ddl: str) -> None:
    doris.execute_sql(DB, ddl)


def test_duplicate_key_appends_every_load(raw: RawDoris, dup_table: str) -> None:
    raw.stream_load(dup_table, b"1\ta\t1\n")
    raw.stream_load(dup_table, b"1\ta\t1\n")
    assert raw.rows(f"SELECT count(*) FROM {dup_table}") == [[2]]


def test_unique_key_upserts_last_writer_wins(raw: RawDoris, doris: DorisServer) -> None:
    _create(doris, "CREATE TABLE u (k INT, v VARCHAR(10)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    raw.stream_load("u", b"1\told\n2\tkeep\n")
    raw.stream_load("u", b"1\tnew\n1\tnewest\n")
    assert raw.rows("SELECT k, v FROM u ORDER BY k") == [[1, "newest"], [2, "keep"]]


def test_unique_key_with_sequence_column_orders_by_sequence_not_by_load(
        raw: RawDoris, doris: DorisServer) -> None:
    _create(doris, "CREATE TABLE s (k INT, v VARCHAR(10), ver BIGINT) UNIQUE KEY(k) "
                   "DISTRIBUTED BY HASH(k) BUCKETS 1 PROPERTIES ('function_column.sequence_col' = 'ver')")
    raw.stream_load("s", b"1\tv5\t5\n2\tv5\t5\n3\tv5\t5\n")
    # larger sequence wins, smaller is ignored, equal lets the later load win
    raw.stream_load("s", b"1\tv9\t9\n2\tv3\t3\n3\tv5-later\t5\n")
    assert raw.rows("SELECT k, v, ver FROM s ORDER BY k") == [[1, "v9", 9], [2, "v5", 5], [3, "v5-later", 5]]
    assert raw.rows("SELECT * FROM s WHERE k = 1") == [[1, "v9", 9]]  # hidden columns stay hidden


def test_sequence_type_table_takes_the_sequence_from_the_load_header(
        raw: RawDoris, doris: DorisServer) -> None:
    _create(doris, "CREATE TABLE st (k INT, v VARCHAR(10)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1 "
                   "PROPERTIES ('function_column.sequence_type' = 'DATETIME')")
    missing = raw.stream_load("st", b"1\ta\n")
    assert "has sequence column, need to specify the sequence column" in missing["Message"]
    columns = "k, v, at"
    header = {"function_column.sequence_col": "at", "columns": columns}
    raw.stream_load("st", b"1\tnew\t2024-05-02 00:00:00\n", **header)
    raw.stream_load("st", b"1\told\t2024-05-01 00:00:00\n", **header)
    assert raw.rows("SELECT k, v FROM st") == [[1, "new"]]


def test_aggregate_key_combines_values(raw: RawDoris, doris: DorisServer) -> None:
    _create(doris, "CREATE TABLE a (k INT, total BIGINT SUM DEFAULT '0', hi INT MAX, lo INT MIN, "
                   "last VARCHAR(5) REPLACE, price DECIMAL(9, 2) SUM) AGGREGATE KEY(k) "
                   "DISTRIBUTED BY HASH(k) BUCKETS 1")
    raw.stream_load("a", b"1\t10\t5\t5\tx\t1.10\n1\t1\t7\t\\N\ty\t2.20\n")
    raw.stream_load("a", b"1\t100\t6\t2\tz\t0.05\n2\t1\t1\t1\tw\t0\n")
    assert raw.rows("SELECT k, total, hi, lo, last, price FROM a ORDER BY k") == [
        [1, 111, 7, 2, "z", 3.35], [2, 1, 1, 1, "w", 0]]


def test_merge_type_delete_and_merge(raw: RawDoris, doris: DorisServer) -> None:
    _create(doris, "CREATE TABLE m (k INT, v VARCHAR(10)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    raw.stream_load("m", b"1\ta\n2\tb\n3\tc\n")
    assert raw.stream_load("m", b"1\tx\n", merge_type="DELETE")["Status"] == "Success"
    raw.stream_load("m", b"2\tgone\n4\td\n", merge_type="MERGE", delete="v = 'gone'")
    assert raw.rows("SELECT k, v FROM m ORDER BY k") == [[3, "c"], [4, "d"]]
    raw.stream_load("m", b"1\tback\n")
    assert raw.rows("SELECT count(*) FROM m WHERE k = 1") == [[1]]


def test_delete_is_refused_on_duplicate_tables(raw: RawDoris, dup_table: str) -> None:
    body = raw.stream_load(dup_table, b"1\ta\t1\n", merge_type="DELETE")
    assert body["Status"] == "Fail" and "only supported in unique tables" in body["Message"]
