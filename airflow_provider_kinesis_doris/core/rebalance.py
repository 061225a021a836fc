"""Resharding: notice splits and merges, apply them to the store, and re-balance shards over Spark
partitions.

Nothing here is needed for correctness: the planner reconciles the topology itself on every run
(``docs/design.md``, invariant I5). Rebalancing makes a reshard prompt (children registered, drained
parents retired before the next load) and even (the shard → partition assignment follows where the
data goes).

Weights: a shard's share of the stream is estimated twice, by the width of its hash-key range
(where uniformly spread keys will go) and by what it carried in the last loaded intervals (where
they went). A closed shard takes no new writes, so its width counts as zero. The placement itself
is ``core.partitions``'s, which the loader follows with the stored assignment.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
from airflow_provider_kinesis_doris.core.stores.high_water_marks import HighWaterMarks
from airflow_provider_kinesis_doris.core.stores.range_book import RangeBook
from airflow_provider_kinesis_doris.core.stores.shard_ledger import ShardLedger
from airflow_provider_kinesis_doris.core.stores.items import ShardCheckpoint
from airflow_provider_kinesis_doris.core.retry import retry_on_conflict
from airflow_provider_kinesis_doris.core.errors import CheckpointConflict
from airflow_provider_kinesis_doris.core.model import BoundaryKind, ShardInfo, ShardState
from airflow_provider_kinesis_doris.core.partitions import Assignment, ShardLoad, assign_partitions, shard_weights
from airflow_provider_kinesis_doris.core.plan import reconcile_shards
from airflow_provider_kinesis_doris.core.kinesis.topology import TopologyChange, diff_topology, list_shards

log = logging.getLogger(__name__)

CARRIED_COUNT_KEYS = ("bytes", "records")
"""Range counts that measure what a shard carried, in order of preference."""
RECENT_INTERVALS = 6
"""How many of the latest loaded intervals measure recent traffic."""


# --- the sensor's check ---------------------------------------------------------------------------


def observe_topology(kinesis: Any, ledger: ShardLedger, stream_name: str) -> TopologyChange | None:
    """Compare the live shard set with the stored topology.

    The first look (nothing stored) stores the live set with an empty assignment and returns None:
    there is nothing to compare with yet. Otherwise nothing is written.

    :param kinesis: a boto3 Kinesis client.
    :param ledger: the pipeline's shards.
    :param stream_name: the stream.
    :return: the change since the stored topology (``is_reshard`` tells whether shards were split
        or merged), or None on the first look.
    """
    live = list_shards(kinesis, stream_name)
    stored = ledger.get_topology()
    if stored is None:
        try:
            ledger.save_topology([shard.shard_id for shard in live], {}, expected_version=None)
            log.info("first look at stream %s: stored %d shards", stream_name, len(live))
            return None
        except CheckpointConflict:
            stored = ledger.get_topology()  # someone else stored it first: compare with theirs
            assert stored is not None, "the topology item is never deleted"
    return diff_topology(stored.shard_ids, stored.version, live)


# --- weights --------------------------------------------------------------------------------------


def shard_loads_from_store(
    ledger: ShardLedger, ranges: RangeBook, *, listed_ids: Iterable[str] | None = None, recent_intervals: int = RECENT_INTERVALS
) -> list[ShardLoad]:
    """The loads of every stored shard that is not drained (and is listed, if ``listed_ids``).

    Traffic is summed over the ``recent_intervals`` latest interval starts that any shard loaded,
    so every shard is measured over the same intervals.
    """
    listed = set(listed_ids) if listed_ids is not None else None
    shards = [
        checkpoint
        for checkpoint in ledger.list_shard_checkpoints()
        if checkpoint.state is not ShardState.DRAINED and (listed is None or checkpoint.shard_id in listed)
    ]
    loaded = {shard.shard_id: ranges.recent_loaded_counts(shard.shard_id, recent_intervals) for shard in shards}
    recent = set(sorted({start for counts in loaded.values() for start in counts})[-recent_intervals:])
    return [
        ShardLoad(
            shard_id=shard.shard_id,
            parent_ids=shard.parent_ids,
            hash_width=_open_width(shard),
            carried=sum(_carried(counts) for start, counts in loaded[shard.shard_id].items() if start in recent),
        )
        for shard in shards
    ]


def weights_for_plan(ledger: ShardLedger, ranges: RangeBook, *, recent_intervals: int = RECENT_INTERVALS) -> dict[str, float]:
    """Per shard id, the weight ``core.partitions.group_ranges`` balances Spark partitions with
    (average 1.0, the weight it assumes for a shard it has no weight for).

    :param ledger: the pipeline's shards, reconciled with ListShards (the planner does).
    :param ranges: the pipeline's ranges, whose loaded counts measure traffic.
    :param recent_intervals: how many of the latest loaded intervals measure traffic.
    """
    return shard_weights(shard_loads_from_store(ledger, ranges, recent_intervals=recent_intervals))


def _open_width(shard: ShardCheckpoint) -> int:
    return shard.ending_hash_key - shard.starting_hash_key + 1 if shard.state is ShardState.OPEN else 0


def _carried(counts: Mapping[str, int]) -> int:
    return next((int(counts[key]) for key in CARRIED_COUNT_KEYS if key in counts), 0)


# --- applying a reshard to the store --------------------------------------------------------------


@dataclass(frozen=True)
class RebalanceResult:
    """What one rebalance did; :meth:`summary` is its XCom."""

    version: int
    assignment: Assignment
    registered: tuple[str, ...]
    closed: tuple[str, ...]
    drained: tuple[str, ...]
    retired: tuple[str, ...]

    def summary(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "assignment": dict(sorted(self.assignment.partition_of.items())),
            "partitions": [list(group) for group in self.assignment.groups],
            "partition_weights": [round(w, 4) for w in self.assignment.partition_weights()],
            "registered": list(self.registered),
            "closed": list(self.closed),
            "drained": list(self.drained),
            "retired": list(self.retired),
        }


def rebalance(
    kinesis: Any,
    store: CheckpointStore,
    stream_name: str,
    partitions: int,
    *,
    recent_intervals: int = RECENT_INTERVALS,
) -> RebalanceResult:
    """Apply the live topology to the store and save a new shard → partition assignment.

    Registers new shards with their parents, marks closed ones CLOSED (they stay CLOSED until a
    load reads them to their end), marks DRAINED the closed shards whose loaded run reaches their
    end, and retires drained parents whose children have started: they leave the assignment. No
    item is deleted; a drained shard's item is what keeps it from being read again.

    :param kinesis: a boto3 Kinesis client.
    :param store: the pipeline's checkpoint store.
    :param stream_name: the stream.
    :param partitions: Spark partitions to balance over.
    :param recent_intervals: how many of the latest loaded intervals measure traffic.
    :raises CheckpointConflict: the topology kept changing under concurrent rebalances.
    """
    listed = list_shards(kinesis, stream_name)
    before = {checkpoint.shard_id: checkpoint.state for checkpoint in store.ledger.list_shard_checkpoints()}
    reconciled = reconcile_shards(store, listed)
    drained = tuple(_mark_drained_where_done(store.marks, reconciled.values()))
    listed_ids = [shard.shard_id for shard in listed]
    loads = shard_loads_from_store(store.ledger, store.ranges, listed_ids=listed_ids, recent_intervals=recent_intervals)
    version, assignment = _save_assignment(store.ledger, listed_ids, loads, partitions)
    return RebalanceResult(
        version=version,
        assignment=assignment,
        registered=tuple(sorted(set(reconciled) - set(before))),
        closed=tuple(sorted(s for s, c in reconciled.items() if _newly_closed(before.get(s), c.state))),
        drained=drained,
        retired=tuple(retired_parents(store.ledger, listed)),
    )


def _newly_closed(before: ShardState | None, now: ShardState) -> bool:
    return now is ShardState.CLOSED and before in (None, ShardState.OPEN)


def _mark_drained_where_done(marks: HighWaterMarks, checkpoints: Iterable[ShardCheckpoint]) -> Iterable[str]:
    """CLOSED shards whose loaded run reaches SHARD_END: the commit marks them when it sees the
    end, but a parent whose last range was loaded before an earlier one is marked here."""
    for checkpoint in checkpoints:
        mark = checkpoint.high_water_mark
        if checkpoint.state is ShardState.CLOSED and mark is not None and mark.kind is BoundaryKind.SHARD_END:
            try:
                marks.mark_drained(checkpoint.shard_id, expected_counter=checkpoint.lease_counter)
            except CheckpointConflict:
                continue  # a concurrent commit updated it; it retires it itself or next time
            yield checkpoint.shard_id


def retired_parents(ledger: ShardLedger, listed: Sequence[ShardInfo]) -> list[str]:
    """Drained shards every one of whose listed children has loaded something (KCL's lease
    cleanup rule): nothing will ever need them again."""
    children: dict[str, list[str]] = {}
    for shard in listed:
        for parent in shard.parent_ids:
            children.setdefault(parent, []).append(shard.shard_id)
    retired = []
    for parent, kids in sorted(children.items()):
        checkpoint = ledger.get_shard(parent)
        if checkpoint is None or checkpoint.state is not ShardState.DRAINED:
            continue
        kid_checkpoints = [ledger.get_shard(kid) for kid in kids]
        if all(kid is not None and kid.high_water_mark is not None for kid in kid_checkpoints):
            retired.append(parent)
    return retired


def _save_assignment(
    ledger: ShardLedger, listed_ids: Sequence[str], loads: Sequence[ShardLoad], partitions: int
) -> tuple[int, Assignment]:
    def save_once() -> tuple[int, Assignment]:
        stored = ledger.get_topology()
        assignment = assign_partitions(loads, partitions, stored.assignment if stored else None)
        saved = ledger.save_topology(listed_ids, assignment.partition_of, expected_version=stored.version if stored else None)
        log.info("topology version %d: %s", saved.version, assignment.partition_of)
        return saved.version, assignment

    return retry_on_conflict(save_once, f"the topology of pipeline {ledger.pipeline_id}")
