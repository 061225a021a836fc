"""``KinesisPipelineHook.test_connection``: the shallow test of both endpoints, and its deep mode
(the AWS preflight, ``core.aws_preflight``) on an ``aws`` connection from the environment, against
kinesis-mock and moto, each AWS item passing and failing (Airflow 3.x and 2.11)."""

from __future__ import annotations

import json
import os
import socket
from typing import Any

import pytest

from airflow_provider_kinesis_doris.core.aws_preflight import AwsPreflightSettings
from tests.conftest import use_local_stack_connections
from tests.preflight_items import AWS_BROKEN_ITEMS, flagged_checks

pytestmark = [pytest.mark.airflow, pytest.mark.integration]


@pytest.fixture
def connection(monkeypatch: pytest.MonkeyPatch, kinesis_mock_endpoint: str, dynamodb_endpoint: str,
               doris_server: Any) -> None:  # fmt: skip
    use_local_stack_connections(monkeypatch, kinesis_mock_endpoint, dynamodb_endpoint, doris_server, "unused")


def make_hook():  # type: ignore[no-untyped-def]
    from airflow_provider_kinesis_doris.hooks.kinesis_pipeline import KinesisPipelineHook

    return KinesisPipelineHook()


def test_without_settings_one_call_to_each_endpoint_proves_the_connection(
    connection: None, kinesis_mock_endpoint: str, dynamodb_endpoint: str
) -> None:
    ok, message = make_hook().test_connection()

    assert ok is True, message
    assert message == (
        f"Connected to Kinesis {kinesis_mock_endpoint} and DynamoDB {dynamodb_endpoint} in us-east-1 "
        "(AWS connection 'aws_default')"
    )
    assert "testing-secret-key" not in message


def test_an_unreachable_endpoint_fails_naming_the_service(
    connection: None, monkeypatch: pytest.MonkeyPatch, kinesis_mock_endpoint: str
) -> None:
    with socket.socket() as closed:  # a port nothing listens on once the socket is closed
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    aws = json.loads(os.environ["AIRFLOW_CONN_AWS_DEFAULT"])
    aws["extra"]["service_config"]["dynamodb"]["endpoint_url"] = f"http://127.0.0.1:{port}"
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps(aws))
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")

    ok, message = make_hook().test_connection()

    assert ok is False
    assert message.startswith(f"DynamoDB at http://127.0.0.1:{port} failed: EndpointConnectionError")


def test_deep_mode_passes_a_deployment_as_the_operator_creates_it(
    connection: None, aws_deployment: AwsPreflightSettings
) -> None:
    ok, message = make_hook().test_connection(preflight=aws_deployment)

    assert ok is True, message
    assert message.startswith("Connected to Kinesis ") and "; preflight passed (AWS preflight at 20" in message
    assert "0 fatal, 0 warnings, 6 checks" in message and len(message.splitlines()) == 1


@pytest.mark.parametrize("check", sorted(AWS_BROKEN_ITEMS))
def test_deep_mode_names_each_broken_item_and_fails_only_on_a_fatal_one(
    connection: None, aws_deployment: AwsPreflightSettings, kinesis_client: Any, dynamodb_client: Any, check: str
) -> None:
    fatal, breaks = AWS_BROKEN_ITEMS[check]
    settings = breaks(aws_deployment, kinesis_client, dynamodb_client)

    ok, message = make_hook().test_connection(preflight=settings)

    assert ok is (not fatal), message
    assert flagged_checks(message) == [f"[{'FATAL' if fatal else 'wrong'}] {check}"], message

