"""The connections `stack up` writes for the local stack are what Airflow reads on both majors: the
amazon provider's endpoint per service, and this provider's doris type with both Doris ports; and
`airflow connections test` passes on both."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kinesis_doris_devstack.stack import CONNECTION_TESTS_ON, airflow_connections
from tests.conftest import DORIS_PASSWORD, DORIS_USER

pytestmark = pytest.mark.airflow

RUNNING = {
    "kinesis_mock": {"endpoint": "http://127.0.0.1:4567", "pid": 1},
    "dynamodb": {"endpoint": "http://127.0.0.1:5000", "pid": 2},
    "doris": {"endpoint": "http://127.0.0.1:8030", "pid": 3, "fe_port": 8030, "be_port": 8040, "query_port": 9030,
              "user": "root", "password": "local-stack-password"},
}  # fmt: skip


def test_airflow_reads_the_exported_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

    from airflow_provider_kinesis_doris.hooks.doris import DorisHook

    for name, value in airflow_connections(RUNNING, "demo").items():
        monkeypatch.setenv(name, value)
    aws = AwsBaseHook(aws_conn_id="aws_default", client_type="kinesis")
    assert aws.conn_config.endpoint_url == "http://127.0.0.1:4567"
    assert aws.conn_config.region_name == "us-east-1"
    assert aws.conn_config.service_config["dynamodb"]["endpoint_url"] == "http://127.0.0.1:5000"
    doris = DorisHook().get_connection("doris_default")
    assert (doris.conn_type, doris.host, doris.port, doris.login, doris.schema) == ("doris", "127.0.0.1", 8030, "root", "demo")
    assert doris.extra_dejson == {"query_port": 9030}


def test_only_running_services_get_a_connection() -> None:
    assert list(airflow_connections({"doris": RUNNING["doris"]}, "demo")) == ["AIRFLOW_CONN_DORIS_DEFAULT"]
    assert list(airflow_connections({"kinesis_mock": RUNNING["kinesis_mock"]}, "demo")) == []


@pytest.mark.integration
@pytest.mark.parametrize("conn_id", ["aws_default", "doris_default"])
def test_airflow_connections_test_passes_on_the_local_stack(
    conn_id: str, airflow_db: Path, kinesis_mock_endpoint: str, dynamodb_endpoint: str, doris_server: Any
) -> None:
    """Before, ``airflow connections test aws_default`` failed: the amazon provider calls STS's
    GetCallerIdentity at STS's own endpoint (AWS's), and Airflow refuses any connection test unless
    ``[core] test_connection`` is on."""
    running = {
        "kinesis_mock": {"endpoint": kinesis_mock_endpoint},
        "dynamodb": {"endpoint": dynamodb_endpoint},
        "doris": {"fe_port": doris_server.fe_port, "query_port": doris_server.query_port,
                  "user": DORIS_USER, "password": DORIS_PASSWORD},
    }  # fmt: skip
    doris_server.execute_sql("", "CREATE DATABASE IF NOT EXISTS connections_tested")  # the connection's database
    env = {**os.environ, **airflow_connections(running, "connections_tested"), **CONNECTION_TESTS_ON}

    tested = subprocess.run(
        [sys.executable, "-m", "airflow", "connections", "test", conn_id], env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip

    assert tested.returncode == 0 and "Connection success!" in tested.stdout, tested.stdout + tested.stderr
    assert DORIS_PASSWORD not in tested.stdout + tested.stderr
