"""Trigger that waits in the triggerer until a Kinesis stream is split or merged.

Each poll lists the shards and compares them with the topology stored in the checkpoint table
(``KinesisPipelineHook.check_topology``). The boto3 calls block, so they run in a worker thread;
the hook is built there too, from the connection id and the client settings the sensor was given
(region, TLS verification, botocore options, as the amazon provider's ``SqsSensorTrigger`` does),
because the trigger is rebuilt from its JSON kwargs whenever a triggerer restarts.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_kinesis_doris.hooks.kinesis_pipeline import KinesisPipelineHook

if TYPE_CHECKING:
    from airflow_provider_kinesis_doris.core.kinesis.topology import TopologyChange


class KinesisReshardTrigger(BaseTrigger):
    """Fires once the stream's shards were split or merged since the stored topology.

    Event payloads: ``{"status": "success", "change": TopologyChange.to_dict()}`` or
    ``{"status": "error", "message": ...}``.

    :param stream_name: the Kinesis stream.
    :param checkpoint_table: DynamoDB table holding the pipeline's topology item.
    :param pipeline_id: the loader pipeline whose topology is compared.
    :param aws_conn_id: Airflow AWS connection (Kinesis and, via ``service_config``, DynamoDB).
    :param poll_interval: seconds between two looks, more than 0 (the sensor checks its
        ``poke_interval`` when the DAG is parsed).
    :param region_name: AWS region; the connection's by default.
    :param verify: whether to verify TLS certificates, or a CA bundle path; the connection's by default.
    :param botocore_config: ``botocore.config.Config`` arguments, instead of the connection's
        ``config_kwargs``.
    """

    def __init__(
        self,
        stream_name: str,
        checkpoint_table: str,
        pipeline_id: str,
        aws_conn_id: str | None = KinesisPipelineHook.default_conn_name,
        poll_interval: float = 60.0,
        region_name: str | None = None,
        verify: bool | str | None = None,
        botocore_config: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.stream_name = stream_name
        self.checkpoint_table = checkpoint_table
        self.pipeline_id = pipeline_id
        self.aws_conn_id = aws_conn_id
        self.poll_interval = poll_interval
        self.region_name = region_name
        self.verify = verify
        self.botocore_config = botocore_config

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "stream_name": self.stream_name,
                "checkpoint_table": self.checkpoint_table,
                "pipeline_id": self.pipeline_id,
                "aws_conn_id": self.aws_conn_id,
                "poll_interval": self.poll_interval,
                "region_name": self.region_name,
                "verify": self.verify,
                "botocore_config": self.botocore_config,
            },
        )

    def hook(self) -> KinesisPipelineHook:
        """A new hook from the connection id and client settings (called in the worker thread, once per look)."""
        return KinesisPipelineHook(
            aws_conn_id=self.aws_conn_id, region_name=self.region_name, verify=self.verify, config=self.botocore_config
        )

    def _look(self) -> TopologyChange | None:
        return self.hook().check_topology(self.stream_name, self.checkpoint_table, self.pipeline_id)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            try:
                change = await asyncio.to_thread(self._look)
            except Exception as exc:  # the task decides; the triggerer must not crash
                self.log.exception("Looking at the shards of stream %s failed", self.stream_name)
                yield TriggerEvent({"status": "error", "message": f"{type(exc).__name__}: {exc}"})
                return
            if change is not None and change.is_reshard:
                self.log.info("Stream %s was resharded: %s", self.stream_name, change.to_dict())
                yield TriggerEvent({"status": "success", "change": change.to_dict()})
                return
            await asyncio.sleep(self.poll_interval)

