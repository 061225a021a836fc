"""``ensure_consumer`` through every state Kinesis reports, with botocore's Stubber (the
emulator cannot be relied on to move a deregistered consumer on from DELETING)."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from airflow_provider_kinesis_doris.core.kinesis.consumer import ensure_consumer

STREAM_ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/orders"
CONSUMER_ARN = f"{STREAM_ARN}/consumer/loader:1700000000"
SUMMARY = {"StreamDescriptionSummary": {
    "StreamName": "orders", "StreamARN": STREAM_ARN, "StreamStatus": "ACTIVE", "RetentionPeriodHours": 24,
    "StreamCreationTimestamp": 0, "EnhancedMonitoring": [], "OpenShardCount": 1,
}}  # fmt: skip
DESCRIBE = {"StreamARN": STREAM_ARN, "ConsumerName": "loader"}


def described(status: str) -> dict[str, Any]:
    return {"ConsumerDescription": {"ConsumerName": "loader", "ConsumerARN": CONSUMER_ARN, "ConsumerStatus": status,
                                    "ConsumerCreationTimestamp": 0, "StreamARN": STREAM_ARN}}  # fmt: skip


@pytest.fixture
def kinesis() -> Any:
    return boto3.client("kinesis", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s")


def test_a_consumer_being_deleted_is_waited_out_then_registered_again(kinesis: Any) -> None:
    sleeps: list[float] = []
    with Stubber(kinesis) as stub:
        stub.add_response("describe_stream_summary", SUMMARY, {"StreamName": "orders"})
        stub.add_response("describe_stream_consumer", described("DELETING"), DESCRIBE)
        stub.add_client_error("describe_stream_consumer", "ResourceNotFoundException", expected_params=DESCRIBE)
        stub.add_response("register_stream_consumer", {"Consumer": {
            "ConsumerName": "loader", "ConsumerARN": CONSUMER_ARN, "ConsumerStatus": "CREATING", "ConsumerCreationTimestamp": 0,
        }}, DESCRIBE)  # fmt: skip
        stub.add_response("describe_stream_consumer", described("CREATING"), DESCRIBE)
        stub.add_response("describe_stream_consumer", described("ACTIVE"), DESCRIBE)

        arn = ensure_consumer(kinesis, "orders", "loader", sleep=sleeps.append)

        stub.assert_no_pending_responses()
    assert arn == CONSUMER_ARN and len(sleeps) == 3


def test_another_run_registering_the_same_consumer_first_is_waited_for(kinesis: Any) -> None:
    with Stubber(kinesis) as stub:
        stub.add_response("describe_stream_summary", SUMMARY, {"StreamName": "orders"})
        stub.add_client_error("describe_stream_consumer", "ResourceNotFoundException", expected_params=DESCRIBE)
        stub.add_client_error("register_stream_consumer", "ResourceInUseException", expected_params=DESCRIBE)
        stub.add_response("describe_stream_consumer", described("ACTIVE"), DESCRIBE)

        assert ensure_consumer(kinesis, "orders", "loader", sleep=lambda _: None) == CONSUMER_ARN
        stub.assert_no_pending_responses()


def test_an_error_other_than_not_found_is_raised(kinesis: Any) -> None:
    from botocore.exceptions import ClientError

    with Stubber(kinesis) as stub:
        stub.add_response("describe_stream_summary", SUMMARY, {"StreamName": "orders"})
        stub.add_client_error("describe_stream_consumer", "AccessDeniedException", expected_params=DESCRIBE)
        with pytest.raises(ClientError, match="AccessDeniedException"):
            ensure_consumer(kinesis, "orders", "loader", sleep=lambda _: None)
