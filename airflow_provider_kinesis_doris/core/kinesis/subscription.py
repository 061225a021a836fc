"""Pages of one Kinesis shard pushed through enhanced fan-out: ``SubscribeToShard`` on a
registered consumer, in the shape the range reader takes from GetRecords (``shard_pages.Page``),
so both read modes cut the same ranges at the same records and load them under the same labels.

A subscription lasts at most five minutes, and only one may be open per consumer and shard: when
Kinesis ends one, the next starts AFTER the last record returned (from the opening position if
none was); ``ResourceInUseException`` (another run or partition holds the shard's subscription, or
the previous one is still closing) and throttling are retried with back-off.

.. seealso:: https://docs.aws.amazon.com/kinesis/latest/APIReference/API_SubscribeToShard.html
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from botocore.exceptions import EventStreamError

from airflow_provider_kinesis_doris.core.errors import aws_error_code
from airflow_provider_kinesis_doris.core.kinesis.shard_pages import (
    MAX_SUBSCRIBE_RETRIES,
    Page,
    ShardClient,
    backoff_delay,
    resume_request,
)

log = logging.getLogger(__name__)

# Errors Kinesis may push inside a subscription's stream that a new subscription can get past.
# ResourceInUse: a SubscribeToShard of the same consumer and shard 5 s or more after ours takes
# the subscription over (another run reading the shard); subscribing again takes it back, and each
# reader goes on from its own last record.
STREAM_RETRY_ERRORS = frozenset({"InternalFailureException", "KMSThrottlingException", "ResourceInUseException"})


class SubscriptionPager:
    """Pages of one shard from an opening request onward, pushed by ``SubscribeToShard``.

    Same contract as ``shard_pages.Pager``: a page's ``next_iterator`` is None once the closed
    shard was read to its end (the event carrying ``ChildShards``); a page with no records and
    ``MillisBehindLatest`` 0 is the tip. ``close()`` ends the open subscription, freeing the
    consumer's slot for this shard.

    :param shard: the shard's client (its ``subscribe`` counts the calls).
    :param consumer_arn: the registered stream consumer.
    :param opening: GetShardIterator-style arguments (``reader.iterator_request``).
    """

    def __init__(self, shard: ShardClient, consumer_arn: str, opening: dict[str, Any]) -> None:
        self._shard = shard
        self._consumer_arn = consumer_arn
        self._opening = opening
        self._stream: Any = None
        self._events: Iterator[dict[str, Any]] | None = None
        self._last_sequence: int | None = None

    def next_page(self) -> Page:
        retries = 0
        while True:
            if self._events is None:
                self._open(resume_request(self._opening, self._last_sequence))
            assert self._events is not None
            try:
                event = next(self._events)
            except StopIteration:
                # Kinesis ends every subscription after five minutes: continue in a new one.
                log.info("Subscription of shard %s ended; subscribing again after record %s",
                         self._shard.shard_id, self._last_sequence)  # fmt: skip
                self.close()
                continue
            except EventStreamError as error:
                self.close()
                if aws_error_code(error) not in STREAM_RETRY_ERRORS or retries >= MAX_SUBSCRIBE_RETRIES:
                    raise
                log.warning("Subscription of shard %s failed (%s); subscribing again",
                            self._shard.shard_id, aws_error_code(error))  # fmt: skip
                self._shard.sleep(backoff_delay(retries))
                retries += 1
                continue
            pushed = event.get("SubscribeToShardEvent")
            if pushed is None:
                continue
            records = pushed.get("Records", [])
            if records:
                self._last_sequence = int(records[-1]["SequenceNumber"])
            continuation = pushed.get("ContinuationSequenceNumber")
            if continuation is None:
                self.close()  # the shard's end: Kinesis ends the subscription too
            return Page(records, continuation, pushed.get("MillisBehindLatest"))

    def close(self) -> None:
        """End the open subscription, if any."""
        if self._stream is not None:
            self._stream.close()
        self._stream = self._events = None

    def _open(self, request: dict[str, Any]) -> None:
        self._stream = self._shard.subscribe(self._consumer_arn, starting_position(request))
        self._events = iter(self._stream)



def starting_position(request: dict[str, Any]) -> dict[str, Any]:
    """SubscribeToShard's ``StartingPosition`` for GetShardIterator-style arguments."""
    position: dict[str, Any] = {"Type": request["ShardIteratorType"]}
    if "StartingSequenceNumber" in request:
        position["SequenceNumber"] = request["StartingSequenceNumber"]
    if "Timestamp" in request:
        position["Timestamp"] = request["Timestamp"]
    return position
