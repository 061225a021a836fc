"""A new pipeline that starts exactly where another one stops: a handover (I1, I11).

A pipeline's id names its checkpoint partition, and its labels; a user moves to a new one when
the schedule's intervals would overlap the old one's, or the DAG is renamed. The new pipeline
(``ReadConfig(take_over_from=...)``) must start where the old one's intervals end, with no record
twice and none missing, and the old one must stop there.

The first plan of the new pipeline does it, in this order, each step put once so any attempt may
die and its retry goes on:

1. it claims the old pipeline (``handed-over`` item in the old partition). From then the old
   pipeline's plans wait (:class:`HandoverPending`) until step 2 fixes its end;
2. it reads the old pipeline's latest interval *after* the claim, and fixes its end ``E`` there.
   An old plan registers its interval before it reads the claim, so either this read sees that
   interval (``E`` lies after it) or that plan sees the claim and waits: no interval of the old
   pipeline past ``E`` is ever loaded (:func:`check_before_end`), none before it is left out;
3. it copies the old pipeline's cuts at ``E`` into its own partition, so its first ranges start
   at the very records the old pipeline's last ranges end at;
4. it records ``taken-over`` (where it starts). Its catch-up walks from the old pipeline's last
   interval, so a span between ``E`` and its own first interval is loaded as a bridge.

The old pipeline keeps loading its intervals up to ``E`` (its DAG's late runs, retries and
backfills); the new one plans nothing before ``E``.
"""

from __future__ import annotations

import logging

from airflow_provider_kinesis_doris.core.errors import ConfigurationError, HandoverPending, readme_section
from airflow_provider_kinesis_doris.core.model import BoundaryKind, RangeState, describe_instant, describe_interval
from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
from airflow_provider_kinesis_doris.core.stores.range_book import RangeBook
from airflow_provider_kinesis_doris.core.stores.items import Handover

log = logging.getLogger(__name__)


def take_over(store: CheckpointStore, old_pipeline_id: str | None, initial_position: str) -> Handover | None:
    """Where this pipeline starts if it took over from another one: the recorded handover, or a
    new one from ``old_pipeline_id`` for a pipeline that has planned nothing yet.

    :raises ConfigurationError: the pipeline planned before without this handover, the old one is
        itself, never planned, was handed over to another, or has intervals below its end that
        no run loaded; or ``initial_position`` is not INTERVAL.
    :raises HandoverPending: the old pipeline's last interval is still loading.
    """
    taken, _ = store.ranges.handovers()
    if taken is not None:
        if old_pipeline_id not in (None, taken.old):
            raise ConfigurationError(
                f"take_over_from={old_pipeline_id!r}, but pipeline {store.pipeline_id!r} took over from "
                f"{taken.old!r} at {describe_instant(taken.end_ms)}: a pipeline starts once. Put take_over_from back."
            )
        return taken
    if old_pipeline_id is None:
        return None
    _check_can_take_over(store.ranges, old_pipeline_id, initial_position)
    old = store.of_pipeline(old_pipeline_id)
    if old.ranges.last_interval() is None:
        raise ConfigurationError(
            f"take_over_from={old_pipeline_id!r}: that pipeline has planned no interval in this checkpoint table "
            "(the same table as this pipeline's): there is nothing to start after. Check the pipeline id and the table."
        )
    claim = old.ranges.claim_handover(store.pipeline_id)
    if claim.new != store.pipeline_id:
        raise ConfigurationError(
            f"take_over_from={old_pipeline_id!r}: pipeline {claim.new!r} took over from it already; two pipelines "
            f"cannot both go on from it. Take over from {claim.new!r} instead."
        )
    if claim.end_ms is None:
        # Read after the claim: an old plan that did not see the claim registered its interval first.
        last = old.ranges.last_interval()
        assert last is not None, "intervals are never deleted but by pruning, which keeps the latest"
        claim = old.ranges.fix_handover_end(store.pipeline_id, *last)
    assert claim.last_start_ms is not None and claim.end_ms is not None
    gaps = old.ranges.gaps_before(claim.end_ms)
    if gaps:
        raise ConfigurationError(
            f"take_over_from={old_pipeline_id!r}: that pipeline stops at {describe_instant(claim.end_ms)}, but "
            f"{', '.join(describe_interval(gap) for gap in gaps[:5])} below it were never loaded (skipped intervals "
            "its runs left for later). Backfill them on the old DAG (its runs of intervals up to that instant "
            f"still load), then clear this run; see {readme_section('Moving to a new pipeline_id')}."
        )
    _copy_cuts(old, store, claim)
    taken = store.ranges.settle_taken_over(Handover(old_pipeline_id, store.pipeline_id, claim.last_start_ms, claim.end_ms))
    log.warning(
        "pipeline %s takes over from pipeline %s at %s: the old one loads its intervals up to there and no further",
        store.pipeline_id, old_pipeline_id, describe_instant(claim.end_ms),
    )  # fmt: skip
    return taken


def _check_can_take_over(ranges: RangeBook, old_pipeline_id: str, initial_position: str) -> None:
    if old_pipeline_id == ranges.pipeline_id:
        raise ConfigurationError(f"take_over_from names this pipeline itself ({old_pipeline_id!r}); name the old pipeline_id")
    if initial_position != "INTERVAL":
        raise ConfigurationError(
            f"take_over_from={old_pipeline_id!r} with initial_position {initial_position}: a pipeline that takes over "
            "starts at the old one's marks, not at each shard's start. Set initial_position to INTERVAL."
        )
    if ranges.last_interval() is not None:
        raise ConfigurationError(
            f"take_over_from={old_pipeline_id!r}, but pipeline {ranges.pipeline_id!r} has planned intervals of its own "
            "already: only a new pipeline_id can take over. Use a new pipeline_id (and remove take_over_from here)."
        )


def _copy_cuts(old: CheckpointStore, new: CheckpointStore, handover: Handover) -> None:
    """The old pipeline's cuts at its end, into the new one's partition (put once). A cut not
    known yet (PENDING) is the new pipeline's to resolve alone once the old range ending there is
    loaded; until then the old range's reader may still resolve it, so the handover waits."""
    assert handover.last_start_ms is not None and handover.end_ms is not None
    for checkpoint in old.ledger.list_shard_checkpoints():
        cut = old.ledger.get_boundary(checkpoint.shard_id, handover.end_ms)
        if cut is None:
            continue
        if cut.kind is BoundaryKind.PENDING:
            last = old.ranges.get_range(checkpoint.shard_id, handover.last_start_ms)
            if last is not None and last.state is not RangeState.LOADED:
                raise HandoverPending(
                    f"Pipeline {new.pipeline_id} takes over from pipeline {old.pipeline_id} at "
                    f"{describe_instant(handover.end_ms)}, where shard {checkpoint.shard_id}'s cut is not known yet "
                    f"and the old pipeline's run of {describe_interval((handover.last_start_ms, handover.end_ms))} "
                    "has not loaded it: let that run finish; this run's retry takes over then."
                )
        new.ledger.put_boundary(cut)


def check_after_start(ranges: RangeBook, start_ms: int, end_ms: int) -> None:
    """Refuse, in a pipeline that took over, an interval before its start (before it is
    registered: the catch-up walk starts at the old pipeline's last interval).

    :raises ConfigurationError: the interval is the old pipeline's.
    """
    taken = ranges.handovers()[0]
    if taken is not None and taken.end_ms is not None and start_ms < taken.end_ms:
        raise ConfigurationError(
            f"Pipeline {ranges.pipeline_id} took over from pipeline {taken.old} at {describe_instant(taken.end_ms)}: "
            f"interval {describe_interval((start_ms, end_ms))} lies before that, and pipeline {taken.old} loads it. "
            "Give this DAG a start_date at or after that instant (these runs load nothing)."
        )


def check_before_end(ranges: RangeBook, start_ms: int, end_ms: int) -> None:
    """Refuse, in a pipeline handed over, an interval past its end, and wait while that end is
    being fixed. After the interval is registered (see the module).

    :raises ConfigurationError: the interval is the new pipeline's.
    :raises HandoverPending: the end of this pipeline is being fixed.
    """
    handed = ranges.handovers()[1]
    if handed is None:
        return
    interval = describe_interval((start_ms, end_ms))
    if handed.end_ms is None:
        raise HandoverPending(
            f"Pipeline {handed.new} is taking over from pipeline {ranges.pipeline_id}: interval {interval} waits "
            "until it has fixed where this pipeline stops; retry."
        )
    if end_ms > handed.end_ms:
        raise ConfigurationError(
            f"Pipeline {ranges.pipeline_id} was handed over to pipeline {handed.new} at "
            f"{describe_instant(handed.end_ms)}: interval {interval} is that pipeline's to load. Pause or "
            f"remove this DAG; its runs of earlier intervals still load ({readme_section('Moving to a new pipeline_id')})."
        )
