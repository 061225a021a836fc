"""The cuts of an interval's new ranges, found ahead of the plan where the loads run.

A recurring interval's plan reads each shard forward from its start cut to find its end cut: a
GetShardIterator and a GetRecords a shard, about two thirds of the plan's CPU on the driver's one
core at a thousand shards (docs/benchmarks.md). A first interval (and a shard new since the last
one) has no start cut stored either: the plan probes the start, then the end from it. With
``InProcessRunner(processes=N)`` the loader processes find those cuts first, each for its share of
the shards; the plan then takes a found cut where it would have read Kinesis for the same shard,
instant and earlier cut (none, for a start), and stores it as it stores its own (put once: a cut
stored meanwhile by another run wins, and an end found from a start that lost is not taken).

A cut found ahead is one the plan's own read could have found: the records up to the sealed
interval's end never change, and one arriving meanwhile arrives after that end (a cut at the tip
is AFTER the last record either way, or PENDING as a probe a moment earlier would have left it).
Where a cut could not be found ahead (a read throttled past its retries, a trimmed start), the plan
reads Kinesis itself, as it always did, and meets what went wrong there.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from airflow_provider_kinesis_doris.core.concurrency import map_bounded
from airflow_provider_kinesis_doris.core.kinesis.boundaries import carried_forward, find_cut
from airflow_provider_kinesis_doris.core.load_job import boundary_from_dict, boundary_to_dict
from airflow_provider_kinesis_doris.core.model import Boundary, BoundaryKind, ShardInfo
from airflow_provider_kinesis_doris.core.stores.items import wall_clock_ms

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CutRequest:
    """A shard's cut at ``instant_ms``, read forward from its cut ``earlier`` (probed without one),
    and then, with ``then_ms``, its cut at ``then_ms`` read forward from the one found: a new
    range's start and end, neither stored yet."""

    shard: ShardInfo
    instant_ms: int
    earlier: Boundary | None
    then_ms: int | None = None

    def to_json(self) -> str:
        earlier = boundary_to_dict(self.earlier) if self.earlier is not None else None
        return json.dumps({"shard": asdict(self.shard), "instant_ms": self.instant_ms, "earlier": earlier, "then_ms": self.then_ms})

    @classmethod
    def from_json(cls, text: str) -> CutRequest:
        data = json.loads(text)
        shard = ShardInfo(**{**data["shard"], "parent_ids": tuple(data["shard"]["parent_ids"])})
        earlier = boundary_from_dict(data["earlier"]) if data["earlier"] is not None else None
        return cls(shard, int(data["instant_ms"]), earlier, data["then_ms"])


CutFinder = Callable[[Sequence[CutRequest], "int | None"], "dict[CutRequest, Boundary]"]
"""The cuts found, each under the request it answers (a ``then_ms`` one answers two: the first
cut under the request without ``then_ms``, the second under its shard, ``then_ms`` and the first
cut), given the stream's trim horizon. A cut not found is not there: the plan reads it itself."""


def new_range_cut_requests(
    listed: Iterable[ShardInfo], starts: Mapping[str, Boundary], planned: Iterable[str], start_ms: int, end_ms: int
) -> list[CutRequest]:
    """The cuts the plan would read Kinesis for, of the shards with no range of the interval stored
    (``planned``): a new range's end, read forward from its concrete start cut stored at the
    interval's start (``starts``) unless that cut already tells it (:func:`carried_forward`); the
    start and then the end of one whose start is not stored (a first interval, a new shard)."""
    planned = set(planned)
    requests = []
    for shard in listed:
        if shard.shard_id in planned:
            continue
        start = starts.get(shard.shard_id)
        if start is None:
            requests.append(CutRequest(shard, start_ms, None, then_ms=end_ms))
        elif start.kind is not BoundaryKind.PENDING and carried_forward(start, end_ms) is None:
            requests.append(CutRequest(shard, end_ms, start))
    return requests


def find_cuts(
    kinesis: Any, stream_name: str, requests: Sequence[CutRequest], trim_horizon_ms: int | None, lanes: int,
    clock: Callable[[], int] = wall_clock_ms,
) -> dict[CutRequest, Boundary]:
    """Each request's cuts (:func:`~.boundaries.find_cut`), ``lanes`` requests at a time, as
    :data:`CutFinder` keys them; one that failed is left out: the plan then reads Kinesis for it
    itself, and meets the failure there."""

    def cut(asked: CutRequest) -> Boundary:
        return find_cut(
            kinesis, stream_name, asked.shard, asked.instant_ms, earlier=asked.earlier,
            trim_horizon_ms=trim_horizon_ms, clock=clock,
        )  # fmt: skip

    def found(request: CutRequest) -> dict[CutRequest, Boundary]:
        answers: dict[CutRequest, Boundary] = {}
        try:
            asked = replace(request, then_ms=None)
            answers[asked] = first = cut(asked)
            # The plan carries the second cut forward itself where the first one tells it.
            if request.then_ms is not None and carried_forward(first, request.then_ms) is None:
                then = CutRequest(request.shard, request.then_ms, first)
                answers[then] = cut(then)
        except Exception as error:  # noqa: BLE001 - the plan's own read raises it, where it counts
            log.debug("a cut of shard %s was not found ahead: %s", request.shard.shard_id, error)
        return answers

    return {asked: boundary for answers in map_bounded(found, requests, lanes) for asked, boundary in answers.items()}
