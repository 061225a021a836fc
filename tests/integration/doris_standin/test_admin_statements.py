"""The statements the preflight sends, answered by the stand-in as Doris answers them: FE and BE
configs, ``SHOW GRANTS``, ``SHOW BACKENDS``, ``SHOW CREATE TABLE`` with the group commit
properties, and a labelled load on a group-commit table. Each test names the Doris source of the reply's shape."""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit

import pytest
from doris_raw import DB, USER, RawDoris

from kinesis_doris_devstack.doris_server import DorisServer

pytestmark = pytest.mark.integration

GROUP_COMMIT_DDL = (
    "CREATE TABLE gc (id BIGINT NOT NULL, name VARCHAR(8)) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 1 "
    "PROPERTIES ('replication_num' = '1', 'group_commit_mode' = 'async_mode', 'group_commit_interval_ms' = '2000')"
)


def test_admin_show_frontend_config_answers_key_value_type_ismutable_masteronly_comment(
    doris: DorisServer, raw: RawDoris
) -> None:
    """fe/fe-core/src/main/java/org/apache/doris/nereids/trees/plans/commands/ShowConfigCommand.java
    (``FE_TITLE_NAMES``); LIKE is a case-insensitive SQL pattern (``PatternMatcher``)."""
    envelope = raw.sql("ADMIN SHOW FRONTEND CONFIG LIKE '%LABEL_KEEP%'")
    assert envelope["code"] == 0, envelope
    assert [column["name"] for column in envelope["data"]["meta"]] == [
        "Key", "Value", "Type", "IsMutable", "MasterOnly", "Comment"]  # fmt: skip
    values = {row[0]: row[1] for row in envelope["data"]["data"]}
    assert values == {"label_keep_max_second": "259200", "streaming_label_keep_max_second": "43200"}

    doris.set_fe_config("streaming_label_keep_max_second", 600)
    assert raw.rows("SHOW FRONTEND CONFIG LIKE 'streaming_label_keep_max_second'")[0][1] == "600"


def test_a_lowered_label_window_makes_the_stand_in_forget_labels_sooner(doris: DorisServer, raw: RawDoris,
                                                                         dup_table: str) -> None:
    """The config takes effect as ``ADMIN SET FRONTEND CONFIG`` makes it (a mutable FE config):
    a label older than the new window is UNKNOWN to ``get_load_state``."""
    label = f"kd-{uuid.uuid4().hex}"
    assert raw.stream_load(dup_table, b"1\ta\t1\n", label=label)["Status"] == "Success"
    doris.set_fe_config("streaming_label_keep_max_second", 0)
    assert raw.load_state(label) == "UNKNOWN"


def test_config_statements_need_the_admin_privilege(doris: DorisServer, raw: RawDoris) -> None:
    """``ShowConfigCommand`` checks ``PrivPredicate.ADMIN`` and reports
    ``ERR_SPECIFIC_ACCESS_DENIED_ERROR`` (fe/.../common/ErrorCode.java, 1227)."""
    doris.set_grants({DB: ["Load_priv", "Select_priv"]})
    for statement in ("ADMIN SHOW FRONTEND CONFIG LIKE 'label_num_threshold'",
                      "SHOW BACKEND CONFIG LIKE 'disable_stream_load_2pc'"):
        envelope = raw.sql(statement)
        assert envelope["code"] == 1
        assert "you need (at least one of) the (ADMIN) privilege(s)" in envelope["data"]


def test_a_stream_load_without_the_load_privilege_is_refused_at_the_fe(doris: DorisServer, raw: RawDoris, dup_table: str) -> None:
    """fe/.../httpv2/rest/LoadAction.java checks ``checkTblAuth(..., PrivPredicate.LOAD)`` before it
    redirects; ``UnauthorizedException`` answers the 401 envelope with HTTP 200 (reference:
    doris-stream-load.md 3.4). The stand-in loaded such rows (24 rows landed for a user without it)."""
    doris.set_grants({DB: ["Select_priv"]})
    reply = raw.request(doris.fe_port, "PUT", f"/api/{DB}/{dup_table}/_stream_load", b"1\ta\t1\n", raw.load_headers())

    assert (reply.status, reply.json()) == (200, {
        "msg": "Unauthorized", "code": 401, "count": 0,
        "data": "Access denied; you need (at least one of) the LOAD privilege(s) for this operation",
    })
    doris.set_grants({f"{DB}.{dup_table}": ["Load_priv", "Select_priv"]})
    assert raw.stream_load(dup_table, b"1\ta\t1\n")["Status"] == "Success"
    assert doris.execute_sql(DB, f"SELECT COUNT(*) FROM {dup_table}") == [(1,)]


def test_show_backend_config_answers_one_row_per_backend(doris: DorisServer, raw: RawDoris) -> None:
    """``ShowConfigCommand.BE_TITLE_NAMES``: BackendId, Host, Key, Value, Type, IsMutable."""
    doris.set_be_config("wait_internal_group_commit_finish", True)
    envelope = raw.sql("SHOW BACKEND CONFIG LIKE 'wait_internal_group_commit_finish'")
    assert [column["name"] for column in envelope["data"]["meta"]] == [
        "BackendId", "Host", "Key", "Value", "Type", "IsMutable"]  # fmt: skip
    [[_, _, key, value, kind, _]] = envelope["data"]["data"]
    assert (key, value, kind) == ("wait_internal_group_commit_finish", "true", "bool")


def test_show_grants_prints_privileges_by_level(doris: DorisServer, raw: RawDoris) -> None:
    """fe/fe-core/src/main/java/org/apache/doris/common/proc/AuthProcDir.java (titles) and
    ``Auth.getAuthInfo``: a level's privileges joined by ``,``, levels by ``; ``, names with the
    catalog (``internal.``); any user may show their own grants."""
    [root] = raw.rows("SHOW GRANTS")
    assert root[0] == f"'{USER}'@'%'" and root[4] == "Node_priv,Admin_priv"

    doris.set_grants({DB: ["Select_priv", "Load_priv"], f"{DB}.events": ["Alter_priv"]})
    envelope = raw.sql("SHOW GRANTS")
    titles = [column["name"] for column in envelope["data"]["meta"]]
    [row] = envelope["data"]["data"]
    granted = dict(zip(titles, row))
    assert titles[:9] == ["UserIdentity", "Comment", "Password", "Roles", "GlobalPrivs", "CatalogPrivs",
                          "DatabasePrivs", "TablePrivs", "ColPrivs"]
    assert granted["GlobalPrivs"] is None
    assert granted["DatabasePrivs"] == f"internal.{DB}: Select_priv,Load_priv"
    assert granted["TablePrivs"] == f"internal.{DB}.events: Alter_priv"


def test_show_create_table_prints_the_group_commit_properties(doris: DorisServer, raw: RawDoris) -> None:
    """``ShowCreateTableStmt`` (columns Table, Create Table); ``Env.getDdlStmt`` prints
    ``group_commit_interval_ms`` and ``group_commit_data_bytes`` for every OLAP table (apache/doris
    #29484) and ``group_commit_mode`` when set (apache/doris#61242, Doris 4.x)."""
    doris.execute_sql(DB, GROUP_COMMIT_DDL)
    envelope = raw.sql("SHOW CREATE TABLE gc")
    assert [column["name"] for column in envelope["data"]["meta"]] == ["Table", "Create Table"]
    [[name, ddl]] = envelope["data"]["data"]
    assert name == "gc" and ddl.startswith("CREATE TABLE `gc` (")
    assert '"group_commit_interval_ms" = "2000"' in ddl and '"group_commit_data_bytes" = "134217728"' in ddl
    assert '"group_commit_mode" = "async_mode"' in ddl and "DUPLICATE KEY(`id`)" in ddl


def test_a_labelled_off_mode_load_on_a_group_commit_table_is_deduplicated_by_its_label(
    doris: DorisServer, raw: RawDoris
) -> None:
    """be/src/http/action/stream_load.cpp ``_handle_group_commit``: a ``group_commit: off_mode``
    header sets ``group_commit = false`` and returns before the table property is consulted (only
    an absent header makes ``begin_txn`` ask the FE with ``use_table_group_commit_mode``), so the
    load is classic and its label deduplicates; unless the BE config
    ``wait_internal_group_commit_finish`` rewrites the header to ``sync_mode``, which the
    preflight reports as fatal (the stand-in shows that config but does not emulate it)."""
    doris.execute_sql(DB, GROUP_COMMIT_DDL)
    label = f"kd-{uuid.uuid4().hex}"
    first = raw.stream_load("gc", b"1\ta\n", label=label, group_commit="off_mode")
    again = raw.stream_load("gc", b"1\ta\n", label=label, group_commit="off_mode")
    assert (first["Status"], first["Label"], "GroupCommit" in first) == ("Success", label, False)
    assert again["Status"] == "Label Already Exists"
    assert doris.execute_sql(DB, "SELECT count(*) FROM gc") == [(1,)]


def test_a_label_beside_a_group_commit_mode_header_is_refused(doris: DorisServer, raw: RawDoris) -> None:
    """``_can_group_commit``: a non-empty header other than off_mode and a label:
    ``[INVALID_ARGUMENT]label and group_commit can't be set at the same time``."""
    doris.execute_sql(DB, GROUP_COMMIT_DDL)
    reply = raw.stream_load("gc", b"1\ta\n", label=f"kd-{uuid.uuid4().hex}", group_commit="async_mode")
    assert reply["Status"] == "Fail"
    assert reply["Message"] == "[INVALID_ARGUMENT]label and group_commit can't be set at the same time"


def test_show_backends_lists_the_be_the_fe_redirects_stream_loads_to(doris: DorisServer, raw: RawDoris) -> None:
    """fe/fe-core/src/main/java/org/apache/doris/common/proc/BackendsProcDir.java (``TITLE_NAMES``,
    ``Host`` and ``HttpPort`` as the BE registered): the host and port of the FE's 307, also after
    the BE is advertised under another name."""
    envelope = raw.sql("SHOW BACKENDS")
    assert envelope["code"] == 0, envelope
    titles = [column["name"] for column in envelope["data"]["meta"]]
    assert titles[:12] == ["BackendId", "Host", "HeartbeatPort", "BePort", "HttpPort", "BrpcPort",
                           "ArrowFlightSqlPort", "LastStartTime", "LastHeartbeat", "Alive", "SystemDecommissioned",
                           "TabletNum"]  # fmt: skip
    assert len(titles) == 28 and titles[-1] == "NodeRole"
    for advertised in ("127.0.0.1", "be-1.doris.internal"):
        doris.advertise_be_host(advertised)
        [backend] = [dict(zip(titles, row)) for row in raw.rows("SHOW BACKENDS")]
        redirect = raw.fe("PUT", f"/api/{DB}/t/_stream_load", b"", **raw.load_headers())
        location = urlsplit(redirect.headers["Location"])
        assert (backend["Host"], backend["HttpPort"], backend["Alive"]) == (
            location.hostname, str(location.port), "true") == (advertised, str(doris.be_port), "true")


def test_show_backends_needs_the_admin_or_operator_privilege(doris: DorisServer, raw: RawDoris) -> None:
    """fe/fe-core/src/main/java/org/apache/doris/analysis/ShowBackendsStmt.java: ``checkGlobalPriv``
    ADMIN or OPERATOR (Node_priv), else ``ERR_SPECIFIC_ACCESS_DENIED_ERROR`` "ADMIN/OPERATOR"."""
    doris.set_grants({"*": ["Node_priv"]})
    assert raw.sql("SHOW BACKENDS")["code"] == 0
    doris.set_grants({DB: ["Load_priv", "Select_priv"]})
    envelope = raw.sql("SHOW BACKENDS")
    assert envelope["code"] == 1
    assert "you need (at least one of) the (ADMIN/OPERATOR) privilege(s)" in envelope["data"]
