"""Pages of one Kinesis shard: GetShardIterator and GetRecords with back-off on throttling, and
an expired iterator renewed after the last record returned. The range reader
(:mod:`~airflow_provider_kinesis_doris.core.kinesis.reader`) reads through them.
"""

from __future__ import annotations

import binascii
import json
import logging
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from botocore.exceptions import ClientError

from airflow_provider_kinesis_doris.core.errors import DataTrimmed, aws_error_code
from airflow_provider_kinesis_doris.core.retry import backoff_seconds

log = logging.getLogger(__name__)

THROTTLING_ERRORS = frozenset({"ProvisionedThroughputExceededException", "LimitExceededException"})
BACKOFF_BASE_S = 0.25
BACKOFF_CAP_S = 8.0
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_ONE_MS = timedelta(milliseconds=1)


@dataclass(frozen=True, slots=True)
class Page:
    records: list[dict[str, Any]]
    next_iterator: str | None
    millis_behind: int | None

    @property
    def at_tip(self) -> bool:
        """Caught up: nothing more to read right now (an empty page alone does not mean that)."""
        return not self.records and self.millis_behind == 0


# ResourceInUse: a consumer's subscription to the shard is held (by another run or partition, or
# by its own previous subscription while Kinesis closes it); worth waiting for like throttling.
SUBSCRIBE_RETRY_ERRORS = THROTTLING_ERRORS | {"ResourceInUseException"}
MAX_SUBSCRIBE_RETRIES = 30
"""Back-off of up to 8 s each: a held subscription gets about four minutes to be released."""


class ShardClient:
    """GetShardIterator, GetRecords and SubscribeToShard on one shard, with back-off on
    throttling and a count of GetRecords and SubscribeToShard calls."""

    def __init__(self, client: Any, stream: str, shard_id: str, limit: int, max_retries: int,
                 sleep: Callable[[float], None]) -> None:  # fmt: skip
        self._client = client
        self.stream = stream
        self.shard_id = shard_id
        self._limit = limit
        self._max_retries = max_retries
        self.sleep = sleep
        self.get_records_calls = 0
        self.subscribe_calls = 0

    def iterator(self, request: dict[str, Any]) -> str:
        """A shard iterator for ``request``; a sequence number the shard no longer holds raises
        ``DataTrimmed``."""
        try:
            response = self._with_backoff(
                self._client.get_shard_iterator, StreamName=self.stream, ShardId=self.shard_id, **request
            )
        except ClientError as error:
            if "StartingSequenceNumber" in request and _is_missing_sequence(error):
                raise self._trimmed(request["StartingSequenceNumber"]) from error
            raise
        return str(response["ShardIterator"])

    def subscribe(self, consumer_arn: str, position: dict[str, Any]) -> Any:
        """``SubscribeToShard`` from ``position`` (its ``StartingPosition``); returns the event
        stream. A held subscription is waited for, as throttling is; a sequence number the shard
        no longer holds raises ``DataTrimmed``.

        .. seealso:: https://docs.aws.amazon.com/kinesis/latest/APIReference/API_SubscribeToShard.html
        """
        try:
            response = self._with_backoff(
                self._subscribe, retry_on=SUBSCRIBE_RETRY_ERRORS, max_retries=MAX_SUBSCRIBE_RETRIES,
                ConsumerARN=consumer_arn, ShardId=self.shard_id, StartingPosition=position,
            )  # fmt: skip
        except ClientError as error:
            if "SequenceNumber" in position and _is_missing_sequence(error):
                raise self._trimmed(position["SequenceNumber"]) from error
            raise
        return response["EventStream"]

    def _subscribe(self, **kwargs: Any) -> dict[str, Any]:
        self.subscribe_calls += 1
        return self._client.subscribe_to_shard(**kwargs)

    def _trimmed(self, sequence: str) -> DataTrimmed:
        return DataTrimmed(
            f"Record {sequence} is not in shard {self.shard_id} of stream {self.stream}: trimmed by retention "
            "before it was loaded (or not from this shard)"
        )

    def records(self, iterator: str) -> dict[str, Any]:
        return self._with_backoff(self._get_records, ShardIterator=iterator, Limit=self._limit)

    def _get_records(self, **kwargs: Any) -> dict[str, Any]:
        self.get_records_calls += 1
        return self._client.get_records(**kwargs)

    def _with_backoff(
        self, call: Callable[..., dict[str, Any]], retry_on: frozenset[str] = THROTTLING_ERRORS,
        max_retries: int | None = None, **kwargs: Any,
    ) -> dict[str, Any]:  # fmt: skip
        attempt = 0
        while True:
            try:
                return call(**kwargs)
            except ClientError as error:
                limit = self._max_retries if max_retries is None else max_retries
                if aws_error_code(error) not in retry_on or attempt >= limit:
                    raise
                delay = backoff_delay(attempt)
                log.warning("Shard %s: %s; retry %d in %.2fs",
                            self.shard_id, aws_error_code(error), attempt + 1, delay)  # fmt: skip
                self.sleep(delay)
                attempt += 1


class Pager:
    """Pages of one shard from an opening request onward, following NextShardIterator.

    An expired iterator is renewed AFTER the last record returned (never from the opening point
    once records were returned). Callers consume each page whole before asking for the next, so
    that record is always fully handled, aggregates included.
    """

    def __init__(self, shard: ShardClient, opening: dict[str, Any]) -> None:
        self._shard = shard
        self._opening = opening
        self._iterator: str | None = None
        self._last_sequence: int | None = None

    def next_page(self) -> Page:
        if self._iterator is None:
            self._iterator = self._shard.iterator(self._opening)
        try:
            response = self._shard.records(self._iterator)
        except ClientError as error:
            if aws_error_code(error) != "ExpiredIteratorException":
                raise
            log.info("Iterator of shard %s expired; renewing after record %s",
                     self._shard.shard_id, self._last_sequence)  # fmt: skip
            self._iterator = self._shard.iterator(self._resume_request())
            response = self._shard.records(self._iterator)
        records = response.get("Records", [])
        if records:
            self._last_sequence = int(records[-1]["SequenceNumber"])
        self._iterator = response.get("NextShardIterator")
        return Page(records, self._iterator, response.get("MillisBehindLatest"))

    def close(self) -> None:
        """Nothing to release: an iterator needs no closing (``SubscriptionPager`` does)."""

    def _resume_request(self) -> dict[str, Any]:
        return resume_request(self._opening, self._last_sequence)


def resume_request(opening: dict[str, Any], last_sequence: int | None) -> dict[str, Any]:
    """Where a renewed read of a shard starts: AFTER the last record returned, or at the opening
    position if none was (an expired iterator, an ended subscription)."""
    if last_sequence is None:
        return opening
    return sequence_request("AFTER_SEQUENCE_NUMBER", last_sequence)


def backoff_delay(attempt: int) -> float:
    """Seconds to wait before retry number ``attempt`` (0-based) of a throttled call: exponential,
    capped at ``BACKOFF_CAP_S``, with jitter between half and all of the step."""
    unit_random = random.random()  # noqa: S311 - jitter, not security
    return backoff_seconds(attempt + 1, initial=BACKOFF_BASE_S, cap=BACKOFF_CAP_S, unit_random=unit_random)


def _is_missing_sequence(error: ClientError) -> bool:
    """GetShardIterator's answer to a sequence number the shard does not hold (any more).

    kinesis-mock: ResourceNotFoundException "Unable to find record with provided SequenceNumber".
    AWS: InvalidArgumentException naming the StartingSequenceNumber (harlow/kinesis-consumer#175;
    SubscribeToShard names its StartingPosition's SequenceNumber), except "... It encodes
    shardId-..., while it was used in a call to ...": a number of another shard.
    """
    message = str(error.response.get("Error", {}).get("Message", "")).lower()
    code = aws_error_code(error)
    if code in ("ResourceNotFoundException", "InvalidArgumentException"):
        return "sequencenumber" in message and "encodes" not in message
    return False


def sequence_request(iterator_type: str, sequence: int) -> dict[str, Any]:
    return {"ShardIteratorType": iterator_type, "StartingSequenceNumber": str(sequence)}


# --- records as the wire sends them -------------------------------------------------------------


def skip_record_parsing(client: Any) -> None:
    """Make ``client``'s GetRecords return its records as Kinesis sent them: ``Data`` base64 text,
    ``ApproximateArrivalTimestamp`` epoch seconds. Read them with ``record_data`` and
    ``record_arrival_ms``, which accept both forms.

    botocore's parser walks the output model field by field for every record; that was most of a
    bare client's CPU per record (``docs/benchmarks.md``, hot path). Here the body is decoded in
    one ``json.loads`` and botocore parses only the rest of the response (iterator, lag, child
    shards, errors). Registered on this client alone: no other client of the session changes.
    """
    client.meta.events.register("before-parse.kinesis.GetRecords", _take_records_unparsed)


def _take_records_unparsed(response_dict: dict[str, Any], customized_response_dict: dict[str, Any], **_: Any) -> None:
    if response_dict.get("status_code") != 200:
        return  # errors go through botocore's parser untouched
    body = json.loads(response_dict["body"])
    records = body.pop("Records", None)
    if records is None:
        return
    response_dict["body"] = json.dumps(body).encode()
    # botocore adds these keys to what it parsed from the body.
    customized_response_dict["Records"] = records


def record_data(record: Mapping[str, Any]) -> bytes:
    """A GetRecords record's payload, whether botocore decoded it (bytes) or not (base64 text)."""
    data = record["Data"]
    return binascii.a2b_base64(data) if isinstance(data, str) else data


def record_arrival_ms(record: Mapping[str, Any]) -> int:
    """A GetRecords record's ApproximateArrivalTimestamp in epoch milliseconds, whether botocore
    parsed it (a datetime) or not (epoch seconds); the same number either way."""
    stamp = record["ApproximateArrivalTimestamp"]
    return epoch_seconds_ms(stamp) if isinstance(stamp, (int, float)) else arrival_ms(stamp)


def arrival_ms(timestamp: datetime) -> int:
    """A record's ApproximateArrivalTimestamp (botocore parses it to a float-derived datetime) as
    integer epoch milliseconds, rounded so that 28.200999 s is 28 201 ms."""
    return round((timestamp - _EPOCH) / _ONE_MS)


def timestamp_of_ms(epoch_ms: int) -> datetime:
    """The exact instant of ``epoch_ms`` as the datetime boto3 sends (AT_TIMESTAMP)."""
    return _EPOCH + epoch_ms * _ONE_MS


def epoch_seconds_ms(seconds: float) -> int:
    """``arrival_ms(datetime.fromtimestamp(seconds, timezone.utc))`` without the datetime: the
    seconds rounded half-even to microseconds (as ``fromtimestamp`` does), then to milliseconds
    (as ``arrival_ms`` does), so a record gets the same arrival whichever client read it."""
    fraction, whole = math.modf(seconds)
    micros = int(whole) * 1_000_000 + round(fraction * 1e6)
    millis, rest = divmod(micros, 1000)
    return millis + (rest > 500 or (rest == 500 and millis % 2 == 1))
