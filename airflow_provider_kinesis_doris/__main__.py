"""``python -m airflow_provider_kinesis_doris check <dag_id> <task_id>``: the preflight of one
``KinesisToDorisOperator`` task against its deployment (issue 34), outside any DAG run.

The DAG is loaded from Airflow's DAG folder (or ``--subdir``) as the scheduler parses it, and the
task checks its Doris and AWS deployment with its own connections and settings
(``KinesisToDorisOperator.check_deployment``). Exit code 1 when an item is fatal (the task would
fail before planning anything), 2 when the DAG or the task cannot be found or checked, else 0.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

EXIT_FATAL = 1
EXIT_UNUSABLE = 2


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


def check(dag_id: str, task_id: str, subdir: str | None = None) -> int:
    """Print the task's preflight report; the process's exit code."""
    try:
        task = _task(dag_id, task_id, subdir)
    except LookupError as exc:
        print(f"Cannot check: {exc}", file=sys.stderr)
        return EXIT_UNUSABLE
    try:
        report = task.check_deployment()
    except Exception as exc:  # an unreachable FE or AWS endpoint, invalid settings: said, not a traceback
        print(f"Cannot check {dag_id}.{task_id}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_UNUSABLE
    print(f"{dag_id}.{task_id}: {report.text()}")
    verdict = "fails: the task would fail before planning anything" if report.fatal else "passes"
    print(f"{dag_id}.{task_id} {verdict}")
    return EXIT_FATAL if report.fatal else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airflow_provider_kinesis_doris")
    commands = parser.add_subparsers(dest="command", required=True)
    checking = commands.add_parser(
        "check", help="check a KinesisToDorisOperator task's Doris and AWS deployment (the preflight)"
    )
    checking.add_argument("dag_id")
    checking.add_argument("task_id")
    checking.add_argument("-S", "--subdir", help="the DAG file or folder (default: Airflow's dags_folder)")
    arguments = parser.parse_args(argv)
    return check(arguments.dag_id, arguments.task_id, arguments.subdir)


if __name__ == "__main__":
    sys.exit(main())
