"""What the pipeline page shows, read from the checkpoint table without Airflow: the shard
lineage, each shard's loaded-through instant and lag, the last passed preflight.

Two reads, whatever the shard count: the ledger's list of shards (one paginated Query) and the
preflight item. The rows each interval loaded come from the runs' XCom (``ui.view``), not from
the ranges: a Query a shard was most of a 1,000-shard page's time (docs/benchmarks.md).

Read only: every call here is a read method of a part of the store (``store.ledger``,
``store.preflight``), never the facade's forwarders, and nothing is written.
The Airflow side (``ui.pipelines``) adds the DAG runs, XCom and Doris.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from airflow_provider_kinesis_doris.core.model import BoundaryKind, ShardState, iso_utc
from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
from airflow_provider_kinesis_doris.core.stores.items import ShardCheckpoint


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
class StoreStatus:
    """Everything the page reads from the checkpoint table of one pipeline."""

    shards: list[ShardView]
    preflight_digest: str | None = None

    @property
    def max_lag_ms(self) -> int | None:
        lags = [shard.lag_ms for shard in self.shards if shard.lag_ms is not None and shard.state != ShardState.DRAINED.value]
        return max(lags, default=None)

    def as_dict(self) -> dict[str, Any]:
        return {
            "shards": [asdict(shard) for shard in self.shards],
            "preflight_digest": self.preflight_digest,
            "max_lag_ms": self.max_lag_ms,
        }


def read_store_status(store: CheckpointStore) -> StoreStatus:
    """The shards with their lineage, marks and lags, and the digest of the last passed preflight."""
    return StoreStatus(
        shards=shard_views(store.ledger.list_shard_checkpoints()),
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
