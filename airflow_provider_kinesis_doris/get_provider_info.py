"""Provider metadata read by Airflow's providers manager (entry point ``apache_airflow_provider``).

Airflow 3.2+ builds the ``doris`` connection form from ``conn-fields`` / ``ui-field-behaviour``
below; Airflow 2.x reads the same fields from ``DorisHook.get_connection_form_widgets``.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from packaging.version import Version

from airflow_provider_kinesis_doris import __version__

_PACKAGE = "airflow_provider_kinesis_doris"
_INTEGRATION = "Kinesis to Doris"

# Extras of the ``doris`` connection; the hook declares the same names for Airflow 2.x.
DORIS_CONN_FIELDS: dict[str, dict[str, Any]] = {
    "query_port": {
        "label": "FE query port (MySQL protocol)",
        "description": "The FE's query_port (default 9030): SQL operators and get_records/run use it; loads use the HTTP port.",
        "schema": {"type": ["integer", "null"], "default": 9030},
    },
    "https": {
        "label": "Use HTTPS",
        "description": "Talk to the FE over HTTPS (the BE redirect target is always plain HTTP).",
        "schema": {"type": ["boolean", "null"], "default": False},
    },
    "be_hosts": {
        "label": "BE hosts",
        "description": "Comma-separated host:port list; loads go straight to these BEs, skipping the FE redirect.",
        "schema": {"type": ["string", "null"]},
    },
    "allowed_redirect_hosts": {
        "label": "Allowed redirect hosts",
        "description": "Comma-separated hosts that may receive credentials after a 307 (the FE host always may).",
        "schema": {"type": ["string", "null"]},
    },
    "be_address_map": {
        "label": "BE address map",
        "description": 'JSON object mapping advertised BE addresses to reachable ones, e.g. {"10.0.0.5:8040": "be1:8040"}.',
        "schema": {"type": ["string", "null"]},
    },
    "label_keep_seconds": {
        "label": "Label retention (s)",
        "description": "The FE's streaming_label_keep_max_second (default 43200); bounds label-based deduplication.",
        "schema": {"type": ["integer", "null"], "default": 43200},
    },
}


_DORIS_URIS = {
    "schemes": ["doris"],
    "handler": f"{_PACKAGE}.assets.doris.sanitize_uri",
    "to_openlineage_converter": f"{_PACKAGE}.assets.doris.convert_asset_to_openlineage",
    "factory": f"{_PACKAGE}.assets.doris.create_asset",
}


_PLUGINS = [{"name": "kinesis_doris_pipelines", "plugin-class": f"{_PACKAGE}.ui.plugin.KinesisDorisPipelinesPlugin"}]
"""The pipeline pages (``ui.app``): a FastAPI app in the API server, which Airflow 3.1 first mounts
from plugins. Listed only there: 2.11's webserver would import the plugin and fail on FastAPI."""


def _serves_plugin_apps() -> bool:
    # Read from the installed distribution, not `import airflow`: the providers manager calls this
    # while Airflow itself is being imported.
    try:
        return Version(Version(version("apache-airflow")).base_version) >= Version("3.1.0")
    except PackageNotFoundError:
        return False


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-provider-kinesis-doris",
        "name": "Kinesis to Doris",
        "description": "Exactly-once micro-batch loads from Amazon Kinesis Data Streams into Apache Doris.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": _INTEGRATION,
                "external-doc-url": "https://doris.apache.org/docs/data-operate/import/import-way/stream-load-manual",
                "tags": ["aws", "software"],
            }
        ],
        "hooks": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": [f"{_PACKAGE}.hooks.doris", f"{_PACKAGE}.hooks.kinesis_pipeline"],
            }
        ],
        "operators": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": [f"{_PACKAGE}.operators.kinesis_to_doris", f"{_PACKAGE}.operators.rebalance",
                                   f"{_PACKAGE}.operators.audit", f"{_PACKAGE}.operators.pipeline_arguments"],
            }
        ],
        "sensors": [{"integration-name": _INTEGRATION, "python-modules": [f"{_PACKAGE}.sensors.kinesis_reshard"]}],
        "triggers": [{"integration-name": _INTEGRATION, "python-modules": [f"{_PACKAGE}.triggers.kinesis_reshard"]}],
        "extra-links": [f"{_PACKAGE}.links.doris.DorisTableLink", f"{_PACKAGE}.links.pipeline_page.KinesisDorisPipelineLink"],
        # doris://<conn id>/<database>/<table>: the loader's default outlet (assets.doris).
        # Airflow 3 reads "asset-uris", 2.11 "dataset-uris".
        "asset-uris": [_DORIS_URIS],
        "dataset-uris": [_DORIS_URIS],
        "connection-types": [
            {
                "connection-type": "doris",
                "hook-class-name": f"{_PACKAGE}.hooks.doris.DorisHook",
                "hook-name": "Apache Doris (Stream Load)",
                "ui-field-behaviour": {
                    "hidden-fields": ["extra"],
                    "relabeling": {"host": "FE host", "port": "FE HTTP port", "schema": "Default database"},
                    "placeholders": {"host": "127.0.0.1", "port": "8030", "login": "root"},
                },
                "conn-fields": DORIS_CONN_FIELDS,
            }
        ],
        **({"plugins": _PLUGINS} if _serves_plugin_apps() else {}),
    }
