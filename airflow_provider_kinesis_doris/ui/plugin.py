"""The provider's Airflow plugin: the "Kinesis → Doris" pages in Airflow 3.1+'s API server and
their entries in the UI's menu and on each DAG.

Registered twice, as the edge3 provider registers its own: from ``get_provider_info`` ("plugins",
read when ``[core] lazy_discover_providers`` is False) and as an ``airflow.plugins`` entry point
(read always). Airflow 2.11 loads the entry point too: there the plugin is empty, since its
webserver serves no FastAPI app.
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

from airflow_provider_kinesis_doris.links.pipeline_page import PAGE_PREFIX, PAGE_SINCE
from airflow_provider_kinesis_doris.version_compat import AIRFLOW_VERSION

PLUGIN_NAME = "kinesis_doris_pipelines"


def _fastapi_apps() -> list[dict[str, Any]]:
    from airflow_provider_kinesis_doris.ui.app import URL_PREFIX, create_app

    assert URL_PREFIX == PAGE_PREFIX  # the task's extra link points here
    return [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "Kinesis → Doris pipelines"}]


EXTERNAL_VIEWS: list[dict[str, Any]] = [
    # In the UI's menu, the page inside Airflow's frame.
    {"name": "Kinesis → Doris", "href": f"{PAGE_PREFIX}/", "destination": "nav", "category": "browse",
     "url_route": "kinesis-doris"},
    # On every DAG: its pipelines ({DAG_ID} is filled in by the UI); a DAG without one says so.
    {"name": "Kinesis → Doris", "href": f"{PAGE_PREFIX}/dags/{{DAG_ID}}", "destination": "dag",
     "url_route": "kinesis-doris-dag"},
]  # fmt: skip


class KinesisDorisPipelinesPlugin(AirflowPlugin):
    name = PLUGIN_NAME
    if AIRFLOW_VERSION >= PAGE_SINCE:
        fastapi_apps = _fastapi_apps()
        external_views = EXTERNAL_VIEWS
