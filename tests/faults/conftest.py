"""Servers of the proof suite: its own two Doris stand-ins (one forgets labels after a second),
so injected faults never reach another module's loads, and its own SubscribeToShard server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from airflow_provider_kinesis_doris.core.stores.dynamodb import dynamo_store
from kinesis_doris_devstack.doris_server import DorisServer
from kinesis_doris_devstack.efo_server import EfoServer
from tests.faults.trial import (
    CHECKPOINT_TABLE,
    DORIS_PASSWORD,
    DORIS_USER,
    SHORT_LABEL_KEEP_SECONDS,
    Stack,
    aws_client,
)


@pytest.fixture(scope="module")
def proof_stack(kinesis_mock_endpoint: str, dynamodb_endpoint: str) -> Iterator[Stack]:
    store = dynamo_store(aws_client("dynamodb", dynamodb_endpoint), CHECKPOINT_TABLE, "setup")
    store.items.create_table_if_missing()
    with DorisServer(user=DORIS_USER, password=DORIS_PASSWORD) as doris, DorisServer(
        user=DORIS_USER, password=DORIS_PASSWORD, label_keep_seconds=SHORT_LABEL_KEEP_SECONDS
    ) as short, EfoServer(
        # Subscriptions end after a second, so that longer reads meet the expiry; a second
        # subscriber takes a shard over after 5 s, as on AWS.
        kinesis_mock_endpoint, subscription_seconds=1.0, heartbeat_seconds=0.2, poll_seconds=0.05,
        takeover_after_seconds=5.0,
    ) as efo:
        yield Stack(kinesis_mock_endpoint, dynamodb_endpoint, doris, short, efo)
