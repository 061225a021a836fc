"""``AwsSettings``' executor credentials, TLS verification and botocore options: what is refused,
and that they reach the executors through the job's JSON (and old jobs without them still load)."""

from __future__ import annotations

import json

import pytest

from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.core.load_job import LoadJob
from airflow_provider_kinesis_doris.core.settings import AwsSettings, check_executor_credentials
from tests.unit.test_job import config, job


@pytest.mark.parametrize(
    "value, role_arn",
    [
        ("driver", None),
        ("default_chain", None),
        ("arn:aws:iam::123456789012:role/loader", "arn:aws:iam::123456789012:role/loader"),
        ("arn:aws-cn:iam::123456789012:role/team/kinesis+doris@etl", "arn:aws-cn:iam::123456789012:role/team/kinesis+doris@etl"),
        ("arn:aws-us-gov:iam::123456789012:role/loader", "arn:aws-us-gov:iam::123456789012:role/loader"),
    ],
)
def test_the_three_forms_are_accepted(value: str, role_arn: str | None) -> None:
    settings = AwsSettings(executor_credentials=check_executor_credentials("executor_credentials", value))
    assert settings.executor_credentials == value and settings.role_arn == role_arn


@pytest.mark.parametrize(
    "value",
    [
        "",
        "Driver",
        "default-chain",
        "instance_profile",
        "arn:aws:iam::123456789012:user/loader",  # a user, not a role
        "arn:aws:sts::123456789012:assumed-role/loader/session",  # a session of a role
        "arn:aws:iam::12345:role/loader",  # not a 12-digit account
        "arn:aws:iam::123456789012:role/",  # no role name
        "arn:aws:iam::123456789012:role/loader name",
        "arn:azure:iam::123456789012:role/loader",
        " arn:aws:iam::123456789012:role/loader",
        None,
        42,
    ],
)
def test_anything_else_is_refused_naming_it_and_the_accepted_forms(value: object) -> None:
    # The operator's check of its argument, when the DAG is parsed; AwsSettings trusts it.
    with pytest.raises(ConfigurationError) as raised:
        check_executor_credentials("executor_credentials", value)
    message = str(raised.value)
    assert message.startswith("executor_credentials must be") and repr(value) in message
    assert "'driver'" in message and "'default_chain'" in message and "role ARN" in message


def test_botocore_options_botocore_refuses_are_refused_when_the_job_is_made() -> None:
    with pytest.raises(ConfigurationError, match="not valid for botocore.config.Config.*retry_mode"):
        AwsSettings(botocore_config={"retry_mode": "adaptive"})
    with pytest.raises(ConfigurationError, match="not valid for botocore.config.Config"):
        AwsSettings(botocore_config={"retries": {"mode": "eager"}})
    with pytest.raises(ConfigurationError, match=r"option 'signature_version' \(object\) is not a JSON value"):
        AwsSettings(botocore_config={"signature_version": object()})


def test_a_proxy_password_is_refused_without_showing_it() -> None:
    # The job's JSON reaches the Spark plan; a proxy's password there would be a secret in it (I8).
    with pytest.raises(ConfigurationError, match="proxies must not hold credentials") as raised:
        AwsSettings(botocore_config={"proxies": {"https": "http://loader:proxy-pw-81@proxy:3128"}})
    assert "proxy-pw-81" not in str(raised.value)
    assert AwsSettings(botocore_config={"proxies": {"https": "http://proxy:3128"}}).botocore_config == {
        "proxies": {"https": "http://proxy:3128"}
    }
    assert AwsSettings(botocore_config={"proxies": None}).botocore_config == {"proxies": None}


def test_the_new_fields_survive_the_trip_to_the_executors() -> None:
    aws = AwsSettings(
        "eu-west-1", "http://127.0.0.1:1", None,
        executor_credentials="arn:aws:iam::123456789012:role/loader",
        verify="/etc/ssl/certs/corporate.pem",
        botocore_config={"retries": {"mode": "adaptive", "max_attempts": 10},
                         "proxies": {"https": "http://proxy:3128"}, "client_cert": ("cert.pem", "key.pem")},
    )  # fmt: skip
    original = job(pipeline=config(aws=aws))
    copy = LoadJob.from_json(original.to_json())
    assert copy == original
    assert copy.pipeline.aws.executor_credentials == "arn:aws:iam::123456789012:role/loader"
    assert copy.pipeline.aws.verify == "/etc/ssl/certs/corporate.pem"
    assert copy.pipeline.aws.botocore_config == {
        "retries": {"mode": "adaptive", "max_attempts": 10},
        "proxies": {"https": "http://proxy:3128"},
        "client_cert": ["cert.pem", "key.pem"],
    }
    assert LoadJob.from_json(job(pipeline=config(aws=AwsSettings(verify=False))).to_json()).pipeline.aws.verify is False


def test_a_job_written_before_the_fields_existed_loads_with_the_driver_credentials() -> None:
    data = json.loads(job().to_json())
    data["pipeline"]["aws"] = {"region_name": "eu-west-1", "kinesis_endpoint_url": "http://127.0.0.1:1",
                               "dynamodb_endpoint_url": None}  # fmt: skip
    aws = LoadJob.from_json(json.dumps(data)).pipeline.aws
    assert aws == AwsSettings("eu-west-1", "http://127.0.0.1:1", None)
    assert (aws.executor_credentials, aws.verify, aws.botocore_config, aws.role_arn) == ("driver", None, None, None)
