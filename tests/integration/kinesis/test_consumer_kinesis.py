"""The enhanced fan-out consumer's lifecycle on kinesis-mock (which implements
RegisterStreamConsumer and DescribeStreamConsumer): registered when missing, waited for until
ACTIVE, reused by later runs. A consumer still being deleted is waited out in
``tests/unit/kinesis/test_consumer_states.py``: kinesis-mock sometimes keeps a deregistered
consumer DELETING for good (seen in CI), so that path is driven through botocore's Stubber."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.core.kinesis.consumer import consumer_name, ensure_consumer
from airflow_provider_kinesis_doris.testing.builders import wait_stream_active

pytestmark = pytest.mark.integration


@pytest.fixture
def stream(kinesis_client: Any) -> str:
    name = f"consumer-{uuid.uuid4().hex[:12]}"
    kinesis_client.create_stream(StreamName=name, ShardCount=1)
    wait_stream_active(kinesis_client, name)
    return name


def consumers(client: Any, stream: str) -> list[dict[str, Any]]:
    arn = client.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamARN"]
    return client.list_stream_consumers(StreamARN=arn)["Consumers"]


def test_a_missing_consumer_is_registered_waited_for_and_then_reused(kinesis_client: Any, stream: str) -> None:
    arn = ensure_consumer(kinesis_client, stream, "loader")

    (registered,) = consumers(kinesis_client, stream)
    assert (registered["ConsumerName"], registered["ConsumerARN"], registered["ConsumerStatus"]) == ("loader", arn, "ACTIVE")
    assert ensure_consumer(kinesis_client, stream, "loader") == arn  # the next run's: no second registration
    assert len(consumers(kinesis_client, stream)) == 1


def test_a_consumer_that_never_becomes_active_times_out_naming_it(kinesis_client: Any, stream: str) -> None:
    with pytest.raises(TimeoutError, match=f"Stream consumer slow of {stream} is CREATING after 0s"):
        ensure_consumer(kinesis_client, stream, "slow", timeout_s=0)


def test_the_default_name_is_the_pipeline_id_in_the_characters_kinesis_takes() -> None:
    assert consumer_name("orders.analytics.events") == "kinesis-doris-orders.analytics.events"
    assert consumer_name("a b/c:d") == "kinesis-doris-a-b-c-d"
    assert len(consumer_name("x" * 300)) == 128
    with pytest.raises(ConfigurationError, match=r"efo_consumer_name must be 1-128 of \[a-zA-Z0-9_.-\], got 'a b'"):
        ensure_consumer(None, "s", "a b")
