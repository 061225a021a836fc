"""Sensor that succeeds when a Kinesis stream was split or merged since the stored topology."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowException, BaseSensorOperator, PokeReturnValue, conf

from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.core.value_checks import check_flag
from airflow_provider_kinesis_doris.operators.pipeline_arguments import KinesisPipelineBaseOperator
from airflow_provider_kinesis_doris.triggers.kinesis_reshard import KinesisReshardTrigger

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context


class KinesisReshardSensor(KinesisPipelineBaseOperator, BaseSensorOperator):
    """Wait until the shards of ``stream_name`` were split or merged, and push what changed.

    The live shard set (ListShards, every page) is compared with the topology the pipeline keeps
    in its checkpoint table. The first look, with nothing stored, stores the live set and waits.
    Nothing else is written: the rebalance step (``KinesisShardRebalanceOperator``) stores the new
    topology, so the sensor fires once per change.

    The XCom value: ``{"stored_version", "closed": [shard ids], "appeared": [{"shard_id",
    "parent_ids", "starting_hash_key", "ending_hash_key", ...}], "expired": [shard ids]}``.

    Waits in the triggerer when ``deferrable`` (the default follows
    ``[operators] default_deferrable``), otherwise in ``reschedule`` mode unless ``mode`` is given.
    ``timeout`` and ``soft_fail`` behave as on every Airflow sensor.

    :param stream_name: the Kinesis stream. (templated)
    :param checkpoint_table: DynamoDB table of the loader's checkpoints. (templated)
    :param pipeline_id: the loader's pipeline id; default ``<stream_name>.<doris_table>``. (templated)
    :param doris_table: the loader's ``database.table``, to derive the default pipeline id. (templated)
    :param aws_conn_id: Airflow AWS connection (Kinesis and, via ``service_config``, DynamoDB). (templated)
    :param region_name: AWS region; the connection's by default. (templated)
    :param verify: whether to verify TLS certificates, or a CA bundle path; the connection's by
        default. (templated)
    :param botocore_config: ``botocore.config.Config`` arguments, instead of the connection's
        ``config_kwargs``, as on the amazon provider's sensors. (templated)
    :param deferrable: wait in the triggerer instead of a worker slot.
    """

    ui_color = "#f5e6c8"

    def __init__(
        self, *, deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False), **kwargs: Any
    ) -> None:
        kwargs.setdefault("mode", "reschedule")
        super().__init__(**kwargs)
        self.deferrable = deferrable
        self.check_arguments({"deferrable": check_flag})
        if deferrable and not self.poke_interval > 0:
            # Airflow allows 0 (poke without pause); the triggerer's loop would fail on it at run time.
            raise ConfigurationError(
                f"poke_interval must be more than 0 seconds for a deferrable sensor (the triggerer looks "
                f"at the stream every poke_interval), got {self.poke_interval!r}: give poke_interval=60, "
                f"or deferrable=False"
            )

    def poke(self, context: Context) -> PokeReturnValue:
        pipeline_id = self.resolved_pipeline_id
        change = self.aws_hook.check_topology(self.stream_name, self.checkpoint_table, pipeline_id)
        if change is None:
            self.log.info("First look at stream %s: stored the topology of %s", self.stream_name, pipeline_id)
            return PokeReturnValue(is_done=False)
        if not change.is_reshard:
            version = change.stored_version
            self.log.info("Stream %s: no split or merge since topology version %d", self.stream_name, version)
            return PokeReturnValue(is_done=False)
        self.log.info("Stream %s was resharded: %s", self.stream_name, change.to_dict())
        return PokeReturnValue(is_done=True, xcom_value=change.to_dict())

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        first = self.poke(context)
        if first.is_done:
            return first.xcom_value
        self.defer(
            trigger=KinesisReshardTrigger(
                stream_name=self.stream_name,
                checkpoint_table=self.checkpoint_table,
                pipeline_id=self.resolved_pipeline_id,
                aws_conn_id=self.aws_conn_id,
                poll_interval=self.poke_interval,
                region_name=self.region_name,
                verify=self.verify,
                botocore_config=self.botocore_config,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """Resumed by :class:`KinesisReshardTrigger`; returns the change (the XCom value)."""
        if not event or event.get("status") != "success":
            message = (event or {}).get("message", "no event")
            raise AirflowException(f"Watching the shards of stream {self.stream_name} failed: {message}")
        return event["change"]
