"""Trigger that waits in the triggerer until a Kinesis stream is split or merged.

Each poll lists the shards and compares them with the topology stored in the checkpoint table
(``core.rebalance.observe_topology``). The boto3 calls block, so they run in a worker thread;
the hooks are built there too, from the connection id, because the trigger is rebuilt from its
JSON kwargs whenever a triggerer restarts.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
from airflow.providers.amazon.aws.hooks.kinesis import KinesisHook
from airflow.triggers.base import BaseTrigger, TriggerEvent
from botocore.exceptions import ClientError

from airflow_provider_kinesis_doris.core.stores.dynamodb import DynamoCheckpointStore
from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.core.rebalance import observe_topology
from airflow_provider_kinesis_doris.core.kinesis.topology import TopologyChange


def kinesis_client(aws_conn_id: str | None) -> Any:
    """A boto3 Kinesis client for the Airflow AWS connection ``aws_conn_id``."""
    return KinesisHook(aws_conn_id=aws_conn_id).conn


def checkpoint_store(aws_conn_id: str | None, table: str, pipeline_id: str) -> DynamoCheckpointStore:
    """The pipeline's checkpoint store on the DynamoDB table ``table`` of connection ``aws_conn_id``."""
    dynamodb = AwsBaseHook(aws_conn_id=aws_conn_id, client_type="dynamodb").conn
    return DynamoCheckpointStore(dynamodb, table, pipeline_id)


def check_topology(
    aws_conn_id: str | None, stream_name: str, checkpoint_table: str, pipeline_id: str
) -> TopologyChange | None:
    """One look at the stream (blocking): the change since the stored topology, or None on the
    first look (which stores the topology).

    :raises ConfigurationError: the stream or the checkpoint table does not exist.
    """
    store = checkpoint_store(aws_conn_id, checkpoint_table, pipeline_id)
    try:
        return observe_topology(kinesis_client(aws_conn_id), store, stream_name)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
            raise
        if error.operation_name == "ListShards":
            missing = f"Kinesis stream {stream_name!r} does not exist"
        else:
            missing = (
                f"DynamoDB checkpoint table {checkpoint_table!r} does not exist: the loader creates it on its "
                "first run (create_checkpoint_table=True); run the loader once before the watch, or create it"
            )
        raise ConfigurationError(f"{missing} (AWS connection {aws_conn_id!r})") from error


class KinesisReshardTrigger(BaseTrigger):
    """Fires once the stream's shards were split or merged since the stored topology.

    Event payloads: ``{"status": "success", "change": TopologyChange.to_dict()}`` or
    ``{"status": "error", "message": ...}``.

    :param stream_name: the Kinesis stream.
    :param checkpoint_table: DynamoDB table holding the pipeline's topology item.
    :param pipeline_id: the loader pipeline whose topology is compared.
    :param aws_conn_id: Airflow AWS connection (Kinesis and, via ``service_config``, DynamoDB).
    :param poll_interval: seconds between two looks.
    """

    def __init__(
        self,
        stream_name: str,
        checkpoint_table: str,
        pipeline_id: str,
        aws_conn_id: str | None = "aws_default",
        poll_interval: float = 60.0,
    ) -> None:
        super().__init__()
        if poll_interval <= 0:
            raise ValueError(f"poll_interval must be positive, got {poll_interval}")
        self.stream_name = stream_name
        self.checkpoint_table = checkpoint_table
        self.pipeline_id = pipeline_id
        self.aws_conn_id = aws_conn_id
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "stream_name": self.stream_name,
                "checkpoint_table": self.checkpoint_table,
                "pipeline_id": self.pipeline_id,
                "aws_conn_id": self.aws_conn_id,
                "poll_interval": self.poll_interval,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            try:
                change = await asyncio.to_thread(
                    check_topology, self.aws_conn_id, self.stream_name, self.checkpoint_table, self.pipeline_id
                )
            except Exception as exc:  # the task decides; the triggerer must not crash
                self.log.exception("Looking at the shards of stream %s failed", self.stream_name)
                yield TriggerEvent({"status": "error", "message": f"{type(exc).__name__}: {exc}"})
                return
            if change is not None and change.is_reshard:
                self.log.info("Stream %s was resharded: %s", self.stream_name, change.to_dict())
                yield TriggerEvent({"status": "success", "change": change.to_dict()})
                return
            await asyncio.sleep(self.poll_interval)


def loader_pipeline_id(stream_name: str, pipeline_id: str | None, doris_table: str | None) -> str:
    """The pipeline id the loader uses: ``pipeline_id`` if given, else the loader's default
    ``<stream>.<doris_table>`` (``KinesisToDorisOperator``).

    :raises ValueError: neither is given.
    """
    if pipeline_id:
        return pipeline_id
    if doris_table:
        return f"{stream_name}.{doris_table}"
    raise ValueError(
        f"Give pipeline_id or doris_table for stream {stream_name!r}: the topology is kept per pipeline"
    )
