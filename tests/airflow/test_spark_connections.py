"""The Spark connections of the apache-spark provider: ``spark`` submissions stream their output
into the task log while they run and stop on ``on_kill``; a cluster deploy mode and a missing
provider are refused naming what to change; a ``spark_connect`` token stays out of reprs.

``spark-submit`` here is a script on ``PATH`` (SparkSubmitHook runs whatever that name finds):
the behaviour under test is the hook's and ours, not Spark's. The real cluster run is
``tests/e2e/test_spark_cluster.py``.
"""

from __future__ import annotations

import logging
import os
import stat
import sys
import threading
import time
from pathlib import Path

import pytest

from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.operators.spark_connections import LoadJobSubmitter, _spark_submit_hook_class, spark_connect_url
from airflow_provider_kinesis_doris.spark.runner import SparkSettings, Submission

pytestmark = pytest.mark.airflow

SLOW_SPARK_SUBMIT = """#!/bin/sh
echo $$ > "$KD_FAKE_SPARK_PID"
echo "first line of the job"
exec sleep 120
"""
SUBMISSION = Submission(
    application="job.py", application_args=("--job-file", "j.json"), conf={}, files=(), py_files=(), name="test"
)


@pytest.fixture
def fake_spark_submit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``spark-submit`` on PATH that prints a line and then runs for two minutes; returns the
    file where it writes its PID."""
    (tmp_path / "bin").mkdir()
    script = tmp_path / "bin" / "spark-submit"
    script.write_text(SLOW_SPARK_SUBMIT)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("KD_FAKE_SPARK_PID", str(tmp_path / "pid"))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_FAKE", "spark://127.0.0.1:7077")
    return tmp_path / "pid"


def test_submission_output_reaches_the_log_while_it_runs_and_on_kill_stops_it(
    fake_spark_submit: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    submitter = LoadJobSubmitter("spark_fake")
    failures: list[BaseException] = []
    printed: list[str] = []

    def log_text() -> str:
        # Airflow 2 logs through logging (caplog); Airflow 3's structlog writes to the console.
        printed.append(capfd.readouterr().out)
        return caplog.text + "".join(printed)

    def submit() -> None:
        try:
            submitter(SUBMISSION)
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            failures.append(exc)

    with caplog.at_level(logging.INFO):
        thread = threading.Thread(target=submit, daemon=True)
        thread.start()
        deadline = time.monotonic() + 60
        while "first line of the job" not in log_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "first line of the job" in log_text(), "spark-submit's output did not reach the log while it ran"
        assert thread.is_alive()
        pid = int(fake_spark_submit.read_text())

        submitter.on_kill()
        thread.join(30)

    assert not thread.is_alive(), "on_kill did not end the submission"
    assert failures and "Error code is: -9" in str(failures[0])
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
    assert "--master spark://127.0.0.1:7077" in log_text()


def test_a_cluster_deploy_mode_connection_is_refused_before_anything_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_CLUSTER_MODE", '{"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}}'
    )

    with pytest.raises(ConfigurationError, match="'spark_cluster_mode' sets deploy-mode 'cluster'.*client mode"):
        LoadJobSubmitter("spark_cluster_mode")


def test_without_the_apache_spark_provider_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "airflow.providers.apache.spark.hooks.spark_submit", None)
    monkeypatch.setitem(sys.modules, "airflow.providers.apache.spark.hooks.spark_connect", None)
    _spark_submit_hook_class.cache_clear()
    try:
        with pytest.raises(ConfigurationError, match=r"spark_conn_id needs .*\[apache-spark\]"):
            LoadJobSubmitter("spark_default")
        with pytest.raises(ConfigurationError, match=r"spark_connect_conn_id needs .*\[apache-spark\]"):
            spark_connect_url("spark_connect_default")
    finally:
        _spark_submit_hook_class.cache_clear()


def test_a_spark_connect_token_comes_from_the_connection_and_stays_out_of_reprs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CONNECT_TEST", "spark-connect://etl:tok-sc-secret@127.0.0.1:15002?use_ssl=True")

    url = spark_connect_url("spark_connect_test")

    assert url.startswith("sc://127.0.0.1:15002/") and "token=tok-sc-secret" in url and "user_id=etl" in url
    assert "tok-sc-secret" not in repr(SparkSettings(remote=url))
