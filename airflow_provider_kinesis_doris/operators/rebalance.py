"""Operator that applies a reshard to the checkpoint store and re-balances shards over Spark
partitions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider_kinesis_doris.core.rebalance import rebalance
from airflow_provider_kinesis_doris.core.value_checks import check_whole_number
from airflow_provider_kinesis_doris.operators.pipeline_arguments import KinesisPipelineBaseOperator

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context


class KinesisShardRebalanceOperator(KinesisPipelineBaseOperator):
    """Register new shards with their parents, close and retire parents, and store a new
    shard → Spark partition assignment (``core.rebalance.rebalance``).

    The loader stays correct without this step (its planner reconciles the topology itself);
    this makes a reshard take effect before the next load and keeps the partitions even. Pushes
    ``RebalanceResult.summary()`` (version, assignment, registered, closed, drained, retired).

    :param stream_name: the Kinesis stream whose shards are spread. (templated)
    :param checkpoint_table: DynamoDB table where the loader keeps the topology. (templated)
    :param partitions: Spark partitions the loader spreads shards over.
    :param pipeline_id: the loader's pipeline id, whose topology this stores; default
        ``<stream_name>.<doris_table>``. (templated)
    :param doris_table: the loader's ``database.table``, when the default pipeline id is meant. (templated)
    :param aws_conn_id: AWS connection to list the shards and write the topology with. (templated)
    :param region_name: the stream's and the table's AWS region, if not the connection's. (templated)
    :param verify: TLS certificate verification (a bool or a CA bundle path), if not the
        connection's. (templated)
    :param botocore_config: ``botocore.config.Config`` arguments for the Kinesis and DynamoDB
        clients, in place of the connection's ``config_kwargs``. (templated)
    """

    ui_color = "#f5e6c8"

    def __init__(self, *, partitions: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.partitions = check_whole_number("partitions", partitions, minimum=1)

    def execute(self, context: Context) -> dict[str, Any]:
        pipeline_id = self.resolved_pipeline_id
        store = self.aws_hook.checkpoint_store(self.checkpoint_table, pipeline_id)
        result = rebalance(self.aws_hook.kinesis, store, self.stream_name, self.partitions)
        summary = result.summary()
        self.log.info("Pipeline %s topology version %d: %s", pipeline_id, result.version, summary)
        return summary
