"""Extra links to the Doris FE, shown on the task instances of the loader."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import BaseOperator, BaseOperatorLink, XCom

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context


class DorisTableLink(BaseOperatorLink):
    """The loaded table's schema on the Doris FE (``GET /api/{db}/{table}/_schema``)."""

    name = "Doris table"
    key = "doris_table_link"

    def get_link(self, operator: BaseOperator, *, ti_key: Any) -> str:
        return XCom.get_value(key=self.key, ti_key=ti_key) or ""

    @classmethod
    def persist(cls, context: Context, fe_url: str, database: str, table: str) -> None:
        context["ti"].xcom_push(key=cls.key, value=f"{fe_url}/api/{database}/{table}/_schema")
