"""The checkpoint store: the whole pipeline-state API, one facade over the parts that each own
one concept, all built on the store's items (:class:`~.primitives.StoreItems`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from airflow_provider_kinesis_doris.core.model import Boundary, ChunkLimits, Position, ShardInfo, ShardRange
from airflow_provider_kinesis_doris.core.stores.chunk_log import ChunkLog
from airflow_provider_kinesis_doris.core.stores.high_water_marks import HighWaterMarks
from airflow_provider_kinesis_doris.core.stores.items import (
    ChunkRecord,
    Floor,
    LabelCanary,
    ShardCheckpoint,
    TopologyRecord,
    wall_clock_ms,
)
from airflow_provider_kinesis_doris.core.stores.preflight import PreflightRecord
from airflow_provider_kinesis_doris.core.stores.primitives import StoreItems
from airflow_provider_kinesis_doris.core.stores.range_book import RangeBook
from airflow_provider_kinesis_doris.core.stores.shard_ledger import ShardLedger


class CheckpointStore(StoreItems):
    """The pipeline state of one pipeline: its methods are those of the parts, each documented
    there. A subclass provides the items (:class:`~.primitives.StoreItems`):
    :class:`~airflow_provider_kinesis_doris.core.stores.dynamodb.DynamoCheckpointStore` and
    :class:`~airflow_provider_kinesis_doris.core.stores.memory.MemoryCheckpointStore`.

    :param pipeline_id: the partition this store reads and writes; nothing else is touched.
    :param clock: epoch milliseconds for ``updated_ms`` attributes.
    """

    def __init__(self, pipeline_id: str, *, clock: Callable[[], int] = wall_clock_ms) -> None:
        if not pipeline_id:
            raise ValueError("pipeline_id must not be empty")
        self.pipeline_id = pipeline_id
        self._clock = clock
        self.ledger = ShardLedger(self)
        self.ranges = RangeBook(self, self.ledger)
        self.chunks = ChunkLog(self)
        self.marks = HighWaterMarks(self, self.ledger, self.ranges)
        self.preflight = PreflightRecord(self)

    def of_pipeline(self, pipeline_id: str) -> CheckpointStore:
        """The store of another pipeline in the same table (a handover reads and fences it)."""
        raise NotImplementedError

    # shards, their cuts and the shard set (ShardLedger) ------------------------------------

    def get_boundary(self, shard_id: str, instant_ms: int) -> Boundary | None:
        return self.ledger.get_boundary(shard_id, instant_ms)

    def prefetch_boundaries(self, shard_ids: Iterable[str], instant_ms: int) -> set[str]:
        return self.ledger.prefetch_boundaries(shard_ids, instant_ms)

    def read_boundaries(self, shard_ids: Iterable[str], instant_ms: int) -> dict[str, Boundary]:
        return self.ledger.read_boundaries(shard_ids, instant_ms)

    def remember_boundary(self, boundary: Boundary) -> None:
        self.ledger.remember_boundary(boundary)

    def put_boundary(self, boundary: Boundary) -> Boundary:
        return self.ledger.put_boundary(boundary)

    def resolve_pending(self, proposed: Boundary) -> Boundary:
        return self.ledger.resolve_pending(proposed)

    def boundaries_for_shard(self, shard_id: str) -> list[Boundary]:
        return self.ledger.boundaries_for_shard(shard_id)

    def boundary_at_or_before(self, shard_id: str, instant_ms: int) -> Boundary | None:
        return self.ledger.boundary_at_or_before(shard_id, instant_ms)

    def get_shard(self, shard_id: str) -> ShardCheckpoint | None:
        return self.ledger.get_shard(shard_id)

    def list_shard_checkpoints(self) -> list[ShardCheckpoint]:
        return self.ledger.list_shard_checkpoints()

    def register_shard(self, info: ShardInfo) -> ShardCheckpoint:
        return self.ledger.register_shard(info)

    def mark_closed(self, shard_id: str) -> ShardCheckpoint:
        return self.ledger.mark_closed(shard_id)

    def get_topology(self) -> TopologyRecord | None:
        return self.ledger.get_topology()

    def save_topology(
        self, shard_ids: Iterable[str], assignment: Mapping[str, int], *, expected_version: int | None
    ) -> TopologyRecord:
        return self.ledger.save_topology(shard_ids, assignment, expected_version=expected_version)

    # ranges, the floor, the interval grid, adoptions, the prune horizon (RangeBook) ---------

    def get_range(self, shard_id: str, interval_start_ms: int) -> ShardRange | None:
        return self.ranges.get_range(shard_id, interval_start_ms)

    def ranges_at(self, shard_ids: Sequence[str], interval_start_ms: int) -> dict[str, ShardRange]:
        return self.ranges.ranges_at(shard_ids, interval_start_ms)

    def ranges_for_shard(self, shard_id: str) -> list[ShardRange]:
        return self.ranges.ranges_for_shard(shard_id)

    def earliest_range(self, shard_id: str) -> ShardRange | None:
        return self.ranges.earliest_range(shard_id)

    def interval_before(self, shard_id: str, interval_start_ms: int) -> tuple[int, int] | None:
        return self.ranges.interval_before(shard_id, interval_start_ms)

    def create_range(self, shard_range: ShardRange, *, with_end: bool = False) -> ShardRange:
        return self.ranges.create_range(shard_range, with_end=with_end)

    def mark_range_loaded(
        self, shard_id: str, interval_start_ms: int, counts: Mapping[str, int] | None = None
    ) -> ShardRange:
        return self.ranges.mark_range_loaded(shard_id, interval_start_ms, counts)

    def settle_chunk_limits(self, shard_id: str, interval_start_ms: int, proposed: ChunkLimits) -> ChunkLimits:
        return self.ranges.settle_chunk_limits(shard_id, interval_start_ms, proposed)

    def recent_loaded_counts(self, shard_id: str, limit: int) -> dict[int, dict[str, int]]:
        return self.ranges.recent_loaded_counts(shard_id, limit)

    def range_planned_ms(self, shard_id: str, interval_start_ms: int) -> int | None:
        return self.ranges.range_planned_ms(shard_id, interval_start_ms)

    def range_counts(self, shard_id: str, interval_start_ms: int) -> dict[str, int]:
        return self.ranges.range_counts(shard_id, interval_start_ms)

    def settle_floor(self, start_ms: int, end_ms: int) -> Floor:
        return self.ranges.settle_floor(start_ms, end_ms)

    def get_floor(self) -> Floor | None:
        return self.ranges.get_floor()

    def settle_initial_position(self, position: str) -> str:
        return self.ranges.settle_initial_position(position)

    def register_interval(self, start_ms: int, end_ms: int, *, register: bool = True) -> tuple[int, int] | None:
        return self.ranges.register_interval(start_ms, end_ms, register=register)

    def latest_interval_start(self) -> int | None:
        return self.ranges.latest_interval_start()

    def intervals_before(self, start_ms: int, *, with_floor: bool = False) -> list[tuple[int, int]]:
        return self.ranges.intervals_before(start_ms, with_floor=with_floor)

    def intervals_between(self, start_ms: int, end_ms: int) -> list[tuple[int, int]]:
        return self.ranges.intervals_between(start_ms, end_ms)

    def advance_gapless(self, start_ms: int) -> None:
        self.ranges.advance_gapless(start_ms)

    def settle_adopted(
        self, start_ms: int, proposed: Sequence[tuple[int, int]]
    ) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        return self.ranges.settle_adopted(start_ms, proposed)

    def mark_adopted_loaded(self, start_ms: int, interval: tuple[int, int]) -> None:
        self.ranges.mark_adopted_loaded(start_ms, interval)

    def prune_grid(self, horizon_ms: int) -> int:
        return self.ranges.prune_grid(horizon_ms)

    def prune_horizon(self) -> int | None:
        return self.ranges.prune_horizon()

    def raise_prune_horizon(self, horizon_ms: int) -> bool:
        return self.ranges.raise_prune_horizon(horizon_ms)

    # chunks and label canaries (ChunkLog) ------------------------------------------------

    def put_chunk_intent(
        self, label: str, shard_id: str, first: Position, last: Position, interval_start_ms: int, *, attempt: str
    ) -> bool:
        return self.chunks.put_chunk_intent(label, shard_id, first, last, interval_start_ms, attempt=attempt)

    def put_chunk_intent_with_content(
        self, label: str, shard_id: str, first: Position, last: Position, interval_start_ms: int, content: str,
        *, attempt: str,
    ) -> bool:  # fmt: skip
        return self.chunks.put_chunk_intent_with_content(
            label, shard_id, first, last, interval_start_ms, content, attempt=attempt
        )

    def renew_chunk_intent(self, read: ChunkRecord, attempt: str) -> bool:
        return self.chunks.renew_chunk_intent(read, attempt)

    def record_chunk_outcome(
        self,
        label: str,
        state: str,
        txn_id: str | None = None,
        *,
        shard_id: str,
        interval_start_ms: int,
        rows_loaded: int = 0,
        rows_filtered: int = 0,
        owner: str | None = None,
    ) -> ChunkRecord:
        return self.chunks.record_chunk_outcome(
            label, state, txn_id, shard_id=shard_id, interval_start_ms=interval_start_ms, rows_loaded=rows_loaded,
            rows_filtered=rows_filtered, owner=owner,
        )

    def get_chunk(self, label: str, shard_id: str, interval_start_ms: int) -> ChunkRecord | None:
        return self.chunks.get_chunk(label, shard_id, interval_start_ms)

    def chunks_for_range(
        self, shard_id: str, interval_start_ms: int, *, keyed_by_range: bool = False
    ) -> list[ChunkRecord]:
        return self.chunks.chunks_for_range(shard_id, interval_start_ms, keyed_by_range=keyed_by_range)

    def settle_chunk_content(self, shard_id: str, interval_start_ms: int, first: Position, content: str) -> str:
        return self.chunks.settle_chunk_content(shard_id, interval_start_ms, first, content)

    def amend_chunk_content(
        self, shard_id: str, interval_start_ms: int, first: Position, settled: str, amended: str
    ) -> str:
        return self.chunks.amend_chunk_content(shard_id, interval_start_ms, first, settled, amended)

    def chunk_content(self, shard_id: str, interval_start_ms: int, first: Position) -> str | None:
        return self.chunks.chunk_content(shard_id, interval_start_ms, first)

    def chunk_contents_for_range(self, shard_id: str, interval_start_ms: int) -> list[str]:
        return self.chunks.chunk_contents_for_range(shard_id, interval_start_ms)

    def label_canaries(self) -> list[LabelCanary]:
        return self.chunks.label_canaries()

    def replace_label_canaries(self, stored: Sequence[LabelCanary], canaries: Sequence[LabelCanary]) -> bool:
        return self.chunks.replace_label_canaries(stored, canaries)

    # high-water marks and pruning (HighWaterMarks) ----------------------------------------

    def advance_high_water_mark(
        self,
        shard_id: str,
        *,
        expected_counter: int | None = None,
        last_lag_ms: int | None = None,
        known: ShardCheckpoint | None = None,
        last_interval_start_ms: int | None = None,
    ) -> ShardCheckpoint:
        return self.marks.advance_high_water_mark(
            shard_id, expected_counter=expected_counter, last_lag_ms=last_lag_ms, known=known,
            last_interval_start_ms=last_interval_start_ms,
        )

    def rewind_high_water_mark(
        self, shard_id: str, before_ms: int, *, fence: bool = False, known: ShardCheckpoint | None = None
    ) -> ShardCheckpoint:
        return self.marks.rewind_high_water_mark(shard_id, before_ms, fence=fence, known=known)

    def loaded_through(
        self, shard_id: str, since: Boundary | None = None, last_interval_start_ms: int | None = None
    ) -> Boundary | None:
        return self.marks.loaded_through(shard_id, since, last_interval_start_ms)

    def mark_drained(self, shard_id: str, *, expected_counter: int | None = None) -> ShardCheckpoint:
        return self.marks.mark_drained(shard_id, expected_counter=expected_counter)

    def prune_shard(self, shard: ShardCheckpoint, horizon_ms: int) -> int:
        return self.marks.prune_shard(shard, horizon_ms)

    # the settings that passed the preflight (PreflightRecord) ------------------------------

    def passed_preflight_digest(self) -> str | None:
        return self.preflight.passed_preflight_digest()

    def record_passed_preflight(self, digest: str) -> None:
        self.preflight.record_passed_preflight(digest)
