"""``DorisHook.preflight`` and the deep mode of ``DorisHook.test_connection`` on a ``doris``
connection from the environment, against the Doris stand-in (Airflow 3.x and 2.11)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace

import pytest

from airflow_provider_kinesis_doris.core.doris.preflight import CheckStatus, DorisPreflightSettings
from kinesis_doris_devstack.doris_server import DorisServer
from kinesis_doris_devstack.scenario import events_table_ddl
from tests.preflight_items import DORIS_BROKEN_ITEMS, flagged_checks

pytestmark = [pytest.mark.airflow, pytest.mark.integration]

PASSWORD = "hook-preflight-pw"
DB = "kd_preflight"
SETTINGS = DorisPreflightSettings(
    database=DB, table="events", dead_letter_table="events_dead_letter", label_keep_seconds=43200,
    metadata_columns=("_kinesis_shard", "_kinesis_sequence"),
)  # fmt: skip


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[DorisServer]:
    with DorisServer(user="root", password=PASSWORD) as srv:
        srv.execute_sql("", f"CREATE DATABASE {DB}")
        srv.execute_sql(DB, events_table_ddl("events"))
        srv.set_fe_config("label_num_threshold", -1)
        connection = {"conn_type": "doris", "host": "127.0.0.1", "port": srv.fe_port, "login": "root",
                      "password": PASSWORD, "schema": DB, "extra": {"query_port": srv.query_port}}
        monkeypatch.setenv("AIRFLOW_CONN_DORIS_DEFAULT", json.dumps(connection))
        yield srv


def make_hook():  # type: ignore[no-untyped-def]
    from airflow_provider_kinesis_doris.hooks.doris import DorisHook

    return DorisHook()


def test_preflight_runs_every_check_through_the_hook(server: DorisServer) -> None:
    report = make_hook().preflight(SETTINGS)
    assert {item.status for item in report.items} == {CheckStatus.OK}, report.text()

    server.set_fe_config("streaming_label_keep_max_second", 600)
    [item] = make_hook().preflight(SETTINGS).fatal
    assert item.check == "label window" and "600 s" in item.detail


def test_test_connection_without_settings_stays_shallow(server: DorisServer) -> None:
    server.set_fe_config("streaming_label_keep_max_second", 600)
    ok, message = make_hook().test_connection()
    assert ok is True and "preflight" not in message


def test_test_connection_deep_mode_passes_and_lists_the_warnings(server: DorisServer) -> None:
    server.set_fe_config("label_num_threshold", 2000)
    ok, message = make_hook().test_connection(preflight=SETTINGS)
    assert ok is True
    assert message.startswith("Connected to Doris FE") and "; preflight passed (Doris preflight at " in message
    assert "0 fatal, 1 warnings, 9 checks" in message
    assert message.splitlines()[1].startswith("[wrong] label count: label_num_threshold 2000")
    assert PASSWORD not in message


def test_test_connection_deep_mode_fails_on_a_fatal_item_naming_it_and_its_fix(server: DorisServer) -> None:
    ok, message = make_hook().test_connection(
        preflight=replace(SETTINGS, metadata_columns=("_kinesis_shard", "_kinesis_partition_key"))
    )
    assert ok is False
    assert "; preflight failed (" in message
    [fatal] = [line for line in message.splitlines() if line.startswith("[FATAL]")]
    assert fatal.startswith("[FATAL] table columns:") and "['_kinesis_partition_key']" in fatal
    assert "Fix: ALTER TABLE kd_preflight.events ADD COLUMN" in fatal


@pytest.mark.parametrize("check", sorted(DORIS_BROKEN_ITEMS))
def test_test_connection_deep_mode_names_each_broken_item_and_fails_only_on_a_fatal_one(
    server: DorisServer, check: str
) -> None:
    fatal, breaks = DORIS_BROKEN_ITEMS[check]
    ok, _ = make_hook().test_connection(preflight=SETTINGS)
    assert ok is True

    breaks(server, DB, "events")
    ok, message = make_hook().test_connection(preflight=SETTINGS)

    assert ok is (not fatal), message
    assert flagged_checks(message) == [f"[{'FATAL' if fatal else 'wrong'}] {check}"], message
