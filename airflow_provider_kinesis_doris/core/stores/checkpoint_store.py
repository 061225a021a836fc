"""The checkpoint store: the pipeline state of one pipeline as the set of its parts, each owning
one concept, all on the pipeline's items (:class:`~.primitives.StoreItems`)."""

from __future__ import annotations

from typing import Generic, TypeVar

from airflow_provider_kinesis_doris.core.stores.chunk_log import ChunkLog
from airflow_provider_kinesis_doris.core.stores.high_water_marks import HighWaterMarks
from airflow_provider_kinesis_doris.core.stores.preflight import PreflightRecord
from airflow_provider_kinesis_doris.core.stores.primitives import StoreItems
from airflow_provider_kinesis_doris.core.stores.range_book import RangeBook
from airflow_provider_kinesis_doris.core.stores.shard_ledger import ShardLedger

ItemsT = TypeVar("ItemsT", bound=StoreItems)


class CheckpointStore(Generic[ItemsT]):
    """The pipeline state of one pipeline: its parts, each documented in its module. A caller
    uses the part it needs (``store.ledger.get_boundary(...)``), or takes that part alone.

    :param items: the pipeline's items, from a backend:
        :func:`~airflow_provider_kinesis_doris.core.stores.dynamodb.dynamo_store` and
        :func:`~airflow_provider_kinesis_doris.core.stores.memory.memory_store` build the store.
    """

    def __init__(self, items: ItemsT) -> None:
        self.items = items
        self.ledger = ShardLedger(items)
        """Shards, their cuts and the shard set."""
        self.ranges = RangeBook(items, self.ledger)
        """Ranges, the floor, the interval grid, adoptions, handovers and the prune horizon."""
        self.chunks = ChunkLog(items)
        """Chunks' intents and outcomes, their settled contents and the label canaries."""
        self.marks = HighWaterMarks(items, self.ledger, self.ranges)
        """How far each shard is loaded without a gap, and when it is drained."""
        self.preflight = PreflightRecord(items)
        """The settings that last passed the preflight."""

    @property
    def pipeline_id(self) -> str:
        return self.items.pipeline_id

    def of_pipeline(self, pipeline_id: str) -> CheckpointStore[StoreItems]:
        """The store of another pipeline in the same table (a handover reads and fences it)."""
        return CheckpointStore(self.items.of_pipeline(pipeline_id))
