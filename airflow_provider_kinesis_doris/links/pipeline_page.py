"""An extra link from the loader's task to its pipeline's page (``ui.app``)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlsplit

from airflow.providers.common.compat.sdk import BaseOperator, BaseOperatorLink
from packaging.version import Version

from airflow_provider_kinesis_doris.version_compat import AIRFLOW_VERSION

PAGE_PREFIX = "/kinesis-doris"
"""``ui.app.URL_PREFIX``, repeated: the link is built in the task's process, which need not
import the page's FastAPI app."""
PAGE_SINCE = Version("3.1.0")
"""Plugins serve FastAPI apps from Airflow 3.1 on; before, the page does not exist."""


class KinesisDorisPipelineLink(BaseOperatorLink):
    """The "Kinesis → Doris" page of the task's pipeline, on the API server's own path
    (``[api] base_url``), so it works behind a proxy that serves Airflow under a path. Empty
    (Airflow hides it) before Airflow 3.1."""

    name = "Kinesis → Doris pipeline"

    def get_link(self, operator: BaseOperator, *, ti_key: Any) -> str:
        if AIRFLOW_VERSION < PAGE_SINCE:
            return ""
        return pipeline_page_url(operator.dag_id, operator.task_id)


def pipeline_page_url(dag_id: str, task_id: str) -> str:
    from airflow.configuration import conf

    base_path = urlsplit(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")
    return f"{base_path}{PAGE_PREFIX}/pipelines/{quote(dag_id, safe='')}/{quote(task_id, safe='')}"
