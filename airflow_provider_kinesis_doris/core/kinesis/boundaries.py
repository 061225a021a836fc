"""Resolving ``boundary(shard, t)`` from an instant, once, with an AT_TIMESTAMP probe.

The probe opens one AT_TIMESTAMP iterator and follows empty pages until it meets a record
(→ AT that record), a null ``NextShardIterator`` (closed shard read to its end → SHARD_END) or
the tip of an open shard (``MillisBehindLatest == 0`` on an empty page → PENDING). An instant
in the future has no record at or after it yet (AWS rejects such a timestamp): PENDING on an
open shard, SHARD_END on a closed one.

An AT boundary keeps the arrival stamp of its record. If the shard's boundary at an earlier
instant ``S`` is AT a record that arrived at or after ``t``, every record before it arrived before
``S``, so the same record is the first at or after ``t``: ``boundary(t)`` is that cut, found
without a probe (an interval without new data then costs no Kinesis call).

A shard that was at its tip at the earlier cut (``AFTER`` a record: a reader settled it there)
usually has few records after it. Its cut at ``t`` is then read forward from that record instead
(a page of them and the empty page that proves the tip): AT the first record arriving at or after
``t``, or, at the tip of the open shard, AFTER its last record (``SHARD_END`` at the end of a
closed one). That cut is concrete from the start, so a quiet interval's range is known empty
without a read, and a reader never has to settle a PENDING end. A scan that cannot tell (more
records than a few pages, the earlier record trimmed) falls back to the probe. Where nothing after
the earlier record can have been trimmed, the scan opens just after it: a quiet shard then costs
one GetShardIterator and one empty page (:func:`scan_forward`).

Arrival stamps are used here only, to find a cut once; the cut is then stored and replays
follow the stored sequence number (invariant I2).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from botocore.exceptions import ClientError

from airflow_provider_kinesis_doris.core.stores.items import wall_clock_ms
from airflow_provider_kinesis_doris.core.errors import DataTrimmed, KinesisDorisError, aws_error_code
from airflow_provider_kinesis_doris.core.model import Boundary, BoundaryKind, Position, ShardInfo, describe_instant
from airflow_provider_kinesis_doris.core.kinesis.reader import user_records
from airflow_provider_kinesis_doris.core.kinesis.topology import kept_from
from airflow_provider_kinesis_doris.core.kinesis.shard_pages import (
    THROTTLING_ERRORS,
    backoff_delay,
    record_arrival_ms,
    sequence_request,
)
from airflow_provider_kinesis_doris.core.stores.shard_ledger import BoundaryStore

log = logging.getLogger(__name__)

DEFAULT_MAX_PAGES = 1000
# Our clock and the service's may differ a little: a timestamp the service calls "in the future"
# within this margin of our now is treated as such, anything older is a real error.
_CLOCK_SKEW_MS = 5_000
_PROBE_ATTEMPTS = 10
SCAN_PAGE_RECORDS = 1000
SCAN_PAGES = 3
"""A forward scan reads at most this many pages of that many records; a shard with more records
after its last cut falls back to the probe."""


def probe_boundary(
    client: Any,
    stream_name: str,
    shard_id: str,
    instant_ms: int,
    *,
    shard_is_open: bool,
    max_pages: int = DEFAULT_MAX_PAGES,
    clock: Callable[[], int] = wall_clock_ms,
    sleep: Callable[[float], None] = time.sleep,
) -> Boundary:
    """Where ``instant_ms`` cuts the shard, as Kinesis shows it now (not persisted).

    :param client: a boto3 Kinesis client.
    :param stream_name: the stream.
    :param shard_id: the shard.
    :param instant_ms: the instant (epoch ms).
    :param shard_is_open: whether ListShards reports the shard open; only an open shard can
        end the probe at its tip (a closed one is followed until its iterator is null).
    :param max_pages: GetRecords calls before giving up.
    :param clock: now, in epoch ms.
    :param sleep: pauses between retries of a throttled or expired probe.
    :return: AT(first record at/after the instant), SHARD_END, or PENDING.
    :raises KinesisDorisError: no answer within ``max_pages`` pages.
    """
    if instant_ms > clock():
        return _future_boundary(shard_id, instant_ms, shard_is_open)
    for attempt in range(_PROBE_ATTEMPTS):
        try:
            return _probe_once(client, stream_name, shard_id, instant_ms, shard_is_open, max_pages, clock)
        except ClientError as error:
            code = aws_error_code(error)
            # The probe is idempotent: it reopens its AT_TIMESTAMP iterator from scratch.
            if code not in (*THROTTLING_ERRORS, "ExpiredIteratorException") or attempt == _PROBE_ATTEMPTS - 1:
                raise
            log.warning("boundary probe of shard %s: %s; retry %d", shard_id, code, attempt + 1)
            sleep(backoff_delay(attempt))
    raise AssertionError("unreachable")


def _probe_once(
    client: Any, stream_name: str, shard_id: str, instant_ms: int, shard_is_open: bool, max_pages: int,
    clock: Callable[[], int],
) -> Boundary:
    try:
        iterator = client.get_shard_iterator(
            StreamName=stream_name,
            ShardId=shard_id,
            ShardIteratorType="AT_TIMESTAMP",
            Timestamp=datetime.fromtimestamp(instant_ms / 1000, tz=timezone.utc),
        )["ShardIterator"]
    except ClientError as error:
        if _is_future_timestamp_error(error, instant_ms, clock()):
            return _future_boundary(shard_id, instant_ms, shard_is_open)
        raise
    return _follow_to_cut(client, stream_name, shard_id, instant_ms, iterator, shard_is_open, max_pages)


def _follow_to_cut(
    client: Any,
    stream_name: str,
    shard_id: str,
    instant_ms: int,
    iterator: str,
    shard_is_open: bool,
    max_pages: int,
) -> Boundary:
    for _ in range(max_pages):
        page = client.get_records(ShardIterator=iterator, Limit=1)
        records = page.get("Records", [])
        if records:
            position = Position(int(records[0]["SequenceNumber"]))
            arrival = record_arrival_ms(records[0])
            return Boundary(shard_id, instant_ms, BoundaryKind.AT, position, arrival)
        next_iterator = page.get("NextShardIterator")
        if next_iterator is None:
            return Boundary(shard_id, instant_ms, BoundaryKind.SHARD_END)
        if shard_is_open and page.get("MillisBehindLatest") == 0:
            return Boundary(shard_id, instant_ms, BoundaryKind.PENDING)
        iterator = next_iterator
    raise KinesisDorisError(
        f"No cut found for shard {shard_id} of stream {stream_name} at {describe_instant(instant_ms)} "
        f"within {max_pages} GetRecords pages"
    )


def _future_boundary(shard_id: str, instant_ms: int, shard_is_open: bool) -> Boundary:
    kind = BoundaryKind.PENDING if shard_is_open else BoundaryKind.SHARD_END
    return Boundary(shard_id, instant_ms, kind)


def _is_future_timestamp_error(error: ClientError, instant_ms: int, now_ms: int) -> bool:
    code = aws_error_code(error)
    return code == "InvalidArgumentException" and instant_ms >= now_ms - _CLOCK_SKEW_MS


def resolve_boundary(
    client: Any,
    store: BoundaryStore,
    stream_name: str,
    shard: ShardInfo,
    instant_ms: int,
    *,
    created_after: bool = False,
    earlier: Boundary | None = None,
    unstored: bool = False,
    put: bool = True,
    trim_horizon_ms: int | None = None,
    max_pages: int = DEFAULT_MAX_PAGES,
    clock: Callable[[], int] = wall_clock_ms,
    found: Boundary | None = None,
) -> Boundary:
    """``boundary(shard, instant_ms)``: the stored one, or resolved now and stored once.

    :param created_after: the shard is known to be created after the instant (a child whose
        parent still took records at/after it, or the pipeline's TRIM_HORIZON floor): SHARD_START
        without probing.
    :param earlier: the shard's stored boundary at an earlier instant (the start of the range
        that ends at ``instant_ms``); see :func:`carried_forward`.
    :param unstored: the caller expects no stored boundary (the end of a range it is about to
        create): resolve first and put once, without reading first. A stored one still wins.
    :param put: store the cut found (False: the caller stores it, with the range it ends, and
        follows the stored one).
    :param trim_horizon_ms: instants before it may have lost records to retention: a probe there
        would land on the first record still kept and cut the shard in the wrong place.
    :param max_pages: GetRecords calls the probe may make.
    :param clock: now, in epoch ms (instants after it are in the future).
    :param found: what :func:`find_cut` gave for this shard, instant and ``earlier`` elsewhere (a
        loader process, ahead of the plan): taken where Kinesis would be read here.
    :return: the stored boundary (ours, or the one a concurrent resolver stored first).
    :raises DataTrimmed: the cut must be probed at an instant older than ``trim_horizon_ms`` (I6).
    """
    stored = None if unstored else store.get_boundary(shard.shard_id, instant_ms)
    if stored is not None:
        return stored
    # An earlier cut that is the shard's end wins over ``created_after``: both hold only for a
    # shard without records, and a range from SHARD_END back to SHARD_START would stop its loaded run.
    if (carried := carried_forward(earlier, instant_ms)) is not None:
        proposed = carried
    elif created_after:
        proposed = Boundary(shard.shard_id, instant_ms, BoundaryKind.SHARD_START)
    elif found is not None:
        proposed = found
    else:
        proposed = find_cut(
            client, stream_name, shard, instant_ms, earlier=earlier, trim_horizon_ms=trim_horizon_ms,
            max_pages=max_pages, clock=clock,
        )  # fmt: skip
    if not put:
        return proposed
    winner = store.put_boundary(proposed)
    lost = "" if winner == proposed else f" (stored by another writer; we probed {proposed.describe()})"
    log.info("boundary of shard %s at %s: %s%s", shard.shard_id, describe_instant(instant_ms), winner.describe(), lost)
    return winner


def find_cut(
    client: Any, stream_name: str, shard: ShardInfo, instant_ms: int, *, earlier: Boundary | None,
    trim_horizon_ms: int | None, max_pages: int = DEFAULT_MAX_PAGES, clock: Callable[[], int] = wall_clock_ms,
) -> Boundary:
    """``boundary(shard, instant_ms)`` as Kinesis shows it now, not stored: read forward from
    ``earlier`` (:func:`scan_forward`), else probed (:func:`probe_boundary`).

    :raises DataTrimmed: the cut must be probed at an instant older than ``trim_horizon_ms`` (I6).
    """
    scanned = scan_forward(client, stream_name, shard, earlier, instant_ms, trim_horizon_ms=trim_horizon_ms, clock=clock)
    if scanned is not None:
        return scanned
    if trim_horizon_ms is not None and instant_ms < trim_horizon_ms:
        raise DataTrimmed(
            f"Shard {shard.shard_id} of stream {stream_name} must be cut at {describe_instant(instant_ms)}, which is "
            f"older than the stream's trim horizon {describe_instant(trim_horizon_ms)} (its retention period before "
            "now): records of "
            "that interval may have been deleted before they were loaded, so it cannot be loaded exactly"
        )
    return probe_boundary(
        client, stream_name, shard.shard_id, instant_ms, shard_is_open=shard.is_open, max_pages=max_pages, clock=clock
    )


def scan_forward(
    client: Any, stream_name: str, shard: ShardInfo, earlier: Boundary | None, instant_ms: int,
    *, trim_horizon_ms: int | None = None, clock: Callable[[], int] = wall_clock_ms,
) -> Boundary | None:
    """``boundary(shard, instant_ms)`` read forward from ``earlier`` in a few pages, when
    ``earlier`` is AFTER a record (the shard was at its tip there); None when they cannot tell.

    The records after it give AT the first one arriving at or after the instant; with none, the
    end of a closed shard gives SHARD_END, and an empty page at the tip of an open one gives AFTER
    the last user record: the interval is sealed, so whatever arrives from now on arrives after the
    instant. As in the reader, only an empty page proves the tip: ``MillisBehindLatest`` is counted
    in milliseconds, and records put in the same millisecond as the last one still follow a page
    that says 0.

    The read opens after ``earlier``'s record where none of the records after it can have been
    trimmed (:func:`_opens_after`): one page fewer for a quiet shard. Otherwise it opens AT that
    record, which must come first (else retention took it, and the probe and the reader deal with
    that), and must be the last user record of its aggregate.
    """
    if earlier is None or earlier.kind is not BoundaryKind.AFTER or earlier.position is None or instant_ms > clock():
        return None
    opens_after = _opens_after(earlier, trim_horizon_ms)
    opening = "AFTER_SEQUENCE_NUMBER" if opens_after else "AT_SEQUENCE_NUMBER"
    try:
        iterator = client.get_shard_iterator(
            StreamName=stream_name, ShardId=shard.shard_id, **sequence_request(opening, earlier.position.sequence)
        )["ShardIterator"]
        return _scan_pages(client, shard, earlier, instant_ms, iterator, earlier_first=not opens_after)
    except ClientError as error:
        # Throttled, or the record is not there to open at: the probe and the reader can tell.
        if aws_error_code(error) in (*THROTTLING_ERRORS, "ExpiredIteratorException", "InvalidArgumentException"):
            return None
        raise


def _opens_after(earlier: Boundary, trim_horizon_ms: int | None) -> bool:
    """Whether a scan from ``earlier`` (AFTER a record) may open just after that record.

    Every record after it arrived after ``earlier``'s instant (the shard was read to its tip then),
    so none of them is trimmed while that instant lies well after the trim horizon
    (:func:`~.topology.kept_from`), and the first page starts with the first of them. And an AFTER
    cut is made at the tip, after the last user record of its aggregate (the reader's and this
    scan's), so nothing of the aggregate is skipped. Without a known horizon the scan opens AT the
    record, which proves it is kept."""
    return kept_from(earlier.instant_ms, trim_horizon_ms)


def _scan_pages(
    client: Any, shard: ShardInfo, earlier: Boundary, instant_ms: int, iterator: str, *, earlier_first: bool
) -> Boundary | None:
    assert earlier.position is not None
    last: dict[str, Any] | None = None  # the last record before the instant; None: earlier's own
    for _ in range(SCAN_PAGES):
        page = client.get_records(ShardIterator=iterator, Limit=SCAN_PAGE_RECORDS)
        records = page.get("Records", [])
        if earlier_first:
            if not records or int(records[0]["SequenceNumber"]) != earlier.position.sequence:
                return None
            if user_records(records[:1], shard.shard_id)[-1].position != earlier.position:
                return None  # an aggregate that goes on after the earlier cut
            earlier_first, records = False, records[1:]
        for record in records:
            arrival = record_arrival_ms(record)
            if arrival >= instant_ms:
                return Boundary(shard.shard_id, instant_ms, BoundaryKind.AT, Position(int(record["SequenceNumber"])), arrival)
            last = record
        if page.get("NextShardIterator") is None:
            return Boundary(shard.shard_id, instant_ms, BoundaryKind.SHARD_END)
        if not page.get("Records") and page.get("MillisBehindLatest") == 0:
            position = earlier.position if last is None else user_records([last], shard.shard_id)[-1].position
            return Boundary(shard.shard_id, instant_ms, BoundaryKind.AFTER, position)
        iterator = page["NextShardIterator"]
    return None


def carried_forward(earlier: Boundary | None, instant_ms: int) -> Boundary | None:
    """``boundary(shard, instant_ms)`` known without Kinesis from the boundary at an earlier instant.

    ``earlier`` AT a record arriving at or after ``instant_ms``: the records before it arrived
    before ``earlier.instant_ms``, hence before ``instant_ms``, so that record is also the first at
    or after ``instant_ms``: the same cut. ``earlier`` SHARD_END: every later cut is the end too.
    Otherwise (no arrival stamp kept, another kind, or an earlier arrival) None: only a probe can
    tell.
    """
    if earlier is not None and earlier.kind is BoundaryKind.SHARD_END and earlier.instant_ms < instant_ms:
        return Boundary(earlier.shard_id, instant_ms, BoundaryKind.SHARD_END)
    if earlier is None or earlier.kind is not BoundaryKind.AT or earlier.arrival_ms is None:
        return None
    if not earlier.instant_ms < instant_ms <= earlier.arrival_ms:
        return None
    return Boundary(earlier.shard_id, instant_ms, BoundaryKind.AT, earlier.position, earlier.arrival_ms)
