"""Which Spark partition loads which shard: one placement for the rebalance step's stored
assignment and for each load job's grouping of ranges.

A lineage (a closed parent and its children) stays in one partition, parents first, so a child is
loaded after its parents (invariant I5, ``docs/design.md``). Lineages go heaviest first onto the
lightest partition; a lineage keeps the partition it had as long as the partitions stay even
within one lineage's weight. A shard's weight is the mean of its hash-key share and its recent
traffic share, scaled so the average shard weighs 1.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.core.model import ShardRange


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


def lineage_units(parents: Mapping[str, Sequence[str]]) -> list[tuple[str, ...]]:
    """Shards connected by parent links among ``parents``' keys, each unit parents first, units by id.

    :param parents: shard id → its parent shard ids, for every shard to place.
    """
    root = {shard_id: shard_id for shard_id in parents}

    def find(shard_id: str) -> str:
        while root[shard_id] != shard_id:
            shard_id = root[shard_id]
        return shard_id

    for shard_id, parent_ids in parents.items():
        for parent in parent_ids:
            if parent in root:
                root[find(shard_id)] = find(parent)
    depth = _lineage_depths(parents)
    units: dict[str, list[str]] = {}
    for shard_id in parents:
        units.setdefault(find(shard_id), []).append(shard_id)
    ordered = (tuple(sorted(members, key=lambda s: (depth[s], s))) for members in units.values())
    return sorted(ordered)


def _lineage_depths(parents: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """0 for a shard without a parent among ``parents``' keys, else one more than its deepest parent."""
    known_parents = {shard_id: [p for p in parent_ids if p != shard_id and p in parents] for shard_id, parent_ids in parents.items()}
    depth: dict[str, int] = {}

    def depth_of(shard_id: str, seen: frozenset[str]) -> int:
        if shard_id not in depth:
            if shard_id in seen:
                raise ConfigurationError(f"Shard lineage has a cycle through {shard_id}")
            depth[shard_id] = 1 + max((depth_of(p, seen | {shard_id}) for p in known_parents[shard_id]), default=-1)
        return depth[shard_id]

    for shard_id in known_parents:
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
    units = lineage_units({load.shard_id: load.parent_ids for load in loads})
    unit_weight = {unit: sum(weights[shard_id] for shard_id in unit) for unit in units}
    members = _balanced_placement(units, unit_weight, partitions, previous or {})
    groups = tuple(tuple(shard_id for unit in sorted(group) for shard_id in unit) for group in members)
    partition_of = {shard_id: index for index, group in enumerate(groups) for shard_id in group}
    return Assignment(partition_of, groups, weights)


def group_ranges(
    ranges: Sequence[ShardRange],
    parents: Mapping[str, Sequence[str]],
    partitions: int,
    weights: Mapping[str, float] | None = None,
    assignment: Mapping[str, int] | None = None,
) -> tuple[tuple[int, ...], ...]:
    """Spread one job's ranges over at most ``partitions`` Spark partitions, by the same placement
    as :func:`assign_partitions`: the ranges of a lineage (a parent and its children in this job)
    stay in one partition in the plan's order, so a child is loaded after its parents (I5); a
    lineage keeps its partition of ``assignment`` (the rebalance step's) where it has one.

    :param ranges: the plan's ranges, parents before children.
    :param parents: shard id → its parent shard ids.
    :param weights: per shard id (e.g. what it carried recently); 1 for a shard not listed.
    :param assignment: shard id → partition stored by the rebalance step, if any.
    :return: per non-empty partition, the indices of its ranges in plan order.
    """
    if partitions < 1:
        raise ConfigurationError(f"partitions must be at least 1, got {partitions}")
    shard_ids = {shard_range.shard_id for shard_range in ranges}
    units = lineage_units({shard_id: tuple(parents.get(shard_id, ())) for shard_id in shard_ids})
    unit_weight = {unit: sum(float((weights or {}).get(shard_id, 1.0)) for shard_id in unit) for unit in units}
    members = _balanced_placement(units, unit_weight, min(partitions, len(units)) if not assignment else partitions, assignment or {})
    partition_of = {shard_id: part for part, group in enumerate(members) for unit in group for shard_id in unit}
    indices: list[list[int]] = [[] for _ in members]
    for index, shard_range in enumerate(ranges):
        indices[partition_of[shard_range.shard_id]].append(index)
    return tuple(tuple(group) for group in indices if group)


def _balanced_placement(
    units: Sequence[tuple[str, ...]], unit_weight: Mapping[tuple[str, ...], float], partitions: int,
    previous: Mapping[str, int],
) -> list[list[tuple[str, ...]]]:  # fmt: skip
    """Units kept where ``previous`` had them, the rest heaviest first onto the lightest partition;
    placed afresh if keeping leaves the partitions uneven by more than the heaviest unit."""
    kept_or_none = {unit: _kept_partition(unit, previous, partitions) for unit in units}
    kept = {unit: part for unit, part in kept_or_none.items() if part is not None}
    members = _place(units, unit_weight, partitions, kept)
    heaviest = max(unit_weight.values(), default=0.0)
    if kept and _spread(members, unit_weight) > heaviest:
        members = _place(units, unit_weight, partitions, {})
    return members


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
