"""DorisHook on a ``doris`` connection from the environment, against the Doris stand-in.

Runs under Airflow 3.x (``.venv``) and 2.11 (``.venv-af2``).
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.core.doris.labels import chunk_label
from airflow_provider_kinesis_doris.core.model import Position
from airflow_provider_kinesis_doris.core.doris.result import LoadDisposition
from airflow_provider_kinesis_doris.core.doris.options import StreamLoadOptions
from airflow_provider_kinesis_doris.core.doris.result import LabelState, LoadOutcome
from airflow_provider_kinesis_doris.get_provider_info import DORIS_CONN_FIELDS, get_provider_info
from kinesis_doris_devstack.doris_server import DorisServer

pytestmark = [pytest.mark.airflow, pytest.mark.integration]

PASSWORD = "hook-pw-7Yx2-secret"
DB = "kd_hook"
ROWS = b'{"id": 1, "v": "a"}\n{"id": 2, "v": "b"}\n'


@pytest.fixture(scope="module")
def server() -> Iterator[DorisServer]:
    with DorisServer(host="127.0.0.1", fe_port=0, be_port=0, user="root", password=PASSWORD) as srv:
        srv.execute_sql("", f"CREATE DATABASE {DB}")
        srv.execute_sql(DB, "CREATE TABLE t (id INT NOT NULL, v VARCHAR(8)) DUPLICATE KEY(id) "
                            "DISTRIBUTED BY HASH(id) BUCKETS 1")
        yield srv


def set_connection(monkeypatch: pytest.MonkeyPatch, conn_id: str = "doris_default", **fields: Any) -> None:
    """Put a JSON connection into the environment, as ``AIRFLOW_CONN_<ID>``."""
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "doris", **fields}))


def standin_connection(server: DorisServer, **overrides: Any) -> dict[str, Any]:
    return {"host": "127.0.0.1", "port": server.fe_port, "login": "root", "password": PASSWORD, "schema": DB,
            "extra": {"query_port": server.query_port}, **overrides}


def make_hook(conn_id: str = "doris_default"):  # type: ignore[no-untyped-def]
    from airflow_provider_kinesis_doris.hooks.doris import DorisHook

    return DorisHook(doris_conn_id=conn_id)


def test_hook_declares_the_doris_connection_type() -> None:
    from airflow_provider_kinesis_doris.hooks.doris import DorisHook

    [entry] = get_provider_info()["connection-types"]
    assert (DorisHook.conn_type, DorisHook.hook_name) == (entry["connection-type"], entry["hook-name"])
    assert entry["hook-class-name"] == f"{DorisHook.__module__}.{DorisHook.__qualname__}"
    assert (DorisHook.conn_name_attr, DorisHook.default_conn_name) == ("doris_conn_id", "doris_default")
    assert make_hook().doris_conn_id == "doris_default"


def test_legacy_ui_behaviour_matches_the_provider_info() -> None:
    from airflow_provider_kinesis_doris.hooks.doris import DorisHook

    declared = get_provider_info()["connection-types"][0]["ui-field-behaviour"]
    assert DorisHook.get_ui_field_behaviour() == {
        "hidden_fields": declared["hidden-fields"],
        "relabeling": declared["relabeling"],
        "placeholders": declared["placeholders"],
    }


def test_legacy_form_widgets_come_from_the_shared_field_declarations() -> None:
    from airflow_provider_kinesis_doris.hooks.doris import DorisHook

    if importlib.util.find_spec("wtforms") is None:
        # Airflow 3.2+ builds the form from conn-fields and ships without wtforms.
        from airflow import __version__ as airflow_version

        assert tuple(int(part) for part in airflow_version.split(".")[:2]) >= (3, 2)
        return
    widgets = DorisHook.get_connection_form_widgets()
    assert list(widgets) == list(DORIS_CONN_FIELDS)
    kinds = {name: widget.field_class.__name__ for name, widget in widgets.items()}
    assert kinds == {"query_port": "IntegerField", "https": "BooleanField", "be_hosts": "StringField",
                     "allowed_redirect_hosts": "StringField",
                     "be_address_map": "StringField", "label_keep_seconds": "IntegerField"}


def test_connection_extras_become_the_client_config(monkeypatch: pytest.MonkeyPatch) -> None:
    set_connection(
        monkeypatch,
        host="fe.internal",
        port=18030,
        login="loader",
        password=PASSWORD,
        schema=DB,
        extra={
            "https": "true",
            "be_hosts": "be1:8040, be2:8040",
            "allowed_redirect_hosts": "be1,be2",
            "be_address_map": json.dumps({"10.0.0.5:8040": "be1:8040"}),
            "label_keep_seconds": "3600",
        },
    )
    hook = make_hook()
    config = hook.connection_config()
    assert (config.host, config.port, config.user) == ("fe.internal", 18030, "loader")
    assert config.password == PASSWORD
    assert config.https is True
    assert config.be_hosts == ("be1:8040", "be2:8040")
    assert config.allowed_redirect_hosts == ("be1", "be2")
    assert dict(config.be_address_map) == {"10.0.0.5:8040": "be1:8040"}
    assert config.label_keep_seconds == 3600
    assert repr(hook.get_client()) == "DorisStreamLoadClient(user='loader', fe='fe.internal:18030')"
    assert hook.stream_load_client.config == config
    assert (hook.query_port, hook.query_address) == (9030, "fe.internal:9030")


def test_prefixed_extras_and_defaults_are_understood(monkeypatch: pytest.MonkeyPatch) -> None:
    set_connection(monkeypatch, host="fe", extra={"extra__doris__be_address_map": {"a:1": "b:2"}})
    hook = make_hook()
    config = hook.connection_config()
    assert (config.port, config.user, config.https, config.label_keep_seconds) == (8030, "root", False, 43200)
    assert hook.query_port == 9030
    assert dict(config.be_address_map) == {"a:1": "b:2"}


def test_bad_be_address_map_names_the_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    set_connection(monkeypatch, conn_id="doris_bad", host="fe", extra={"be_address_map": "{not json"})
    with pytest.raises(ConfigurationError, match="doris_bad"):
        make_hook("doris_bad").connection_config()


def test_test_connection_runs_select_1_over_both_ways_to_the_fe(
    server: DorisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_connection(monkeypatch, **standin_connection(server))
    ok, message = make_hook().test_connection()
    assert ok is True
    assert f"127.0.0.1:{server.query_port} (MySQL protocol)" in message
    assert f"127.0.0.1:{server.fe_port} (HTTP)" in message and PASSWORD not in message


def test_test_connection_says_which_way_to_the_fe_failed(
    server: DorisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed = {"query_port": _closed_port()}
    set_connection(monkeypatch, **standin_connection(server, extra=closed))
    ok, message = make_hook().test_connection()
    assert ok is False
    assert message.startswith("The MySQL protocol (query_port) failed") and "doris_default" in message
    assert f"127.0.0.1:{closed['query_port']}" in message

    set_connection(monkeypatch, **standin_connection(server, port=_closed_port()))
    ok, message = make_hook().test_connection()
    assert ok is False
    assert message.startswith("The MySQL protocol works; the HTTP SQL endpoint at 127.0.0.1:")


def test_test_connection_reports_a_wrong_password_without_showing_it(
    server: DorisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = "wrong-" + PASSWORD
    set_connection(monkeypatch, **standin_connection(server, password=wrong))
    hook = make_hook()
    ok, message = hook.test_connection()
    assert ok is False
    assert "Access denied" in message and "MySQL protocol" in message
    assert wrong not in message and PASSWORD not in message
    assert wrong not in repr(hook.stream_load_client) and wrong not in repr(hook)


def test_hook_loads_idempotently_and_reads_state_and_sql(
    server: DorisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_connection(monkeypatch, **standin_connection(server))
    hook = make_hook()
    label = chunk_label("hook", "stream", "shardId-000000000000", Position(1), Position(2))
    options = StreamLoadOptions.json_lines()
    first = hook.load_idempotently("t", label, ROWS, options)
    second = hook.load_idempotently("t", label, ROWS, options)
    assert (first.disposition, second.disposition) == (LoadDisposition.LOADED, LoadDisposition.ALREADY_LOADED)
    assert hook.get_load_state(label) is LabelState.VISIBLE
    assert hook.run_sql("SELECT id, v FROM t ORDER BY id").rows == ((1, "a"), (2, "b"))


def test_hook_stream_load_uses_be_hosts_from_the_connection(
    server: DorisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The FE port is closed on purpose: only the BE list can make this load work.
    be_hosts = {"be_hosts": f"127.0.0.1:{server.be_port}"}
    set_connection(monkeypatch, **standin_connection(server, port=1, extra=be_hosts))
    hook = make_hook()
    result = hook.stream_load("t", b'{"id": 9, "v": "z"}\n', label="kd:hook:direct:1",
                              options=StreamLoadOptions.json_lines(), database=DB)
    assert result.outcome is LoadOutcome.SUCCESS and result.number_loaded_rows == 1
    assert server.execute_sql(DB, "SELECT v FROM t WHERE id = 9") == [("z",)]


def test_hook_without_schema_or_database_asks_for_one(
    server: DorisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_connection(monkeypatch, **standin_connection(server, schema=""))
    with pytest.raises(ConfigurationError, match="No database given"):
        make_hook().get_load_state("any")


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_hook_describes_columns_and_creates_the_dead_letter_table_beside_an_existing_target(
    server: DorisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_connection(monkeypatch, **standin_connection(server))
    hook = make_hook()
    assert [name for name, _ in hook.column_types(DB, "t")] == ["id", "v"]
    hook.ensure_dead_letter_table(DB, "t", "t_dead", {"replication_num": "1"})
    hook.ensure_dead_letter_table(DB, "t", "t_dead")  # the next run's: it exists
    assert "payload_base64" in [name for name, _ in hook.column_types(DB, "t_dead")]


def test_hook_names_a_missing_target_table_and_creates_nothing(
    server: DorisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_connection(monkeypatch, **standin_connection(server))
    hook = make_hook()
    with pytest.raises(ConfigurationError, match=r"Doris table kd_hook.nope does not exist .* sees \[.*'t'.*\]\); create it first"):
        hook.ensure_dead_letter_table(DB, "nope", "nope_dead")
    assert "nope_dead" not in {row[0] for row in hook.run_sql("SHOW TABLES").rows}
