"""Shard topology: complete listings, the lineage graph, and which shards may be read.

ListShards pages are followed with ``NextToken`` alone (the service rejects it together with
``StreamName``); an expired token restarts the listing. A shard is open while its
``EndingSequenceNumber`` is null. A child may be read once every parent is drained up to the
interval (``docs/resharding.md``); parents that left ListShards (expired) never
block.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from airflow_provider_kinesis_doris.core.errors import KinesisDorisError, aws_error_code
from airflow_provider_kinesis_doris.core.model import ShardInfo, ShardState

log = logging.getLogger(__name__)

MAX_PAGE_SIZE = 1000
_EXPIRED_TOKEN = "ExpiredNextTokenException"


def list_shards(
    client: Any, stream_name: str, *, page_size: int = MAX_PAGE_SIZE, max_restarts: int = 3
) -> list[ShardInfo]:
    """Every shard of the stream that ListShards reports (open and closed-but-retained).

    :param client: a boto3 Kinesis client.
    :param stream_name: the stream.
    :param page_size: ``MaxResults`` per call (1..1000).
    :param max_restarts: how often an expired ``NextToken`` may restart the listing.
    :return: the shards in listing order.
    :raises KinesisDorisError: the token kept expiring.
    """
    if not 1 <= page_size <= MAX_PAGE_SIZE:
        raise ValueError(f"page_size must be within 1..{MAX_PAGE_SIZE}, got {page_size}")
    for attempt in range(max_restarts + 1):
        try:
            return [shard_info(raw) for raw in _list_all_pages(client, stream_name, page_size)]
        except ClientError as error:
            if aws_error_code(error) != _EXPIRED_TOKEN:
                raise
            log.warning("ListShards token of stream %s expired; listing again (%d)", stream_name, attempt + 1)
    raise KinesisDorisError(f"ListShards of stream {stream_name}: NextToken expired {max_restarts + 1} times")


def _list_all_pages(client: Any, stream_name: str, page_size: int) -> list[dict[str, Any]]:
    response = client.list_shards(StreamName=stream_name, MaxResults=page_size)
    shards = list(response.get("Shards", []))
    while response.get("NextToken"):
        # Follow-up pages carry NextToken alone: StreamName + NextToken is an error on AWS.
        response = client.list_shards(NextToken=response["NextToken"], MaxResults=page_size)
        shards.extend(response.get("Shards", []))
    return shards


def shard_info(raw: Mapping[str, Any]) -> ShardInfo:
    """A ListShards ``Shard`` object as :class:`ShardInfo` (open iff no EndingSequenceNumber)."""
    parents = tuple(raw[key] for key in ("ParentShardId", "AdjacentParentShardId") if raw.get(key))
    sequence_range = raw.get("SequenceNumberRange", {})
    return ShardInfo(
        shard_id=raw["ShardId"],
        parent_ids=parents,
        starting_hash_key=int(raw["HashKeyRange"]["StartingHashKey"]),
        ending_hash_key=int(raw["HashKeyRange"]["EndingHashKey"]),
        starting_sequence=int(sequence_range.get("StartingSequenceNumber", 0)),
        is_open=sequence_range.get("EndingSequenceNumber") is None,
    )


def children_of(shards: Iterable[ShardInfo]) -> dict[str, tuple[str, ...]]:
    """Parent id → ids of its children, for every parent named by a shard in ``shards``."""
    children: dict[str, list[str]] = {}
    for shard in shards:
        for parent in shard.parent_ids:
            children.setdefault(parent, []).append(shard.shard_id)
    return {parent: tuple(sorted(ids)) for parent, ids in children.items()}


def parents_first(shards: Iterable[ShardInfo]) -> list[ShardInfo]:
    """``shards`` ordered so every shard comes after its listed parents (ties by shard id).

    Parents outside ``shards`` (expired) are ignored.
    """
    by_id = {shard.shard_id: shard for shard in shards}
    waiting_on = {sid: {p for p in shard.parent_ids if p in by_id} for sid, shard in by_id.items()}
    children = children_of(by_id.values())
    ready = [sid for sid, parents in waiting_on.items() if not parents]
    heapq.heapify(ready)
    ordered: list[ShardInfo] = []
    while ready:
        sid = heapq.heappop(ready)
        ordered.append(by_id[sid])
        for child in children.get(sid, ()):
            waiting_on[child].discard(sid)
            if not waiting_on[child]:
                heapq.heappush(ready, child)
    if len(ordered) != len(by_id):
        cyclic = sorted(set(by_id) - {s.shard_id for s in ordered})
        raise KinesisDorisError(f"Shard lineage has a cycle among {cyclic}")
    return ordered


def parent_generations(shards: Iterable[ShardInfo]) -> list[list[ShardInfo]]:
    """``shards`` in generations: the first holds the shards without a listed parent, each later one
    the shards whose listed parents all lie in earlier generations. The shards of one generation
    do not depend on each other, so a step may handle them at the same time.

    Each generation is in :func:`parents_first` order; parents outside ``shards`` are ignored.
    """
    ordered = parents_first(shards)
    listed = {shard.shard_id for shard in ordered}
    depth: dict[str, int] = {}
    generations: list[list[ShardInfo]] = []
    for shard in ordered:
        depth[shard.shard_id] = 1 + max((depth[p] for p in shard.parent_ids if p in listed), default=-1)
        if depth[shard.shard_id] == len(generations):
            generations.append([])
        generations[depth[shard.shard_id]].append(shard)
    return generations


@dataclass(frozen=True, slots=True)
class ParentProgress:
    """How far a parent shard is loaded, as the checkpoint store knows it.

    :param state: the stored shard state.
    :param loaded_through_ms: instant where the parent's contiguous LOADED run from its floor
        (earliest range) ends; the floor itself when nothing is loaded; None without ranges.
    :param ended: that run ends at the parent's end (it is drained, whatever its stored state).
    :param planned_from_ms: start instant of the parent's range in the plan being made, if any.
    :param waiting: the parent itself waits for its own parents in this plan.
    """

    state: ShardState
    loaded_through_ms: int | None
    ended: bool = False
    planned_from_ms: int | None = None
    waiting: bool = False

    def drained_up_to(self, instant_ms: int) -> bool:
        """True if every record of this parent before ``instant_ms`` that is in scope is loaded,
        or is in the parent's range of the same plan, which is read before its children."""
        if self.waiting:
            return False
        if self.state is ShardState.DRAINED or self.ended:
            return True
        if self.loaded_through_ms is None:
            return False
        return self.loaded_through_ms >= instant_ms or self.planned_from_ms == self.loaded_through_ms


def blocking_parents(
    shard: ShardInfo,
    interval_start_ms: int,
    *,
    listed_ids: Iterable[str],
    progress: Mapping[str, ParentProgress],
    relaxed: bool = False,
) -> tuple[str, ...]:
    """The parents that keep ``shard`` from being read for the interval starting at
    ``interval_start_ms``; empty when it is readable.

    :param shard: the child.
    :param interval_start_ms: start of the interval to plan.
    :param listed_ids: ids ListShards reports now; a parent outside them has expired.
    :param progress: stored progress of known parents.
    :param relaxed: order cannot matter for the target table: nothing blocks.
    """
    if relaxed:
        return ()
    listed = set(listed_ids)
    blocking = []
    for parent in shard.parent_ids:
        if parent not in listed:
            continue  # expired (older than retention): nothing left to read before the child
        parent_progress = progress.get(parent)
        if parent_progress is None or not parent_progress.drained_up_to(interval_start_ms):
            blocking.append(parent)
    return tuple(blocking)


# --- what changed since the topology was stored (the reshard sensor) ------------------------------


@dataclass(frozen=True, slots=True)
class TopologyChange:
    """The difference between a stored shard set and a live listing.

    :param stored_version: version of the stored topology the listing was compared with.
    :param closed: shards whose children appeared (split or merged away), by id.
    :param appeared: shards not in the stored set, with their parents and hash ranges.
    :param expired: stored shards ListShards no longer reports (past retention).
    """

    stored_version: int
    closed: tuple[str, ...]
    appeared: tuple[ShardInfo, ...]
    expired: tuple[str, ...]

    @property
    def is_reshard(self) -> bool:
        """True if shards were split or merged: every reshard creates new shards."""
        return bool(self.appeared)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form (hash keys as decimal strings: they exceed 64 bits) for XCom."""
        return {
            "stored_version": self.stored_version,
            "closed": list(self.closed),
            "appeared": [_shard_to_dict(shard) for shard in self.appeared],
            "expired": list(self.expired),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TopologyChange:
        return cls(
            stored_version=int(data["stored_version"]),
            closed=tuple(data["closed"]),
            appeared=tuple(_shard_from_dict(shard) for shard in data["appeared"]),
            expired=tuple(data["expired"]),
        )


def _shard_to_dict(shard: ShardInfo) -> dict[str, Any]:
    return {
        "shard_id": shard.shard_id,
        "parent_ids": list(shard.parent_ids),
        "starting_hash_key": str(shard.starting_hash_key),
        "ending_hash_key": str(shard.ending_hash_key),
        "starting_sequence": str(shard.starting_sequence),
        "is_open": shard.is_open,
    }


def _shard_from_dict(data: Mapping[str, Any]) -> ShardInfo:
    return ShardInfo(
        shard_id=data["shard_id"],
        parent_ids=tuple(data["parent_ids"]),
        starting_hash_key=int(data["starting_hash_key"]),
        ending_hash_key=int(data["ending_hash_key"]),
        starting_sequence=int(data["starting_sequence"]),
        is_open=bool(data["is_open"]),
    )


def diff_topology(stored_ids: Iterable[str], stored_version: int, live: Iterable[ShardInfo]) -> TopologyChange:
    """What changed between the stored shard set and the live listing.

    :param stored_ids: shard ids of the stored topology.
    :param stored_version: its version.
    :param live: the shards ListShards reports now.
    """
    stored = set(stored_ids)
    listed = list(live)
    appeared = tuple(sorted((s for s in listed if s.shard_id not in stored), key=lambda s: s.shard_id))
    # A shard that appeared and was resharded again before this look is closed too.
    closed = tuple(sorted({parent for shard in appeared for parent in shard.parent_ids}))
    expired = tuple(sorted(stored - {shard.shard_id for shard in listed}))
    return TopologyChange(stored_version, closed, appeared, expired)


def trim_horizon(kinesis: Any, stream_name: str, clock: Callable[[], int]) -> int:
    """The oldest arrival instant whose records Kinesis still keeps for sure: now less the
    stream's retention period (DescribeStreamSummary)."""
    summary = kinesis.describe_stream_summary(StreamName=stream_name)["StreamDescriptionSummary"]
    return clock() - int(summary["RetentionPeriodHours"]) * 3_600_000


KEPT_MARGIN_MS = 3_600_000
"""How far after the trim horizon an instant must lie for the records arriving from it on to be
surely kept while a read that starts now passes them: retention deletes the oldest records first,
a read takes seconds, and an hour also covers a clock of ours that differs from the service's."""


def kept_from(instant_ms: int, horizon_ms: int | None) -> bool:
    """Whether every record arriving at or after ``instant_ms`` is surely still in the stream,
    given its trim horizon (None: not known, so not surely)."""
    return horizon_ms is not None and instant_ms >= horizon_ms + KEPT_MARGIN_MS
