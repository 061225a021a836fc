"""Preflight of the AWS side of a pipeline: the checkpoint table, the stream and the identity's
permissions, checked with read-only calls before the first load (issue 34). Its items are those
of the Doris half (``core.doris.preflight``): ok, wrong (with the fix), or not verifiable (why).

Fatal (the pipeline cannot keep its record of what was loaded, or cannot read at all): a
checkpoint table whose key schema is not the store's ``pk``/``sk`` strings (every conditional
write the exactly-once argument rests on addresses items by them), a checkpoint table that is
missing and will not be created, a stream that does not exist.

Not fatal, whatever the stream's retention and the label window are: the prune horizon is the
trim horizon less the label window (``core.prune``), so pruning never deletes the history of an
interval a run could still read, and a run past either limit fails loudly (``DataTrimmed`` past
retention, ``UnresolvableLoad`` past the label window), never loads twice. A retention shorter
than the label window is a warning: an outage longer than retention loses records although Doris
would still deduplicate them.

Only calls without side effects are made: ``DescribeTable``, ``DescribeContinuousBackups``,
``GetItem``, ``Query``, ``DescribeStreamSummary``, ``ListShards``, ``DescribeStreamConsumer``. The
actions that write or spend the shards' read throughput (``PutItem``, ``UpdateItem``,
``BatchWriteItem``, ``GetRecords``, ``RegisterStreamConsumer``, ``kms:Decrypt``) are not tested.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from botocore.exceptions import ClientError

from airflow_provider_kinesis_doris.core.doris.preflight import (
    CheckStatus,
    DorisPreflightSettings,
    PreflightItem,
    PreflightReport,
)
from airflow_provider_kinesis_doris.core.errors import aws_error_code, doc_url, readme_section
from airflow_provider_kinesis_doris.core.stores.buckets import PIPELINE_BUCKET, partition_key
from airflow_provider_kinesis_doris.core.stores.preflight import PREFLIGHT_KEY

EFO_CONSUMERS_PER_STREAM = 20
"""Kinesis's limit of registered consumers per stream (RegisterStreamConsumer refuses the 21st)."""

CHECKPOINT_KEY_SCHEMA = {"pk": ("HASH", "S"), "sk": ("RANGE", "S")}
"""The key ``DynamoItems.create_table_if_missing`` creates: name → (key type, type)."""

_REFUSED_CODES = frozenset({"AccessDeniedException", "AccessDenied", "UnauthorizedOperation"})
_NOT_FOUND = "ResourceNotFoundException"
_PRODUCTION = f"{doc_url('production.md')} lists the policy"
_NO_RECOVERY = (
    "a table deleted or overwritten by mistake takes the record of what was loaded with it, and a pipeline "
    "started again without it loads every record still in the stream again."
)
_ENABLE_RECOVERY = (
    "aws dynamodb update-continuous-backups --point-in-time-recovery-specification PointInTimeRecoveryEnabled=true."
)


@dataclass(frozen=True)
class AwsPreflightSettings:
    """The pipeline settings the AWS checks are made against.

    :param label_keep_seconds: the Doris connection's label window.
    :param efo_consumer: the stream consumer's name when the pipeline reads with enhanced
        fan-out (``ReadConfig(mode="efo")``), else None.
    :param creates_checkpoint_table: the operator creates a missing checkpoint table.
    """

    stream_name: str
    checkpoint_table: str
    pipeline_id: str
    label_keep_seconds: int
    efo_consumer: str | None = None
    creates_checkpoint_table: bool = True


def preflight_digest(doris: DorisPreflightSettings, aws: AwsPreflightSettings) -> str:
    """A hash of every setting both halves check: a pipeline is checked again when one changes."""
    return hashlib.sha256(json.dumps([doris.digest(), asdict(aws)], sort_keys=True).encode()).hexdigest()


_Answer = Mapping[str, Any] | ClientError


def _ask(answers: dict[str, _Answer], action: str, call: Callable[..., Any], **kwargs: Any) -> _Answer:
    """``call``'s answer, or the error AWS answered with (kept under ``action`` for the IAM item);
    an unreachable endpoint raises."""
    try:
        answer: _Answer = call(**kwargs)
    except ClientError as error:
        answer = error
    answers[action] = answer
    return answer


def _refused(answer: _Answer) -> bool:
    return isinstance(answer, ClientError) and aws_error_code(answer) in _REFUSED_CODES


def aws_preflight(kinesis: Any, dynamodb: Any, settings: AwsPreflightSettings) -> PreflightReport:
    """Run every AWS check of ``settings`` with the boto3 clients ``kinesis`` and ``dynamodb``.

    :raises botocore.exceptions.BotoCoreError: an endpoint could not be reached (a refused call
        is an item).
    """
    answers: dict[str, _Answer] = {}
    table = _ask(answers, "dynamodb:DescribeTable", dynamodb.describe_table, TableName=settings.checkpoint_table)
    table_exists = not isinstance(table, ClientError)
    # The preflight item's own key (its pipeline's first bucket): a role confined to the pipeline's
    # keys (dynamodb:LeadingKeys "<pipeline id>#*") may read it, and must not be reported refused.
    key = {"pk": {"S": partition_key(settings.pipeline_id, PIPELINE_BUCKET)}, "sk": {"S": PREFLIGHT_KEY}}
    if table_exists:
        _ask(answers, "dynamodb:GetItem", dynamodb.get_item, TableName=settings.checkpoint_table, Key=key)
        _ask(answers, "dynamodb:Query", dynamodb.query, TableName=settings.checkpoint_table, Limit=1,
             KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": key["pk"]})  # fmt: skip
    backups = (
        _ask({}, "dynamodb:DescribeContinuousBackups", dynamodb.describe_continuous_backups,
             TableName=settings.checkpoint_table)
        if table_exists else None
    )  # fmt: skip
    summary = _ask(answers, "kinesis:DescribeStreamSummary", kinesis.describe_stream_summary,
                   StreamName=settings.stream_name)  # fmt: skip
    _ask(answers, "kinesis:ListShards", kinesis.list_shards, StreamName=settings.stream_name, MaxResults=1)
    stream = summary.get("StreamDescriptionSummary", {}) if not isinstance(summary, ClientError) else None
    items = [
        _key_schema(table, settings, dynamodb.meta.region_name),
        _billing(table, settings),
        _point_in_time_recovery(backups, table, settings),
        _retention(summary, settings),
        _encryption(stream),
    ]
    if settings.efo_consumer is not None:
        consumer = (
            _ask(answers, "kinesis:DescribeStreamConsumer", kinesis.describe_stream_consumer,
                 StreamARN=stream["StreamARN"], ConsumerName=settings.efo_consumer)
            if stream else None
        )  # fmt: skip
        items.append(_consumers(stream, consumer, settings.efo_consumer))
    items.append(_permissions(answers))
    return PreflightReport(tuple(items), name="AWS")


def _unanswered(check: str, action: str, answer: ClientError) -> PreflightItem:
    """The item of a check whose call AWS refused or failed (the IAM item names the refusal)."""
    return PreflightItem(check, CheckStatus.NOT_VERIFIABLE, f"{action} failed: {aws_error_code(answer)}: {answer}")


def _key_schema(table: _Answer, settings: AwsPreflightSettings, region: str | None) -> PreflightItem:
    """:param region: where the client looked for the table (a table in another region is missing)."""
    check = "checkpoint table"
    name = settings.checkpoint_table
    if isinstance(table, ClientError):
        if aws_error_code(table) != _NOT_FOUND:
            return _unanswered(check, "dynamodb:DescribeTable", table)
        if settings.creates_checkpoint_table:
            return PreflightItem(check, CheckStatus.OK, f"{name} does not exist yet: the first run creates it "
                                                        "(pk/sk strings, on-demand; needs dynamodb:CreateTable)")
        return PreflightItem(
            check, CheckStatus.WRONG,
            f"DynamoDB table {name} does not exist in region {region} and create_checkpoint_table is False.",
            f"create {name} in {region} with key pk (HASH, S), sk (RANGE, S) and on-demand billing "
            f"(aws dynamodb create-table --region {region} --table-name {name} --attribute-definitions "
            "AttributeName=pk,AttributeType=S AttributeName=sk,AttributeType=S --key-schema "
            "AttributeName=pk,KeyType=HASH AttributeName=sk,KeyType=RANGE --billing-mode PAY_PER_REQUEST), "
            "or set state=StateConfig(create_checkpoint_table=True) to have the first run create it.",
            fatal=True,
        )  # fmt: skip
    described = table["Table"]
    types = {a["AttributeName"]: a["AttributeType"] for a in described.get("AttributeDefinitions", ())}
    schema = {k["AttributeName"]: (k["KeyType"], types.get(k["AttributeName"])) for k in described["KeySchema"]}
    if schema == CHECKPOINT_KEY_SCHEMA:
        return PreflightItem(check, CheckStatus.OK, f"{name} has the key pk (HASH, S), sk (RANGE, S)")
    found = ", ".join(f"{attribute} ({kind}, {type_})" for attribute, (kind, type_) in schema.items())
    return PreflightItem(
        check, CheckStatus.WRONG,
        f"{name} has the key {found}, the store needs pk (HASH, S), sk (RANGE, S): every read and conditional "
        "write of ranges, cuts and chunk intents fails, so nothing of what was loaded can be recorded.",
        f"use another checkpoint_table (the operator creates it), or create {name} with that key.",
        fatal=True,
    )  # fmt: skip


def _created_by_the_operator(table: _Answer, settings: AwsPreflightSettings) -> bool:
    return (isinstance(table, ClientError) and aws_error_code(table) == _NOT_FOUND
            and settings.creates_checkpoint_table)  # fmt: skip


def _billing(table: _Answer, settings: AwsPreflightSettings) -> PreflightItem:
    check = "checkpoint table billing"
    if _created_by_the_operator(table, settings):
        return PreflightItem(check, CheckStatus.OK, "the first run creates the table on-demand (PAY_PER_REQUEST)")
    if isinstance(table, ClientError):
        return PreflightItem(check, CheckStatus.NOT_VERIFIABLE, "the checkpoint table could not be described")
    mode = table["Table"].get("BillingModeSummary", {}).get("BillingMode", "PROVISIONED")
    if mode == "PAY_PER_REQUEST":
        return PreflightItem(check, CheckStatus.OK, "on-demand (PAY_PER_REQUEST)")
    throughput = table["Table"].get("ProvisionedThroughput", {})
    return PreflightItem(
        check, CheckStatus.WRONG,
        f"provisioned ({throughput.get('ReadCapacityUnits')} RCU, {throughput.get('WriteCapacityUnits')} WCU): a "
        "backfill or a reshard writes in bursts, and throttled writes are retried, so runs slow down or time out.",
        "switch the table to on-demand (aws dynamodb update-table --billing-mode PAY_PER_REQUEST), or provision "
        f"for the bursts ({readme_section('Performance')} gives the writes per shard and interval).",
    )  # fmt: skip


def _point_in_time_recovery(backups: _Answer | None, table: _Answer, settings: AwsPreflightSettings) -> PreflightItem:
    check = "checkpoint table recovery"
    if _created_by_the_operator(table, settings):
        return PreflightItem(
            check, CheckStatus.WRONG,
            f"the first run creates {settings.checkpoint_table} without point-in-time recovery: {_NO_RECOVERY}",
            f"once it exists: {_ENABLE_RECOVERY}",
        )  # fmt: skip
    if backups is None:
        return PreflightItem(check, CheckStatus.NOT_VERIFIABLE, "the checkpoint table could not be described")
    if isinstance(backups, ClientError):
        return PreflightItem(
            check, CheckStatus.NOT_VERIFIABLE,
            f"dynamodb:DescribeContinuousBackups failed ({aws_error_code(backups)}); the loader does not need it, "
            "so its policy may well not grant it.",
            "check point-in-time recovery in the console, or grant dynamodb:DescribeContinuousBackups.",
        )  # fmt: skip
    status = backups["ContinuousBackupsDescription"].get("PointInTimeRecoveryDescription", {})
    if status.get("PointInTimeRecoveryStatus") == "ENABLED":
        return PreflightItem(check, CheckStatus.OK, "point-in-time recovery is enabled")
    return PreflightItem(
        check, CheckStatus.WRONG,
        f"point-in-time recovery is off: {_NO_RECOVERY}", _ENABLE_RECOVERY,
    )  # fmt: skip


def _retention(summary: _Answer, settings: AwsPreflightSettings) -> PreflightItem:
    check = "stream retention"
    if isinstance(summary, ClientError):
        if aws_error_code(summary) == _NOT_FOUND:
            return PreflightItem(check, CheckStatus.WRONG, f"stream {settings.stream_name} does not exist.",
                                 "create the stream, or fix stream_name.", fatal=True)
        return _unanswered(check, "kinesis:DescribeStreamSummary", summary)
    hours = int(summary["StreamDescriptionSummary"]["RetentionPeriodHours"])
    window = settings.label_keep_seconds
    horizon = f"the prune horizon is {hours} h + {window} s back (trim horizon less the label window)"
    if hours * 3600 >= window:
        return PreflightItem(check, CheckStatus.OK, (
            f"retention {hours} h >= label_keep_seconds {window} s: a failed interval can be run again for "
            f"{window} s, and after that is reported (UnresolvableLoad), never loaded twice; {horizon}"
        ))  # fmt: skip
    return PreflightItem(
        check, CheckStatus.WRONG,
        f"retention {hours} h is shorter than label_keep_seconds {window} s: records are deleted before Doris "
        "forgets their labels, so an outage longer than the retention ends in DataTrimmed (records lost, loudly) "
        f"while a re-run could still have been deduplicated; {horizon}.",
        f"raise the retention to {math.ceil(window / 3600)} h or more (aws kinesis increase-stream-retention-period), "
        "or accept that an outage must end within the retention.",
    )  # fmt: skip


def _encryption(stream: Mapping[str, Any] | None) -> PreflightItem:
    check = "stream encryption"
    if stream is None:
        return PreflightItem(check, CheckStatus.NOT_VERIFIABLE, "the stream could not be described")
    if stream.get("EncryptionType", "NONE") != "KMS":
        return PreflightItem(check, CheckStatus.OK, "the stream is not encrypted: no kms:Decrypt needed")
    return PreflightItem(
        check, CheckStatus.NOT_VERIFIABLE,
        f"the stream is encrypted with KMS key {stream.get('KeyId')}: the loader needs kms:Decrypt on it, and only "
        "GetRecords on an encrypted record tests that, spending the shard's reads the running loaders share; a "
        "missing permission fails the first run with KMSAccessDeniedException before anything is loaded.",
        f"grant kms:Decrypt on {stream.get('KeyId')} to the identity that reads (the loader's, or the executors' "
        "role with executor_credentials).",
    )  # fmt: skip


def _consumers(stream: Mapping[str, Any] | None, consumer: _Answer | None, name: str) -> PreflightItem:
    check = "enhanced fan-out consumers"
    if stream is None:
        return PreflightItem(check, CheckStatus.NOT_VERIFIABLE, "the stream could not be described")
    count = int(stream.get("ConsumerCount", 0))
    if consumer is not None and not isinstance(consumer, ClientError):
        return PreflightItem(check, CheckStatus.OK, f"consumer {name} is registered ({count} on the stream)")
    if isinstance(consumer, ClientError) and aws_error_code(consumer) != _NOT_FOUND:
        return _unanswered(check, "kinesis:DescribeStreamConsumer", consumer)
    if count < EFO_CONSUMERS_PER_STREAM:
        return PreflightItem(check, CheckStatus.OK, f"consumer {name} is registered by the first run ({count} of "
                                                    f"{EFO_CONSUMERS_PER_STREAM} on the stream)")  # fmt: skip
    return PreflightItem(
        check, CheckStatus.WRONG,
        f"the stream has {count} consumers, Kinesis's limit is {EFO_CONSUMERS_PER_STREAM}: registering {name} "
        "fails, so the first run fails before anything is planned.",
        "deregister a consumer that is no longer read, or read with ReadConfig(mode='polling').",
    )  # fmt: skip


def _permissions(answers: Mapping[str, _Answer]) -> PreflightItem:
    check = "IAM actions"
    refused = [action for action, answer in answers.items() if _refused(answer)]
    if refused:
        return PreflightItem(
            check, CheckStatus.WRONG,
            f"AWS refused {', '.join(refused)}: runs fail where the loader needs them.",
            f"grant {', '.join(refused)} to the pipeline's identity ({_PRODUCTION}).",
        )  # fmt: skip
    return PreflightItem(check, CheckStatus.OK, (
        f"not refused: {', '.join(answers)} (actions that write or spend read throughput are not tested)"
    ))
