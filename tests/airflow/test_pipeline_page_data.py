"""What the pipeline page (``ui``) makes of the metadata DB without a server: the loader's
connection ids from its serialized task, and the interval grid from the loader's own XCom summary
(``core.report.xcom_summary``, the operator's return value).

The browser test (tests/e2e/test_pipeline_page.py) shows the page after real loads; this one
covers the cases a run of the example DAG does not make.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from packaging.version import Version

from airflow_provider_kinesis_doris.version_compat import AIRFLOW_VERSION

pytestmark = [
    pytest.mark.airflow,
    pytest.mark.airflow3,
    pytest.mark.skipif(AIRFLOW_VERSION < Version("3.1.0"), reason="the page is served from Airflow 3.1 on"),
]

CONNECTION_FIELDS = ("aws_conn_id", "doris_conn_id")
MINUTE = 60_000


def _page_task(monkeypatch: pytest.MonkeyPatch, connection_fields: bool, **arguments: Any) -> Any:
    """The page's view of a loader built with ``arguments`` and put through Airflow's own
    serialization, as the API server reads it. ``connection_fields``: the loader as it is, which
    lists its connection ids among its template fields (so Airflow serializes them), or as a DAG
    serialized by an older release of the provider, which did not."""
    from airflow.sdk import DAG
    from airflow.serialization.serialized_objects import DagSerialization

    from airflow_provider_kinesis_doris.operators.kinesis_to_doris import KinesisToDorisOperator
    from airflow_provider_kinesis_doris.ui.pipelines import _pipeline_task

    if connection_fields:
        assert set(CONNECTION_FIELDS) <= set(KinesisToDorisOperator.template_fields)
    else:
        older = tuple(name for name in KinesisToDorisOperator.template_fields if name not in CONNECTION_FIELDS)
        monkeypatch.setattr(KinesisToDorisOperator, "template_fields", older)
    with DAG("page_connections", start_date=datetime(2026, 1, 1), schedule=None) as dag:
        KinesisToDorisOperator(task_id="load", stream_name="s", doris_table="db.t", checkpoint_table="c", **arguments)
    serialized = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    return _pipeline_task(dag.dag_id, serialized.get_task("load"), None)


def test_the_page_reads_through_the_loaders_own_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    own = _page_task(monkeypatch, True, aws_conn_id="aws_eu", doris_conn_id="doris_eu")
    assert (own.aws_conn_id, own.doris_conn_id) == ("aws_eu", "doris_eu")
    # None is boto3's default credential chain for the loader: the page must not swap in aws_default.
    chain = _page_task(monkeypatch, True, aws_conn_id=None)
    assert (chain.aws_conn_id, chain.doris_conn_id) == (None, "doris_default")


def test_a_dag_serialized_without_the_connection_ids_is_read_through_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    older = _page_task(monkeypatch, False, aws_conn_id="aws_eu", doris_conn_id="doris_eu")
    assert (older.aws_conn_id, older.doris_conn_id) == ("aws_default", "doris_default")


def test_a_loader_with_a_templated_connection_id_is_not_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    # Like a templated stream: the page, outside any run, cannot know which connection a run reads.
    assert _page_task(monkeypatch, True, aws_conn_id="{{ var.value.aws_conn }}") is None
    assert _page_task(monkeypatch, True, doris_conn_id="doris_eu") is not None


def _summary(start_ms: int, rows: int, caught_up: tuple[tuple[int, int], ...] = ()) -> dict[str, Any]:
    """The loader's XCom for a run of ``[start_ms, start_ms + 1 min)`` that loaded ``rows`` on one
    shard, after the skipped intervals ``caught_up`` (each loading 100 + its index rows)."""
    from airflow_provider_kinesis_doris.core.catch_up import SkippedIntervals
    from airflow_provider_kinesis_doris.core.commit import CommitResult
    from airflow_provider_kinesis_doris.core.model import ShardState
    from airflow_provider_kinesis_doris.core.pipeline import IntervalResult
    from airflow_provider_kinesis_doris.core.plan import Plan, ShardDecision, ShardPlan
    from airflow_provider_kinesis_doris.core.report import RangeReport, xcom_summary

    def result(start: int, end: int, loaded: int, **more: Any) -> IntervalResult:
        plan = Plan("p", "s", start, end, (ShardPlan("shardId-0", (), ShardState.OPEN, 3, ShardDecision.NEW),))
        report = RangeReport("shardId-0", start, records=loaded + 1, rows_loaded=loaded, dead_lettered=1)
        return IntervalResult(plan, (report,), CommitResult(), **more)

    recovered = tuple(result(start, end, 100 + n) for n, (start, end) in enumerate(caught_up))
    return xcom_summary(result(start_ms, start_ms + MINUTE, rows, skipped=SkippedIntervals(adopted=caught_up), recovered=recovered))


def test_the_grid_counts_and_catch_ups_come_from_the_runs_summaries() -> None:
    from airflow_provider_kinesis_doris.ui.pipelines import LoaderRun
    from airflow_provider_kinesis_doris.ui.view import CAUGHT_UP, FAILED, LOADED, caught_up_intervals, grid_cell, interval_counts

    t0 = 1_800_000_000_000 // MINUTE * MINUTE
    # Newest first, as the page lists them: the run of t0+3 caught up t0+1 (whose run failed) and
    # t0+2 (no run); t0's run loaded its own interval.
    runs = [
        LoaderRun("r3", t0 + 3 * MINUTE, t0 + 4 * MINUTE, "success", "success", 1),
        LoaderRun("r1", t0 + MINUTE, t0 + 2 * MINUTE, "failed", "failed", 1),
        LoaderRun("r0", t0, t0 + MINUTE, "success", "success", 1),
    ]
    catch_up = ((t0 + MINUTE, t0 + 2 * MINUTE), (t0 + 2 * MINUTE, t0 + 3 * MINUTE))
    summaries = {"r3": _summary(t0 + 3 * MINUTE, 30, catch_up), "r0": _summary(t0, 7)}

    counts = interval_counts(summaries.values())
    cells = [grid_cell(run, counts.get(run.start_ms), caught_up_intervals(runs, summaries)) for run in runs]

    assert {start - t0: interval.rows_loaded for start, interval in counts.items()} == {
        0: 7, MINUTE: 100, 2 * MINUTE: 101, 3 * MINUTE: 30
    }  # fmt: skip
    assert [(cell["status"], cell["caught_up_by"], cell["rows_loaded"], cell["dead_lettered"]) for cell in cells] == [
        (LOADED, None, 30, 1), (CAUGHT_UP, "r3", 100, 1), (LOADED, None, 7, 1),
    ]  # fmt: skip
    # A failed run nobody caught up returns no summary: its cell says so instead of 0 rows.
    lone = grid_cell(runs[1], None, {})
    assert (lone["status"], lone["rows_loaded"]) == (FAILED, None)
