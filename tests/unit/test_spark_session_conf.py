"""The Spark session's settings: a local session's JVM runs with the client compiler and the serial
collector (it only schedules the Python workers), unless the user's conf says otherwise."""

from __future__ import annotations

from airflow_provider_kinesis_doris.spark.runner import LOCAL_DRIVER_JAVA_OPTIONS, SparkSettings, _session_conf

JAVA_OPTIONS = "spark.driver.extraJavaOptions"


def test_a_local_session_gets_the_light_jvm_options() -> None:
    assert _session_conf(SparkSettings(master="local[2]"))[JAVA_OPTIONS] == LOCAL_DRIVER_JAVA_OPTIONS
    assert "-XX:TieredStopAtLevel=1" in LOCAL_DRIVER_JAVA_OPTIONS


def test_a_cluster_or_connect_session_and_the_users_own_options_are_left_alone() -> None:
    assert JAVA_OPTIONS not in _session_conf(SparkSettings(master="spark://127.0.0.1:7077"))
    assert JAVA_OPTIONS not in _session_conf(SparkSettings(remote="sc://127.0.0.1:15002"))
    mine = SparkSettings(master="local[2]", conf={JAVA_OPTIONS: "-Xmx2g"})
    assert _session_conf(mine)[JAVA_OPTIONS] == "-Xmx2g"


def test_the_submit_command_ships_the_credentials_file_by_path_and_holds_no_secret(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from airflow_provider_kinesis_doris.core.load_job import Credentials
    from airflow_provider_kinesis_doris.spark.runner import submit_command
    from tests.unit.test_job import job

    secret_file = tmp_path / "credentials.json"
    Credentials(doris_password="pw-on-no-command-line", aws_secret_access_key="aws-secret-on-none").write(str(secret_file))
    settings = SparkSettings(master="spark://127.0.0.1:7077", submit=True)

    command = submit_command(job(credentials_file=str(secret_file)), settings, tmp_path / "job.json", tmp_path / "r.json")

    # An executor on another host has no such path: spark-submit must carry the file to it.
    assert command[command.index("--files") + 1] == str(secret_file)
    line = " ".join(command)
    assert "pw-on-no-command-line" not in line and "aws-secret-on-none" not in line
