"""What the pipeline page shows, read from the checkpoint table without Airflow: the shard
lineage, each shard's loaded-through instant and lag, the rows each interval loaded.

Read only: every call here is a read method of a part of the store (``store.ledger``,
``store.ranges``, ``store.preflight``), never the facade's forwarders, and nothing is written.
The Airflow side (``ui.pipelines``) adds the DAG runs, XCom and Doris.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_provider_kinesis_doris.core.model import BoundaryKind, ShardState, iso_utc
from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
from airflow_provider_kinesis_doris.core.stores.items import ShardCheckpoint

READ_THREADS = 16
"""Shards' ranges are read one Query a shard, in parallel (boto3's clients are thread-safe). Still a
Query a shard: at 1,000 shards that is most of the page's time (docs/benchmarks.md, "The pipeline
page")."""


@dataclass(frozen=True)
class ShardView:
    """One shard as a person reads it: where it comes from, where it went, how far it is loaded."""

    shard_id: str
    parents: tuple[str, ...]
    children: tuple[str, ...]
    state: str
    loaded_through: str
    """An ISO instant, ``end of shard`` once its last record is loaded, ``-`` before any."""
    loaded_through_ms: int | None
    lag_ms: int | None


@dataclass
class IntervalCounts:
    """What the checkpoint table says one interval loaded, over every shard."""

    start_ms: int
    shards_loaded: int = 0
    records: int = 0
    rows_loaded: int = 0
    dead_lettered: int = 0


@dataclass
class StoreStatus:
    """Everything the page reads from the checkpoint table of one pipeline."""

    shards: list[ShardView]
    intervals: dict[int, IntervalCounts] = field(default_factory=dict)
    preflight_digest: str | None = None

    @property
    def rows_loaded(self) -> int:
        return sum(counts.rows_loaded for counts in self.intervals.values())

    @property
    def max_lag_ms(self) -> int | None:
        lags = [shard.lag_ms for shard in self.shards if shard.lag_ms is not None and shard.state != ShardState.DRAINED.value]
        return max(lags, default=None)

    def as_dict(self) -> dict[str, Any]:
        return {
            "shards": [asdict(shard) for shard in self.shards],
            "intervals": {str(start): asdict(counts) for start, counts in sorted(self.intervals.items())},
            "preflight_digest": self.preflight_digest,
            "rows_loaded": self.rows_loaded,
            "max_lag_ms": self.max_lag_ms,
        }


def read_store_status(store: CheckpointStore, recent_intervals: int) -> StoreStatus:
    """The shards, their lineage and the counts of each shard's ``recent_intervals`` latest ranges."""
    checkpoints = store.ledger.list_shard_checkpoints()
    shards = shard_views(checkpoints)
    with ThreadPoolExecutor(max_workers=READ_THREADS) as pool:
        per_shard = list(pool.map(lambda shard: store.ranges.recent_loaded_counts(shard.shard_id, recent_intervals), checkpoints))
    return StoreStatus(
        shards=shards,
        intervals=interval_counts(per_shard),
        preflight_digest=store.preflight.passed_preflight_digest(),
    )


def shard_views(checkpoints: Sequence[ShardCheckpoint]) -> list[ShardView]:
    """The shards with their children filled in (the store keeps only parents), oldest first."""
    children: dict[str, list[str]] = {}
    for checkpoint in checkpoints:
        for parent in checkpoint.parent_ids:
            children.setdefault(parent, []).append(checkpoint.shard_id)
    return [
        ShardView(
            shard_id=checkpoint.shard_id,
            parents=tuple(checkpoint.parent_ids),
            children=tuple(sorted(children.get(checkpoint.shard_id, ()))),
            state=checkpoint.state.value,
            loaded_through=_describe_mark(checkpoint),
            loaded_through_ms=checkpoint.high_water_mark.instant_ms if checkpoint.high_water_mark else None,
            # A drained shard has no lag: nothing of it is left to load.
            lag_ms=None if checkpoint.state is ShardState.DRAINED else checkpoint.last_lag_ms,
        )
        for checkpoint in sorted(checkpoints, key=lambda c: c.shard_id)
    ]


def _describe_mark(checkpoint: ShardCheckpoint) -> str:
    mark = checkpoint.high_water_mark
    if mark is None:
        return "-"
    if mark.kind is BoundaryKind.SHARD_END:
        return "end of shard"
    return iso_utc(mark.instant_ms)


def interval_counts(per_shard: Sequence[Mapping[int, Mapping[str, int]]]) -> dict[int, IntervalCounts]:
    """Interval start → the sum of the LOADED ranges' counts over the shards."""
    totals: dict[int, IntervalCounts] = {}
    for ranges in per_shard:
        for start_ms, counts in ranges.items():
            total = totals.setdefault(start_ms, IntervalCounts(start_ms))
            total.shards_loaded += 1
            total.records += counts.get("records", 0)
            total.rows_loaded += counts.get("rows_loaded", 0)
            total.dead_lettered += counts.get("dead_lettered", 0)
    return totals

