"""Extra links to the Doris FE, shown on the task instances of the loader."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import BaseOperator, BaseOperatorLink, XCom

from airflow_provider_kinesis_doris.version_compat import AIRFLOW_V_3_0_PLUS

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context

_URL_ATTRIBUTE = "_doris_table_url"
"""Where Airflow 3 finds the URL on the task that ran: the attribute :meth:`DorisTableLink.persist` sets."""


class DorisTableLink(BaseOperatorLink):
    """The loaded table's schema on the Doris FE (``GET /api/{db}/{table}/_schema``).

    Empty, quietly, for a task that failed before it knew the FE (a wrong ``doris_conn_id``).
    """

    name = "Doris table"
    key = "doris_table_link"

    def get_link(self, operator: BaseOperator, *, ti_key: Any) -> str:
        if AIRFLOW_V_3_0_PLUS:
            # Airflow 3 asks in the task's own process as it finishes, and keeps the answer for the
            # UI: the task holds the URL if it got that far. Asking XCom for a value never pushed
            # would log "XCom not found" as an error beside the task's real failure.
            return getattr(operator, _URL_ATTRIBUTE, "")
        return XCom.get_value(key=self.key, ti_key=ti_key) or ""  # 2.x: the webserver asks, later

    @classmethod
    def persist(cls, context: Context, fe_url: str, database: str, table: str) -> None:
        url = f"{fe_url}/api/{database}/{table}/_schema"
        if AIRFLOW_V_3_0_PLUS:
            setattr(context["task"], _URL_ATTRIBUTE, url)
        else:
            context["ti"].xcom_push(key=cls.key, value=url)
