"""The Doris preflight (``core.doris.preflight``) through the core client's HTTP SQL endpoint,
against the stand-in set up as a deployment that keeps each assumption and as one that breaks it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from airflow_provider_kinesis_doris.core.doris.client import DorisStreamLoadClient
from airflow_provider_kinesis_doris.core.doris.connection import DorisConnectionConfig
from airflow_provider_kinesis_doris.core.doris.options import StreamLoadOptions
from airflow_provider_kinesis_doris.core.doris.result import SqlResult
from airflow_provider_kinesis_doris.core.doris.preflight import (
    CheckStatus,
    DorisPreflightSettings,
    PreflightReport,
    doris_preflight,
)
from airflow_provider_kinesis_doris.testing.builders import pipeline_config
from airflow_provider_kinesis_doris.core.mapping import METADATA_COLUMNS, RecordMapping, dead_letter_ddl
from kinesis_doris_devstack.doris_server import DorisServer
from kinesis_doris_devstack.scenario import events_table_ddl

pytestmark = pytest.mark.integration

USER, PASSWORD, DB = "loader", "preflight-pw", "pf"
METADATA = ("_kinesis_shard", "_kinesis_sequence", "_kinesis_arrival")
SETTINGS = DorisPreflightSettings(
    database=DB, table="events", dead_letter_table="events_dead_letter", label_keep_seconds=43200,
    metadata_columns=METADATA, max_concurrent_loads=8,
)  # fmt: skip


@pytest.fixture
def doris() -> Iterator[DorisServer]:
    """A deployment as the loader expects it: labels kept by time only, the events table."""
    with DorisServer(user=USER, password=PASSWORD) as server:
        server.execute_sql("", f"CREATE DATABASE {DB}")
        server.execute_sql(DB, events_table_ddl("events"))
        server.set_fe_config("label_num_threshold", -1)
        yield server


def preflight(doris: DorisServer, settings: DorisPreflightSettings = SETTINGS, **connection: Any) -> PreflightReport:
    """The preflight through a client of the Doris connection with ``connection``'s settings."""
    config = DorisConnectionConfig(host="127.0.0.1", port=doris.fe_port, user=USER, password=PASSWORD, **connection)
    client = DorisStreamLoadClient(config)
    return doris_preflight(lambda statement: client.run_sql(settings.database, statement), settings, config)


def test_a_deployment_that_keeps_every_assumption_passes_every_check(doris: DorisServer) -> None:
    report = preflight(doris)
    assert [(item.check, item.status) for item in report.items] == [
        (check, CheckStatus.OK) for check in (
            "label window", "label count", "precommit timeout", "running transactions", "group commit",
            "two-phase commit", "table columns", "privileges", "BE redirects")
    ], report.text()  # fmt: skip
    assert report.fatal == () and report.warnings == ()
    assert "streaming_label_keep_max_second 43200 s >= label_keep_seconds 43200 s" in report.item("label window").detail
    assert "0 fatal, 0 warnings, 9 checks" in report.text().splitlines()[0]
    assert report.text().startswith(f"Doris preflight at {report.checked_at.isoformat(timespec='seconds')}")


def test_a_label_window_shorter_than_label_keep_seconds_is_fatal(doris: DorisServer) -> None:
    doris.set_fe_config("streaming_label_keep_max_second", 3600)
    report = preflight(doris)
    [item] = report.fatal
    assert (item.check, item.status) == ("label window", CheckStatus.WRONG)
    assert "after streaming_label_keep_max_second 3600 s" in item.detail and "duplicates" in item.detail
    assert item.fix and "set label_keep_seconds of the Doris connection to 3600 or less" in item.fix
    assert item.line().startswith("[FATAL] label window:")


def test_a_label_count_threshold_warns_with_the_database_and_the_fix(doris: DorisServer) -> None:
    doris.set_fe_config("label_num_threshold", 2000)
    item = preflight(doris).item("label count")
    assert (item.status, item.fatal) == (CheckStatus.WRONG, False)
    assert f"fewer than 2000 transactions in 43200 s" in item.detail and DB in item.detail
    assert item.fix and '"label_num_threshold" = "-1"' in item.fix


def test_too_few_running_transactions_for_the_pipeline_warn(doris: DorisServer) -> None:
    doris.set_fe_config("max_running_txn_num_per_db", 4)
    report = preflight(doris)
    item = report.item("running transactions")
    assert (item.status, item.fatal) == (CheckStatus.WRONG, False) and item in report.warnings
    assert "max_running_txn_num_per_db 4 is below the pipeline's 8 loads at once" in item.detail
    assert preflight(doris, replace(SETTINGS, max_concurrent_loads=4)).item("running transactions").status is CheckStatus.OK


def test_a_backend_forcing_group_commit_is_fatal(doris: DorisServer) -> None:
    doris.set_be_config("wait_internal_group_commit_finish", True)
    [item] = preflight(doris).fatal
    assert item.check == "group commit" and "labels do not deduplicate" in item.detail
    assert item.fix and "wait_internal_group_commit_finish = false" in item.fix


def test_a_group_commit_table_is_fine_for_labelled_off_mode_loads(doris: DorisServer) -> None:
    doris.execute_sql(DB, events_table_ddl("gc").replace('"replication_num" = "1"',
                                                        '"replication_num" = "1", "group_commit_mode" = "async_mode"'))
    item = preflight(doris, replace(SETTINGS, table="gc")).item("group commit")
    assert item.status is CheckStatus.OK
    assert "table group_commit_mode async_mode" in item.detail and "off_mode" in item.detail


def test_two_phase_commit_disabled_on_a_backend_warns(doris: DorisServer) -> None:
    doris.set_be_config("disable_stream_load_2pc", True)
    report = preflight(doris)
    item = report.item("two-phase commit")
    assert (item.status, item.fatal) == (CheckStatus.WRONG, False) and report.fatal == ()
    assert "refused rows" in item.detail


def test_a_metadata_column_the_table_lacks_is_fatal(doris: DorisServer) -> None:
    """The issue's new user: ``_kinesis_partition_key`` silently dropped, run green."""
    [item] = preflight(doris, replace(SETTINGS, metadata_columns=(*METADATA, "_kinesis_partition_key"))).fatal
    assert item.check == "table columns"
    assert "lacks the metadata columns ['_kinesis_partition_key']" in item.detail
    assert item.fix and f"ALTER TABLE {DB}.events ADD COLUMN" in item.fix


def test_a_missing_table_is_fatal(doris: DorisServer) -> None:
    report = preflight(doris, replace(SETTINGS, table="nope"))
    assert [item.check for item in report.fatal] == ["table columns"]
    assert "table pf.nope does not exist" in report.item("group commit").detail


def test_load_option_targets_and_the_sequence_column_are_checked(doris: DorisServer) -> None:
    bad_columns = replace(SETTINGS, load_columns=("event_id", "user_id", "amount_cents", "amount = amount_cents / 100",
                                                  "region"))  # fmt: skip
    item = preflight(doris, bad_columns).item("table columns")
    assert (item.status, item.fatal) == (CheckStatus.WRONG, False)
    assert "load_options.columns names ['region']" in item.detail

    too_many_paths = replace(SETTINGS, load_columns=("event_id",), jsonpaths=("$.id", "$.user"))
    assert "2 jsonpaths for 1 columns" in preflight(doris, too_many_paths).item("table columns").detail

    sequence = replace(SETTINGS, sequence_col="_kinesis_arrival")
    item = preflight(doris, sequence).item("table columns")
    assert item.status is CheckStatus.WRONG and "has no sequence column" in item.detail
    doris.execute_sql(DB, events_table_ddl("unique_events", "UNIQUE"))
    assert preflight(doris, replace(sequence, table="unique_events")).item("table columns").status is CheckStatus.OK


def test_missing_load_and_create_privileges_are_named_with_the_grant(doris: DorisServer) -> None:
    doris.set_grants({DB: ["Select_priv"]})
    item = preflight(doris).item("privileges")
    assert (item.status, item.fatal) == (CheckStatus.WRONG, True)
    assert f"LOAD_PRIV on {DB}.events, LOAD_PRIV on {DB}.events_dead_letter, CREATE_PRIV on {DB}.events_dead_letter" in item.detail
    assert item.fix and f"GRANT CREATE_PRIV ON {DB}.events_dead_letter TO <user>" in item.fix

    doris.set_grants({DB: ["Select_priv", "Load_priv", "Create_priv"]})
    assert preflight(doris).item("privileges").status is CheckStatus.OK
    # What docs/production.md grants the loader: CREATE on the dead-letter table to be, not on the
    # database (before, the preflight wanted the database's and failed such a loader as fatal).
    doris.set_grants({f"{DB}.events": ["Load_priv"], f"{DB}.events_dead_letter": ["Load_priv", "Create_priv"]})
    assert preflight(doris).item("privileges").status is CheckStatus.OK
    doris.set_grants({f"{DB}.events": ["Load_priv"], f"{DB}.events_dead_letter": ["Load_priv"]})
    doris.execute_sql(DB, dead_letter_ddl(DB, "events_dead_letter"))
    assert preflight(doris).item("privileges").status is CheckStatus.OK


def test_without_the_admin_privilege_the_configs_are_not_verifiable_and_say_why(doris: DorisServer) -> None:
    doris.set_grants({DB: ["Load_priv", "Create_priv"]})
    report = preflight(doris)
    statuses = {item.check: item.status for item in report.items}
    assert statuses == {
        "label window": CheckStatus.NOT_VERIFIABLE, "label count": CheckStatus.NOT_VERIFIABLE,
        "precommit timeout": CheckStatus.NOT_VERIFIABLE, "running transactions": CheckStatus.NOT_VERIFIABLE,
        "group commit": CheckStatus.NOT_VERIFIABLE, "two-phase commit": CheckStatus.NOT_VERIFIABLE,
        "table columns": CheckStatus.OK, "privileges": CheckStatus.OK, "BE redirects": CheckStatus.NOT_VERIFIABLE,
    }  # fmt: skip
    window = report.item("label window")
    assert "(ADMIN) privilege" in window.detail and window.fix and "ADMIN privilege" in window.fix
    backends = report.item("BE redirects")
    assert "the BEs could not be listed" in backends.detail and "(ADMIN/OPERATOR) privilege" in backends.detail
    assert backends.fix and "ADMIN or NODE privilege" in backends.fix
    assert report.fatal == () and len(report.warnings) == 7


def test_the_be_the_fe_redirects_to_is_checked_against_the_connections_redirect_policy(doris: DorisServer) -> None:
    """The FE host is allowed by default: the stand-in's BE on 127.0.0.1 passes, and resolves."""
    item = preflight(doris).item("BE redirects")
    assert item.status is CheckStatus.OK and f"127.0.0.1:{doris.be_port} resolve" in item.detail


def test_a_be_outside_the_allowed_hosts_warns_naming_it_and_the_fix(doris: DorisServer) -> None:
    """Not fatal: every load would fail at its redirect, before a row reaches Doris."""
    doris.advertise_be_host("be-1.doris.invalid")
    advertised = f"be-1.doris.invalid:{doris.be_port}"
    report = preflight(doris)
    item = report.item("BE redirects")
    assert (item.status, item.fatal) == (CheckStatus.WRONG, False) and report.fatal == ()
    assert f"redirects Stream Loads to the BEs ['{advertised}'], which are not allowed" in item.detail
    assert "exactly-once holds" in item.detail
    assert item.fix and "allowed_redirect_hosts" in item.fix and "be_address_map" in item.fix
    mapped = preflight(doris, be_address_map={advertised: f"127.0.0.1:{doris.be_port}"}).item("BE redirects")
    assert mapped.status is CheckStatus.OK and f"127.0.0.1:{doris.be_port} resolve" in mapped.detail


def test_an_allowed_be_that_does_not_resolve_warns(doris: DorisServer) -> None:
    doris.advertise_be_host("be-1.doris.invalid")
    item = preflight(doris, allowed_redirect_hosts=("be-1.doris.invalid",)).item("BE redirects")
    assert (item.status, item.fatal) == (CheckStatus.WRONG, False)
    assert f"['be-1.doris.invalid:{doris.be_port}'] do not resolve from here" in item.detail
    assert item.fix and "be_address_map" in item.fix


def test_be_hosts_skip_the_redirect_and_are_checked_to_resolve(doris: DorisServer) -> None:
    doris.advertise_be_host("be-1.doris.invalid")
    ok = preflight(doris, be_hosts=(f"127.0.0.1:{doris.be_port}",)).item("BE redirects")
    assert ok.status is CheckStatus.OK and "without the FE redirect" in ok.detail
    wrong = preflight(doris, be_hosts=("be-2.doris.invalid:8040",)).item("BE redirects")
    assert wrong.status is CheckStatus.WRONG and "['be-2.doris.invalid:8040'] do not resolve" in wrong.detail


def test_settings_come_from_the_pipeline_and_their_digest_follows_every_setting() -> None:
    config = pipeline_config(
        doris_database=DB, doris_table="events", dead_letter_table="events_dead_letter",
        doris=DorisConnectionConfig(host="fe", label_keep_seconds=7200),
        load_options=StreamLoadOptions(columns=("a", "b"), sequence_col="b"),
        mapping=RecordMapping(metadata_columns=tuple(METADATA_COLUMNS)),
    )  # fmt: skip
    settings = DorisPreflightSettings.from_pipeline(config, max_concurrent_loads=3)
    assert settings == DorisPreflightSettings(
        database=DB, table="events", dead_letter_table="events_dead_letter", label_keep_seconds=7200,
        metadata_columns=tuple(METADATA_COLUMNS), load_columns=("a", "b"), jsonpaths=None, sequence_col="b",
        max_concurrent_loads=3,
    )  # fmt: skip
    assert settings.digest() == DorisPreflightSettings.from_pipeline(config, max_concurrent_loads=3).digest()
    assert settings.digest() != replace(settings, label_keep_seconds=7201).digest()
    assert settings.digest() != replace(settings, metadata_columns=METADATA).digest()


def test_a_statement_doris_refuses_makes_its_check_not_verifiable_not_a_crash(doris: DorisServer) -> None:
    """A Doris (or a proxy) that refuses ``SHOW GRANTS``: the other checks still report."""
    client = DorisStreamLoadClient(DorisConnectionConfig(host="127.0.0.1", port=doris.fe_port, user=USER,
                                                         password=PASSWORD))

    def run_sql(statement: str) -> SqlResult:
        if statement == "SHOW GRANTS":
            return client.run_sql(DB, "SHOW GRANTS FOR nobody")
        return client.run_sql(DB, statement)

    report = doris_preflight(run_sql, SETTINGS, client.config)
    item = report.item("privileges")
    assert item.status is CheckStatus.NOT_VERIFIABLE and "Doris refused a statement" in item.detail
    assert report.item("table columns").status is CheckStatus.OK
