"""A fresh one-shard stream per test, on kinesis-mock."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest


def wait_active(client: Any, stream: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        summary = client.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]
        if summary["StreamStatus"] == "ACTIVE":
            return
        assert time.monotonic() < deadline, f"stream {stream} never became ACTIVE"
        time.sleep(0.05)


@pytest.fixture
def stream(kinesis_client: Any) -> Iterator[str]:
    name = f"reader-{uuid.uuid4().hex[:12]}"
    kinesis_client.create_stream(StreamName=name, ShardCount=1)
    wait_active(kinesis_client, name)
    yield name
    kinesis_client.delete_stream(StreamName=name, EnforceConsumerDeletion=True)
