"""How the loaders' AWS clients (``core.load``) get credentials, against moto's STS.

moto identifies a caller by its access key: ``GetCallerIdentity`` with the keys of an assumed role
answers that role's session ARN, and ``/moto-api/data.json`` lists every ``AssumeRole`` it served.
So the tests give the process (its environment: the "default chain") and the credentials file the
keys of two different roles, and ask STS who the clients are.
"""

from __future__ import annotations

import os
import uuid
from datetime import datetime, timedelta
from typing import Any

import boto3
import pytest
from dateutil.tz import tzlocal

from airflow_provider_kinesis_doris.core.aws_clients import _botocore_session, aws_client
from airflow_provider_kinesis_doris.core.load import LoadClients
from airflow_provider_kinesis_doris.core.settings import AwsSettings, Credentials
from tests.conftest import assumed_roles
from tests.unit.test_job import config, job

pytestmark = pytest.mark.integration

ACCOUNT = "123456789012"
REGION = "us-east-1"


def role_arn(name: str) -> str:
    """A role of its own for each use, so moto's list of assumed roles counts only this test's."""
    return f"arn:aws:iam::{ACCOUNT}:role/{name}-{uuid.uuid4().hex[:8]}"


def session_arn(role: str, session_name: str) -> str:
    return f"arn:aws:sts::{ACCOUNT}:assumed-role/{role.rsplit('/', 1)[1]}/{session_name}"


def signing_key(request: Any) -> str:
    """The access key id a SigV4 request was signed with."""
    return request.headers["Authorization"].decode().split("Credential=", 1)[1].split("/", 1)[0]


def aws_clients(loader: LoadClients) -> tuple[Any, Any]:
    """The Kinesis and DynamoDB clients a loader reads and records with."""
    return loader.kinesis, loader.store.items._client


def caller(client: Any) -> str:
    return client.get_caller_identity()["Arn"]


def role_keys(role: str, session_name: str) -> dict[str, str]:
    """Keys of a session of ``role``, from moto's STS with the suite's dummy keys."""
    sts = boto3.client("sts", region_name=REGION)
    answer = sts.assume_role(RoleArn=role, RoleSessionName=session_name)["Credentials"]
    return {"AWS_ACCESS_KEY_ID": answer["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": answer["SecretAccessKey"],
            "AWS_SESSION_TOKEN": answer["SessionToken"]}  # fmt: skip


@pytest.fixture
def identities(moto_sts: str, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Credentials, str]:
    """The process's default chain (its environment) and a credentials file with keys of two
    different roles: the ARN the chain is, the file's credentials, the ARN the file is."""
    environment_role, driver_role = role_arn("executor-environment"), role_arn("driver")
    driver = role_keys(driver_role, "driver")
    for name, value in role_keys(environment_role, "environment").items():
        monkeypatch.setenv(name, value)
    credentials = Credentials(
        doris_password="doris-pw", aws_access_key_id=driver["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=driver["AWS_SECRET_ACCESS_KEY"], aws_session_token=driver["AWS_SESSION_TOKEN"],
    )  # fmt: skip
    return session_arn(environment_role, "environment"), credentials, session_arn(driver_role, "driver")


def test_driver_mode_uses_the_files_keys_and_without_them_the_default_chain(identities: tuple[str, Credentials, str]) -> None:
    environment, credentials, driver = identities
    settings = AwsSettings(REGION)
    assert caller(aws_client("sts", None, settings, credentials)) == driver
    # Kept from before executor_credentials existed: a file with the password only.
    assert caller(aws_client("sts", None, settings, Credentials(doris_password="doris-pw"))) == environment


def test_default_chain_mode_ignores_the_files_keys(identities: tuple[str, Credentials, str]) -> None:
    environment, credentials, _ = identities
    assert caller(aws_client("sts", None, AwsSettings(REGION, executor_credentials="default_chain"), credentials)) == environment


def test_role_mode_assumes_the_role_once_per_process_with_the_default_chain(
    moto_sts: str, identities: tuple[str, Credentials, str]
) -> None:
    _, credentials, _ = identities
    target = role_arn("loader")
    settings = AwsSettings(REGION, moto_sts, moto_sts, executor_credentials=target, botocore_config={"retries": {"max_attempts": 3}})
    signed_with: list[str] = []
    # Registered on the process's shared session before it builds the STS client that assumes.
    _botocore_session().register("before-send.sts.AssumeRole", lambda request, **_: signed_with.append(signing_key(request)))

    loaders = [LoadClients.from_job(job(pipeline=config(aws=settings)), credentials) for _ in range(2)]
    sts = aws_client("sts", None, settings, credentials)

    assert caller(sts) == session_arn(target, f"kinesis-doris-{os.getpid()}")
    served = assumed_roles(moto_sts, target)
    assert len(served) == 1 and len(signed_with) == 1, "one AssumeRole for every client of the process"
    # The source credentials are the process's chain (the environment), not the file's keys.
    assert signed_with == [os.environ["AWS_ACCESS_KEY_ID"]] != [credentials.aws_access_key_id]
    for loader in loaders:
        for client in aws_clients(loader):
            keys = client._get_credentials().get_frozen_credentials()
            assert (keys.access_key, keys.token) == (served[0]["access_key_id"], served[0]["session_token"])
        loader.doris.close()
    assert settings.botocore_config == {"retries": {"max_attempts": 3}}, "building clients changed the job's settings"


def test_role_credentials_are_assumed_again_before_they_expire(moto_sts: str, identities: tuple[str, Credentials, str]) -> None:
    """botocore reads the time through the credentials' clock (``RefreshableCredentials``'
    ``time_fetcher``); moving that clock 50 minutes on puts the one-hour role session within
    botocore's mandatory refresh window (10 minutes), as a long load would reach it."""
    _, credentials, _ = identities
    target = role_arn("long-load")
    sts = aws_client("sts", None, AwsSettings(REGION, executor_credentials=target), credentials)
    signed_with: list[str] = []
    sts.meta.events.register("before-send.sts.GetCallerIdentity", lambda request, **_: signed_with.append(signing_key(request)))
    expected = session_arn(target, f"kinesis-doris-{os.getpid()}")
    assert caller(sts) == expected
    (first,) = assumed_roles(moto_sts, target)

    role_credentials = sts._get_credentials()
    role_credentials._time_fetcher = lambda: datetime.now(tzlocal()) + timedelta(minutes=50)
    assert caller(sts) == expected
    first_again, second = assumed_roles(moto_sts, target)
    assert first_again["access_key_id"] == first["access_key_id"] != second["access_key_id"]
    assert signed_with == [first["access_key_id"], second["access_key_id"]], "the call after the refresh used the new keys"

    role_credentials._time_fetcher = lambda: datetime.now(tzlocal())
    assert caller(sts) == expected
    assert len(assumed_roles(moto_sts, target)) == 2, "fresh credentials are not assumed again"
    assert signed_with[-1] == second["access_key_id"]


def test_verify_and_botocore_config_reach_every_client(moto_sts: str, identities: tuple[str, Credentials, str]) -> None:
    _, credentials, _ = identities
    options = {"retries": {"mode": "standard", "max_attempts": 4}, "connect_timeout": 7, "user_agent_extra": "kd-options/1"}
    user_agents: list[str] = []

    def record_user_agent(request: Any, **_: Any) -> None:
        user_agents.append(request.headers["User-Agent"].decode())

    # The STS client that assumes a role is built from the shared session.
    _botocore_session().register("before-send.sts.AssumeRole", record_user_agent)
    for mode in ("driver", "default_chain", role_arn("configured")):
        settings = AwsSettings(REGION, moto_sts, moto_sts, executor_credentials=mode, verify=False, botocore_config=options)
        user_agents.clear()
        loader = LoadClients.from_job(job(pipeline=config(aws=settings)), credentials)
        for client in aws_clients(loader):
            assert client.meta.config.retries == {"mode": "standard", "total_max_attempts": 5}
            assert client.meta.config.connect_timeout == 7
            assert client._endpoint.http_session._verify is False
            client.meta.events.register("before-send", record_user_agent)
        loader.kinesis.list_streams()
        aws_clients(loader)[1].list_tables()
        loader.doris.close()
        assert len(user_agents) == (3 if settings.role_arn else 2) and all("kd-options/1" in agent for agent in user_agents)
        assert settings.botocore_config == options

    bundle = AwsSettings(REGION, moto_sts, moto_sts, verify="/etc/kinesis-doris/ca.pem")
    assert aws_client("dynamodb", moto_sts, bundle, credentials)._endpoint.http_session._verify == "/etc/kinesis-doris/ca.pem"
