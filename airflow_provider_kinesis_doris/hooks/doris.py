"""Airflow hook for Apache Doris: builds the core Stream Load client from a ``doris`` connection.

Connection fields: host = FE host, port = FE HTTP port (8030), login/password, schema = default
database. Extras (declared once, in ``get_provider_info.DORIS_CONN_FIELDS``): ``https``,
``be_hosts``, ``allowed_redirect_hosts``, ``be_address_map``, ``label_keep_seconds``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cached_property
from typing import Any

from airflow.providers.common.compat.sdk import BaseHook

from airflow_provider_kinesis_doris.core.errors import ConfigurationError, KinesisDorisError
from airflow_provider_kinesis_doris.core.doris.client import DorisStreamLoadClient
from airflow_provider_kinesis_doris.core.doris.result import IdempotentLoadResult, SqlResult
from airflow_provider_kinesis_doris.core.doris.options import PrecommittedPolicy
from airflow_provider_kinesis_doris.core.doris.options import Body, StreamLoadOptions
from airflow_provider_kinesis_doris.core.doris.connection import (
    DEFAULT_FE_HTTP_PORT,
    DEFAULT_LABEL_KEEP_SECONDS,
    DorisConnectionConfig,
)
from airflow_provider_kinesis_doris.core.doris.result import LabelState, StreamLoadResult
from airflow_provider_kinesis_doris.get_provider_info import DORIS_CONN_FIELDS, get_provider_info


class DorisHook(BaseHook):
    """Stream Load, label state and SQL on an Apache Doris cluster.

    .. seealso:: https://doris.apache.org/docs/data-operate/import/import-way/stream-load-manual

    :param doris_conn_id: the ``doris`` connection; defaults to ``doris_default``.
    """

    conn_name_attr = "doris_conn_id"
    default_conn_name = "doris_default"
    conn_type = "doris"
    hook_name = "Apache Doris (Stream Load)"

    def __init__(self, doris_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.doris_conn_id = doris_conn_id

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        """Extra fields of the connection form on Airflow < 3.2 (3.2+ reads ``conn-fields``)."""
        from flask_appbuilder.fieldwidgets import BS3TextFieldWidget
        from flask_babel import lazy_gettext
        from wtforms import BooleanField, IntegerField, StringField

        def widget(spec: Mapping[str, Any]) -> Any:
            label = lazy_gettext(spec["label"])
            types = spec["schema"]["type"]
            default = spec["schema"].get("default")
            if "boolean" in types:
                return BooleanField(label, description=spec["description"], default=default)
            if "integer" in types:
                return IntegerField(
                    label, description=spec["description"], default=default, widget=BS3TextFieldWidget()
                )
            return StringField(label, description=spec["description"], widget=BS3TextFieldWidget())

        return {name: widget(spec) for name, spec in DORIS_CONN_FIELDS.items()}

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Relabelled and hidden standard fields on Airflow < 3.2 (same values as the provider info)."""
        behaviour = _doris_connection_type()["ui-field-behaviour"]
        return {
            "hidden_fields": list(behaviour["hidden-fields"]),
            "relabeling": dict(behaviour["relabeling"]),
            "placeholders": dict(behaviour["placeholders"]),
        }

    def connection_config(self) -> DorisConnectionConfig:
        """The core client configuration read from the connection."""
        conn = self.get_connection(self.doris_conn_id)
        if not conn.host:
            raise ConfigurationError(f"Connection {self.doris_conn_id!r} has no host (the Doris FE)")
        extras = conn.extra_dejson
        return DorisConnectionConfig(
            host=conn.host,
            port=int(conn.port or DEFAULT_FE_HTTP_PORT),
            user=conn.login or "root",
            password=conn.password or "",
            https=_as_bool(_extra(extras, "https")),
            be_hosts=_as_list(_extra(extras, "be_hosts")),
            allowed_redirect_hosts=_as_list(_extra(extras, "allowed_redirect_hosts")),
            be_address_map=_as_mapping(self.doris_conn_id, _extra(extras, "be_address_map")),
            label_keep_seconds=int(_extra(extras, "label_keep_seconds") or DEFAULT_LABEL_KEEP_SECONDS),
        )

    def get_client(self) -> DorisStreamLoadClient:
        """A new core client for this connection (one per task or Spark partition)."""
        return DorisStreamLoadClient(self.connection_config())

    def get_conn(self) -> DorisStreamLoadClient:
        """The hook's own client, created on first use."""
        return self._client

    @cached_property
    def _client(self) -> DorisStreamLoadClient:
        return self.get_client()

    @cached_property
    def default_database(self) -> str | None:
        """The connection's schema, used when a method is called without ``database``."""
        return self.get_connection(self.doris_conn_id).schema or None

    def stream_load(
        self,
        table: str,
        body: Body,
        *,
        label: str | None = None,
        options: StreamLoadOptions | None = None,
        database: str | None = None,
    ) -> StreamLoadResult:
        """Send one Stream Load; see :meth:`DorisStreamLoadClient.stream_load`.

        :param table: target table.
        :param body: the rows, as bytes or a ``StreamingBody``.
        :param label: the load's label.
        :param options: format and other headers.
        :param database: target database; the connection's schema by default.
        """
        client = self.get_conn()
        return client.stream_load(self._database(database), table, body, label=label, options=options)

    def load_idempotently(
        self,
        table: str,
        label: str,
        body: Body,
        options: StreamLoadOptions | None = None,
        *,
        database: str | None = None,
        precommitted_policy: PrecommittedPolicy = PrecommittedPolicy.FAIL,
    ) -> IdempotentLoadResult:
        """Load exactly once under ``label``; see :meth:`DorisStreamLoadClient.load_idempotently`.

        :param table: target table.
        :param label: the chunk's label.
        :param body: the rows.
        :param options: format and other headers.
        :param database: target database; the connection's schema by default.
        :param precommitted_policy: what to do with a label left PRECOMMITTED.
        """
        return self.get_conn().load_idempotently(
            self._database(database), table, label, body, options, precommitted_policy=precommitted_policy
        )

    def get_load_state(self, label: str, *, database: str | None = None) -> LabelState:
        """The state of ``label``; see :meth:`DorisStreamLoadClient.get_load_state`.

        :param label: the label.
        :param database: the label's database; the connection's schema by default.
        """
        return self.get_conn().get_load_state(self._database(database), label)

    def run_sql(self, statement: str, *, database: str | None = None) -> SqlResult:
        """Run one statement through the FE's HTTP SQL endpoint.

        :param statement: the SQL statement.
        :param database: default database; the connection's schema by default.
        """
        return self.get_conn().run_sql(self._database(database), statement)

    def test_connection(self) -> tuple[bool, str]:
        """Run ``SELECT 1`` on the FE with the connection's credentials."""
        try:
            result = self.run_sql("SELECT 1")
        except KinesisDorisError as exc:
            return False, str(exc)
        if not result.rows or str(result.rows[0][0]) != "1":
            return False, f"SELECT 1 returned {result.rows!r}"
        config = self.get_conn().config
        return True, f"Connected to Doris FE {config.fe_address} as {config.user}"

    def _database(self, database: str | None) -> str:
        chosen = database or self.default_database
        if not chosen:
            raise ConfigurationError(
                f"No database given and connection {self.doris_conn_id!r} has no schema (default database)"
            )
        return chosen


def _doris_connection_type() -> dict[str, Any]:
    entries = get_provider_info()["connection-types"]
    return next(entry for entry in entries if entry["connection-type"] == "doris")


def _extra(extras: Mapping[str, Any], name: str) -> Any:
    # Airflow stores form fields under the plain name; older forms used the prefixed one.
    value = extras.get(name)
    return extras.get(f"extra__doris__{name}") if value in (None, "") else value


def _as_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def _as_list(value: Any) -> tuple[str, ...]:
    if not value:
        return ()
    items = value.split(",") if isinstance(value, str) else value
    return tuple(str(item).strip() for item in items if str(item).strip())


def _as_mapping(conn_id: str, value: Any) -> dict[str, str]:
    if not value:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ConfigurationError(f"be_address_map of connection {conn_id!r} is not valid JSON") from None
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"be_address_map of connection {conn_id!r} must be a JSON object")
    return {str(key): str(target) for key, target in value.items()}
