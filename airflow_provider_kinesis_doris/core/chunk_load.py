"""Load one chunk of a range exactly once: its rows under one label, its dead letters under another.

Each label follows the intent log of invariant I7: record the intent in DynamoDB, load under the
label (Doris drops a duplicate label), record the outcome. A label whose outcome is recorded is
skipped without asking Doris, and one with an intent but no outcome is resolved through
``get_load_state`` before anything is sent again, whatever its age. An intent older than Doris's
label window whose label Doris no longer knows cannot be resolved: it is reported, never guessed.
A load that provably did not reach Doris is recorded ``NOT_LOADED`` and sent again under a fresh
intent. Rows Doris refuses are settled as dead letters in the chunk's content, and the range is
read again (``core.load``). See docs/checkpoints.md, "Chunks", for what this proves.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from airflow_provider_kinesis_doris.core.chunks import Chunk, ChunkContent, follow_an_amendment, settle_content
from airflow_provider_kinesis_doris.core.doris.labels import chunk_label, dead_letter_label
from airflow_provider_kinesis_doris.core.doris.options import StreamLoadOptions
from airflow_provider_kinesis_doris.core.doris.rejections import find_refused_rows, refused_rows
from airflow_provider_kinesis_doris.core.doris.result import LabelState, StreamLoadResult
from airflow_provider_kinesis_doris.core.errors import PermanentStreamLoadError, RowsRefused, StreamLoadError, UnresolvableLoad
from airflow_provider_kinesis_doris.core.fields import refuse_unmatched, sample_members
from airflow_provider_kinesis_doris.core.label_window import CLOCK_SKEW_MARGIN_SECONDS, past_trusted_window, trusted_window_seconds
from airflow_provider_kinesis_doris.core.model import Position, ShardRange, describe_instant
from airflow_provider_kinesis_doris.core.report import RangeReport
from airflow_provider_kinesis_doris.core.stores.items import CHUNK_INTENT, CHUNK_NOT_LOADED, ChunkRecord

if TYPE_CHECKING:  # core.load hands its clients in and imports load_chunk from here
    from airflow_provider_kinesis_doris.core.load import LoadClients

LOADED_STATES = frozenset({LabelState.VISIBLE.value, LabelState.COMMITTED.value})


FEW_REFUSED_ROWS = 10
"""Fewer rows refused in a chunk are dead-lettered whatever their share (a small chunk at the end of
an interval may hold one bad record and little else); from this many, ``max_bad_record_ratio``
applies."""


_RECORD_SPECIFIC = re.compile(r": |, src value is |\. first 32 bytes of input str")


def reason_kind(reason: str) -> str:
    """A dead letter's reason without what is specific to its record (the decoder's position,
    the exception's text, the refused value): what to count and alert on."""
    return _RECORD_SPECIFIC.split(reason, maxsplit=1)[0][:200]


def load_chunk(
    clients: LoadClients, shard_range: ShardRange, chunk: Chunk, recorded: Mapping[str, ChunkRecord],
    report: RangeReport, sent: set[Position],
) -> None:  # fmt: skip
    """Load one chunk's rows and dead letters; ``recorded``: the range's chunks by label, as this
    pass read them when it began."""
    pipeline = clients.job.pipeline
    report.records_skipped += chunk.skipped
    if not chunk.line_count and not chunk.dead_letters:
        # Only records that make no row: nothing to send, nothing to settle (a replay cuts the
        # same chunk again, since its records and the limits it was cut by are the same).
        report.records += chunk.record_count
        report.chunks += 1
        sent.add(chunk.first)
        return
    ids = (pipeline.pipeline_id, pipeline.stream_name, chunk.shard_id, chunk.first, chunk.last)
    first_label = chunk_label(*ids) if chunk.line_count else dead_letter_label(*ids)
    # Names this pass in the intents it writes: only the attempt that wrote an intent may record
    # that its send did not reach Doris.
    attempt = uuid.uuid4().hex
    settled, intent_put = settle_content(clients.store.chunks, shard_range, chunk, first_label, recorded.get(first_label), attempt)
    if chunk.line_count:
        if not report.fields and pipeline.table_columns is not None:
            report.fields = sorted(sample_members(chunk.body))
            if pipeline.unmatched_fields == "fail":
                refuse_unmatched(report.fields, pipeline.table_columns, chunk.shard_id)
        label = chunk_label(*ids)
        try:
            loaded = _load_once(
                clients, shard_range, chunk, label, pipeline.doris_table, pipeline.load_options, chunk.body,
                recorded.get(label), report, attempt, intent_put=intent_put,
            )  # fmt: skip
        except PermanentStreamLoadError as error:
            if (failed := refused_rows(error)) is None:
                raise
            _settle_refused_rows(clients, shard_range, chunk, settled, failed, error, report)
        known = recorded.get(label)
        if loaded is None and chunk.dead_letters and (known is None or known.state not in LOADED_STATES):
            follow_an_amendment(clients.store.chunks, shard_range, chunk)
        report.labels.append(label)
        report.chunks_already_loaded += loaded is None
        if loaded is None:
            report.rows_already_loaded += chunk.line_count
        else:
            report.rows_loaded += loaded.number_loaded_rows
            report.rows_filtered += loaded.number_filtered_rows
            report.rows_unselected += loaded.number_unselected_rows
    if chunk.dead_letters:
        body = b"".join(dead.as_row(pipeline.stream_name) + b"\n" for dead in chunk.dead_letters)
        label = dead_letter_label(*ids)
        loaded = _load_once(
            clients, shard_range, chunk, label, pipeline.dead_letter_table, pipeline.dead_letter_options, body,
            recorded.get(label), report, attempt, intent_put=intent_put and label == first_label,
        )  # fmt: skip
        if loaded is None:
            report.dead_letters_already_loaded += len(chunk.dead_letters)
        else:
            report.dead_lettered += len(chunk.dead_letters)
            for dead_letter in chunk.dead_letters:
                kind = reason_kind(dead_letter.reason)
                report.dead_letter_reasons[kind] = report.dead_letter_reasons.get(kind, 0) + 1
    report.records += chunk.record_count
    report.chunks += 1
    sent.add(chunk.first)


def _settle_refused_rows(
    clients: LoadClients, shard_range: ShardRange, chunk: Chunk, settled: str, failed: StreamLoadResult,
    error: PermanentStreamLoadError, report: RangeReport,
) -> NoReturn:  # fmt: skip
    """Settle the rows Doris refused in ``chunk`` as dead letters (its load failed whole, so
    nothing of it is visible yet), unless so many are refused that the table and the records
    cannot match; then raise :class:`RowsRefused` to load the chunk again without them.

    :param report: counts the failed load and the probes (their labels enter Doris's label window).
    """
    report.loads_aborted += 1
    pipeline = clients.job.pipeline
    where = f"chunk {chunk.first.encode()}..{chunk.last.encode()} of shard {chunk.shard_id} (interval {describe_instant(shard_range.interval_start_ms)})"
    share = failed.number_filtered_rows / max(failed.number_total_rows, 1)
    if failed.number_filtered_rows >= FEW_REFUSED_ROWS and share > pipeline.max_bad_record_ratio:
        raise PermanentStreamLoadError(
            f"Doris refused {failed.number_filtered_rows} of {failed.number_total_rows} rows of {where}, more than "
            f"max_bad_record_ratio ({pipeline.max_bad_record_ratio:g}): the table {pipeline.doris_database}."
            f"{pipeline.doris_table} and the records probably do not match (a column's type, a NOT NULL column). "
            f"Nothing of the chunk was loaded; see Doris's error log {failed.error_url}",
            error_url=failed.error_url, result=failed,
        ) from error
    lines = chunk.body.split(b"\n")[:-1]
    found = find_refused_rows(clients.doris, pipeline.doris_database, pipeline.doris_table, pipeline.load_options, lines)
    report.probe_loads += found.probe_loads
    report.loads_aborted += found.probes_aborted
    refused = found.reasons
    if not refused:
        raise error
    # A refused line makes its whole record a dead letter (a record's rows load together or not).
    line_records = chunk.line_records()
    amended = ChunkContent.decode(settled).with_refused({line_records[index]: reason for index, reason in refused.items()})
    clients.store.chunks.amend_chunk_content(shard_range.shard_id, shard_range.interval_start_ms, chunk.first, settled, amended.encode())
    raise RowsRefused(f"Doris refused {len(refused)} of {len(lines)} rows of {where}; they are dead letters now")



def _load_once(
    clients: LoadClients,
    shard_range: ShardRange,
    chunk: Chunk,
    label: str,
    table: str,
    options: StreamLoadOptions,
    body: bytes,
    known: ChunkRecord | None,
    report: RangeReport,
    attempt: str,
    *,
    intent_put: bool = False,
) -> Any:
    """Load ``body`` under ``label`` unless the intent log or Doris proves it loaded.

    :param known: the chunk as recorded when this pass began, or None. An intent another run
        records after that is not missed: ours is put once, so we then load as a run that did not
        settle every attempt (Doris refuses a label it holds).
    :param report: counts a load that needed more than one attempt (``chunks_retried``).
    :param attempt: names this pass in the intent it writes.
    :param intent_put: this pass put the label's intent already (with the chunk's content), as
        ``attempt``.
    :return: the Stream Load result of a load made now, or None if it was already loaded.
    """
    chunks, doris, database = clients.store.chunks, clients.doris, clients.job.pipeline.doris_database
    shard_id, interval_start_ms = shard_range.shard_id, shard_range.interval_start_ms
    if known is not None and known.state in LOADED_STATES:
        return None
    if known is not None and known.state == CHUNK_INTENT:
        # An earlier attempt may have reached Doris, whenever it was: ask before sending again,
        # so a label Doris still knows is never loaded twice and its body never re-sent (I7).
        state = doris.get_load_state(database, label)
        if state.is_loaded:
            chunks.record_chunk_outcome(label, state.value, shard_id=shard_id, interval_start_ms=interval_start_ms)
            return None
        label_keep_seconds = clients.job.pipeline.doris.label_keep_seconds
        if state is LabelState.UNKNOWN and past_trusted_window(known.updated_ms, clients.clock_ms(), label_keep_seconds):
            raise UnresolvableLoad(
                f"Chunk {label} of shard {chunk.shard_id} ({chunk.first.encode()}..{chunk.last.encode()}, range of "
                f"interval {describe_instant(interval_start_ms)}) was "
                f"sent more than {trusted_window_seconds(label_keep_seconds)} s ago (label_keep_seconds "
                f"{label_keep_seconds} less {CLOCK_SKEW_MARGIN_SECONDS} s the workers' "
                "clocks may disagree by) and Doris no longer "
                "knows its label: whether it was loaded cannot be decided. Check the table for these positions, "
                "then delete the chunk item from the checkpoint table to load it again, or record it as VISIBLE."
            )
        # UNKNOWN inside the window or ABORTED: the label is free and nothing of it is visible.
        # PREPARE: another attempt is still running; load_idempotently waits for it.
    # Whether this attempt owns the intent, so that no other send of this label can be under way:
    # only then can a failure of our own send prove the chunk not loaded. An intent found written
    # by another attempt is never taken over: that attempt may still be sending.
    owned = intent_put
    if known is None:
        if not intent_put:
            owned = chunks.put_chunk_intent(label, chunk.shard_id, chunk.first, chunk.last, interval_start_ms, attempt=attempt)
    elif known.state != CHUNK_INTENT:
        # Known not loaded (never sent, or refused for certain): a fresh intent, so the label window
        # of this attempt starts now; only over the chunk as this pass read it.
        owned = chunks.renew_chunk_intent(known, attempt)
        if not owned:
            current = chunks.get_chunk(label, shard_id, interval_start_ms)
            if current is not None and current.state in LOADED_STATES:
                return None
    try:
        result = doris.load_idempotently(database, table, label, body, options)
    except StreamLoadError as error:
        if error.definitely_not_loaded and owned:
            # Provably not in Doris: a retry after the label window sends it again. Only while the
            # intent is still ours: an outcome another attempt recorded meanwhile stays.
            chunks.record_chunk_outcome(
                label, CHUNK_NOT_LOADED, shard_id=shard_id, interval_start_ms=interval_start_ms, owner=attempt
            )  # fmt: skip
        raise
    report.chunks_retried += result.attempts > 1
    txn_id = str(result.result.txn_id) if result.result is not None and result.result.txn_id is not None else None
    loaded = result.result
    chunks.record_chunk_outcome(
        label,
        result.state.value,
        txn_id,
        shard_id=shard_id,
        interval_start_ms=interval_start_ms,
        rows_loaded=loaded.number_loaded_rows if loaded else 0,
        rows_filtered=loaded.number_filtered_rows if loaded else 0,
    )
    if loaded is not None and result.state is LabelState.VISIBLE:
        clients.label_window.offer(label)
    return loaded
