"""The Doris table extra link: the schema URL once the task knew the FE, and an empty link, without
an error in the log, when it failed before (a wrong ``doris_conn_id`` fails before the URL is
known; Airflow 3 then logged ``XCom not found ... doris_table_link`` beside the real failure).

Runs under Airflow 3.x (``.venv``) and 2.11 (``.venv-af2``).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

pytestmark = [pytest.mark.airflow]


def _loader() -> object:
    from airflow_provider_kinesis_doris.operators.kinesis_to_doris import KinesisToDorisOperator

    return KinesisToDorisOperator(task_id="load", stream_name="s", doris_table="d.t", checkpoint_table="c")


def test_the_link_of_a_task_that_failed_before_it_knew_the_fe_is_empty_and_logs_no_error(
    airflow_db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from airflow.models.taskinstancekey import TaskInstanceKey

    from airflow_provider_kinesis_doris.links.doris import DorisTableLink

    with caplog.at_level(logging.WARNING):
        link = DorisTableLink().get_link(_loader(), ti_key=TaskInstanceKey("kd_link", "load", "manual__never", 1, -1))

    assert link == ""
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_on_airflow_3_the_task_that_knew_the_fe_links_its_tables_schema() -> None:
    from airflow_provider_kinesis_doris.links.doris import DorisTableLink
    from airflow_provider_kinesis_doris.version_compat import AIRFLOW_V_3_0_PLUS

    if not AIRFLOW_V_3_0_PLUS:
        pytest.skip("Airflow 2.x reads the link from the task's XCom in the webserver")
    loader = _loader()

    DorisTableLink.persist({"task": loader}, "http://fe:8030", "analytics", "events")  # type: ignore[arg-type]

    assert DorisTableLink().get_link(loader, ti_key=None) == "http://fe:8030/api/analytics/events/_schema"
