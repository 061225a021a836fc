"""Proof at run time that Doris remembers labels as long as ``label_keep_seconds`` says.

A chunk whose intent is recorded but whose label Doris answers ``UNKNOWN`` is sent again only
inside the label window: had it loaded, Doris would still know the label and refuse it (I7). The
FE's real window can be shorter than the pipeline's ``label_keep_seconds`` without any error:
``streaming_label_keep_max_second`` lowered, or ``label_num_threshold`` evicting the oldest labels
of a busy database early (the refused-rows bisection's aborted probe loads count towards it). Then
re-sending an ``UNKNOWN`` intent may load its rows twice.

So each run, in the driver before any lane or Spark task loads, asks Doris about a label it knows
was loaded: the oldest of a few kept for the purpose (the canaries, one newer every quarter window)
that is still inside the trusted window. ``UNKNOWN`` there fails the task with
:class:`LabelWindowBroken` before any intent is re-sent. Checking needs no privilege; it costs one
GetItem and one label lookup per run, however many lanes or Spark partitions load. A
window shortened to W' is found once the oldest canary is older than W', within a quarter window.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from airflow_provider_kinesis_doris.core.doris.client import DorisStreamLoadClient
from airflow_provider_kinesis_doris.core.doris.result import LabelState
from airflow_provider_kinesis_doris.core.errors import LabelWindowBroken, readme_section
from airflow_provider_kinesis_doris.core.load_job import LoadJob
from airflow_provider_kinesis_doris.core.settings import Credentials
from airflow_provider_kinesis_doris.core.stores.chunk_log import ChunkLog
from airflow_provider_kinesis_doris.core.stores.items import LabelCanary

log = logging.getLogger(__name__)

CLOCK_SKEW_MARGIN_SECONDS = 600
"""How far the clock of a worker replaying a chunk may be behind the one that recorded its intent.
A replayer behind by more than the margin would take a label Doris has forgotten for one it still
keeps and send the chunk again. Both clocks sign their DynamoDB requests (SigV4), which AWS refuses
when more than 5 minutes off its own, and botocore does not correct skew: two workers that reached
the checkpoint table disagree by at most 10 minutes. An ``UNKNOWN`` label younger than
``label_keep_seconds`` by less than this is reported (:class:`UnresolvableLoad`), not sent."""

CANARIES_PER_WINDOW = 4
"""A new canary is kept once the newest is older than this share of the trusted window."""


def trusted_window_seconds(label_keep_seconds: int) -> int:
    """How long after a label's load Doris is trusted to remember it, on any worker's clock."""
    return max(label_keep_seconds - CLOCK_SKEW_MARGIN_SECONDS, 0)


def past_trusted_window(updated_ms: int, now_ms: int, label_keep_seconds: int) -> bool:
    """Whether Doris may have forgotten the label of a chunk whose intent was written at
    ``updated_ms``: that is the clock of the worker that wrote it, ``now_ms`` this worker's, so a
    label is taken as still remembered only while it is younger than ``label_keep_seconds`` by
    more than the two clocks can disagree (:data:`CLOCK_SKEW_MARGIN_SECONDS`)."""
    return now_ms - updated_ms >= trusted_window_seconds(label_keep_seconds) * 1000


class LabelWindowWatch:
    """One process's part in checking the label window: the driver's :meth:`check` once per run
    before anything loads; each lane's :meth:`offer` of every label it loads (one of them becomes
    a canary when a newer one is due)."""

    def __init__(self, chunks: ChunkLog, doris: Any, database: str, label_keep_seconds: int,
                 clock_ms: Callable[[], int]) -> None:  # fmt: skip
        self._chunks, self._doris, self._database, self._clock_ms = chunks, doris, database, clock_ms
        self._label_keep_seconds = label_keep_seconds
        self._window_ms = trusted_window_seconds(label_keep_seconds) * 1000
        self._lock = threading.Lock()
        self._stored: list[LabelCanary] | None = None
        self._due = False

    def check(self) -> None:
        """Ask Doris about the oldest canary still inside the trusted window (once per run).

        :raises LabelWindowBroken: Doris forgot it.
        :raises StreamLoadError: Doris could not be asked.
        """
        with self._lock:
            if self._stored is not None:
                return
            now = self._clock_ms()
            stored = self._chunks.label_canaries()
            inside = self._inside(stored, now)
            if inside:
                self._ask(inside[0], now)
            self._keep(stored, inside, now)

    def offer(self, label: str) -> None:
        """``label`` was just answered VISIBLE: keep it as a canary if a newer one is due (one
        conditional write per lane at most; a lost race leaves the other lane's canary). A lane
        reads the canaries at its first offer: the driver asked Doris about them already."""
        with self._lock:
            now = self._clock_ms()
            if self._stored is None:
                stored = self._chunks.label_canaries()
                self._keep(stored, self._inside(stored, now), now)
            if not self._due:
                return
            self._due = False
            stored = self._stored or []
            self._chunks.replace_label_canaries(stored, [*self._inside(stored, now), LabelCanary(label, now)])

    def _inside(self, canaries: list[LabelCanary], now: int) -> list[LabelCanary]:
        """The canaries still inside the trusted window, oldest first."""
        return [canary for canary in canaries if now - canary.loaded_ms < self._window_ms]

    def _keep(self, stored: list[LabelCanary], inside: list[LabelCanary], now: int) -> None:
        """Remember the stored canaries (what the conditional write expects) and whether a newer
        one is due."""
        self._stored = stored
        self._due = not inside or now - inside[-1].loaded_ms >= self._window_ms // CANARIES_PER_WINDOW

    def _ask(self, canary: LabelCanary, now: int) -> None:
        state = self._doris.get_load_state(self._database, canary.label)
        if state is not LabelState.UNKNOWN:
            log.debug("label window: Doris still knows %s (%s)", canary.label, state.value)
            return
        loaded = datetime.fromtimestamp(canary.loaded_ms / 1000, tz=timezone.utc).isoformat(timespec="seconds")
        raise LabelWindowBroken(
            f"Doris no longer knows label {canary.label} of database {self._database}, loaded at {loaded} "
            f"({(now - canary.loaded_ms) // 1000} s ago), although label_keep_seconds is {self._label_keep_seconds}: "
            "Doris forgets labels sooner than the pipeline assumes, so a chunk whose load may have reached Doris "
            "could be loaded twice if sent again. Nothing was loaded. Set the connection's label_keep_seconds to "
            "Doris's real window, or raise the FE's streaming_label_keep_max_second (and label_num_threshold, "
            "which evicts the oldest labels of a busy database early); see "
            f"{readme_section('Exactly once: what is guaranteed, and the limits')}, 'Label window'."
        )


def check_label_window(
    job: LoadJob, chunks: ChunkLog, credentials: Credentials, clock_ms: Callable[[], int], *, doris: Any | None = None
) -> None:
    """The run's label-window canary (:class:`LabelWindowWatch`), asked in the driver once before the
    runner starts, with the driver's own store: lanes and Spark partitions then only offer their
    labels. The loaders' AWS credentials (``executor_credentials``) may hold only on the
    executors, so the canary never builds AWS clients from them.

    :param doris: the client to ask; None: one built from the job and ``credentials``' password.
    :raises LabelWindowBroken: Doris forgot a label younger than ``label_keep_seconds``.
    """
    pipeline = job.pipeline
    client = doris if doris is not None else DorisStreamLoadClient(job.doris_config(credentials), retry_policy=pipeline.retry_policy)
    try:
        LabelWindowWatch(chunks, client, pipeline.doris_database, pipeline.doris.label_keep_seconds, clock_ms).check()
    finally:
        if doris is None:
            client.close()
