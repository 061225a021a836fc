"""A small in-memory Kinesis with the boto3 client surface this package uses, for property tests.

Covered: ``list_shards`` (MaxResults, NextToken-alone rule, expiring tokens on request),
``get_shard_iterator`` (TRIM_HORIZON, LATEST, AT/AFTER_SEQUENCE_NUMBER, AT_TIMESTAMP; a future
timestamp is rejected like AWS does), ``get_records`` (Limit, MillisBehindLatest, injected empty
pages, ``NextShardIterator`` null once a closed shard is read to its end, ChildShards),
``put_record``, ``split_shard``, ``merge_shards``. Arrival stamps come from ``now_ms``, which the
test controls. Errors are botocore ``ClientError`` with AWS's codes.

Integration tests use real emulators (kinesis-mock); this fake exists so that hypothesis can run
hundreds of shard histories per second.
"""

from __future__ import annotations

import hashlib
import itertools
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from botocore.exceptions import ClientError

MAX_HASH_KEY = 2**128 - 1
_FIRST_SEQUENCE = 49_600_000_000_000_000_000_000_000_000_000_000_000_000_000_000_000_000_000
_SEQUENCE_STEP = 1_000


@dataclass
class FakeRecord:
    sequence: int
    arrival_ms: int
    partition_key: str
    data: bytes


@dataclass
class FakeShard:
    shard_id: str
    starting_hash_key: int
    ending_hash_key: int
    starting_sequence: int
    parent_id: str | None = None
    adjacent_parent_id: str | None = None
    records: list[FakeRecord] = field(default_factory=list)
    ending_sequence: int | None = None
    child_ids: list[str] = field(default_factory=list)

    @property
    def is_open(self) -> bool:
        return self.ending_sequence is None

    def describe(self) -> dict[str, Any]:
        sequence_range = {"StartingSequenceNumber": str(self.starting_sequence)}
        if self.ending_sequence is not None:
            sequence_range["EndingSequenceNumber"] = str(self.ending_sequence)
        described: dict[str, Any] = {
            "ShardId": self.shard_id,
            "HashKeyRange": {
                "StartingHashKey": str(self.starting_hash_key),
                "EndingHashKey": str(self.ending_hash_key),
            },
            "SequenceNumberRange": sequence_range,
        }
        if self.parent_id:
            described["ParentShardId"] = self.parent_id
        if self.adjacent_parent_id:
            described["AdjacentParentShardId"] = self.adjacent_parent_id
        return described


@dataclass
class _Iterator:
    stream_name: str
    shard_id: str
    index: int
    empty_pages_left: int


def _client_error(operation: str, code: str, message: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, operation)


_KEEPS_EVERYTHING_HOURS = 10**7


class FakeKinesis:
    """In-memory streams.

    :param now_ms: the clock (epoch ms) that stamps arrivals; advance it with :meth:`advance`.
    :param empty_pages: every new iterator first returns this many empty pages (as AWS may).
    :param retention_hours: what DescribeStreamSummary reports; None: so long that nothing of the
        fake's history counts as trimmed, whatever the wall clock (tests trim records by hand).
    """

    def __init__(self, *, now_ms: int = 1_700_000_000_000, empty_pages: int = 0, retention_hours: int | None = None) -> None:
        self.now_ms = now_ms
        self.empty_pages = empty_pages
        self.retention_hours = retention_hours
        self.streams: dict[str, dict[str, FakeShard]] = {}
        self.calls: Counter[str] = Counter()
        self.expire_next_tokens = 0
        """How many upcoming NextToken calls fail with ExpiredNextTokenException."""
        self._iterators: dict[str, _Iterator] = {}
        self._tokens: dict[str, tuple[str, int]] = {}
        self._ids = itertools.count()
        self._sequences = itertools.count()
        self._shard_numbers: dict[str, itertools.count[int]] = {}
        self.trimmed: set[int] = set()
        """The sequence numbers :meth:`trim` deleted."""

    # --- test controls ---------------------------------------------------------------------

    def advance(self, milliseconds: int) -> int:
        """Move the clock forward; returns the new now."""
        if milliseconds < 0:
            raise ValueError("The fake clock never goes back")
        self.now_ms += milliseconds
        return self.now_ms

    def trim(self, stream_name: str, shard_id: str, count: int) -> list[FakeRecord]:
        """Retention: delete the shard's ``count`` oldest records, and return them. Open iterators
        keep pointing at the records they pointed at (AWS's iterators are positions in the shard, not
        in a list); one that pointed at a deleted record now points at the oldest one kept. An
        iterator asked for at a deleted record's sequence number is refused as AWS refuses it."""
        shard = self.shard(stream_name, shard_id)
        deleted, shard.records[:count] = shard.records[:count], []
        self.trimmed.update(record.sequence for record in deleted)
        for iterator in self._iterators.values():
            if (iterator.stream_name, iterator.shard_id) == (stream_name, shard_id):
                iterator.index = max(0, iterator.index - len(deleted))
        return deleted

    def shard(self, stream_name: str, shard_id: str) -> FakeShard:
        """A shard's state and records, for assertions."""
        shards = self._shards(stream_name, "DescribeShard")
        if shard_id not in shards:
            raise KeyError(f"No shard {shard_id} in stream {stream_name}")
        return shards[shard_id]

    # --- control plane ---------------------------------------------------------------------

    def describe_stream_summary(self, *, StreamName: str) -> dict[str, Any]:  # noqa: N803
        self.calls["describe_stream_summary"] += 1
        shards = self._shards(StreamName, "DescribeStreamSummary")
        hours = self.retention_hours if self.retention_hours is not None else _KEEPS_EVERYTHING_HOURS
        return {"StreamDescriptionSummary": {
            "StreamName": StreamName, "StreamStatus": "ACTIVE", "RetentionPeriodHours": hours,
            "OpenShardCount": sum(shard.is_open for shard in shards.values()),
        }}  # fmt: skip

    # Keyword names are boto3's, hence N803.
    def create_stream(self, *, StreamName: str, ShardCount: int = 1) -> dict[str, Any]:  # noqa: N803
        self.calls["create_stream"] += 1
        if StreamName in self.streams:
            raise _client_error("CreateStream", "ResourceInUseException", f"Stream {StreamName} exists")
        self.streams[StreamName] = {}
        self._shard_numbers[StreamName] = itertools.count()
        width = (MAX_HASH_KEY + 1) // ShardCount
        for index in range(ShardCount):
            end = MAX_HASH_KEY if index == ShardCount - 1 else (index + 1) * width - 1
            self._add_shard(StreamName, index * width, end)
        return {}

    def split_shard(  # noqa: N803
        self, *, StreamName: str, ShardToSplit: str, NewStartingHashKey: str
    ) -> dict[str, Any]:
        self.calls["split_shard"] += 1
        parent = self._open_shard(StreamName, ShardToSplit, "SplitShard")
        new_start = int(NewStartingHashKey)
        if not parent.starting_hash_key < new_start <= parent.ending_hash_key:
            message = f"NewStartingHashKey {new_start} is outside shard {ShardToSplit}"
            raise _client_error("SplitShard", "InvalidArgumentException", message)
        self._close(parent)
        low = self._add_shard(StreamName, parent.starting_hash_key, new_start - 1, parent=parent.shard_id)
        high = self._add_shard(StreamName, new_start, parent.ending_hash_key, parent=parent.shard_id)
        parent.child_ids = [low.shard_id, high.shard_id]
        return {}

    def merge_shards(  # noqa: N803
        self, *, StreamName: str, ShardToMerge: str, AdjacentShardToMerge: str
    ) -> dict[str, Any]:
        self.calls["merge_shards"] += 1
        first = self._open_shard(StreamName, ShardToMerge, "MergeShards")
        second = self._open_shard(StreamName, AdjacentShardToMerge, "MergeShards")
        low, high = sorted((first, second), key=lambda s: s.starting_hash_key)
        if low.ending_hash_key + 1 != high.starting_hash_key:
            raise _client_error("MergeShards", "InvalidArgumentException", "Shards are not adjacent")
        self._close(first)
        self._close(second)
        child = self._add_shard(
            StreamName,
            low.starting_hash_key,
            high.ending_hash_key,
            parent=first.shard_id,
            adjacent=second.shard_id,
        )
        first.child_ids = second.child_ids = [child.shard_id]
        return {}

    def put_record(  # noqa: N803
        self, *, StreamName: str, Data: bytes, PartitionKey: str, ExplicitHashKey: str | None = None
    ) -> dict[str, Any]:
        self.calls["put_record"] += 1
        hash_key = int(ExplicitHashKey) if ExplicitHashKey is not None else _routing_hash(PartitionKey)
        shard = next(
            s for s in self._shards(StreamName, "PutRecord").values()
            if s.is_open and s.starting_hash_key <= hash_key <= s.ending_hash_key
        )  # fmt: skip
        record = FakeRecord(self._next_sequence(), self.now_ms, PartitionKey, bytes(Data))
        shard.records.append(record)
        return {"ShardId": shard.shard_id, "SequenceNumber": str(record.sequence)}

    # --- read plane ------------------------------------------------------------------------

    def list_shards(self, **kwargs: Any) -> dict[str, Any]:
        self.calls["list_shards"] += 1
        max_results = int(kwargs.get("MaxResults", 1000))
        if not 1 <= max_results <= 10_000:
            raise _client_error("ListShards", "InvalidArgumentException", f"MaxResults {max_results} invalid")
        stream_name, offset = self._listing_start(kwargs)
        shards = list(self._shards(stream_name, "ListShards").values())
        page = shards[offset : offset + max_results]
        response: dict[str, Any] = {"Shards": [shard.describe() for shard in page]}
        if offset + max_results < len(shards):
            token = f"token-{next(self._ids)}"
            self._tokens[token] = (stream_name, offset + max_results)
            response["NextToken"] = token
        return response

    def _listing_start(self, kwargs: dict[str, Any]) -> tuple[str, int]:
        token = kwargs.get("NextToken")
        if token is None:
            if "StreamName" not in kwargs:
                raise _client_error("ListShards", "InvalidArgumentException", "StreamName needed")
            return kwargs["StreamName"], 0
        if set(kwargs) - {"NextToken", "MaxResults"}:
            message = "NextToken and StreamName cannot be provided together"
            raise _client_error("ListShards", "InvalidArgumentException", message)
        if self.expire_next_tokens > 0:
            self.expire_next_tokens -= 1
            raise _client_error("ListShards", "ExpiredNextTokenException", "The NextToken has expired")
        if token not in self._tokens:
            raise _client_error("ListShards", "InvalidArgumentException", f"Invalid NextToken {token}")
        return self._tokens[token]

    def get_shard_iterator(self, **kwargs: Any) -> dict[str, Any]:
        self.calls["get_shard_iterator"] += 1
        stream_name, shard_id = kwargs["StreamName"], kwargs["ShardId"]
        shard = self._shards(stream_name, "GetShardIterator").get(shard_id)
        if shard is None:
            raise _client_error("GetShardIterator", "ResourceNotFoundException", f"No shard {shard_id}")
        index = self._iterator_index(shard, kwargs)
        return {"ShardIterator": self._new_iterator(stream_name, shard_id, index, self.empty_pages)}

    def _iterator_index(self, shard: FakeShard, kwargs: dict[str, Any]) -> int:
        kind = kwargs["ShardIteratorType"]
        sequences = [record.sequence for record in shard.records]
        if kind == "TRIM_HORIZON":
            return 0
        if kind == "LATEST":
            return len(sequences)
        if kind in ("AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER"):
            wanted = int(kwargs["StartingSequenceNumber"])
            if wanted in self.trimmed:  # AWS's words (harlow/kinesis-consumer#175)
                message = f"StartingSequenceNumber {wanted} used in GetShardIterator on shard {shard.shard_id} is invalid"
                raise _client_error("GetShardIterator", "InvalidArgumentException", message)
            if wanted not in sequences:
                message = f"{wanted} is not in {shard.shard_id}"
                raise _client_error("GetShardIterator", "InvalidArgumentException", message)
            return sequences.index(wanted) + (kind == "AFTER_SEQUENCE_NUMBER")
        if kind == "AT_TIMESTAMP":
            instant_ms = _epoch_ms(kwargs["Timestamp"])
            if instant_ms > self.now_ms:
                message = (
                    f"timestampInMillis {instant_ms} cannot be greater than currentTimestampInMillis {self.now_ms}"
                )
                raise _client_error("GetShardIterator", "InvalidArgumentException", message)
            later = (i for i, r in enumerate(shard.records) if r.arrival_ms >= instant_ms)
            return next(later, len(sequences))
        raise _client_error("GetShardIterator", "InvalidArgumentException", f"ShardIteratorType {kind}?")

    def get_records(self, *, ShardIterator: str, Limit: int = 10_000) -> dict[str, Any]:  # noqa: N803
        self.calls["get_records"] += 1
        if not 1 <= Limit <= 10_000:
            raise _client_error("GetRecords", "InvalidArgumentException", f"Limit {Limit} out of range")
        position = self._iterators.pop(ShardIterator, None)
        if position is None:
            raise _client_error("GetRecords", "ExpiredIteratorException", "Iterator expired or already used")
        shard = self._shards(position.stream_name, "GetRecords")[position.shard_id]
        if position.empty_pages_left:
            page: list[FakeRecord] = []
            next_index, empty_left = position.index, position.empty_pages_left - 1
        else:
            page = shard.records[position.index : position.index + Limit]
            next_index, empty_left = position.index + len(page), 0
        response: dict[str, Any] = {
            "Records": [_describe_record(record) for record in page],
            "MillisBehindLatest": self._millis_behind(shard, next_index),
        }
        if not shard.is_open and next_index >= len(shard.records) and not empty_left:
            response["NextShardIterator"] = None
            response["ChildShards"] = [self._describe_child(position.stream_name, c) for c in shard.child_ids]
        else:
            response["NextShardIterator"] = self._new_iterator(
                position.stream_name, shard.shard_id, next_index, empty_left
            )
        return response

    # --- internals -------------------------------------------------------------------------

    def _millis_behind(self, shard: FakeShard, next_index: int) -> int:
        if next_index >= len(shard.records):
            return 0
        return max(1, self.now_ms - shard.records[next_index].arrival_ms)

    def _describe_child(self, stream_name: str, child_id: str) -> dict[str, Any]:
        child = self.streams[stream_name][child_id]
        parents = [p for p in (child.parent_id, child.adjacent_parent_id) if p]
        hash_range = child.describe()["HashKeyRange"]
        return {"ShardId": child_id, "ParentShards": parents, "HashKeyRange": hash_range}

    def _new_iterator(self, stream_name: str, shard_id: str, index: int, empty_pages: int) -> str:
        token = f"iterator-{next(self._ids)}"
        self._iterators[token] = _Iterator(stream_name, shard_id, index, empty_pages)
        return token

    def _shards(self, stream_name: str, operation: str) -> dict[str, FakeShard]:
        if stream_name not in self.streams:
            raise _client_error(operation, "ResourceNotFoundException", f"Stream {stream_name} not found")
        return self.streams[stream_name]

    def _open_shard(self, stream_name: str, shard_id: str, operation: str) -> FakeShard:
        shard = self._shards(stream_name, operation).get(shard_id)
        if shard is None or not shard.is_open:
            raise _client_error(operation, "ResourceInUseException", f"Shard {shard_id} is not an open shard")
        return shard

    def _add_shard(
        self,
        stream_name: str,
        start: int,
        end: int,
        *,
        parent: str | None = None,
        adjacent: str | None = None,
    ) -> FakeShard:
        shard_id = f"shardId-{next(self._shard_numbers[stream_name]):012d}"
        shard = FakeShard(shard_id, start, end, self._next_sequence(), parent, adjacent)
        self.streams[stream_name][shard_id] = shard
        return shard

    def _close(self, shard: FakeShard) -> None:
        shard.ending_sequence = shard.records[-1].sequence if shard.records else shard.starting_sequence

    def _next_sequence(self) -> int:
        return _FIRST_SEQUENCE + next(self._sequences) * _SEQUENCE_STEP


def _routing_hash(partition_key: str) -> int:
    """Kinesis maps a partition key to a 128-bit hash key with MD5."""
    return int(hashlib.md5(partition_key.encode()).hexdigest(), 16)  # noqa: S324 - not for security


def _epoch_ms(timestamp: Any) -> int:
    if isinstance(timestamp, datetime):
        return round(timestamp.timestamp() * 1000)
    return round(float(timestamp) * 1000)


def _describe_record(record: FakeRecord) -> dict[str, Any]:
    return {
        "SequenceNumber": str(record.sequence),
        "ApproximateArrivalTimestamp": datetime.fromtimestamp(record.arrival_ms / 1000, tz=timezone.utc),
        "Data": record.data,
        "PartitionKey": record.partition_key,
    }
