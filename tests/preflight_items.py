"""Each preflight item broken as a user's deployment could break it, on the Doris stand-in and the
AWS emulators: the matrix the hooks' deep ``test_connection``, the ``check`` CLI and the operator
are each run through (issue 34). An item maps to (fatal, how to break it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from airflow_provider_kinesis_doris.core.aws_preflight import AwsPreflightSettings
from airflow_provider_kinesis_doris.core.stores.dynamodb import dynamo_store

DorisBreak = Callable[[Any, str, str], object]
"""Breaks the stand-in (a ``DorisServer``) for the pipeline's table: (server, database, table)."""

AwsBreak = Callable[[AwsPreflightSettings, Any, Any], AwsPreflightSettings]
"""Breaks the deployment of settings with the Kinesis and DynamoDB clients; the settings to check."""

# Without the load privileges the user lacks ADMIN too: the config checks are then not verifiable.
DORIS_BROKEN_ITEMS: dict[str, tuple[bool, DorisBreak]] = {
    "label window": (True, lambda srv, db, table: srv.set_fe_config("streaming_label_keep_max_second", 600)),
    "label count": (False, lambda srv, db, table: srv.set_fe_config("label_num_threshold", 2000)),
    "running transactions": (False, lambda srv, db, table: srv.set_fe_config("max_running_txn_num_per_db", 0)),
    "group commit": (True, lambda srv, db, table: srv.set_be_config("wait_internal_group_commit_finish", True)),
    "two-phase commit": (False, lambda srv, db, table: srv.set_be_config("disable_stream_load_2pc", True)),
    "table columns": (True, lambda srv, db, table: srv.execute_sql(db, f"DROP TABLE {table}")),
    "privileges": (True, lambda srv, db, table: srv.set_grants({db: ["Select_priv"]})),
    # A BE registered under a name the connection does not allow (.invalid never resolves).
    "BE redirects": (False, lambda srv, db, table: srv.advertise_be_host("be-1.doris.invalid")),
}


def _other_key_schema(settings: AwsPreflightSettings, kinesis: Any, dynamodb: Any) -> AwsPreflightSettings:
    table = f"{settings.checkpoint_table}_other_key"
    dynamodb.create_table(
        TableName=table, BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
    )  # fmt: skip
    _recoverable(dynamodb, table)
    return replace(settings, checkpoint_table=table)


def _provisioned(settings: AwsPreflightSettings, kinesis: Any, dynamodb: Any) -> AwsPreflightSettings:
    table = f"{settings.checkpoint_table}_provisioned"
    dynamo_store(dynamodb, table, settings.pipeline_id).items.create_table_if_missing()
    dynamodb.update_table(TableName=table, BillingMode="PROVISIONED",
                          ProvisionedThroughput={"ReadCapacityUnits": 5, "WriteCapacityUnits": 5})  # fmt: skip
    _recoverable(dynamodb, table)
    return replace(settings, checkpoint_table=table)


def _recoverable(dynamodb: Any, table: str) -> None:
    dynamodb.update_continuous_backups(
        TableName=table, PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True}
    )


def _no_recovery(settings: AwsPreflightSettings, kinesis: Any, dynamodb: Any) -> AwsPreflightSettings:
    dynamodb.update_continuous_backups(
        TableName=settings.checkpoint_table, PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": False}
    )
    return settings


AWS_BROKEN_ITEMS: dict[str, tuple[bool, AwsBreak]] = {
    "checkpoint table": (True, _other_key_schema),
    "checkpoint table billing": (False, _provisioned),
    "checkpoint table recovery": (False, _no_recovery),
    "stream retention": (True, lambda settings, k, d: replace(settings, stream_name=f"{settings.stream_name}-gone")),
}


def flagged_checks(message: str) -> list[str]:
    """The items a preflight message flags, as ``[FATAL] check`` / ``[wrong] check``."""
    return [line.split(":")[0] for line in message.splitlines() if line.startswith(("[FATAL] ", "[wrong] "))]
