"""The SQL subset through ``POST /api/query/default_cluster/{db}``: Doris DDL and simple SELECTs."""

from __future__ import annotations

import pytest
from doris_raw import DB, RawDoris

pytestmark = pytest.mark.integration

_ORDERS = """
CREATE TABLE IF NOT EXISTS `orders` (
    `order_id` BIGINT NOT NULL COMMENT 'id',
    `region` VARCHAR(16) NOT NULL DEFAULT 'eu',
    `big` LARGEINT,
    `amount` DECIMAL(10, 2) NULL,
    `created` DATETIME(3) DEFAULT CURRENT_TIMESTAMP,
    `active` BOOLEAN,
    `attrs` JSON,
    `memo` TEXT,
    INDEX idx_region (`region`) USING INVERTED COMMENT 'inverted'
) ENGINE=OLAP
UNIQUE KEY(`order_id`)
COMMENT 'orders'
PARTITION BY RANGE(`order_id`) (PARTITION p0 VALUES LESS THAN ("1000"))
DISTRIBUTED BY HASH(`order_id`) BUCKETS 4
PROPERTIES (
    "replication_allocation" = "tag.location.default: 1",
    "enable_unique_key_merge_on_write" = "true"
);
"""


def _ok(raw: RawDoris, stmt: str, db: str = DB) -> None:
    envelope = raw.sql(stmt, db)
    assert envelope["code"] == 0, envelope


def _error(raw: RawDoris, stmt: str, db: str = DB) -> str:
    envelope = raw.sql(stmt, db)
    assert envelope["code"] == 1, envelope
    return envelope["data"]


def test_create_table_with_doris_syntax_and_describe(raw: RawDoris) -> None:
    _ok(raw, _ORDERS)
    _ok(raw, _ORDERS)  # IF NOT EXISTS
    assert raw.rows("DESC orders") == [
        ["order_id", "BIGINT", "No", "true", None, ""],
        ["region", "VARCHAR(16)", "No", "false", "eu", ""],
        ["big", "LARGEINT", "Yes", "false", None, ""],
        ["amount", "DECIMAL(10, 2)", "Yes", "false", None, ""],
        ["created", "DATETIME(3)", "Yes", "false", "CURRENT_TIMESTAMP", ""],
        ["active", "BOOLEAN", "Yes", "false", None, ""],
        ["attrs", "JSON", "Yes", "false", None, ""],
        ["memo", "STRING", "Yes", "false", None, ""],
    ]
    assert raw.rows("SHOW TABLES") == [["orders"]]


def test_ddl_errors_are_doris_like(raw: RawDoris) -> None:
    _ok(raw, "CREATE TABLE t (k INT, v INT) DUPLICATE KEY(k)")
    assert "Table 't' already exists" in _error(raw, "CREATE TABLE t (k INT) DUPLICATE KEY(k)")
    assert "ordered prefix of the schema" in _error(raw, "CREATE TABLE t2 (k INT, v INT) UNIQUE KEY(v)")
    assert "must specify aggregate type" in _error(raw, "CREATE TABLE t3 (k INT, v INT) AGGREGATE KEY(k)")
    assert "sequence column only support UNIQUE_KEYS" in _error(
        raw, "CREATE TABLE t4 (k INT, v INT) DUPLICATE KEY(k) "
             "PROPERTIES ('function_column.sequence_col' = 'v')")
    assert "Unsupported type 'BITMAP'" in _error(raw, "CREATE TABLE t5 (k INT, b BITMAP) DUPLICATE KEY(k)")
    assert "database exists" in _error(raw, f"CREATE DATABASE {DB}", db="information_schema")


def test_drop_truncate_and_if_exists(raw: RawDoris, dup_table: str) -> None:
    raw.stream_load(dup_table, b"1\ta\t1\n")
    _ok(raw, f"TRUNCATE TABLE {dup_table}")
    assert raw.rows(f"SELECT count(*) FROM {dup_table}") == [[0]]
    _ok(raw, f"DROP TABLE {dup_table}")
    _ok(raw, f"DROP TABLE IF EXISTS {dup_table}")
    assert "Unknown table" in _error(raw, f"DROP TABLE {dup_table}")
    assert raw.rows("SHOW TABLES") == []
    _ok(raw, f"DROP DATABASE {DB}", db="information_schema")
    _ok(raw, f"DROP DATABASE IF EXISTS {DB}", db="information_schema")
    assert [DB] not in raw.rows("SHOW DATABASES", db="information_schema")


def test_select_count_where_group_by_order_by(raw: RawDoris, dup_table: str) -> None:
    raw.stream_load(dup_table, b"1\ta\t10\n2\tb\t20\n3\ta\t30\n4\tc\t\\N\n")
    assert raw.rows(f"SELECT count(*) FROM {dup_table}") == [[4]]
    assert raw.rows(f"SELECT name, sum(amount) AS s FROM `{dup_table}` WHERE id > 1 GROUP BY name "
                    "ORDER BY name") == [["a", 30], ["b", 20], ["c", None]]
    assert raw.rows(f"SELECT id FROM {DB}.{dup_table} ORDER BY id DESC LIMIT 2") == [[4], [3]]


def test_select_across_databases(raw: RawDoris, dup_table: str) -> None:
    _ok(raw, "CREATE DATABASE side", db="information_schema")
    _ok(raw, "CREATE TABLE side.t (k INT) DUPLICATE KEY(k)")
    raw.stream_load("t", b"5\n", db="side")
    assert raw.rows(f"SELECT count(*) FROM {dup_table} JOIN side.t ON 1 = 1") == [[0]]
    assert raw.rows("SELECT k FROM side.t") == [[5]]


def test_a_query_naming_databases_leaves_them_writable(raw: RawDoris, dup_table: str) -> None:
    # The stand-in attaches the databases a query names; attached files stayed locked against the
    # next load ("database is locked") until they were detached after each query.
    assert raw.rows(f"SELECT count(*) FROM `{DB}`.`{dup_table}`") == [[0]]
    raw.stream_load(dup_table, b"1\ta\t10\n")
    _ok(raw, "CREATE TABLE after_query (k INT) DUPLICATE KEY(k)")
    assert raw.rows(f"SELECT count(*) FROM {DB}.{dup_table}") == [[1]]


def test_select_is_read_only(raw: RawDoris, dup_table: str) -> None:
    assert "Failed to execute sql" in _error(raw, f"SELECT 1; DELETE FROM {dup_table}")
    assert "Unsupported statement type" in _error(raw, f"UPDATE {dup_table} SET amount = 2 WHERE id = 1")
