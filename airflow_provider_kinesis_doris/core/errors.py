"""Errors of the data path, one class per meaning, so callers decide on type, not on text.

Messages name the bad input (stream, shard, label, table) and never carry credentials.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from typing import Any

PROJECT_URL = "https://github.com/airflow-provider-kinesis-doris/airflow-provider-kinesis-doris"
"""Where the README and the docs live: a message points there, since only the package is installed."""


def readme_section(title: str) -> str:
    """``the README, "Performance" (<project URL>#performance)``, for a message: the heading to look for
    and its anchor, as GitHub derives it from the heading."""
    anchor = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
    return f'the README, "{title}" ({PROJECT_URL}#{anchor})'


def doc_url(path: str) -> str:
    """The URL of a file of the repository's ``docs/`` (not in the wheel), for a message."""
    return f"{PROJECT_URL}/blob/main/docs/{path}"


class KinesisDorisError(Exception):
    """Base of every error raised by this package."""


class ConfigurationError(KinesisDorisError, ValueError):
    """A parameter or connection setting is invalid; nothing was read or loaded."""


# --- source side -------------------------------------------------------------------------------


class UnmatchedFields(ConfigurationError):
    """Records hold JSON members that no column of the table takes (``core.fields``), and the
    mapping says to fail instead of loading without them."""


class DataTrimmed(KinesisDorisError):
    """A range starts before the shard's trim horizon: Kinesis retention deleted records that
    were never loaded. Never skipped silently (invariant I6)."""


class PrunedHistory(KinesisDorisError):
    """An interval reaches into a shard's pruned history (``core.prune``) without lying inside the
    span its loaded ranges covered: its records are past Kinesis retention, and what was loaded
    of them is no longer tracked. Never planned again, never skipped silently."""


class BoundaryConflict(KinesisDorisError):
    """Another writer persisted a different boundary first; re-read the stored one."""


class BoundaryNotFound(KinesisDorisError):
    """A read reached the shard's tip or end without meeting the record its stored end boundary
    names: the boundary and the shard disagree, and nothing is guessed."""


class CheckpointConflict(KinesisDorisError):
    """A conditional write on a shard or range lost to a concurrent writer (fencing, I4).
    Another run holds or advanced the same shard; this run must not move it."""


# --- sink side ---------------------------------------------------------------------------------


class StreamLoadError(KinesisDorisError):
    """A Stream Load did not succeed. ``retryable`` tells whether the same label may be re-sent.

    ``definitely_not_loaded`` is True when the client knows the label's data did not load: no
    attempt reached Doris (connection refused before anything was sent), or Doris answered with a
    definite ``Fail`` (its transaction is aborted and the label free again). The loader records
    that outcome, so a retry after Doris's label window re-sends instead of raising
    :class:`UnresolvableLoad`. False means "unknown": the load may have gone through.
    """

    retryable: bool = False
    definitely_not_loaded: bool = False


class RetryableStreamLoadError(StreamLoadError):
    """5xx, reset, timeout, -235 too many versions, running-transaction limit, no backend."""

    retryable = True


class PermanentStreamLoadError(StreamLoadError):
    """Data quality (see ``error_url``), unknown table, authentication, bad header.

    ``result`` is Doris's reply (a ``StreamLoadResult``) when the failure is one."""

    def __init__(self, message: str, *, error_url: str | None = None, result: Any = None) -> None:
        super().__init__(message)
        self.error_url = error_url
        self.result = result


class UnrecognisedReply(PermanentStreamLoadError):
    """An HTTP 200 reply whose JSON object has none of the shapes Doris sends (BE load result,
    FE ``RestBaseResult``, FE envelope, BE 2PC reply): nothing about the request's outcome can be
    read from it. Permanent, since asking again gets the same shape; never
    ``definitely_not_loaded``, since a load may have gone through all the same."""


class ShardsWaiting(KinesisDorisError):
    """Shards of the interval whose ranges are planned but could not be loaded in this run: a
    parent is not loaded up to them yet (I5). Everything else of the interval is loaded and
    committed; the run still fails, so Airflow retries it instead of marking it green (I9).

    :param waiting: shard id -> the parents it waits for.
    :param result: what the run loaded and committed of the rest (a ``core.pipeline.IntervalResult``),
        for its report and metrics.
    :param lacking: ``(start_ms, end_ms)``, the span the parents are not loaded in yet, which runs of
        its intervals load (start None: no range of a parent was ever planned).
    """

    def __init__(
        self, message: str, *, waiting: dict[str, tuple[str, ...]], result: Any, lacking: tuple[int | None, int]
    ) -> None:
        super().__init__(message)
        self.waiting = waiting
        self.result = result
        self.lacking = lacking


class HandoverPending(KinesisDorisError):
    """A handover between two pipelines is underway (``core.handover``): the run waits for the
    other pipeline's step; its retry goes on."""


class IntervalsSkipped(KinesisDorisError):
    """Intervals of the pipeline that no DAG run covers are not loaded (``core.catch_up``): the
    operator was told not to load them, or the timetable does not tile them. ``intervals`` holds
    their ``(start_ms, end_ms)``."""

    def __init__(self, message: str, *, intervals: tuple[tuple[int, int], ...]) -> None:
        super().__init__(message)
        self.intervals = intervals


class UnresolvableLoad(KinesisDorisError):
    """A chunk's intent is recorded but Doris no longer knows its label (past the label window)
    and nothing else proves the outcome. Reported, never guessed (invariant I7)."""


class LabelWindowBroken(KinesisDorisError):
    """Doris forgot a label younger than ``label_keep_seconds``: its label window is shorter than
    the pipeline assumes, so an ``UNKNOWN`` intent may have been loaded and must not be sent again.
    Nothing is loaded until the settings agree (``core.label_window``)."""


class CheckpointNotFound(KinesisDorisError, LookupError):
    """An update names a shard, range or chunk that was never stored."""


class ShardNotDrained(KinesisDorisError):
    """``mark_drained`` was asked for a shard whose last range is not loaded (or that is open)."""


class LoadOutcomeUnknown(RetryableStreamLoadError):
    """The body may have reached the BE, but no reply came back (reset, read timeout).

    The load may or may not be applied: resolve the label with ``get_load_state`` before sending
    it again. :meth:`DorisStreamLoadClient.load_idempotently` does this itself.
    """


class DorisSqlError(KinesisDorisError):
    """A statement sent to the FE's HTTP SQL endpoint failed; the message carries Doris's text."""


class ChunkContentChanged(KinesisDorisError):
    """A record of a chunk whose content is settled maps differently now, in a way the settled
    content cannot absorb (it was a row, and a row cannot be rebuilt from a dead letter), or the
    chunk no longer holds the records it held. Nothing of the chunk is sent; a retry follows the
    settled content again (a transient failure of a user transform passes)."""


class ChunkContentSettledElsewhere(ChunkContentChanged):
    """Another attempt settled or amended a chunk's content after this pass read the contents (or
    a fresh pass read none): nothing of the chunk was sent, and the range is read again following
    the stored contents."""


class ChunkContentTooLarge(KinesisDorisError):
    """A chunk's dead letters do not fit one checkpoint item: refused rather than guessed."""


class RowsRefused(KinesisDorisError):
    """Doris refused rows of a chunk, now settled as dead letters: the range is read again."""


class Phase(Enum):
    """A phase of one interval's run (``core.pipeline.run_interval``), as a failure names it: a
    failed commit leaves rows in Doris that a rerun commits, a failed plan loaded nothing."""

    PLANNING = "planning"
    LOADING = "loading"
    COMMITTING = "committing"


_PHASE_ATTRIBUTE = "kinesis_doris_phase"


@contextmanager
def in_phase(phase: Phase) -> Iterator[None]:
    """Mark an exception raised inside with ``phase`` (:func:`failed_phase`), keeping its class,
    so callers still decide on type; the innermost phase wins."""
    try:
        yield
    except Exception as exc:
        if not hasattr(exc, _PHASE_ATTRIBUTE):
            setattr(exc, _PHASE_ATTRIBUTE, phase)
        raise


def failed_phase(exc: BaseException) -> Phase:
    """The phase ``exc`` was raised in; planning when no phase marked it (what a run does before
    its first plan: finding skipped intervals, checking their trim horizon)."""
    return getattr(exc, _PHASE_ATTRIBUTE, Phase.PLANNING)


def aws_error_code(error: BaseException) -> str:
    """The error code of a botocore ``ClientError`` (e.g. ``ResourceNotFoundException``), "" if none."""
    response = getattr(error, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


@dataclass(frozen=True)
class RangeFailure:
    """A typed error of one range as plain JSON, so it crosses from a Spark executor (or a loader
    process) to the driver and is raised there as the same class (Spark would otherwise wrap it in its own
    exception, leaving only text).

    :param type: the class name, one of this module's :class:`KinesisDorisError` classes.
    :param shard: the shard whose range failed.
    :param message: the error's message.
    :param where: the process the range failed in, as the driver's message says it.
    :param label: the Stream Load label concerned, when the error names one.
    """

    type: str
    shard: str
    message: str
    where: str
    label: str | None = None

    @classmethod
    def of(cls, error: KinesisDorisError, shard_id: str, where: str) -> RangeFailure:
        label = getattr(error, "label", None) or getattr(getattr(error, "result", None), "label", None)
        return cls(type(error).__name__, shard_id, str(error), where, label)

    def to_error(self) -> KinesisDorisError:
        """The error again, as its own class (``KinesisDorisError`` for a name this module lacks)."""
        error_class = globals().get(self.type)
        if not (isinstance(error_class, type) and issubclass(error_class, KinesisDorisError)):
            error_class = KinesisDorisError
        error = error_class.__new__(error_class)
        Exception.__init__(error, f"{self.message} (shard {self.shard}, {self.where})")
        return error
