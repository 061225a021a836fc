"""Operator that applies a reshard to the checkpoint store and re-balances shards over Spark
partitions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import BaseOperator

from airflow_provider_kinesis_doris.core.rebalance import rebalance
from airflow_provider_kinesis_doris.core.value_checks import check_whole_number
from airflow_provider_kinesis_doris.hooks.kinesis_pipeline import KinesisPipelineHook
from airflow_provider_kinesis_doris.operators.pipeline_arguments import PipelineArgumentsMixin

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context


class KinesisShardRebalanceOperator(PipelineArgumentsMixin, BaseOperator):
    """Register new shards with their parents, close and retire parents, and store a new
    shard → Spark partition assignment (``core.rebalance.rebalance``).

    The loader stays correct without this step (its planner reconciles the topology itself);
    this makes a reshard take effect before the next load and keeps the partitions even. Pushes
    ``RebalanceResult.summary()`` (version, assignment, registered, closed, drained, retired).

    :param stream_name: the Kinesis stream.
    :param checkpoint_table: DynamoDB table of the loader's checkpoints.
    :param partitions: Spark partitions the loader spreads shards over.
    :param pipeline_id: the loader's pipeline id; default ``<stream_name>.<doris_table>``.
    :param doris_table: the loader's ``database.table``, to derive the default pipeline id.
    :param aws_conn_id: Airflow AWS connection (Kinesis and, via ``service_config``, DynamoDB).
    """

    template_fields = PipelineArgumentsMixin.template_fields
    ui_color = "#f5e6c8"

    def __init__(
        self,
        *,
        stream_name: str,
        checkpoint_table: str,
        partitions: int,
        pipeline_id: str | None = None,
        doris_table: str | None = None,
        aws_conn_id: str | None = KinesisPipelineHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            stream_name=stream_name, checkpoint_table=checkpoint_table, pipeline_id=pipeline_id,
            doris_table=doris_table, aws_conn_id=aws_conn_id, **kwargs,
        )  # fmt: skip
        self.partitions = check_whole_number("partitions", partitions, minimum=1)

    def execute(self, context: Context) -> dict[str, Any]:
        pipeline_id = self.resolved_pipeline_id
        store = self.aws_hook.checkpoint_store(self.checkpoint_table, pipeline_id)
        result = rebalance(self.aws_hook.kinesis, store, self.stream_name, self.partitions)
        summary = result.summary()
        self.log.info("Pipeline %s topology version %d: %s", pipeline_id, result.version, summary)
        return summary
