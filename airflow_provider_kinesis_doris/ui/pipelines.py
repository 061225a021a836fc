"""The pipelines of an Airflow 3 deployment and what its metadata DB knows of them: found in the
serialized DAGs (every task whose type is ``KinesisToDorisOperator``), with their DAG runs, the
loader's XCom (what each run loaded, which shards waited, the preflight's warnings) and the audit's
verdicts.

Read only, and nothing secret: the page names connections by id, never their fields.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from airflow_provider_kinesis_doris.operators.pipeline_arguments import loader_pipeline_id

LOADER_TYPE = "KinesisToDorisOperator"
AUDIT_TYPE = "KinesisDorisAuditOperator"
DEFAULT_CONNECTIONS = {"aws_conn_id": "aws_default", "doris_conn_id": "doris_default"}
"""The loader's defaults, for a DAG serialized before its connection ids were template fields."""


@dataclass(frozen=True)
class PipelineTask:
    """One loader task: the pipeline it loads and the connections it reads them through."""

    dag_id: str
    task_id: str
    stream_name: str
    doris_table: str
    checkpoint_table: str
    pipeline_id: str
    aws_conn_id: str | None
    """None: boto3's default credential chain, as the loader reads it."""
    doris_conn_id: str | None
    dead_letter_table: str | None
    audit_task_id: str | None


@dataclass(frozen=True)
class LoaderRun:
    """A DAG run of the loader's DAG, with the loader task's state in it."""

    run_id: str
    start_ms: int
    end_ms: int
    run_state: str
    task_state: str | None
    try_number: int


def find_pipelines(session: Session) -> list[PipelineTask]:
    """Every loader task of the latest serialized version of every DAG, whose pipeline can be named
    without a DAG run (a templated stream or table is rendered only when a run starts)."""
    from airflow.models.serialized_dag import SerializedDagModel

    found = []
    for dag_id, dag in sorted(SerializedDagModel.read_all_dags(session=session).items()):
        audits = [task.task_id for task in dag.tasks if task.task_type == AUDIT_TYPE]
        for task in dag.tasks:
            if task.task_type != LOADER_TYPE:
                continue
            pipeline = _pipeline_task(dag_id, task, audits[0] if audits else None)
            if pipeline is not None:
                found.append(pipeline)
    return found


def _pipeline_task(dag_id: str, task: Any, audit_task_id: str | None) -> PipelineTask | None:
    stream, table = getattr(task, "stream_name", None), getattr(task, "doris_table", None)
    checkpoint_table = getattr(task, "checkpoint_table", None)
    if not all(isinstance(value, str) and not _templated(value) for value in (stream, table, checkpoint_table)):
        return None
    connections = loader_connections(task)
    if any(_templated(conn_id) for conn_id in connections.values()):
        return None
    mapping = getattr(task, "mapping", None)
    return PipelineTask(
        dag_id=dag_id,
        task_id=task.task_id,
        stream_name=stream,
        doris_table=table,
        checkpoint_table=checkpoint_table,
        pipeline_id=loader_pipeline_id(stream, getattr(task, "pipeline_id", None), table),
        aws_conn_id=connections["aws_conn_id"],
        doris_conn_id=connections["doris_conn_id"],
        dead_letter_table=getattr(mapping, "dead_letter_table", None),
        audit_task_id=audit_task_id,
    )


def loader_connections(task: Any) -> dict[str, str | None]:
    """The loader's connection ids as serialized. A template field is serialized whatever its
    value (a None is left out and comes back as None: boto3's default chain for AWS), so one the
    task lists is the loader's own; a DAG serialized while they were not template fields lists
    neither, and the defaults are the best guess."""
    serialized = set(getattr(task, "template_fields", ()))
    return {
        name: getattr(task, name, None) if name in serialized else default
        for name, default in DEFAULT_CONNECTIONS.items()
    }


def _templated(value: Any) -> bool:
    """A value rendered only when a run starts: the page, outside any run, cannot name it."""
    return isinstance(value, str) and "{{" in value


def recent_runs(session: Session, pipeline: PipelineTask, hours: float) -> list[LoaderRun]:
    """The DAG runs whose data interval ends in the last ``hours``, newest first, each with the
    loader task's state."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance

    since = datetime.now(timezone.utc) - timedelta(hours=hours)
    rows = session.execute(
        select(DagRun.run_id, DagRun.data_interval_start, DagRun.data_interval_end, DagRun.state,
               TaskInstance.state, TaskInstance.try_number)
        .outerjoin(TaskInstance, (TaskInstance.dag_id == DagRun.dag_id) & (TaskInstance.run_id == DagRun.run_id)
                   & (TaskInstance.task_id == pipeline.task_id))
        .where(DagRun.dag_id == pipeline.dag_id, DagRun.data_interval_end >= since)
        .order_by(DagRun.data_interval_start.desc())
    ).all()  # fmt: skip
    return [
        LoaderRun(run_id, _ms(start), _ms(end), str(run_state), str(task_state) if task_state else None, tries or 0)
        for run_id, start, end, run_state, task_state, tries in rows
        if start is not None and end is not None
    ]


def latest_xcom(session: Session, dag_id: str, task_id: str | None, key: str) -> tuple[str, Any] | None:
    """The newest XCom ``key`` of the task: (its run id, its value), or None."""
    if task_id is None:
        return None
    from airflow.models.xcom import XComModel

    row = session.scalars(
        select(XComModel)
        .where(XComModel.dag_id == dag_id, XComModel.task_id == task_id, XComModel.key == key)
        .order_by(XComModel.timestamp.desc())
        .limit(1)
    ).first()
    return (row.run_id, XComModel.deserialize_value(row)) if row is not None else None


def run_summaries(session: Session, pipeline: PipelineTask, run_ids: Sequence[str]) -> dict[str, Mapping[str, Any]]:
    """Run id → the loader's summary (its ``return_value`` XCom: what the run loaded of its own
    interval and of those it caught up), for the runs that returned one, in one read. A run
    that loaded another pipeline (the DAG named another stream or table then) is left out."""
    if not run_ids:
        return {}
    from airflow.models.xcom import XComModel

    rows = session.scalars(
        select(XComModel).where(
            XComModel.dag_id == pipeline.dag_id, XComModel.task_id == pipeline.task_id,
            XComModel.key == "return_value", XComModel.run_id.in_(run_ids),
        )
    ).all()  # fmt: skip
    summaries = {row.run_id: XComModel.deserialize_value(row) for row in rows}
    return {
        run_id: summary
        for run_id, summary in summaries.items()
        if isinstance(summary, dict) and summary.get("pipeline_id") == pipeline.pipeline_id
    }


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)
