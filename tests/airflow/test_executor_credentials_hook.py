"""KinesisPipelineHook's part of the executors' AWS credentials: the settings the load job carries
(verify, botocore options, the credentials mode) and the secrets its credentials file carries, from
``aws`` connections set as a user would (``AIRFLOW_CONN_*``).

Runs under Airflow 3.x (``.venv``) and 2.11 (``.venv-af2``).
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.core.aws_clients import aws_client
from airflow_provider_kinesis_doris.core.load_job import LoadJob
from airflow_provider_kinesis_doris.core.settings import AwsSettings, Credentials
from tests.conftest import assumed_roles
from tests.unit.test_job import config, job

pytestmark = pytest.mark.airflow

CONNECTION_OPTIONS = {"retries": {"mode": "adaptive", "max_attempts": 9}, "connect_timeout": 5}
EXECUTOR_ROLE = "arn:aws:iam::123456789012:role/executors"


def set_aws_connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, **extra: Any) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({
        "conn_type": "aws", "login": "connection-key-id", "password": "connection-secret-key",
        "extra": {"region_name": "eu-west-1", "endpoint_url": "http://127.0.0.1:1", **extra},
    }))  # fmt: skip


def hook(conn_id: str, **arguments: Any):  # type: ignore[no-untyped-def]
    from airflow_provider_kinesis_doris.hooks.kinesis_pipeline import KinesisPipelineHook

    return KinesisPipelineHook(aws_conn_id=conn_id, **arguments)


def test_the_settings_carry_the_connections_verify_and_botocore_options(monkeypatch: pytest.MonkeyPatch) -> None:
    set_aws_connection(monkeypatch, "aws_options", verify=False, config_kwargs=CONNECTION_OPTIONS)

    settings = hook("aws_options").aws_settings()

    assert settings == AwsSettings("eu-west-1", "http://127.0.0.1:1", "http://127.0.0.1:1", "driver", False, CONNECTION_OPTIONS)
    # The options reach the executors' clients through the job's JSON.
    executor_settings = LoadJob.from_json(job(pipeline=config(aws=settings)).to_json()).pipeline.aws
    kinesis = aws_client("kinesis", executor_settings.kinesis_endpoint_url, executor_settings, Credentials())
    assert kinesis.meta.config.retries == {"mode": "adaptive", "total_max_attempts": 10}
    assert kinesis.meta.config.connect_timeout == 5 and kinesis._endpoint.http_session._verify is False


def test_the_hooks_own_verify_and_config_win_over_the_connections_as_on_every_aws_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    set_aws_connection(monkeypatch, "aws_options", verify=False, config_kwargs=CONNECTION_OPTIONS)

    settings = hook("aws_options", verify="/etc/ca.pem", config={"proxies": {"https": "http://proxy:3128"}}).aws_settings()

    assert (settings.verify, settings.botocore_config) == ("/etc/ca.pem", {"proxies": {"https": "http://proxy:3128"}})


def test_a_connection_without_options_adds_none(monkeypatch: pytest.MonkeyPatch) -> None:
    set_aws_connection(monkeypatch, "aws_plain")

    settings = hook("aws_plain").aws_settings(EXECUTOR_ROLE)

    assert (settings.verify, settings.botocore_config, settings.role_arn) == (None, None, EXECUTOR_ROLE)


def test_options_json_cannot_carry_are_refused_naming_why(monkeypatch: pytest.MonkeyPatch) -> None:
    # The amazon provider turns signature_version "unsigned" into botocore's UNSIGNED sentinel.
    set_aws_connection(monkeypatch, "aws_unsigned", config_kwargs={"signature_version": "unsigned"})

    with pytest.raises(ConfigurationError, match=r"option 'signature_version' \(.*\) is not a JSON value"):
        hook("aws_unsigned").aws_settings()
    # The hook's (the operator's botocore_config) replaces the connection's options.
    settings = hook("aws_unsigned", config={"signature_version": "v4"}).aws_settings()
    assert settings.botocore_config == {"signature_version": "v4"}


@pytest.mark.integration
def test_only_the_driver_mode_resolves_and_ships_aws_keys(
    monkeypatch: pytest.MonkeyPatch, moto_sts: str, tmp_path: Path
) -> None:
    """The connection assumes a role of its own (on moto's STS): whether a mode resolved the
    connection's credentials shows in the sessions STS handed out."""
    connection_role = f"arn:aws:iam::123456789012:role/connection-{uuid.uuid4().hex[:8]}"
    set_aws_connection(monkeypatch, "aws_role", role_arn=connection_role, service_config={"sts": {"endpoint_url": moto_sts}})

    for mode in ("default_chain", EXECUTOR_ROLE):
        credentials = hook("aws_role").load_job_credentials("doris-pw", mode)
        assert credentials == Credentials(doris_password="doris-pw")
        credentials.write(str(tmp_path / "credentials.json"))
        shipped = json.loads((tmp_path / "credentials.json").read_text())
        assert shipped == {"doris_password": "doris-pw", "aws_access_key_id": None,
                           "aws_secret_access_key": None, "aws_session_token": None}  # fmt: skip
    assert assumed_roles(moto_sts, connection_role) == [], "the connection's credentials were resolved"

    driver = hook("aws_role").load_job_credentials("doris-pw")

    (served,) = assumed_roles(moto_sts, connection_role)
    assert (driver.doris_password, driver.aws_access_key_id, driver.aws_secret_access_key, driver.aws_session_token) == (
        "doris-pw", served["access_key_id"], served["secret_access_key"], served["session_token"]
    )  # fmt: skip


@pytest.mark.integration
def test_executors_in_role_mode_are_the_role_not_the_connection(monkeypatch: pytest.MonkeyPatch, moto_sts: str) -> None:
    """The driver's own clients (the hook's) still assume the connection's role: it plans with them."""
    connection_role = f"arn:aws:iam::123456789012:role/connection-{uuid.uuid4().hex[:8]}"
    executor_role = f"arn:aws:iam::123456789012:role/executors-{uuid.uuid4().hex[:8]}"
    set_aws_connection(monkeypatch, "aws_role", role_arn=connection_role, service_config={"sts": {"endpoint_url": moto_sts}})
    aws_hook = hook("aws_role")

    loader_job = job(pipeline=config(aws=aws_hook.aws_settings(executor_role)))
    credentials = aws_hook.load_job_credentials("doris-pw", executor_role)
    executor_settings = LoadJob.from_json(loader_job.to_json()).pipeline.aws
    identity = aws_client("sts", None, executor_settings, credentials).get_caller_identity()

    assert identity["Arn"] == f"arn:aws:sts::123456789012:assumed-role/{executor_role.rsplit('/', 1)[1]}/kinesis-doris-{os.getpid()}"
    assert len(assumed_roles(moto_sts, executor_role)) == 1
