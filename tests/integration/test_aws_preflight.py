"""The AWS half of the preflight (``core.aws_preflight``) on the emulators: moto's DynamoDB and
kinesis-mock, with botocore's Stubber for the answers they never give (a refused call, a
KMS-encrypted stream, a stream at the consumer limit). Each check passes and fails once."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from airflow_provider_kinesis_doris.core.aws_preflight import (
    EFO_CONSUMERS_PER_STREAM,
    AwsPreflightSettings,
    aws_preflight,
    preflight_digest,
)
from airflow_provider_kinesis_doris.core.doris.preflight import CheckStatus, DorisPreflightSettings, PreflightReport
from tests.conftest import LABEL_WINDOW_S

pytestmark = pytest.mark.integration


def _with(settings: AwsPreflightSettings, **changes: Any) -> AwsPreflightSettings:
    return replace(settings, **changes)


def _status(report: PreflightReport, check: str) -> tuple[CheckStatus, bool]:
    item = report.item(check)
    return item.status, item.fatal


def test_a_deployment_as_the_operator_creates_it_passes_every_check(
    kinesis_client: Any, dynamodb_client: Any, aws_deployment: AwsPreflightSettings
) -> None:
    report = aws_preflight(kinesis_client, dynamodb_client, aws_deployment)

    assert [item.status for item in report.items] == [CheckStatus.OK] * 6, report.text()
    assert report.text().startswith("AWS preflight at ")
    assert "not refused: dynamodb:DescribeTable, dynamodb:GetItem, dynamodb:Query, kinesis:DescribeStreamSummary, " \
           "kinesis:ListShards" in report.item("IAM actions").detail  # fmt: skip
    assert "prune horizon is 24 h + 43200 s back" in report.item("stream retention").detail


def test_a_checkpoint_table_with_another_key_schema_is_fatal(
    kinesis_client: Any, dynamodb_client: Any, aws_deployment: AwsPreflightSettings
) -> None:
    table = f"{aws_deployment.checkpoint_table}_other_key"
    dynamodb_client.create_table(
        TableName=table, BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "N"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
    )  # fmt: skip

    report = aws_preflight(kinesis_client, dynamodb_client, _with(aws_deployment, checkpoint_table=table))

    assert _status(report, "checkpoint table") == (CheckStatus.WRONG, True)
    assert "pk (HASH, S), sk (RANGE, N)" in report.item("checkpoint table").detail
    assert report.fatal == (report.item("checkpoint table"),)


def test_a_missing_checkpoint_table_is_fatal_only_when_the_operator_will_not_create_it(
    kinesis_client: Any, dynamodb_client: Any, aws_deployment: AwsPreflightSettings
) -> None:
    missing = _with(aws_deployment, checkpoint_table=f"{aws_deployment.checkpoint_table}_missing")

    created = aws_preflight(kinesis_client, dynamodb_client, missing)
    refused = aws_preflight(kinesis_client, dynamodb_client, _with(missing, creates_checkpoint_table=False))

    assert _status(created, "checkpoint table") == (CheckStatus.OK, False)
    assert _status(created, "checkpoint table billing") == (CheckStatus.OK, False)
    assert _status(created, "checkpoint table recovery") == (CheckStatus.WRONG, False)
    assert _status(refused, "checkpoint table") == (CheckStatus.WRONG, True)
    assert refused.item("checkpoint table").detail == (
        f"DynamoDB table {missing.checkpoint_table} does not exist in region us-east-1 and create_checkpoint_table "
        "is False."
    )


def test_provisioned_billing_and_no_point_in_time_recovery_warn(
    kinesis_client: Any, dynamodb_client: Any, aws_deployment: AwsPreflightSettings
) -> None:
    table = f"{aws_deployment.checkpoint_table}_provisioned"
    dynamodb_client.create_table(
        TableName=table, ProvisionedThroughput={"ReadCapacityUnits": 5, "WriteCapacityUnits": 5},
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
    )  # fmt: skip

    report = aws_preflight(kinesis_client, dynamodb_client, _with(aws_deployment, checkpoint_table=table))

    assert _status(report, "checkpoint table") == (CheckStatus.OK, False)
    assert _status(report, "checkpoint table billing") == (CheckStatus.WRONG, False)
    assert "5 RCU, 5 WCU" in report.item("checkpoint table billing").detail
    assert _status(report, "checkpoint table recovery") == (CheckStatus.WRONG, False)
    assert not report.fatal


def test_a_retention_shorter_than_the_label_window_warns(
    kinesis_client: Any, dynamodb_client: Any, aws_deployment: AwsPreflightSettings
) -> None:
    report = aws_preflight(kinesis_client, dynamodb_client, _with(aws_deployment, label_keep_seconds=30 * 3600))

    item = report.item("stream retention")
    assert (item.status, item.fatal) == (CheckStatus.WRONG, False)
    assert "retention 24 h is shorter than label_keep_seconds 108000 s" in item.detail
    assert "raise the retention to 30 h" in (item.fix or "")


def test_a_missing_stream_is_fatal(kinesis_client: Any, dynamodb_client: Any, aws_deployment: AwsPreflightSettings) -> None:
    report = aws_preflight(kinesis_client, dynamodb_client, _with(aws_deployment, stream_name="no-such-stream"))

    assert _status(report, "stream retention") == (CheckStatus.WRONG, True)
    assert _status(report, "stream encryption") == (CheckStatus.NOT_VERIFIABLE, False)
    assert _status(report, "IAM actions") == (CheckStatus.OK, False)  # not found is not refused


def test_efo_consumers_registered_or_below_the_limit_pass(
    kinesis_client: Any, dynamodb_client: Any, aws_deployment: AwsPreflightSettings
) -> None:
    arn = kinesis_client.describe_stream_summary(StreamName=aws_deployment.stream_name)["StreamDescriptionSummary"]["StreamARN"]
    kinesis_client.register_stream_consumer(StreamARN=arn, ConsumerName="registered")

    registered = aws_preflight(kinesis_client, dynamodb_client, _with(aws_deployment, efo_consumer="registered"))
    new = aws_preflight(kinesis_client, dynamodb_client, _with(aws_deployment, efo_consumer="new"))

    assert _status(registered, "enhanced fan-out consumers") == (CheckStatus.OK, False)
    assert "consumer registered is registered" in registered.item("enhanced fan-out consumers").detail
    assert "kinesis:DescribeStreamConsumer" in registered.item("IAM actions").detail
    assert _status(new, "enhanced fan-out consumers") == (CheckStatus.OK, False)
    assert "registered by the first run" in new.item("enhanced fan-out consumers").detail


# --- answers the emulators do not give ---------------------------------------------------------------


def _stubbed_kinesis() -> tuple[Any, Stubber]:
    client = boto3.client("kinesis", region_name="us-east-1")
    return client, Stubber(client)


def _summary(stream: str, **fields: Any) -> dict[str, Any]:
    return {"StreamDescriptionSummary": {
        "StreamName": stream, "StreamARN": f"arn:aws:kinesis:us-east-1:123456789012:stream/{stream}",
        "StreamStatus": "ACTIVE", "RetentionPeriodHours": 24, "StreamCreationTimestamp": datetime(2026, 1, 1),
        "EnhancedMonitoring": [], "OpenShardCount": 1, **fields,
    }}  # fmt: skip


def test_a_kms_encrypted_stream_is_not_verifiable_and_says_which_key_needs_decrypt(
    dynamodb_client: Any, aws_deployment: AwsPreflightSettings
) -> None:
    kinesis, stub = _stubbed_kinesis()
    stub.add_response("describe_stream_summary", _summary(aws_deployment.stream_name, EncryptionType="KMS", KeyId="alias/kd"))
    stub.add_response("list_shards", {"Shards": []})

    with stub:
        report = aws_preflight(kinesis, dynamodb_client, aws_deployment)

    item = report.item("stream encryption")
    assert item.status is CheckStatus.NOT_VERIFIABLE
    assert "alias/kd" in item.detail and "kms:Decrypt on alias/kd" in (item.fix or "")
    assert not report.fatal


def test_a_stream_at_the_consumer_limit_is_wrong_for_a_consumer_not_registered_yet(
    dynamodb_client: Any, aws_deployment: AwsPreflightSettings
) -> None:
    kinesis, stub = _stubbed_kinesis()
    stub.add_response("describe_stream_summary", _summary(aws_deployment.stream_name, ConsumerCount=EFO_CONSUMERS_PER_STREAM))
    stub.add_response("list_shards", {"Shards": []})
    stub.add_client_error("describe_stream_consumer", "ResourceNotFoundException")

    with stub:
        report = aws_preflight(kinesis, dynamodb_client, _with(aws_deployment, efo_consumer="new"))

    assert _status(report, "enhanced fan-out consumers") == (CheckStatus.WRONG, False)
    assert "the stream has 20 consumers" in report.item("enhanced fan-out consumers").detail


def test_a_refused_read_only_call_is_wrong_naming_the_action(
    dynamodb_client: Any, aws_deployment: AwsPreflightSettings
) -> None:
    kinesis, stub = _stubbed_kinesis()
    stub.add_response("describe_stream_summary", _summary(aws_deployment.stream_name))
    stub.add_client_error("list_shards", "AccessDeniedException", "not authorized to perform: kinesis:ListShards")

    with stub:
        report = aws_preflight(kinesis, dynamodb_client, aws_deployment)

    item = report.item("IAM actions")
    assert (item.status, item.fatal) == (CheckStatus.WRONG, False)
    assert "AWS refused kinesis:ListShards" in item.detail and "grant kinesis:ListShards" in (item.fix or "")


def test_a_refused_describe_table_leaves_the_table_checks_not_verifiable(
    kinesis_client: Any, aws_deployment: AwsPreflightSettings
) -> None:
    dynamodb = boto3.client("dynamodb", region_name="us-east-1")
    stub = Stubber(dynamodb)
    stub.add_client_error("describe_table", "AccessDeniedException", "not authorized to perform: dynamodb:DescribeTable")

    with stub:
        report = aws_preflight(kinesis_client, dynamodb, aws_deployment)

    assert _status(report, "checkpoint table") == (CheckStatus.NOT_VERIFIABLE, False)
    assert _status(report, "checkpoint table recovery") == (CheckStatus.NOT_VERIFIABLE, False)
    assert "AWS refused dynamodb:DescribeTable" in report.item("IAM actions").detail


def test_the_digest_changes_with_an_aws_setting(aws_deployment: AwsPreflightSettings) -> None:
    doris = DorisPreflightSettings("db", "t", "t_dead_letter", LABEL_WINDOW_S)

    assert preflight_digest(doris, aws_deployment) == preflight_digest(doris, _with(aws_deployment))
    assert preflight_digest(doris, aws_deployment) != preflight_digest(doris, _with(aws_deployment, efo_consumer="c"))
    assert preflight_digest(doris, aws_deployment) != preflight_digest(doris, _with(aws_deployment, stream_name="other"))
