"""Watch a Kinesis stream for splits and merges; on one, re-balance and signal the loader.

``watch_topology`` waits (deferred in the triggerer, or rescheduling) until the stream's shards
differ from the topology stored in the loader's checkpoint table; ``rebalance`` registers the
children, retires drained parents and stores a new shard → Spark partition assignment;
``signal_loader`` starts a run of ``kinesis_to_doris_example`` so the change is picked up now
instead of at the loader's next slot. The loader is correct without this DAG: it only makes a
reshard prompt and the partitions even. A window without a reshard ends in a skip (soft_fail).

Names come from the same environment variables as ``kinesis_to_doris_example``.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.providers.common.compat.sdk import DAG

from airflow_provider_kinesis_doris.operators.rebalance import KinesisShardRebalanceOperator
from airflow_provider_kinesis_doris.sensors.kinesis_reshard import KinesisReshardSensor

try:
    from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
except ImportError:  # Airflow 2.11 without the standard provider
    from airflow.operators.trigger_dagrun import TriggerDagRunOperator  # type: ignore[no-redef]

STREAM = os.environ.get("KD_EXAMPLE_STREAM", "events")
DORIS_TABLE = os.environ.get("KD_EXAMPLE_TABLE", "demo.events")
CHECKPOINT_TABLE = os.environ.get("KD_EXAMPLE_CHECKPOINT_TABLE", "kinesis_doris_checkpoints")
WINDOW = timedelta(minutes=int(os.environ.get("KD_RESHARD_WATCH_MINUTES", "30")))

with DAG(
    dag_id="kinesis_reshard_watch_example",
    description="Re-balance the Kinesis → Doris loader when the stream is split or merged",
    schedule=WINDOW,
    start_date=datetime.fromisoformat(os.environ.get("KD_EXAMPLE_START", "2026-01-01T00:00:00+00:00")),
    catchup=False,
    max_active_runs=1,
    tags=["kinesis", "doris", "example"],
) as dag:
    watch = KinesisReshardSensor(
        task_id="watch_topology",
        stream_name=STREAM,
        doris_table=DORIS_TABLE,
        checkpoint_table=CHECKPOINT_TABLE,
        poke_interval=int(os.environ.get("KD_RESHARD_POKE_SECONDS", "60")),
        timeout=max(WINDOW.total_seconds() - 60, 60),
        soft_fail=True,
    )
    balance = KinesisShardRebalanceOperator(
        task_id="rebalance",
        stream_name=STREAM,
        doris_table=DORIS_TABLE,
        checkpoint_table=CHECKPOINT_TABLE,
        partitions=int(os.environ.get("KD_EXAMPLE_PARALLELISM", "2")),
    )
    signal = TriggerDagRunOperator(task_id="signal_loader", trigger_dag_id="kinesis_to_doris_example")
    watch >> balance >> signal
