"""Resharding: notice splits and merges, apply them to the store, and re-balance shards over Spark
partitions.

Nothing here is needed for correctness: the planner reconciles the topology itself on every run
(DESIGN.md §6, invariant I5). Rebalancing makes a reshard prompt (children registered, drained
parents retired before the next load) and even (the shard → partition assignment follows where the
data goes).

Weights: a shard's share of the stream is estimated twice, by the width of its hash-key range
(where uniformly spread keys will go) and by what it carried in the last loaded intervals (where
they went); the weight is the mean of both shares, scaled so the average shard weighs 1. A closed
shard takes no new writes, so its width counts as zero. The assignment keeps a lineage (a closed
parent and its children) in one partition, parents first, and keeps every unchanged lineage where
it was as long as the partitions stay balanced within one lineage's weight.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_kinesis_doris.core.checkpoints import CheckpointStore, ShardCheckpoint
from airflow_provider_kinesis_doris.core.errors import CheckpointConflict, ConfigurationError
from airflow_provider_kinesis_doris.core.model import BoundaryKind, ShardInfo, ShardState
from airflow_provider_kinesis_doris.core.planner import reconcile_shards
from airflow_provider_kinesis_doris.core.topology import TopologyChange, diff_topology, list_shards

log = logging.getLogger(__name__)

CARRIED_COUNT_KEYS = ("bytes", "records")
"""Range counts that measure what a shard carried, in order of preference."""
RECENT_INTERVALS = 6
"""How many of the latest loaded intervals measure recent traffic."""
_SAVE_ATTEMPTS = 3


# --- the sensor's check ---------------------------------------------------------------------------


def observe_topology(kinesis: Any, store: CheckpointStore, stream_name: str) -> TopologyChange | None:
    """Compare the live shard set with the stored topology.

    The first look (nothing stored) stores the live set with an empty assignment and returns None:
    there is nothing to compare with yet. Otherwise nothing is written.

    :param kinesis: a boto3 Kinesis client.
    :param store: the pipeline's checkpoint store.
    :param stream_name: the stream.
    :return: the change since the stored topology (``is_reshard`` tells whether shards were split
        or merged), or None on the first look.
    """
    live = list_shards(kinesis, stream_name)
    stored = store.get_topology()
    if stored is None:
        try:
            store.save_topology([shard.shard_id for shard in live], {}, expected_version=None)
            log.info("first look at stream %s: stored %d shards", stream_name, len(live))
            return None
        except CheckpointConflict:
            stored = store.get_topology()  # someone else stored it first: compare with theirs
            assert stored is not None, "the topology item is never deleted"
    return diff_topology(stored.shard_ids, stored.version, live)


# --- weights --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ShardLoad:
    """What the balancer knows of one shard that still has records to read.

    :param hash_width: width of its hash-key range; 0 for a closed shard (it takes no writes).
    :param carried: bytes (or records) it carried in the recent loaded intervals.
    """

    shard_id: str
    parent_ids: tuple[str, ...] = ()
    hash_width: int = 0
    carried: int = 0


def shard_weights(loads: Sequence[ShardLoad]) -> dict[str, float]:
    """Weight per shard: mean of its hash-width share and its traffic share, times the shard
    count (so the average shard weighs 1). A measure that is zero for every shard is left out."""
    total_width = sum(load.hash_width for load in loads)
    total_carried = sum(load.carried for load in loads)
    candidates = ((total_width, "hash_width"), (total_carried, "carried"))
    measures = [(total, attribute) for total, attribute in candidates if total]
    if not measures:
        return {load.shard_id: 1.0 for load in loads}
    count = len(loads)
    return {
        load.shard_id: count * sum(getattr(load, name) / total for total, name in measures) / len(measures)
        for load in loads
    }


def shard_loads_from_store(
    store: CheckpointStore, *, listed_ids: Iterable[str] | None = None, recent_intervals: int = RECENT_INTERVALS
) -> list[ShardLoad]:
    """The loads of every stored shard that is not drained (and is listed, if ``listed_ids``).

    Traffic is summed over the ``recent_intervals`` latest interval starts that any shard loaded,
    so every shard is measured over the same intervals.
    """
    listed = set(listed_ids) if listed_ids is not None else None
    shards = [
        checkpoint
        for checkpoint in store.list_shard_checkpoints()
        if checkpoint.state is not ShardState.DRAINED and (listed is None or checkpoint.shard_id in listed)
    ]
    loaded = {shard.shard_id: store.recent_loaded_counts(shard.shard_id, recent_intervals) for shard in shards}
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


def weights_for_plan(store: CheckpointStore, *, recent_intervals: int = RECENT_INTERVALS) -> dict[str, float]:
    """Per shard id, the weight ``core.job.balance_groups(weights=...)`` balances Spark partitions
    with (average 1.0, the weight balance_groups assumes for a shard it has no weight for).

    :param store: the pipeline's checkpoint store, reconciled with ListShards (the planner does).
    :param recent_intervals: how many of the latest loaded intervals measure traffic.
    """
    return shard_weights(shard_loads_from_store(store, recent_intervals=recent_intervals))


def _open_width(shard: ShardCheckpoint) -> int:
    return shard.ending_hash_key - shard.starting_hash_key + 1 if shard.state is ShardState.OPEN else 0


def _carried(counts: Mapping[str, int]) -> int:
    return next((int(counts[key]) for key in CARRIED_COUNT_KEYS if key in counts), 0)


# --- the assignment -------------------------------------------------------------------------------


def lineage_units(loads: Sequence[ShardLoad]) -> list[tuple[str, ...]]:
    """Shards connected by parent links (among ``loads``), each unit parents first, units by id."""
    ids = {load.shard_id for load in loads}
    root = {shard_id: shard_id for shard_id in ids}

    def find(shard_id: str) -> str:
        while root[shard_id] != shard_id:
            shard_id = root[shard_id]
        return shard_id

    for load in loads:
        for parent in load.parent_ids:
            if parent in ids:
                root[find(load.shard_id)] = find(parent)
    depth = _lineage_depths(loads)
    units: dict[str, list[str]] = {}
    for shard_id in ids:
        units.setdefault(find(shard_id), []).append(shard_id)
    ordered = (tuple(sorted(members, key=lambda s: (depth[s], s))) for members in units.values())
    return sorted(ordered)


def _lineage_depths(loads: Sequence[ShardLoad]) -> dict[str, int]:
    """0 for a shard without a parent among ``loads``, else one more than its deepest parent."""
    parents = {load.shard_id: [p for p in load.parent_ids if p != load.shard_id] for load in loads}
    depth: dict[str, int] = {}

    def depth_of(shard_id: str, seen: frozenset[str]) -> int:
        if shard_id not in depth:
            if shard_id in seen:
                raise ConfigurationError(f"Shard lineage has a cycle through {shard_id}")
            known = [p for p in parents[shard_id] if p in parents]
            depth[shard_id] = 1 + max((depth_of(p, seen | {shard_id}) for p in known), default=-1)
        return depth[shard_id]

    for shard_id in parents:
        depth_of(shard_id, frozenset())
    return depth


@dataclass(frozen=True)
class Assignment:
    """Shard → Spark partition, and the order of shards inside each partition.

    :param partition_of: shard id → partition index.
    :param groups: per partition, its shards parents first.
    :param weights: the weights the assignment balanced.
    """

    partition_of: dict[str, int]
    groups: tuple[tuple[str, ...], ...]
    weights: dict[str, float] = field(repr=False)

    def partition_weights(self) -> list[float]:
        return [sum(self.weights[shard_id] for shard_id in group) for group in self.groups]


def assign_partitions(
    loads: Sequence[ShardLoad], partitions: int, previous: Mapping[str, int] | None = None
) -> Assignment:
    """Balance shards over ``partitions`` Spark partitions.

    A lineage keeps its previous partition if all its shards had the same one and nothing new
    joined it; the other lineages go heaviest first onto the lightest partition. If the result
    is uneven by more than the heaviest lineage, everything is placed afresh. The result is a
    pure function of the arguments.

    :param loads: the shards that still have records to read.
    :param partitions: how many Spark partitions (at least 1).
    :param previous: the stored assignment, if any.
    :raises ConfigurationError: ``partitions`` is below 1.
    """
    if partitions < 1:
        raise ConfigurationError(f"partitions must be at least 1, got {partitions}")
    weights = shard_weights(loads)
    units = lineage_units(loads)
    unit_weight = {unit: sum(weights[shard_id] for shard_id in unit) for unit in units}
    kept_or_none = {unit: _kept_partition(unit, previous or {}, partitions) for unit in units}
    kept = {unit: part for unit, part in kept_or_none.items() if part is not None}
    members = _place(units, unit_weight, partitions, kept)
    heaviest = max(unit_weight.values(), default=0.0)
    if kept and _spread(members, unit_weight) > heaviest:
        members = _place(units, unit_weight, partitions, {})
    groups = tuple(tuple(shard_id for unit in sorted(group) for shard_id in unit) for group in members)
    partition_of = {shard_id: index for index, group in enumerate(groups) for shard_id in group}
    return Assignment(partition_of, groups, weights)


def _kept_partition(unit: tuple[str, ...], previous: Mapping[str, int], partitions: int) -> int | None:
    before = {previous.get(shard_id) for shard_id in unit}
    if len(before) != 1:
        return None
    (part,) = before
    return part if part is not None and 0 <= part < partitions else None


def _place(
    units: Sequence[tuple[str, ...]], weight: Mapping[tuple[str, ...], float], partitions: int,
    kept: Mapping[tuple[str, ...], int],
) -> list[list[tuple[str, ...]]]:  # fmt: skip
    members: list[list[tuple[str, ...]]] = [[] for _ in range(partitions)]
    loads = [0.0] * partitions
    for unit, part in kept.items():
        members[part].append(unit)
        loads[part] += weight[unit]
    heap = [(load, part) for part, load in enumerate(loads)]
    heapq.heapify(heap)
    for unit in sorted((u for u in units if u not in kept), key=lambda u: (-weight[u], u)):
        load, part = heapq.heappop(heap)
        members[part].append(unit)
        heapq.heappush(heap, (load + weight[unit], part))
    return members


def _spread(members: Sequence[Sequence[tuple[str, ...]]], weight: Mapping[tuple[str, ...], float]) -> float:
    loads = [sum(weight[unit] for unit in group) for group in members]
    return max(loads) - min(loads)


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
    before = {checkpoint.shard_id: checkpoint.state for checkpoint in store.list_shard_checkpoints()}
    reconciled = reconcile_shards(store, listed)
    drained = tuple(_mark_drained_where_done(store, reconciled.values()))
    listed_ids = [shard.shard_id for shard in listed]
    loads = shard_loads_from_store(store, listed_ids=listed_ids, recent_intervals=recent_intervals)
    version, assignment = _save_assignment(store, listed_ids, loads, partitions)
    return RebalanceResult(
        version=version,
        assignment=assignment,
        registered=tuple(sorted(set(reconciled) - set(before))),
        closed=tuple(sorted(s for s, c in reconciled.items() if _newly_closed(before.get(s), c.state))),
        drained=drained,
        retired=tuple(retired_parents(store, listed)),
    )


def _newly_closed(before: ShardState | None, now: ShardState) -> bool:
    return now is ShardState.CLOSED and before in (None, ShardState.OPEN)


def _mark_drained_where_done(store: CheckpointStore, checkpoints: Iterable[ShardCheckpoint]) -> Iterable[str]:
    """CLOSED shards whose loaded run reaches SHARD_END: the commit marks them when it sees the
    end, but a parent whose last range was loaded before an earlier one is marked here."""
    for checkpoint in checkpoints:
        mark = checkpoint.high_water_mark
        if checkpoint.state is ShardState.CLOSED and mark is not None and mark.kind is BoundaryKind.SHARD_END:
            try:
                store.mark_drained(checkpoint.shard_id, expected_counter=checkpoint.lease_counter)
            except CheckpointConflict:
                continue  # a concurrent commit updated it; it retires it itself or next time
            yield checkpoint.shard_id


def retired_parents(store: CheckpointStore, listed: Sequence[ShardInfo]) -> list[str]:
    """Drained shards every one of whose listed children has loaded something (KCL's lease
    cleanup rule): nothing will ever need them again."""
    children: dict[str, list[str]] = {}
    for shard in listed:
        for parent in shard.parent_ids:
            children.setdefault(parent, []).append(shard.shard_id)
    retired = []
    for parent, kids in sorted(children.items()):
        checkpoint = store.get_shard(parent)
        if checkpoint is None or checkpoint.state is not ShardState.DRAINED:
            continue
        kid_checkpoints = [store.get_shard(kid) for kid in kids]
        if all(kid is not None and kid.high_water_mark is not None for kid in kid_checkpoints):
            retired.append(parent)
    return retired


def _save_assignment(
    store: CheckpointStore, listed_ids: Sequence[str], loads: Sequence[ShardLoad], partitions: int
) -> tuple[int, Assignment]:
    for attempt in range(1, _SAVE_ATTEMPTS + 1):
        stored = store.get_topology()
        assignment = assign_partitions(loads, partitions, stored.assignment if stored else None)
        try:
            saved = store.save_topology(
                listed_ids, assignment.partition_of, expected_version=stored.version if stored else None
            )
        except CheckpointConflict:
            if attempt == _SAVE_ATTEMPTS:
                raise
            log.info("topology changed concurrently; recomputing the assignment (attempt %d)", attempt)
            continue
        log.info("topology version %d: %s", saved.version, assignment.partition_of)
        return saved.version, assignment
    raise AssertionError("unreachable")
