"""The Spark session's settings: a local session's JVM runs with the client compiler and the serial
collector (it only schedules the Python workers), unless the user's conf says otherwise."""

from __future__ import annotations

import pytest

from airflow_provider_kinesis_doris.spark.runner import LOCAL_DRIVER_JAVA_OPTIONS, SparkSettings, _session_conf

JAVA_OPTIONS = "spark.driver.extraJavaOptions"


def test_a_local_session_gets_the_light_jvm_options() -> None:
    assert _session_conf(SparkSettings(master="local[2]"))[JAVA_OPTIONS] == LOCAL_DRIVER_JAVA_OPTIONS
    assert "-XX:TieredStopAtLevel=1" in LOCAL_DRIVER_JAVA_OPTIONS


def test_a_cluster_or_connect_session_and_the_users_own_options_are_left_alone() -> None:
    assert JAVA_OPTIONS not in _session_conf(SparkSettings(remote="sc://127.0.0.1:15002"))
    mine = SparkSettings(master="local[2]", conf={JAVA_OPTIONS: "-Xmx2g"})
    assert _session_conf(mine)[JAVA_OPTIONS] == "-Xmx2g"


def test_a_connect_session_sets_only_sql_settings_the_server_lets_a_session_change() -> None:
    # The server's Spark runs already: a static setting (the UI, Python workers) is refused with a
    # warning per key, so only the SQL ones go, and the user's own as given.
    conf = _session_conf(SparkSettings(remote="sc://127.0.0.1:15002", conf={"spark.executor.memory": "2g"}))
    assert conf == {"spark.sql.shuffle.partitions": "4", "spark.executor.memory": "2g"}


def test_a_submission_ships_the_credentials_file_and_names_it_for_sparkfiles_only(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from airflow_provider_kinesis_doris.core.load_job import LoadJob
    from airflow_provider_kinesis_doris.core.settings import Credentials
    from airflow_provider_kinesis_doris.spark.runner import prepare_submission
    from tests.unit.test_job import job

    secret_file = tmp_path / "credentials.json"
    Credentials(doris_password="pw-on-no-command-line", aws_secret_access_key="aws-secret-on-none").write(str(secret_file))
    job_file = tmp_path / "job.json"

    submission = prepare_submission(job(credentials_file=str(secret_file)), SparkSettings(), job_file, tmp_path / "r.json")

    # An executor on another host has no such path: spark-submit carries the file, and the job
    # names it without a folder so that executors look it up with SparkFiles, never at the driver's path.
    assert submission.files == (str(secret_file),)
    assert LoadJob.from_json(job_file.read_text()).credentials_file == "credentials.json"
    assert submission.application_args == ("--job-file", str(job_file), "--report-file", str(tmp_path / "r.json"))
    line = " ".join([*submission.application_args, *submission.files, *map(str, submission.conf.values())])
    assert "pw-on-no-command-line" not in line and "aws-secret-on-none" not in line
    assert submission.properties_file is None


def test_the_authentication_secret_goes_in_a_private_properties_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from airflow_provider_kinesis_doris.spark.runner import _properties_file

    secret = " lead\\ing=space:\nand more"
    path = _properties_file(SparkSettings(auth_secret=secret), tmp_path)

    assert path is not None and oct(path.stat().st_mode & 0o777) == "0o600"
    assert path.read_text().splitlines() == [
        "spark.authenticate=true",
        "spark.authenticate.secret=\\ lead\\\\ing=space:\\nand more",
    ]
    assert _properties_file(SparkSettings(), tmp_path / "none") is None
    assert secret not in repr(SparkSettings(auth_secret=secret))


def test_a_submission_never_gets_the_local_loopback_settings() -> None:
    # The master of a submission is its connection's; SparkSettings.master keeps its local default.
    conf = _session_conf(SparkSettings(submitter=lambda submission: None))

    assert "spark.driver.host" not in conf and "spark.driver.bindAddress" not in conf and JAVA_OPTIONS not in conf


def test_a_cluster_master_in_the_task_process_is_refused_pointing_to_the_connections() -> None:
    from airflow_provider_kinesis_doris.core.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match=r"'spark://127.0.0.1:7077'.*local mode only.*spark_conn_id"):
        SparkSettings(master="spark://127.0.0.1:7077")
