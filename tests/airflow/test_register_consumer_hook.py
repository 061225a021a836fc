"""``KinesisPipelineHook.register_consumer`` on the local stack's AWS connection (kinesis-mock):
the enhanced fan-out consumer is registered once and found again by the next run.

Runs under Airflow 3.x (``.venv``) and 2.11 (``.venv-af2``).
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from kinesis_doris_devstack.scenario import create_stream, now_ms
from tests.conftest import use_local_stack_connections

pytestmark = [pytest.mark.airflow, pytest.mark.integration]


def test_a_consumer_is_registered_once_and_found_by_the_next_run(
    monkeypatch: pytest.MonkeyPatch, kinesis_client: Any, kinesis_mock_endpoint: str, dynamodb_endpoint: str,
    doris_server: Any,
) -> None:  # fmt: skip
    from airflow_provider_kinesis_doris.hooks.kinesis_pipeline import KinesisPipelineHook

    use_local_stack_connections(monkeypatch, kinesis_mock_endpoint, dynamodb_endpoint, doris_server, "unused")
    stream = f"consumer-hook-{now_ms()}"
    create_stream(kinesis_client, stream, 1)
    hook = KinesisPipelineHook()

    arn = hook.register_consumer(stream, "loader")

    assert "/consumer/loader:" in arn
    assert KinesisPipelineHook().register_consumer(stream, "loader") == arn
    with pytest.raises(ConfigurationError, match="efo_consumer_name must be"):
        hook.register_consumer(stream, "not a name")
