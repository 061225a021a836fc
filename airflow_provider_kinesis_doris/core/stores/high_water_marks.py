"""The high-water marks: how far each shard's history is loaded without a gap (the walk over its
ranges), when it is drained, and the pruning of its loaded history."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_kinesis_doris.core.concurrency import map_bounded

from airflow_provider_kinesis_doris.core.errors import CheckpointConflict, PrunedHistory, ShardNotDrained
from airflow_provider_kinesis_doris.core.model import (
    Boundary,
    BoundaryKind,
    RangeState,
    ShardRange,
    ShardState,
    describe_instant,
)
from airflow_provider_kinesis_doris.core.stores.items import (
    ABSENT,
    boundary_attributes,
    ShardCheckpoint,
)
from airflow_provider_kinesis_doris.core.stores.primitives import StoreItems
from airflow_provider_kinesis_doris.core.stores.range_book import RangeBook, RangeSpan
from airflow_provider_kinesis_doris.core.stores.shard_ledger import FencedUpdate, lease_conflict, ShardLedger

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MarkAdvance:
    """A shard whose mark a commit moves, with the last MillisBehindLatest its load saw and the
    shard as the run last read it (None: read it now; see
    :meth:`HighWaterMarks.advance_high_water_mark`)."""

    shard_id: str
    last_lag_ms: int | None = None
    known: ShardCheckpoint | None = None


@dataclass(frozen=True)
class _MarkMove:
    update: FencedUpdate
    mark: Boundary | None
    """The mark it moves to; None when only the lag changes."""

    def log_moved(self) -> None:
        if self.mark is not None:
            log.info("shard %s high-water mark -> %s", self.update.shard.shard_id, self.mark.describe(position=False))


class HighWaterMarks:
    """The shards' marks, moved over the range book's ranges and written fenced on the ledger.

    :param items: the pipeline's items.
    :param ledger: the shards and their cuts.
    :param ranges: the ranges the marks walk.
    """

    def __init__(self, items: StoreItems, ledger: ShardLedger, ranges: RangeBook) -> None:
        self._items = items
        self._ledger = ledger
        self._ranges = ranges

    def advance_high_water_mark(
        self,
        shard_id: str,
        *,
        expected_counter: int | None = None,
        last_lag_ms: int | None = None,
        known: ShardCheckpoint | None = None,
        last_interval_start_ms: int | None = None,
    ) -> ShardCheckpoint:
        """Move the shard's high-water mark forward to the end of its contiguous LOADED run.

        Only :meth:`rewind_high_water_mark` moves it back. The write is conditional on
        ``expected_counter`` and on the stored mark, so of two concurrent runs only one advances
        the shard.

        :param shard_id: the shard.
        :param expected_counter: the lease counter this run read (e.g. from its plan); default:
            the counter read now (the mark is recomputed from the stored ranges either way).
        :param last_lag_ms: the last MillisBehindLatest seen; replaces the stored one.
        :param known: the shard as this run last read or wrote it, instead of a read. The write is
            fenced on its counter, so a stale one (even one whose mark a rewind has dropped since)
            costs a conflict, never a wrong mark; with nothing to write, the shard is read after all.
        :param last_interval_start_ms: see :meth:`loaded_through`.
        :return: the shard after the update.
        :raises CheckpointConflict: another writer updated the shard since ``expected_counter``.
        """
        move = self._mark_move(MarkAdvance(shard_id, last_lag_ms, known), expected_counter, last_interval_start_ms)
        if isinstance(move, ShardCheckpoint):
            return move
        update = move.update
        advanced = self._ledger.fenced_update(update.shard, update.changes, extra_expected=update.extra_expected, grouped=True)
        move.log_moved()
        return advanced

    def advance_high_water_marks(
        self, advances: Sequence[MarkAdvance], last_interval_start_ms: int | None, concurrency: int
    ) -> list[ShardCheckpoint | None]:
        """:meth:`advance_high_water_mark` of each shard: their walks ``concurrency`` at a time,
        their writes in one grouped write (transactions of many shards, not a request per shard).

        :return: each shard after the update, or None where its write lost a race (another writer
            updated the shard since it was read): the caller advances that one again on a fresh read.
        """

        def move_of(advance: MarkAdvance) -> _MarkMove | ShardCheckpoint | None:
            try:
                return self._mark_move(advance, None, last_interval_start_ms)
            except CheckpointConflict:
                return None  # a known shard re-read and written alone lost its race

        moves = map_bounded(move_of, advances, concurrency)
        written = iter(self._ledger.fenced_updates([move.update for move in moves if isinstance(move, _MarkMove)]))
        advanced: list[ShardCheckpoint | None] = []
        for move in moves:
            if not isinstance(move, _MarkMove):
                advanced.append(move)
                continue
            shard = next(written)
            if shard is not None:
                move.log_moved()
            advanced.append(shard)
        return advanced

    def _mark_move(
        self, advance: MarkAdvance, expected_counter: int | None, last_interval_start_ms: int | None
    ) -> _MarkMove | ShardCheckpoint:
        """The write that moves the shard's mark (:meth:`advance_high_water_mark`), or the shard
        when there is nothing to write."""
        shard_id, known = advance.shard_id, advance.known
        shard = known if known is not None else self._ledger.require_shard(shard_id)
        if expected_counter is not None and shard.lease_counter != expected_counter:
            raise lease_conflict(shard_id, expected_counter, shard.lease_counter)
        current = shard.high_water_mark
        mark = self.loaded_through(shard_id, current, last_interval_start_ms)
        changes: dict[str, Any] = {}
        if mark is not None and mark != current:
            changes.update(boundary_attributes(mark, "hwm_"))
        if advance.last_lag_ms is not None:
            changes["last_lag_ms"] = advance.last_lag_ms
        if not changes:
            # Nothing to write means nothing fenced: a known shard must be read to be trusted.
            if known is None:
                return shard
            return self.advance_high_water_mark(
                shard_id, expected_counter=expected_counter, last_interval_start_ms=last_interval_start_ms
            )
        hwm_expected = {"hwm_instant_ms": current.instant_ms if current else ABSENT}
        return _MarkMove(FencedUpdate(shard, changes, hwm_expected), mark if "hwm_kind" in changes else None)

    def _range_from(self, cut: Boundary, last_interval_start_ms: int | None = None) -> ShardRange | None:
        """The range of the interval starting at ``cut``'s instant or, when there is none, the next
        stored range if nothing lies between (:meth:`_nothing_between`). One Query either way (none
        for a range this store has seen LOADED, or after the latest interval)."""
        known = self._ranges.loaded_range(cut.shard_id, cut.instant_ms)
        if known is not None:
            return known
        if last_interval_start_ms is not None and cut.instant_ms > last_interval_start_ms:
            return None
        following = self._ranges.first_range_from(cut.shard_id, cut.instant_ms)
        if following is None:
            return None
        if following.interval_start_ms == cut.instant_ms or self._nothing_between(cut, following):
            return following
        return None

    def _nothing_between(self, cut: Boundary, following: ShardRange) -> bool:
        """Whether the intervals between ``cut`` and the next stored range hold no record of the
        shard. They have no range when their runs listed the shards before this one existed (a
        later run of an earlier interval gave it the range that ends at ``cut``), or when the shard
        was quiet in them (``EMPTY``: only their cuts are stored, the next range's start cut).
        Empty for sure: the range starts at the very same cut, ``cut`` is the shard's end, the
        range starts at the shard's start, or the intervals before the range, or before the quiet
        intervals that lead to it, hold nothing to load (:meth:`_nothing_to_load_before`)."""
        nothing_between = cut.kind is BoundaryKind.SHARD_END or following.start.kind is BoundaryKind.SHARD_START
        if cut.same_cut(following.start) or (cut.is_concrete and nothing_between):
            return True
        if self._nothing_to_load_before(cut.shard_id, following.interval_start_ms):
            return True
        quiet_from = self._ledger.earliest_same_cut(cut, following.start)
        return quiet_from is not None and self._nothing_to_load_before(cut.shard_id, quiet_from)

    def _nothing_to_load_before(self, shard_id: str, until_ms: int) -> bool:
        """Whether the intervals without a range up to ``until_ms`` hold nothing any run can load:
        the interval ending there was planned before the shard existed, or ``until_ms`` is not
        after the prune horizon. Before the horizon no range is planned any more and records are
        past the stream's retention; the proof that the shard did not exist may be pruned."""
        if self._planned_before_it_existed(shard_id, until_ms):
            return True
        horizon_ms = self._ranges.prune_horizon()
        return horizon_ms is not None and until_ms <= horizon_ms

    def _planned_before_it_existed(self, shard_id: str, until_ms: int) -> bool:
        """Whether an ancestor's range of an interval ending at ``until_ms`` was planned before
        this shard was registered. Every run registers each shard it lists before it plans any
        range, so that run did not list this one: it was created later, after the interval's end
        (runs plan sealed intervals only), and holds no record before ``until_ms``.

        An ancestor quiet in that interval (``EMPTY``) has no range of it; then it took a record
        after the interval, so its cut at ``until_ms`` is a position, and the child's cut there is
        its start (``SHARD_START``, created after), which the walk crosses without this."""
        shard = self._ledger.get_shard(shard_id)
        if shard is None or shard.registered_ms is None:
            return False
        ancestors, seen = list(shard.parent_ids), set()
        while ancestors:
            ancestor = ancestors.pop()
            if ancestor in seen:
                continue
            seen.add(ancestor)
            planned_ms = self._ranges.planned_ms_of_interval_ending(ancestor, until_ms)
            if planned_ms is not None and planned_ms < shard.registered_ms:
                return True
            if (checkpoint := self._ledger.get_shard(ancestor)) is not None:
                ancestors.extend(checkpoint.parent_ids)
        return False

    def rewind_high_water_mark(
        self, shard_id: str, before_ms: int, *, fence: bool = False, known: ShardCheckpoint | None = None
    ) -> ShardCheckpoint:
        """Drop the shard's high-water mark if it lies past ``before_ms``, where a range that is
        not loaded starts (a backfill before the shard's earliest range): the mark claims that
        everything before it is loaded, so it restarts from that range. A DRAINED shard becomes
        CLOSED again until the commit that loads the range drains it.

        :param fence: the range is stored: with no mark to drop, bump the shard's lease counter
            all the same (a fenced touch). A commit that read the shard before the range was
            stored walked from the ranges it saw then, past this one, and holds the counter it
            read: its mark write must fail, and its retry walks from the stored range.
        :param known: the shard as this run last read or wrote it, instead of a read. The write is
            fenced on its counter, so a stale one costs a conflict, never a mark left past the
            range (a pruning only raises ``pruned_through_ms``, so a stale one refuses less, and its
            write conflicts); with nothing to write, the shard is read after all.
        :raises CheckpointConflict: another writer updated the shard concurrently (re-plan).
        """
        shard = known if known is not None else self._ledger.require_shard(shard_id)
        if shard.pruned_through_ms is not None and before_ms < shard.pruned_through_ms:
            raise PrunedHistory(
                f"Shard {shard_id} of pipeline {self._items.pipeline_id}: a range starting at {describe_instant(before_ms)} is "
                f"not loaded, but the shard's history before {describe_instant(shard.pruned_through_ms)} was loaded and "
                "pruned. "
                "Its records are past Kinesis retention; the range is not loaded."
            )
        mark = shard.high_water_mark
        if mark is None or mark.instant_ms <= before_ms:
            if fence:
                return self._ledger.fenced_update(shard, {}, extra_expected={}, grouped=True)
            # Nothing to write means nothing fenced: a known shard must be read to be trusted.
            return shard if known is None else self.rewind_high_water_mark(shard_id, before_ms)
        changes: dict[str, Any] = boundary_attributes(None, "hwm_")
        if shard.state is ShardState.DRAINED:
            changes["state"] = ShardState.CLOSED.value
        rewound = self._ledger.fenced_update(shard, changes, extra_expected={"hwm_instant_ms": mark.instant_ms})
        log.warning(
            "shard %s: a range starting at %s is not loaded yet and lies before the high-water mark "
            "(%s); the mark restarts from it", shard_id, describe_instant(before_ms), mark.describe(position=False),
        )  # fmt: skip
        return rewound

    def loaded_through(
        self, shard_id: str, since: Boundary | None = None, last_interval_start_ms: int | None = None
    ) -> Boundary | None:
        """End of the contiguous run of LOADED ranges from the shard's earliest range.

        Walks forward from ``since`` (the stored high-water mark, which lies on that run) one range
        at a time, so a run reads the ranges loaded since the mark moved, not the shard's history.

        :param since: a boundary the run is known to reach; None: start at the earliest range.
        :param last_interval_start_ms: the grid's latest interval start
            (:meth:`latest_interval_start`), read after the caller's ranges were marked LOADED: the
            walk does not look for ranges after it. A range there belongs to a run that registered
            its interval after that read, so its commit walks after those ranges were marked, and
            moves the mark across them and its own range itself.
        :return: the run's end, or None if the earliest range is not loaded.
        """
        # The stored mark is a copy of a boundary taken when it moved; a PENDING cut may have been
        # resolved since (to SHARD_END when the shard closed without a record after it).
        mark = self._ledger.get_boundary(shard_id, since.instant_ms) or since if since is not None else None
        if mark is None:
            first = self._ranges.earliest_range(shard_id)
            if first is None or first.state is not RangeState.LOADED:
                return None
            mark = first.end
        while mark.kind is not BoundaryKind.SHARD_END:
            following = self._range_from(mark, last_interval_start_ms)
            if following is None:
                break
            # Across an empty gap, everything before the next range is loaded: its children may
            # read the intervals the gap spans (the next range is read before them).
            mark = following.start if following.interval_start_ms != mark.instant_ms else mark
            if following.state is not RangeState.LOADED:
                break
            mark = following.end
        if mark.kind is BoundaryKind.PENDING:
            # A cut left PENDING (no reader met it) after a cut that is the shard's end is the end
            # too; otherwise the run would stop there for good when no later range is needed.
            earlier = self._ledger.boundary_at_or_before(shard_id, mark.instant_ms - 1)
            if earlier is not None and earlier.kind is BoundaryKind.SHARD_END:
                return Boundary(shard_id, mark.instant_ms, BoundaryKind.SHARD_END)
        return mark

    def mark_drained(self, shard_id: str, *, expected_counter: int | None = None) -> ShardCheckpoint:
        """CLOSED → DRAINED, only once the high-water mark is SHARD_END (its last range is loaded).

        Drops the stored lag: a drained shard has none.

        :param expected_counter: fence on this counter; default: the counter read now.
        :raises ShardNotDrained: the shard is open, or its loaded run does not reach SHARD_END.
        :raises CheckpointConflict: another writer updated the shard concurrently.
        """
        shard = self._ledger.require_shard(shard_id)
        if shard.state is ShardState.DRAINED:
            return shard
        if expected_counter is not None and shard.lease_counter != expected_counter:
            raise lease_conflict(shard_id, expected_counter, shard.lease_counter)
        mark = shard.high_water_mark
        if shard.state is not ShardState.CLOSED or mark is None or mark.kind is not BoundaryKind.SHARD_END:
            described = mark.describe(position=False) if mark else "none"
            raise ShardNotDrained(
                f"Shard {shard_id} of pipeline {self._items.pipeline_id} cannot be marked drained: state "
                f"{shard.state.value}, high-water mark {described} (needs CLOSED and SHARD_END)"
            )
        changes = {"state": ShardState.DRAINED.value, "last_lag_ms": None}
        drained = self._ledger.fenced_update(shard, changes, extra_expected={"state": ShardState.CLOSED.value})
        log.info("shard %s is drained", shard_id)
        return drained


    # pruning (core.prune) -------------------------------------------------------------------

    def claim_pruned_span(self, shard: ShardCheckpoint, horizon_ms: int) -> PrunedSpan | None:
        """Record on the shard item the span of its loaded history before ``horizon_ms`` that
        pruning deletes: its ranges from the earliest on that are LOADED and end by the horizon and
        by the high-water mark, and the cuts before the last one's end (which the next range
        starts from). The parts then forget what the span names (``core.prune.prune_shard``).

        A quiet shard's history reaches past its mark: the intervals after it whose cuts are still
        the mark's cut are ``EMPTY`` (no record, no range). The mark moves to the last of those cuts
        with the span, so a shard that stays quiet keeps no more cuts than one that loads, and the
        span stays below the mark: a range that a stale planner stores inside it (refused, see
        :meth:`rewind_high_water_mark`) is never met by a commit, and the next pruning deletes it.

        The span goes on the shard item first (a fenced write), so a planner that meets it never
        plans those intervals again (``PRUNED``), and a run killed among the deletes leaves a
        prefix deleted that the next pruning finishes, whatever its horizon: ranges go before the
        cuts they reference.

        :param shard: the shard as read (its listing); the span is written fenced on its counter.
        :return: what to forget, or None when nothing is to be pruned.
        :raises CheckpointConflict: another writer updated the shard since (pruned next time).
        """
        shard_id, mark = shard.shard_id, shard.high_water_mark
        if mark is None:
            return None
        pruned = shard.pruned_through_ms or 0
        # A span already recorded is history whatever this horizon (a pruning killed among its
        # deletes, then a lower horizon: a longer retention); its cuts go only with its ranges.
        limit = max(min(horizon_ms, mark.instant_ms), pruned)
        loaded: list[RangeSpan] = []
        quiet, reached, kept_cut = None, pruned, None
        for span in self._ranges.spans_through(shard_id, limit):
            if span.interval_end_ms > limit:
                # Loaded across the limit: the mark passed its start, so what lies before (quiet
                # intervals the mark crossed) is history. Its start cut stays: a TRIM_HORIZON
                # pipeline's floor range starts at the shard's start, before its interval.
                reached = max(reached, span.interval_start_ms if span.loaded else 0)
                kept_cut = span.start_instant_ms
                break
            if not span.loaded and span.interval_end_ms > pruned:
                break
            loaded.append(span)
            reached = max(reached, span.interval_end_ms)
        else:
            # Only when every range before the mark goes: one that is being planned there (stored,
            # its mark not rewound yet) keeps the cuts after it.
            quiet = self._quiet_cut(mark, horizon_ms) if mark.instant_ms <= horizon_ms else None
        through = quiet.instant_ms if quiet is not None else reached
        if through == pruned and not loaded:
            return None
        first = loaded[0].interval_start_ms if loaded else mark.instant_ms if quiet is not None else through
        changes: dict[str, Any] = {
            "pruned_from_ms": shard.pruned_from_ms if shard.pruned_from_ms is not None else first,
            "pruned_through_ms": through,
        }
        if quiet is not None:
            changes.update(boundary_attributes(quiet, "hwm_"))
        self._ledger.fenced_update(shard, changes, extra_expected={})
        return PrunedSpan(
            shard_id, through, tuple(span.interval_start_ms for span in loaded),
            cuts_before_ms=through if kept_cut is None else min(through, kept_cut),
        )  # fmt: skip

    def _quiet_cut(self, mark: Boundary, horizon_ms: int) -> Boundary | None:
        """The latest stored cut after the mark, by the horizon and the shard's next range, that is
        still the mark's cut: no record arrived between the two, so every interval between is
        ``EMPTY``. None when there is none."""
        if mark.position is None:  # only an AT or AFTER cut can be met again
            return None
        following = self._ranges.next_interval_start(mark.shard_id, mark.instant_ms)
        until = min(horizon_ms, following) if following is not None else horizon_ms
        quiet = None
        for cut in self._ledger.cuts_between(mark.shard_id, mark.instant_ms + 1, until):
            if not mark.same_cut(cut):
                break
            quiet = cut
        return quiet


@dataclass(frozen=True)
class PrunedSpan:
    """A shard's history recorded as pruned (:meth:`HighWaterMarks.claim_pruned_span`): what each
    part forgets."""

    shard_id: str
    through_ms: int
    """The span's end (``pruned_through_ms``)."""
    range_starts: tuple[int, ...]
    """The interval starts of the ranges that go, with their chunks and contents."""
    cuts_before_ms: int
    """The cuts before this instant go (after the ranges that reference them)."""
