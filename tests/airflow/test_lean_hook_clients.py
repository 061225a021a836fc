"""The driver's Kinesis and DynamoDB clients (``KinesisPipelineHook``) run with
``core.aws_clients.LEAN_CLIENT_OPTIONS`` under the connection's or the hook's botocore options,
whose options win; the options the load job carries stay the user's alone.

Runs under Airflow 3.x (``.venv``) and 2.11 (``.venv-af2``).
"""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ParamValidationError

from tests.airflow.test_executor_credentials_hook import CONNECTION_OPTIONS, hook, set_aws_connection
from tests.unit.test_lean_clients import LEAN_USER_AGENT, request_sent

pytestmark = pytest.mark.airflow


def driver_clients(pipeline_hook: Any) -> list[Any]:
    return [pipeline_hook.kinesis, pipeline_hook.dynamodb]


def test_the_drivers_clients_skip_botocores_validation_and_user_agent_assembly(monkeypatch: pytest.MonkeyPatch) -> None:
    set_aws_connection(monkeypatch, "aws_lean", config_kwargs=CONNECTION_OPTIONS)

    for client in driver_clients(hook("aws_lean")):
        assert client.meta.config.user_agent.startswith(LEAN_USER_AGENT)
        # The connection's options still apply, and Airflow's user agent extra is still sent.
        assert client.meta.config.connect_timeout == 5
        assert request_sent(client)["headers"]["User-Agent"].endswith(client.meta.config.user_agent_extra)


def test_the_hooks_config_wins_and_the_load_job_carries_only_the_users_options(monkeypatch: pytest.MonkeyPatch) -> None:
    set_aws_connection(monkeypatch, "aws_lean")
    pipeline_hook = hook("aws_lean", config={"parameter_validation": True})

    for client in driver_clients(pipeline_hook):
        assert client.meta.config.user_agent.startswith(LEAN_USER_AGENT)
        with pytest.raises(ParamValidationError):
            request_sent(client)
    assert pipeline_hook.aws_settings().botocore_config == {"parameter_validation": True}
