"""Durable pipeline state in one DynamoDB table: shards, boundaries, ranges, chunks, topology.

A pipeline's items spread over its buckets (``pk`` = ``<pipeline id>#<bucket>``, the bucket a
stable hash of the item's shard, ``core.stores.buckets``); the sort key ``sk`` names
the item:

- ``shard#<shard_id>``: lineage, state OPEN → CLOSED → DRAINED, high-water mark, lease counter;
- ``boundary#<shard_id>#<instant_ms, 15 digits>``: a cut between records, written once;
- ``range#<shard_id>#<interval_start_ms, 15 digits>``: references to its two boundaries;
- ``chunk#<shard_id>#<interval_start_ms, 15 digits>#<label>``: intent and outcome of one Stream
  Load (invariant I7), under its range so a run reads only its ranges' chunks;
- ``content#<shard_id>#<interval_start_ms, 15 digits>#<first position>``: which records of a chunk
  are dead letters, fixed once before its first load;
- ``interval#<interval_start_ms, 15 digits>``: an interval some run planned, with its end: the
  pipeline's interval grid, which a new interval must fit (one Query per run, not one per shard);
- ``adopted#<interval_start_ms, 15 digits>``: the intervals no DAG run covered that the run of
  this interval took on (``core.catch_up``), written once, so its retries load the same ones;
- ``gapless``: the start of an interval of the grid below which the grid has no interval left
  unplanned (``core.catch_up``), so a run reads the grid from there only;
- ``intervals``: written once the grid holds every interval of the table's ranges (tables from
  before the grid existed are registered by the first run that finds it missing);
- ``topology``: the last shard set seen and the shard → partition assignment;
- ``floor``: the interval a TRIM_HORIZON pipeline's first ranges sweep up to, written once;
- ``prune``: the horizon the last pruning step claimed (``core.prune``);
- ``preflight``: the digest of the settings that last passed the Doris and AWS preflight
  (``core.stores.preflight``).

Every write that can race is conditional and a lost race never overwrites: put-once items return
the stored winner, fenced updates raise :class:`CheckpointConflict`. Only pruning deletes, and only
a shard's loaded history below a horizon the shard item records first (``core.prune``). Every read is a consistent
``GetItem`` or a paginated ``Query`` on the pipeline's partitions (never a ``Scan``).

The logic lives in the parts of :class:`CheckpointStore`, which need a few primitives
(:class:`~.primitives.StoreItems`: get, query by prefix, put-if-absent of one or several items,
conditional update, delete). :class:`~.dynamodb.DynamoItems` implements them on DynamoDB, and sends
the driver threads' writes in groups; :class:`~.memory.MemoryItems` implements them in memory, so
both stores behave alike by construction.

Sequence numbers (56 digits) and hash keys (39 digits) exceed DynamoDB's 38-digit numbers, so
they are stored as strings.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_kinesis_doris.core.model import Boundary, BoundaryKind, Position, ShardState

log = logging.getLogger(__name__)

SHARD_PREFIX = "shard#"
BOUNDARY_PREFIX = "boundary#"
RANGE_PREFIX = "range#"
CHUNK_PREFIX = "chunk#"
CONTENT_PREFIX = "content#"
INTERVAL_PREFIX = "interval#"
INTERVALS_KEY = "intervals"
ADOPTED_PREFIX = "adopted#"
GAPLESS_KEY = "gapless"
TOPOLOGY_KEY = "topology"
FLOOR_KEY = "floor"
INITIAL_POSITION_KEY = "initial-position"
TAKEN_OVER_KEY = "taken-over"
"""In a pipeline that started where another one's marks stood: which, and the instant."""
HANDED_OVER_KEY = "handed-over"
"""In a pipeline another one took over from: which, and (once fixed) the instant it stops at."""
PRUNE_KEY = "prune"
LABEL_CANARIES_KEY = "label-canaries"
CHUNK_INTENT = "INTENT"
CHUNK_NOT_LOADED = "NOT_LOADED"
"""A chunk's load provably did not reach Doris, or Doris failed it definitely: send it again."""
_INSTANT_DIGITS = 15
DEFAULT_PAGE_SIZE = 100


class ABSENT:
    """Marker for an expected attribute that must not exist (``attribute_not_exists``)."""

def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def shard_sk(shard_id: str) -> str:
    return f"{SHARD_PREFIX}{shard_id}"


def boundary_sk(shard_id: str, instant_ms: int) -> str:
    return f"{BOUNDARY_PREFIX}{shard_id}#{instant_ms:0{_INSTANT_DIGITS}d}"


def interval_sk(interval_start_ms: int) -> str:
    return f"{INTERVAL_PREFIX}{interval_start_ms:0{_INSTANT_DIGITS}d}"


def adopted_sk(interval_start_ms: int) -> str:
    return f"{ADOPTED_PREFIX}{interval_start_ms:0{_INSTANT_DIGITS}d}"


def range_sk(shard_id: str, interval_start_ms: int) -> str:
    return f"{RANGE_PREFIX}{shard_id}#{interval_start_ms:0{_INSTANT_DIGITS}d}"


def chunk_sk(shard_id: str, interval_start_ms: int, label: str) -> str:
    return f"{range_chunks_prefix(shard_id, interval_start_ms)}{label}"


def range_chunks_prefix(shard_id: str, interval_start_ms: int) -> str:
    return f"{CHUNK_PREFIX}{shard_id}#{interval_start_ms:0{_INSTANT_DIGITS}d}#"


def range_contents_prefix(shard_id: str, interval_start_ms: int) -> str:
    return f"{CONTENT_PREFIX}{shard_id}#{interval_start_ms:0{_INSTANT_DIGITS}d}#"


# --- value objects -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ShardCheckpoint:
    """The stored state of one shard.

    ``high_water_mark`` is the end boundary of the longest contiguous run of LOADED ranges from
    the shard's floor (its earliest range); ``lease_counter`` grows with every update and fences
    concurrent writers."""

    shard_id: str
    parent_ids: tuple[str, ...]
    starting_hash_key: int
    ending_hash_key: int
    state: ShardState
    lease_counter: int
    high_water_mark: Boundary | None
    last_lag_ms: int | None
    updated_ms: int
    registered_ms: int | None = None
    """When a run first listed the shard (None for shards registered before this was kept)."""
    pruned_from_ms: int | None = None
    pruned_through_ms: int | None = None
    """The shard's intervals in ``[pruned_from_ms, pruned_through_ms)`` were loaded and their items
    pruned (``core.prune``); None while nothing is."""


@dataclass(frozen=True, slots=True)
class ChunkRecord:
    """Intent (``state == "INTENT"``) or outcome (a Doris state such as ``VISIBLE``) of one chunk."""

    label: str
    shard_id: str
    interval_start_ms: int
    first: Position
    last: Position
    state: str
    txn_id: str | None
    rows_loaded: int
    rows_filtered: int
    updated_ms: int
    attempt: str | None = None
    """The attempt that wrote the intent (a new id per pass of a chunk, ``core.chunk_load.load_chunk``),
    the only one that may record the chunk not loaded; None for chunks recorded before attempts were named."""


@dataclass(frozen=True, slots=True)
class Floor:
    """The interval ``[start_ms, end_ms)`` whose ranges sweep a TRIM_HORIZON pipeline's shards from
    their start: fixed by the first run that plans, so every later run agrees on it (I10)."""

    start_ms: int
    end_ms: int


@dataclass(frozen=True, slots=True)
class Handover:
    """Pipeline ``new`` starts where pipeline ``old`` stops: at the end of ``old``'s interval
    ``[last_start_ms, end_ms)``, both None until the handover fixes them (``core.handover``)."""

    old: str
    new: str
    last_start_ms: int | None = None
    end_ms: int | None = None


@dataclass(frozen=True, slots=True)
class LabelCanary:
    """A chunk label Doris answered VISIBLE at ``loaded_ms`` (the loading worker's clock), kept to
    ask Doris about later (``core.label_window``)."""

    label: str
    loaded_ms: int


@dataclass(frozen=True, slots=True)
class TopologyRecord:
    """The shard set the sensor saw last and the current shard → Spark partition assignment."""

    shard_ids: tuple[str, ...]
    version: int
    assignment: Mapping[str, int] = field(default_factory=dict)
    updated_ms: int = 0


# --- item <-> value object ---------------------------------------------------------------------


def boundary_from_item(item: Mapping[str, Any]) -> Boundary:
    position = item.get("position")
    return Boundary(
        shard_id=item["shard_id"],
        instant_ms=int(item["instant_ms"]),
        kind=BoundaryKind(item["boundary_kind"]),
        position=Position.decode(position) if position else None,
        # Items written before the attribute existed have none: their boundary carries no hint.
        arrival_ms=item.get("arrival_ms"),
    )


def boundary_attributes(boundary: Boundary | None, prefix: str) -> dict[str, Any]:
    """Boundary fields flattened under ``prefix`` (None values mean "remove")."""
    if boundary is None:
        return {f"{prefix}instant_ms": None, f"{prefix}kind": None, f"{prefix}position": None}
    return {
        f"{prefix}instant_ms": boundary.instant_ms,
        f"{prefix}kind": boundary.kind.value,
        f"{prefix}position": boundary.position.encode() if boundary.position else None,
    }


def shard_from_item(item: Mapping[str, Any]) -> ShardCheckpoint:
    mark = None
    if item.get("hwm_kind"):
        mark = boundary_from_item(
            {
                "shard_id": item["shard_id"],
                "instant_ms": item["hwm_instant_ms"],
                "boundary_kind": item["hwm_kind"],
                "position": item.get("hwm_position"),
            }
        )
    return ShardCheckpoint(
        shard_id=item["shard_id"],
        parent_ids=tuple(item.get("parent_ids", ())),
        starting_hash_key=int(item["starting_hash_key"]),
        ending_hash_key=int(item["ending_hash_key"]),
        state=ShardState(item["state"]),
        lease_counter=int(item["lease_counter"]),
        high_water_mark=mark,
        last_lag_ms=_optional_int(item, "last_lag_ms"),
        updated_ms=int(item["updated_ms"]),
        registered_ms=_optional_int(item, "registered_ms"),
        pruned_from_ms=_optional_int(item, "pruned_from_ms"),
        pruned_through_ms=_optional_int(item, "pruned_through_ms"),
    )


def shard_attributes(shard: ShardCheckpoint) -> dict[str, Any]:
    """The attributes :func:`shard_from_item` reads, from ``shard``: with a write's changes laid
    over them (None removes), the shard as that write left it, without reading it back."""
    return {
        "shard_id": shard.shard_id,
        "parent_ids": list(shard.parent_ids),
        "starting_hash_key": str(shard.starting_hash_key),
        "ending_hash_key": str(shard.ending_hash_key),
        "state": shard.state.value,
        "lease_counter": shard.lease_counter,
        **boundary_attributes(shard.high_water_mark, "hwm_"),
        "last_lag_ms": shard.last_lag_ms,
        "updated_ms": shard.updated_ms,
        "registered_ms": shard.registered_ms,
        "pruned_from_ms": shard.pruned_from_ms,
        "pruned_through_ms": shard.pruned_through_ms,
    }


def _optional_int(item: Mapping[str, Any], name: str) -> int | None:
    return int(item[name]) if name in item else None


def chunk_from_item(item: Mapping[str, Any]) -> ChunkRecord:
    return ChunkRecord(
        label=item["label"],
        shard_id=item["shard_id"],
        interval_start_ms=int(item["interval_start_ms"]),
        first=Position.decode(item["first"]),
        last=Position.decode(item["last"]),
        state=item["state"],
        txn_id=item.get("txn_id"),
        rows_loaded=int(item.get("rows_loaded", 0)),
        rows_filtered=int(item.get("rows_filtered", 0)),
        updated_ms=int(item["updated_ms"]),
        attempt=item.get("attempt"),
    )


