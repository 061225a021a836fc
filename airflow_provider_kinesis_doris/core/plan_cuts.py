"""The ends of an interval's new ranges, found ahead of the plan where the loads run.

A recurring interval's plan reads each shard forward from its start cut to find its end cut: a
GetShardIterator and a GetRecords a shard, about two thirds of the plan's CPU on the driver's one
core at a thousand shards (docs/benchmarks.md). With ``InProcessRunner(processes=N)`` the loader
processes find those cuts first, each for its share of the shards; the plan then takes a found cut
where it would have read Kinesis for the same shard, instant and start cut, and stores it as it
stores its own (put once with the range: a cut stored meanwhile by another run wins).

A cut found ahead is the one the plan's own read would have found a moment later: the records up
to the sealed interval's end never change, and one arriving meanwhile arrives after that end (a
cut at the tip is AFTER the last record either way). Where a cut could not be found ahead (a read
throttled past its retries, a trimmed start), the plan reads Kinesis itself, as it always did, and
meets what went wrong there.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from airflow_provider_kinesis_doris.core.concurrency import map_bounded
from airflow_provider_kinesis_doris.core.kinesis.boundaries import carried_forward, find_cut
from airflow_provider_kinesis_doris.core.load_job import boundary_from_dict, boundary_to_dict
from airflow_provider_kinesis_doris.core.model import Boundary, BoundaryKind, ShardInfo
from airflow_provider_kinesis_doris.core.stores.items import wall_clock_ms

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CutRequest:
    """A shard's cut at ``instant_ms``, read forward from its cut ``earlier``."""

    shard: ShardInfo
    instant_ms: int
    earlier: Boundary

    def to_json(self) -> str:
        return json.dumps({"shard": asdict(self.shard), "instant_ms": self.instant_ms, "earlier": boundary_to_dict(self.earlier)})

    @classmethod
    def from_json(cls, text: str) -> CutRequest:
        data = json.loads(text)
        shard = ShardInfo(**{**data["shard"], "parent_ids": tuple(data["shard"]["parent_ids"])})
        return cls(shard, int(data["instant_ms"]), boundary_from_dict(data["earlier"]))


CutFinder = Callable[[Sequence[CutRequest], "int | None"], "list[Boundary | None]"]
"""Each request's cut, or None where it was not found, given the stream's trim horizon."""


def end_cut_requests(
    listed: Iterable[ShardInfo], starts: Mapping[str, Boundary], planned: Iterable[str], end_ms: int
) -> list[CutRequest]:
    """The shards whose new range's end the plan would read Kinesis for: with a concrete start cut
    stored at the interval's start (``starts``), no range of the interval stored (``planned``), and
    an end the start cut does not already tell (:func:`carried_forward`)."""
    planned = set(planned)
    return [
        CutRequest(shard, end_ms, start)
        for shard in listed
        if (start := starts.get(shard.shard_id)) is not None and shard.shard_id not in planned
        and start.kind is not BoundaryKind.PENDING and carried_forward(start, end_ms) is None
    ]  # fmt: skip


def find_cuts(
    kinesis: Any, stream_name: str, requests: Sequence[CutRequest], trim_horizon_ms: int | None, lanes: int,
    clock: Callable[[], int] = wall_clock_ms,
) -> list[Boundary | None]:
    """Each request's cut (:func:`~.boundaries.find_cut`), ``lanes`` at a time; None where it
    failed: the plan then reads Kinesis for it itself, and meets the failure there."""

    def found(request: CutRequest) -> Boundary | None:
        try:
            return find_cut(
                kinesis, stream_name, request.shard, request.instant_ms, earlier=request.earlier,
                trim_horizon_ms=trim_horizon_ms, clock=clock,
            )  # fmt: skip
        except Exception as error:  # noqa: BLE001 - the plan's own read raises it, where it counts
            log.debug("the cut of shard %s was not found ahead: %s", request.shard.shard_id, error)
            return None

    return map_bounded(found, requests, lanes)
