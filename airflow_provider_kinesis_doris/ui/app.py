"""The "Kinesis → Doris" pages, a FastAPI app the provider's plugin mounts in Airflow 3's API
server under :data:`URL_PREFIX` (no server of its own).

Airflow's authentication and permissions hold on every route: the user comes from the API
server's token (the UI's cookie or a bearer token), and a pipeline is shown only to a user the
auth manager lets read its DAG, the same check Airflow's own DAG endpoints make.

Imported by the plugin on Airflow 3.1+ only (``ui.plugin``).
"""

from __future__ import annotations

from typing import Annotated, Any

from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import FastAPI, HTTPException, Query, status
from fastapi.responses import HTMLResponse

from airflow_provider_kinesis_doris.ui import html
from airflow_provider_kinesis_doris.ui.pipelines import PipelineTask, find_pipelines, recent_runs
from airflow_provider_kinesis_doris.ui.view import DEFAULT_HOURS, build_page, pipeline_summary

URL_PREFIX = "/kinesis-doris"
HoursQuery = Annotated[float, Query(gt=0, le=24 * 14, description="the interval grid's window")]


def can_read_dag(user: Any, dag_id: str) -> bool:
    """The auth manager's answer for GET on the DAG, as ``requires_access_dag("GET")`` asks it."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails
    from airflow.models.dag import DagModel

    details = DagDetails(id=dag_id, team_name=DagModel.get_team_name(dag_id))
    return get_auth_manager().is_authorized_dag(method="GET", details=details, user=user)


def readable_pipelines(user: Any) -> list[PipelineTask]:
    from airflow.utils.session import create_session

    with create_session() as session:
        pipelines = find_pipelines(session)
    readable_dags = {dag_id for dag_id in {p.dag_id for p in pipelines} if can_read_dag(user, dag_id)}
    return [pipeline for pipeline in pipelines if pipeline.dag_id in readable_dags]


def pipeline_for(user: Any, dag_id: str, task_id: str) -> PipelineTask:
    """The loader task ``task_id`` of ``dag_id``; 403 before anything is looked up when the user
    may not read the DAG, so a refusal does not tell whether the DAG exists."""
    if not can_read_dag(user, dag_id):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "Forbidden")
    for pipeline in readable_pipelines(user):
        if (pipeline.dag_id, pipeline.task_id) == (dag_id, task_id):
            return pipeline
    raise HTTPException(status.HTTP_404_NOT_FOUND, f"No Kinesis → Doris loader {task_id!r} in DAG {dag_id!r}")


def list_data(user: Any, hours: float) -> list[dict[str, Any]]:
    from airflow.utils.session import create_session

    rows = []
    with create_session() as session:
        for pipeline in readable_pipelines(user):
            # The list reads only the metadata DB: a pipeline's store is read on its own page.
            rows.append(pipeline_summary(pipeline, recent_runs(session, pipeline, hours), None))
    return rows


def page_data(user: Any, dag_id: str, task_id: str, hours: float) -> dict[str, Any]:
    from airflow.utils.session import create_session

    pipeline = pipeline_for(user, dag_id, task_id)
    with create_session() as session:
        return build_page(session, pipeline, hours)


def create_app() -> FastAPI:
    app = FastAPI(title="Kinesis → Doris pipelines", description="Read-only status of the Kinesis → Doris pipelines.")

    @app.get("/api/pipelines")
    def pipelines_json(user: GetUserDep, hours: HoursQuery = DEFAULT_HOURS) -> list[dict[str, Any]]:
        return list_data(user, hours)

    @app.get("/api/pipelines/{dag_id}/{task_id}")
    def pipeline_json(dag_id: str, task_id: str, user: GetUserDep, hours: HoursQuery = DEFAULT_HOURS) -> dict[str, Any]:
        return page_data(user, dag_id, task_id, hours)

    @app.get("/", response_class=HTMLResponse)
    def pipelines_page(user: GetUserDep, hours: HoursQuery = DEFAULT_HOURS) -> str:
        return html.pipelines_page(list_data(user, hours), URL_PREFIX)

    @app.get("/dags/{dag_id}", response_class=HTMLResponse)
    def dag_page(dag_id: str, user: GetUserDep, hours: HoursQuery = DEFAULT_HOURS) -> str:
        """The DAG's pipelines (the DAG's own menu links here)."""
        if not can_read_dag(user, dag_id):
            raise HTTPException(status.HTTP_403_FORBIDDEN, "Forbidden")
        rows = [row for row in list_data(user, hours) if row["dag_id"] == dag_id]
        return html.pipelines_page(rows, URL_PREFIX)

    @app.get("/pipelines/{dag_id}/{task_id}", response_class=HTMLResponse)
    def pipeline_page(dag_id: str, task_id: str, user: GetUserDep, hours: HoursQuery = DEFAULT_HOURS) -> str:
        return html.pipeline_page(page_data(user, dag_id, task_id, hours), URL_PREFIX)

    return app
