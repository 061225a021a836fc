"""The statements an operator sets Doris up with, answered over the wire as Doris answers them:
CREATE / DROP USER, GRANT / REVOKE, SHOW GRANTS FOR, ADMIN SET FRONTEND CONFIG and the BE's
``update_config``; each with the refusal Doris gives a user without the privilege. Each test
names the Doris source of the behaviour."""

from __future__ import annotations

import uuid

import pymysql
import pytest
from doris_raw import DB, RawDoris, basic

from kinesis_doris_devstack.doris_server import DorisServer

pytestmark = pytest.mark.integration

ALICE = basic("alice", "alice-pw")


def ok(raw: RawDoris, stmt: str, authorization: str | None = None) -> None:
    envelope = raw.sql(stmt, authorization=authorization)
    assert envelope["code"] == 0, envelope


def refusal(raw: RawDoris, stmt: str, authorization: str | None = None) -> str:
    """The detail message of a refused statement (the SQL endpoint's ``Failed to execute sql``)."""
    envelope = raw.sql(stmt, authorization=authorization)
    assert envelope["code"] == 1, envelope
    return str(envelope["data"]).removeprefix("Failed to execute sql: errCode = 2, detailMessage = ")


def load_as(raw: RawDoris, table: str, authorization: str) -> dict[str, object]:
    return raw.stream_load(table, b"1\ta\t1\n", Authorization=authorization, label=f"kd-{uuid.uuid4().hex}")


def fe_refuses_load(raw: RawDoris, table: str, authorization: str) -> bool:
    """Whether the FE answers a stream load of this user with LoadAction's 401 (no LOAD)."""
    headers = raw.load_headers(Authorization=authorization)
    reply = raw.request(raw.server.fe_port, "PUT", f"/api/{DB}/{table}/_stream_load", b"1\ta\t1\n", headers)
    return reply.status == 200 and reply.json()["code"] == 401


def mysql_error(doris: DorisServer, stmt: str, user: str, password: str) -> tuple[int, str]:
    connection = pymysql.connect(host="127.0.0.1", port=doris.query_port, user=user, password=password, database=DB,
                                 connect_timeout=5)
    with connection, connection.cursor() as cursor, pytest.raises(pymysql.MySQLError) as raised:
        cursor.execute(stmt)
    return raised.value.args[0], raised.value.args[1]


def test_create_user_lets_the_user_log_in_over_http_and_mysql(doris: DorisServer, raw: RawDoris) -> None:
    """``Auth.createUserInternal``: the user exists at once, with no privileges yet."""
    assert raw.fe("GET", f"/api/{DB}/get_load_state?label=x", Authorization=ALICE).json()["code"] == 401
    ok(raw, "CREATE USER 'alice'@'%' IDENTIFIED BY 'alice-pw'")

    assert raw.fe("GET", f"/api/{DB}/get_load_state?label=x", Authorization=ALICE).json()["data"] == "UNKNOWN"
    connection = pymysql.connect(host="127.0.0.1", port=doris.query_port, user="alice", password="alice-pw",
                                 connect_timeout=5)
    with connection, connection.cursor() as cursor:
        cursor.execute("SHOW GRANTS")
        [row] = cursor.fetchall()
    assert row[0] == "'alice'@'%'" and row[4] is None and row[6] is None


def test_create_user_twice_is_refused_unless_if_not_exists(raw: RawDoris) -> None:
    """``Auth.createUserInternal``: "User 'u'@'h' already exist"; IF NOT EXISTS ignores it."""
    ok(raw, "CREATE USER 'alice'@'%' IDENTIFIED BY 'alice-pw'")
    assert refusal(raw, "CREATE USER 'alice'@'%' IDENTIFIED BY 'other'") == "User 'alice'@'%' already exist"
    ok(raw, "CREATE USER IF NOT EXISTS 'alice'@'%' IDENTIFIED BY 'other'")
    assert raw.fe("GET", f"/api/{DB}/get_load_state?label=x", Authorization=ALICE).json()["code"] == 0


def test_drop_user_ends_its_logins(doris: DorisServer, raw: RawDoris) -> None:
    """``Auth.dropUserInternal`` and its text for a missing user; IF EXISTS ignores it."""
    ok(raw, "CREATE USER 'alice'@'%' IDENTIFIED BY 'alice-pw'")
    ok(raw, "DROP USER 'alice'@'%'")

    assert raw.fe("GET", f"/api/{DB}/get_load_state?label=x", Authorization=ALICE).json()["code"] == 401
    with pytest.raises(pymysql.OperationalError, match="Access denied for user 'alice'"):
        pymysql.connect(host="127.0.0.1", port=doris.query_port, user="alice", password="alice-pw", connect_timeout=5)
    assert refusal(raw, "DROP USER 'alice'@'%'") == "User `alice`@`%` does not exist."
    ok(raw, "DROP USER IF EXISTS 'alice'@'%'")


def test_drop_user_root_is_refused(raw: RawDoris) -> None:
    """``DropUserStmt``: ``userIdent.isRootUser()`` gives "Can not drop root user"."""
    assert refusal(raw, "DROP USER 'root'@'%'") == "Can not drop root user"


def test_user_statements_need_the_grant_privilege(raw: RawDoris) -> None:
    """CreateUserStmt / DropUserStmt / ShowGrantsStmt check ``PrivPredicate.GRANT`` globally:
    ``ERR_SPECIFIC_ACCESS_DENIED_ERROR`` (1227) naming GRANT."""
    ok(raw, "CREATE USER 'alice'@'%' IDENTIFIED BY 'alice-pw'")
    denied = "Access denied; you need (at least one of) the (GRANT) privilege(s) for this operation"
    for statement in ("CREATE USER 'bob'@'%' IDENTIFIED BY 'b'", "DROP USER 'alice'@'%'",
                      "SHOW GRANTS FOR 'loader'@'%'", "SHOW ALL GRANTS"):
        assert refusal(raw, statement, ALICE) == denied


def test_grant_on_a_database_lets_the_user_load_and_show_grants_prints_it(
    raw: RawDoris, dup_table: str
) -> None:
    """``Auth.grantInternal`` on ``db.*``; SHOW GRANTS FOR prints the level (``Auth.getAuthInfo``)."""
    ok(raw, "CREATE USER 'alice'@'%' IDENTIFIED BY 'alice-pw'")
    assert fe_refuses_load(raw, dup_table, ALICE)

    ok(raw, f"GRANT LOAD_PRIV, SELECT_PRIV ON {DB}.* TO 'alice'@'%'")

    assert load_as(raw, dup_table, ALICE)["Status"] == "Success"
    [row] = raw.rows("SHOW GRANTS FOR 'alice'@'%'")
    assert row[6] == f"internal.{DB}: Select_priv,Load_priv"


def test_grant_on_a_table_and_all_on_every_database(raw: RawDoris, dup_table: str) -> None:
    """Table and global levels; ``ALL`` is the five table privileges (the GRANT manual page)."""
    ok(raw, "CREATE USER 'alice'@'%' IDENTIFIED BY 'alice-pw'")
    ok(raw, f"GRANT ALTER_PRIV ON {DB}.{dup_table} TO 'alice'@'%'")
    ok(raw, "GRANT ALL ON *.* TO 'alice'@'%'")
    [row] = raw.rows("SHOW GRANTS FOR 'alice'@'%'")
    assert row[4] == "Select_priv,Load_priv,Alter_priv,Create_priv,Drop_priv"
    assert row[7] == f"internal.{DB}.{dup_table}: Alter_priv"


def test_admin_priv_is_granted_on_every_database_only(raw: RawDoris) -> None:
    """``GrantStmt.checkTablePrivileges`` rule: ADMIN_PRIV and NODE_PRIV only on ``*.*``."""
    ok(raw, "CREATE USER 'alice'@'%' IDENTIFIED BY 'alice-pw'")
    assert refusal(raw, f"GRANT ADMIN_PRIV ON {DB}.* TO 'alice'@'%'") == (
        "ADMIN_PRIV and NODE_PRIV can only be granted/revoke on/from *.*.*")


def test_grant_to_a_missing_user_is_refused(raw: RawDoris) -> None:
    """``Auth.grantInternal``: "user 'u'@'h' does not exist"."""
    assert refusal(raw, f"GRANT LOAD_PRIV ON {DB}.* TO 'ghost'@'%'") == "user 'ghost'@'%' does not exist"


def test_grant_without_admin_needs_grant_and_the_granted_privileges(doris: DorisServer, raw: RawDoris) -> None:
    """``GrantStmt.checkTablePrivileges`` rule 4: ``ERR_SPECIFIC_ALL_ACCESS_DENIED_ERROR`` (1223),
    Grant_priv plus what is granted, in ``Privilege`` order, after the template's double space."""
    ok(raw, "CREATE USER 'alice'@'%' IDENTIFIED BY 'alice-pw'")
    ok(raw, f"GRANT SELECT_PRIV ON {DB}.* TO 'alice'@'%'")
    code, message = mysql_error(doris, f"GRANT LOAD_PRIV ON {DB}.* TO 'loader'@'%'", "alice", "alice-pw")
    assert code == 1223
    assert message == ("errCode = 2, detailMessage = Access denied; you need all  [Grant_priv, Load_priv] "
                       "privilege(s) for this operation")

    ok(raw, f"GRANT GRANT_PRIV, LOAD_PRIV ON {DB}.* TO 'alice'@'%'")
    ok(raw, "CREATE USER 'bob'@'%' IDENTIFIED BY 'bob-pw'")
    ok(raw, f"GRANT LOAD_PRIV ON {DB}.* TO 'bob'@'%'", ALICE)


def test_revoke_takes_the_privilege_away(raw: RawDoris, dup_table: str) -> None:
    """``Auth.revokeInternal``: the stream load is refused again."""
    ok(raw, "CREATE USER 'alice'@'%' IDENTIFIED BY 'alice-pw'")
    ok(raw, f"GRANT LOAD_PRIV ON {DB}.* TO 'alice'@'%'")
    assert load_as(raw, dup_table, ALICE)["Status"] == "Success"
    ok(raw, f"REVOKE LOAD_PRIV ON {DB}.* FROM 'alice'@'%'")
    assert fe_refuses_load(raw, dup_table, ALICE)
    assert raw.rows("SHOW GRANTS FOR 'alice'@'%'")[0][6] is None


def test_revoking_a_privilege_not_held_is_refused(doris: DorisServer, raw: RawDoris) -> None:
    """``PrivTable.revoke`` raises ``ERR_NONEXISTING_GRANT`` (1141) without its arguments, and
    ``ErrorCode.formatErrorMsg`` gives the template back unformatted."""
    ok(raw, "CREATE USER 'alice'@'%' IDENTIFIED BY 'alice-pw'")
    code, message = mysql_error(doris, f"REVOKE LOAD_PRIV ON {DB}.* FROM 'alice'@'%'", "loader", "s3cret-pw")
    assert code == 1141
    assert message.endswith("There is no such grant defined for user '%s' on host '%s'")


def test_admin_set_frontend_config_shortens_the_label_window(raw: RawDoris, dup_table: str) -> None:
    """``ADMIN SET FRONTEND CONFIG`` (``ConfigBase.setMutableConfig``) of the mutable
    ``streaming_label_keep_max_second``: ADMIN SHOW FRONTEND CONFIG answers the new value and a
    finished label older than the window is forgotten (``TransactionState.isExpired``)."""
    label = f"kd-{uuid.uuid4().hex}"
    assert raw.stream_load(dup_table, b"1\ta\t1\n", label=label)["Status"] == "Success"

    ok(raw, 'ADMIN SET FRONTEND CONFIG ("streaming_label_keep_max_second" = "0")')

    assert raw.rows("ADMIN SHOW FRONTEND CONFIG LIKE 'streaming_label_keep_max_second'")[0][1] == "0"
    assert raw.load_state(label) == "UNKNOWN"


def test_admin_set_config_needs_the_admin_privilege(raw: RawDoris) -> None:
    """``AdminSetConfigStmt`` checks ``PrivPredicate.ADMIN`` (Admin_priv only)."""
    ok(raw, "CREATE USER 'alice'@'%' IDENTIFIED BY 'alice-pw'")
    ok(raw, "GRANT NODE_PRIV ON *.* TO 'alice'@'%'")
    assert refusal(raw, 'ADMIN SET FRONTEND CONFIG ("label_num_threshold" = "10")', ALICE) == (
        "Access denied; you need (at least one of) the (ADMIN) privilege(s) for this operation")


def test_admin_set_config_refuses_a_value_of_the_wrong_type_and_two_configs(raw: RawDoris) -> None:
    """``ConfigBase.setMutableConfig`` ("Failed to set config ... err: <NumberFormatException>")
    and ``AdminSetConfigStmt`` (one config per statement)."""
    assert refusal(raw, 'ADMIN SET FRONTEND CONFIG ("label_num_threshold" = "many")') == (
        "Failed to set config 'label_num_threshold'. err: For input string: \"many\"")
    assert refusal(raw, 'ADMIN SET FRONTEND CONFIG ("label_num_threshold" = "1", "label_keep_max_second" = "2")') == (
        "config parameter size is not equal to 1")
    assert raw.rows("ADMIN SHOW FRONTEND CONFIG LIKE 'label_num_threshold'")[0][1] == "2000"


def test_be_update_config_sets_a_mutable_config_and_refuses_the_others(raw: RawDoris) -> None:
    """be/src/service/http/action/config_action.cpp ``handle_update_config``: one result per
    config (``config::set_config``: NOT_FOUND for an unknown name, NOT_IMPLEMENTED_ERROR for a
    ``DEFINE_Bool``), ``persist`` skipped; the doris-website BE ``config`` API page's shape."""
    reply = raw.be("POST", "/api/update_config?disable_stream_load_2pc=true&persist=true")
    assert reply.status == 200
    assert reply.json() == [{"config_name": "disable_stream_load_2pc", "status": "OK", "msg": ""}]
    assert raw.rows("SHOW BACKEND CONFIG LIKE 'disable_stream_load_2pc'")[0][3] == "true"

    refused = raw.be("POST", "/api/update_config?wait_internal_group_commit_finish=true&no_such_config=1").json()
    assert refused == [
        {"config_name": "no_such_config", "status": "BAD",
         "msg": "set no_such_config=1 failed, reason: [NOT_FOUND]'no_such_config' is not found."},
        {"config_name": "wait_internal_group_commit_finish", "status": "BAD",
         "msg": "set wait_internal_group_commit_finish=true failed, reason: [NOT_IMPLEMENTED_ERROR]"
                "'wait_internal_group_commit_finish' is not support to modify."},
    ]  # fmt: skip
    assert raw.rows("SHOW BACKEND CONFIG LIKE 'wait_internal_group_commit_finish'")[0][3] == "false"
