"""INSERT, DELETE, queries, SHOW, 2PC and direct BE loads of a user with or without the privilege
Doris asks for, over the wire; and the string functions users put in queries. Each test names
the Doris source of the behaviour."""

from __future__ import annotations

import uuid

import pymysql
import pytest
from doris_raw import DB, RawDoris, basic

from kinesis_doris_devstack.doris_server import DorisServer

pytestmark = pytest.mark.integration

ALICE = basic("alice", "alice-pw")


@pytest.fixture
def alice(raw: RawDoris, dup_table: str) -> str:
    """A user holding only what the test grants it; its Basic authorization."""
    assert raw.sql("CREATE USER 'alice'@'%' IDENTIFIED BY 'alice-pw'")["code"] == 0
    return ALICE


def detail(envelope: dict[str, object]) -> str:
    assert envelope["code"] == 1, envelope
    return str(envelope["data"]).removeprefix("Failed to execute sql: errCode = 2, detailMessage = ")


def test_insert_values_lands_rows_under_a_label(raw: RawDoris, dup_table: str) -> None:
    """INSERT INTO ... VALUES converts the literals to the columns' types; ``WITH LABEL`` names
    its transaction (get_load_state VISIBLE), and a used label refuses the INSERT."""
    statement = f"INSERT INTO {dup_table} WITH LABEL ins_1 (id, name, amount) VALUES (1, 'a', '10'), (2, NULL, -3)"
    assert raw.sql(statement)["code"] == 0

    assert raw.rows(f"SELECT id, name, amount FROM {dup_table} ORDER BY id") == [[1, "a", 10], [2, None, -3]]
    assert raw.load_state("ins_1") == "VISIBLE"
    assert "Label [ins_1] has already been used" in detail(raw.sql(statement))


def test_insert_of_a_value_that_does_not_convert_fails_in_strict_mode(raw: RawDoris, dup_table: str) -> None:
    """``enable_insert_strict`` (default true): a row the conversion filters fails the INSERT."""
    message = detail(raw.sql(f"INSERT INTO {dup_table} VALUES (1, 'far too long', 1)"))
    assert message.startswith("Insert has filtered data in strict mode. url: http://")
    assert raw.rows(f"SELECT count(*) FROM {dup_table}") == [[0]]


def test_insert_and_delete_need_the_load_privilege(doris: DorisServer, raw: RawDoris, dup_table: str,
                                                   alice: str) -> None:
    """Nereids insert / delete commands: ``ERR_TABLEACCESS_DENIED_ERROR`` (1142) "LOAD", the
    table named ``db: table``."""
    assert raw.sql(f"GRANT SELECT_PRIV ON {DB}.* TO 'alice'@'%'")["code"] == 0
    connection = pymysql.connect(host="127.0.0.1", port=doris.query_port, user="alice", password="alice-pw",
                                 database=DB, connect_timeout=5)
    with connection, connection.cursor() as cursor:
        for statement in (f"INSERT INTO {dup_table} VALUES (1, 'a', 1)", f"DELETE FROM {dup_table} WHERE id = 1"):
            with pytest.raises(pymysql.MySQLError) as refused:
                cursor.execute(statement)
            assert refused.value.args == (1142, "errCode = 2, detailMessage = LOAD command denied to user "
                                                f"'alice'@'127.0.0.1' for table '{DB}: {dup_table}'")


def test_delete_removes_the_rows_its_predicate_matches(raw: RawDoris, dup_table: str) -> None:
    assert raw.sql(f"INSERT INTO {dup_table} VALUES (1, 'a', 1), (2, 'b', 2), (3, 'c', 3)")["code"] == 0
    assert raw.sql(f"DELETE FROM {DB}.{dup_table} WHERE amount >= 2 AND name != 'c'")["code"] == 0
    assert raw.rows(f"SELECT id FROM {dup_table} ORDER BY id") == [[1], [3]]


def test_delete_on_a_unique_table_keeps_the_key_deleted_against_an_older_sequence(raw: RawDoris) -> None:
    """The delete sign keeps the row's sequence value: a later row with a smaller one loses."""
    ddl = ("CREATE TABLE u (id BIGINT NOT NULL, v INT, seq BIGINT) UNIQUE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 1 "
           "PROPERTIES ('function_column.sequence_col' = 'seq')")
    assert raw.sql(ddl)["code"] == 0
    assert raw.sql("INSERT INTO u VALUES (1, 10, 5)")["code"] == 0
    assert raw.sql("DELETE FROM u WHERE id = 1")["code"] == 0
    assert raw.sql("INSERT INTO u VALUES (1, 11, 4)")["code"] == 0
    assert raw.rows("SELECT count(*) FROM u") == [[0]]


def test_select_of_columns_without_the_select_privilege_is_refused(raw: RawDoris, dup_table: str, alice: str) -> None:
    """``UserAuthentication.checkPermission`` → ``Auth.checkColsPriv``: "Permission denied" naming a column."""
    assert raw.sql(f"GRANT LOAD_PRIV ON {DB}.* TO 'alice'@'%'")["code"] == 0
    assert detail(raw.sql(f"SELECT name FROM {dup_table}", authorization=alice)) == (
        "Permission denied: user ['alice'@'%'] does not have privilege for [priv predicate: OR, Admin_priv "
        f"Select_priv ] command on [internal].[{DB}].[{dup_table}].[name]")


def test_a_count_without_the_select_privilege_is_refused_for_the_table(raw: RawDoris, dup_table: str,
                                                                       alice: str) -> None:
    """No column read: ``ERR_TABLE_ACCESS_DENIED_ERROR`` (1224) with ``PrivBitSet.toString``."""
    assert detail(raw.sql(f"SELECT count(*) FROM {dup_table}", authorization=alice)) == (
        f"Access denied; you need (at least one of) the (Admin_priv Select_priv ) privilege(s) on table {dup_table} "
        "for this operation")
    assert raw.sql(f"GRANT SELECT_PRIV ON {DB}.{dup_table} TO 'alice'@'%'")["code"] == 0
    assert raw.sql(f"SELECT count(*) FROM {dup_table}", authorization=alice)["data"]["data"] == [[0]]


def test_show_lists_only_what_the_user_sees_and_show_create_table_refuses_the_rest(
    raw: RawDoris, dup_table: str, alice: str
) -> None:
    """``PrivPredicate.SHOW``: SHOW DATABASES / TABLES filter; SHOW CREATE TABLE gives 1142."""
    assert raw.sql("CREATE TABLE other (id INT) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 1")["code"] == 0
    assert raw.sql(f"GRANT LOAD_PRIV ON {DB}.{dup_table} TO 'alice'@'%'")["code"] == 0

    assert raw.sql("SHOW TABLES", authorization=alice)["data"]["data"] == [[dup_table]]
    assert raw.sql("SHOW DATABASES", authorization=alice)["data"]["data"] == [["information_schema"], [DB]]
    assert detail(raw.sql("SHOW CREATE TABLE other", authorization=alice)) == (
        f"SHOW CREATE TABLE command denied to user 'alice'@'127.0.0.1' for table '{DB}: other'")


def test_create_table_needs_the_create_privilege(raw: RawDoris, alice: str) -> None:
    """CreateTableStmt: ``ERR_SPECIFIC_ACCESS_DENIED_ERROR`` naming CREATE."""
    statement = "CREATE TABLE t2 (id INT) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 1"
    assert detail(raw.sql(statement, authorization=alice)) == (
        "Access denied; you need (at least one of) the (CREATE) privilege(s) for this operation")
    assert raw.sql(f"GRANT CREATE_PRIV ON {DB}.* TO 'alice'@'%'")["code"] == 0
    assert raw.sql(statement, authorization=alice)["code"] == 0


def test_a_2pc_commit_needs_the_load_privilege_on_the_transactions_table(raw: RawDoris, dup_table: str,
                                                                         alice: str) -> None:
    """``FrontendServiceImpl.loadTxn2PCImpl`` checks LOAD on the transaction's tables
    (``checkPasswordAndPrivs``, whose text prints the ``PrivPredicate``)."""
    loaded = raw.stream_load(dup_table, b"1\ta\t1\n", label=f"kd-{uuid.uuid4().hex}", two_phase_commit="true")
    refused = raw.two_pc("commit", txn_id=str(loaded["TxnId"]), Authorization=alice)
    assert refused == {"status": "ANALYSIS_ERROR", "msg": "TStatus: errCode = 2, detailMessage = Access denied; you "
                       "need (at least one of) the (priv predicate: OR, Admin_priv Load_priv ) privilege(s) for this "
                       "operation"}
    assert raw.two_pc("commit", txn_id=str(loaded["TxnId"]))["status"] == "Success"


def test_a_load_sent_straight_to_the_be_needs_the_load_privilege(raw: RawDoris, dup_table: str, alice: str) -> None:
    """``loadTxnBeginImpl`` checks LOAD when BE begins the transaction, whichever port was asked first."""
    headers = raw.load_headers(Authorization=alice)
    reply = raw.request(raw.server.be_port, "PUT", f"/api/{DB}/{dup_table}/_stream_load", b"1\ta\t1\n", headers).json()
    assert (reply["Status"], reply["Message"]) == ("Fail", "[ANALYSIS_ERROR]TStatus: errCode = 2, detailMessage = "
                                                   "Access denied; you need (at least one of) the (priv predicate: OR, "
                                                   "Admin_priv Load_priv ) privilege(s) for this operation")


def test_substring_index_left_and_right_in_queries(raw: RawDoris, dup_table: str) -> None:
    """Doris's string functions (doris-website sql-functions/string-functions): SUBSTRING_INDEX
    counts delimiters from the left, or from the right when negative; LEFT / RIGHT take characters."""
    assert raw.sql(f"INSERT INTO {dup_table} VALUES (1, 'a.b.c', 1)")["code"] == 0
    query = (f"SELECT SUBSTRING_INDEX(name, '.', 2), SUBSTRING_INDEX(name, '.', -1), SUBSTRING_INDEX(name, '.', 0), "
             f"SUBSTRING_INDEX(name, '-', 1), LEFT(name, 3), RIGHT(name, 2), LEFT(name, 0), RIGHT(name, 9) FROM {dup_table}")
    assert raw.rows(query) == [["a.b", "c", "", "a.b.c", "a.b", ".c", "", "a.b.c"]]
