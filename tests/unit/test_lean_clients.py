"""The loaders' AWS clients run with ``core.aws_clients.LEAN_CLIENT_OPTIONS`` (no client-side
parameter validation, a fixed user agent: botocore's own CPU per call), under the user's
``botocore_config``, whose options win. The driver's clients (the hook) are tested in
``tests/airflow/test_lean_hook_clients.py`` with :func:`request_sent`."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from botocore.exceptions import ParamValidationError

from airflow_provider_kinesis_doris.core.aws_clients import LEAN_CLIENT_OPTIONS, aws_client
from airflow_provider_kinesis_doris.core.settings import AwsSettings, Credentials

ENDPOINT = "http://127.0.0.1:1"
LEAN_USER_AGENT = str(LEAN_CLIENT_OPTIONS["user_agent"])
MALFORMED_CALLS = {
    "kinesis": ("get_shard_iterator", {"StreamName": "s", "ShardIteratorType": "LATEST"}),
    "dynamodb": ("get_item", {"TableName": "t"}),
}
"""A call per service without a required parameter (the shard, the item's key)."""


def request_sent(client: Any) -> dict[str, Any]:
    """The request ``client`` builds for its service's malformed call, answered here instead of
    sent: botocore's parameter validation, when on, refuses it before this point."""
    sent: dict[str, Any] = {}

    def answer_here(params: dict[str, Any], **_: Any) -> tuple[Any, dict[str, Any]]:
        sent.update(params)
        return SimpleNamespace(status_code=200, headers={}), {}

    client.meta.events.register("before-call", answer_here)
    operation, arguments = MALFORMED_CALLS[client.meta.service_model.service_name]
    getattr(client, operation)(**arguments)
    return sent


def loader_client(service: str, botocore_config: dict[str, Any] | None = None) -> Any:
    settings = AwsSettings("eu-west-1", ENDPOINT, ENDPOINT, botocore_config=botocore_config)
    return aws_client(service, ENDPOINT, settings, Credentials(aws_access_key_id="k", aws_secret_access_key="s"))


@pytest.mark.parametrize("service", sorted(MALFORMED_CALLS))
def test_the_loaders_clients_skip_botocores_validation_and_user_agent_assembly(service: str) -> None:
    client = loader_client(service)

    assert client.meta.config.user_agent.startswith(LEAN_USER_AGENT)
    assert request_sent(client)["headers"]["User-Agent"].startswith(LEAN_USER_AGENT)


def test_the_users_botocore_options_win_and_keep_the_rest_lean() -> None:
    client = loader_client("dynamodb", {"parameter_validation": True, "connect_timeout": 5})

    assert client.meta.config.connect_timeout == 5 and client.meta.config.user_agent.startswith(LEAN_USER_AGENT)
    with pytest.raises(ParamValidationError, match="Key"):
        request_sent(client)
