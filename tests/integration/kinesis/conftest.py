"""A fresh one-shard stream per test, on kinesis-mock."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from airflow_provider_kinesis_doris.testing.builders import wait_stream_active


@pytest.fixture
def stream(kinesis_client: Any) -> Iterator[str]:
    name = f"reader-{uuid.uuid4().hex[:12]}"
    kinesis_client.create_stream(StreamName=name, ShardCount=1)
    wait_stream_active(kinesis_client, name)
    yield name
    kinesis_client.delete_stream(StreamName=name, EnforceConsumerDeletion=True)
