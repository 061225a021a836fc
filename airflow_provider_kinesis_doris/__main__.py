"""``python -m airflow_provider_kinesis_doris check <dag_id> <task_id>``: the preflight of one
``KinesisToDorisOperator`` task against its deployment (issue 34), outside any DAG run.

The DAG is loaded from Airflow's DAG folder (or ``--subdir``) as the scheduler parses it, its
templated arguments are rendered as a manual run at ``--logical-date`` (default: now) would render
them (``{{ ds }}``, ``{{ var.value.x }}``...), and the task checks its Doris and AWS deployment with
its own connections and settings (``KinesisToDorisOperator.check_deployment``). It also reads a
sample of the stream's records of the last hour, maps them as the loader would and names the
members no column of the table takes and the columns none fills (``core.fields``); it loads
nothing and moves no checkpoint. Exit code 1 when an item is fatal (the task would
fail before planning anything, or would refuse the sampled records with
``unmatched_fields="fail"``), 2 when the DAG or the task cannot be found or checked, 3 when
nothing is fatal but Doris's label window could not be read (a user without ADMIN: only the
run-time canary checks it then), else 0.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider_kinesis_doris.core.doris.preflight import PreflightReport

EXIT_FATAL = 1
EXIT_UNUSABLE = 2
EXIT_LABEL_WINDOW_UNVERIFIED = 3


def _dag_bag(subdir: str | None) -> Any:
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # Airflow 2.11, whose DagBag would add the example DAGs
        from airflow.models.dagbag import DagBag as DagBag2

        return DagBag2(dag_folder=subdir, include_examples=False)
    return DagBag(dag_folder=subdir)


def _task(dag_id: str, task_id: str, subdir: str | None) -> Any:
    from airflow_provider_kinesis_doris.operators.kinesis_to_doris import KinesisToDorisOperator

    bag = _dag_bag(subdir)
    dag = bag.dags.get(dag_id)
    if dag is None:
        errors = "".join(f"\n  {path}: {error}" for path, error in bag.import_errors.items())
        raise LookupError(f"DAG {dag_id!r} is not in the DAG folder {bag.dag_folder}{errors}")
    if task_id not in dag.task_dict:
        raise LookupError(f"DAG {dag_id!r} has no task {task_id!r} (it has {sorted(dag.task_dict)})")
    task = dag.task_dict[task_id]
    if not isinstance(task, KinesisToDorisOperator):
        raise LookupError(f"task {dag_id}.{task_id} is a {type(task).__name__}, not a KinesisToDorisOperator")
    return task


def _render(task: Any, logical_date: datetime) -> None:
    """Render ``task``'s templated arguments in place with the context of a manual run at
    ``logical_date`` (its data interval as the DAG's timetable infers it), as the run would."""
    import pendulum

    from airflow_provider_kinesis_doris.version_compat import AIRFLOW_V_3_0_PLUS

    # Timetables compute with pendulum's datetimes (a cron one calls in_timezone), as the scheduler
    # hands them; a plain datetime fails there.
    logical_date = pendulum.instance(logical_date)
    context = _context_3(task, logical_date) if AIRFLOW_V_3_0_PLUS else _context_2(task, logical_date)
    task.render_template_fields(context)


_RUN_ID = "kinesis_doris_check"
"""The run id the rendering context names: no run of this id is created."""


def _context_3(task: Any, logical_date: datetime) -> Any:
    """The Task SDK's context of an in-memory task instance (what a worker builds from the API
    server's answer); variables and connections come from the secrets backends and the API."""
    from airflow.sdk.api.datamodels._generated import DagRun, DagRunState, DagRunType, TIRunContext
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance
    from airflow.serialization.encoders import coerce_to_core_timetable

    dag = task.dag
    interval = coerce_to_core_timetable(dag.timetable).infer_manual_data_interval(run_after=logical_date)
    dag_run = DagRun.model_construct(
        dag_id=dag.dag_id, run_id=_RUN_ID, logical_date=logical_date, data_interval_start=interval.start,
        data_interval_end=interval.end, run_after=logical_date, start_date=logical_date, end_date=None,
        run_type=DagRunType.MANUAL, state=DagRunState.RUNNING, conf={}, consumed_asset_events=[], clear_number=0,
        partition_key=None,
    )  # fmt: skip
    server = TIRunContext.model_construct(dag_run=dag_run, max_tries=0, variables=[], connections=[],
                                          xcom_keys_to_clear=[])  # fmt: skip
    instance = RuntimeTaskInstance.model_construct(
        id=uuid.uuid4(), task_id=task.task_id, dag_id=dag.dag_id, run_id=_RUN_ID, try_number=1, map_index=-1,
        max_tries=0, dag_version_id=uuid.uuid4(), task=task, _ti_context_from_server=server,
    )  # fmt: skip
    return instance.get_template_context()


def _context_2(task: Any, logical_date: datetime) -> Any:
    """Airflow 2.11's context of an in-memory task instance and DAG run (neither is stored)."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.types import DagRunType

    interval = task.dag.timetable.infer_manual_data_interval(run_after=logical_date)
    dag_run = DagRun(dag_id=task.dag.dag_id, run_id=_RUN_ID, execution_date=logical_date,
                     data_interval=(interval.start, interval.end), run_type=DagRunType.MANUAL)  # fmt: skip
    instance = TaskInstance(task, run_id=_RUN_ID)
    instance.dag_run = dag_run
    return instance.get_template_context()


def check(dag_id: str, task_id: str, subdir: str | None = None, logical_date: datetime | None = None) -> int:
    """Print the task's preflight report; the process's exit code.

    :param logical_date: the run whose rendering of the templated arguments is checked; now by default.
    """
    try:
        task = _task(dag_id, task_id, subdir)
    except LookupError as exc:
        print(f"Cannot check: {exc}", file=sys.stderr)
        return EXIT_UNUSABLE
    try:
        _render(task, logical_date or datetime.now(timezone.utc))
        report = task.check_deployment()
    except Exception as exc:  # an unreachable FE or AWS endpoint, invalid settings: said, not a traceback
        print(f"Cannot check {dag_id}.{task_id}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_UNUSABLE
    print(f"{dag_id}.{task_id}: {report.text()}")
    from airflow_provider_kinesis_doris.core.doris.preflight import CheckStatus

    unverified = any(item.check == "label window" and item.status is CheckStatus.NOT_VERIFIABLE for item in report.items)
    if report.fatal:
        verdict, code = _fatal_verdict(report), EXIT_FATAL
    elif unverified:
        verdict = ("passes, but Doris's label window could not be read: only the run-time canary checks it "
                   "(StateConfig(require_label_window_check=True) makes this fatal)")
        code = EXIT_LABEL_WINDOW_UNVERIFIED
    else:
        verdict, code = "passes", 0
    print(f"{dag_id}.{task_id} {verdict}")
    return code


def _fatal_verdict(report: PreflightReport) -> str:
    """What a run would do: fail before planning, or (only the sampled records fatal) plan and
    then refuse to send their chunks."""
    from airflow_provider_kinesis_doris.core.fields import RECORD_FIELDS_CHECK

    if all(item.check == RECORD_FIELDS_CHECK for item in report.fatal):
        return "fails: the task would send nothing of a chunk holding such records (unmatched_fields='fail')"
    return "fails: the task would fail before planning anything"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airflow_provider_kinesis_doris")
    commands = parser.add_subparsers(dest="command", required=True)
    checking = commands.add_parser(
        "check",
        help="check a KinesisToDorisOperator task's Doris and AWS deployment (the preflight) and a sample of its records",
    )
    checking.add_argument("dag_id")
    checking.add_argument("task_id")
    checking.add_argument("-S", "--subdir", help="the DAG file or folder (default: Airflow's dags_folder)")
    checking.add_argument(
        "-l", "--logical-date", type=_utc,
        help="render templated arguments as a manual run at this ISO 8601 time would (default: now; UTC if no offset)",
    )  # fmt: skip
    arguments = parser.parse_args(argv)
    return check(arguments.dag_id, arguments.task_id, arguments.subdir, arguments.logical_date)


def _utc(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


if __name__ == "__main__":
    sys.exit(main())
