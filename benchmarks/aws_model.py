"""A model of AWS in the shard benchmark's path: latency per operation, AWS's call limits, and a
clock that leaves the emulators' own service time out.

Every botocore request of this process that carries an ``X-Amz-Target`` (Kinesis and DynamoDB,
whose JSON protocols the emulators speak) passes :meth:`AwsModel.send` while :meth:`AwsModel.active`
is open: the call is admitted or throttled against AWS's per-shard, per-stream and per-account
limits, and DynamoDB's throughput per partition-key value (:class:`PartitionLimits`; a throttled
call gets AWS's error code as a 400 reply, so botocore's retries and the driver's back-off meet it
as they would on AWS), waits the operation's modelled latency on the
:class:`VirtualClock`, and only then goes to the emulator, one call at a time, with the clock
paused. Time read on the clock is therefore the driver's own work (its CPU during a pause
included), the Doris stand-in's replies and the modelled latency, without the emulators' service
time: calls in flight overlap as on AWS, while the emulators (moto serves one request at a time)
answer them in turn off the clock. ``time.sleep`` is the clock's too while the model is active,
so back-off pauses are not shortened by paused time.

The benchmark's loader processes (``--processes``) each run a model of their own, on a clock of
their own (``benchmarks/shards.py`` puts an interval's time together from the clocks). Each model
counts its own calls against the limits, so a shard's or a partition key's calls from the driver
and from a loader process are not added up (docs/benchmarks.md: why that stays far below them).

The figures and their sources are in docs/benchmarks.md ("An AWS model").
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import random
import threading
import time
from collections import Counter, deque
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.endpoint import Endpoint

_real_sleep = time.sleep
_original_send = Endpoint._send

LATENCY_S: Mapping[str, float] = {
    # DynamoDB: "single-digit millisecond" reads and writes; a transaction prepares and commits
    # every item (two underlying writes), so twice a single write; a Query or batch page as 2 reads.
    "GetItem": 0.005, "PutItem": 0.005, "UpdateItem": 0.005, "DeleteItem": 0.005,
    "Query": 0.010, "BatchGetItem": 0.010, "BatchWriteItem": 0.010, "TransactWriteItems": 0.010,
    # Kinesis: no per-call latency is published; assumed (docs/benchmarks.md says why).
    "GetRecords": 0.020, "GetShardIterator": 0.010, "ListShards": 0.020, "DescribeStreamSummary": 0.010,
}  # fmt: skip
OTHER_LATENCY_S = 0.010
"""An operation without a figure of its own: a round trip within a region."""


@dataclass(frozen=True)
class LatencyTail:
    """The slow calls: a share of every operation's calls takes ``factor`` times its latency.
    Neither service publishes a percentile (DynamoDB's "single-digit millisecond" is its typical
    latency): one call in a hundred at five times the typical one is an assumption, a p99 of
    25 ms for a GetItem and 100 ms for a GetRecords. Drawn from a seeded generator, so a run's
    sequence of slow calls repeats (the threads' order of calls may not)."""

    share: float = 0.01
    factor: float = 5.0
    seed: int = 37


@dataclass(frozen=True)
class Limit:
    """AWS admits ``calls`` of an operation per second for each ``scope``; the next is refused with ``error``."""

    calls: int
    scope: Literal["shard", "stream", "account"]
    error: str


THROUGHPUT = "ProvisionedThroughputExceededException"
SORT_KEY = "sk"
"""The checkpoint table's sort key: with the partition key, what names an item (transaction conflicts)."""
LIMITS: Mapping[str, Limit] = {
    "GetRecords": Limit(5, "shard", THROUGHPUT),
    "GetShardIterator": Limit(5, "shard", THROUGHPUT),
    "ListShards": Limit(1000, "stream", "LimitExceededException"),
    "DescribeStreamSummary": Limit(20, "account", "LimitExceededException"),
    "DescribeStream": Limit(10, "account", "LimitExceededException"),
}


@dataclass(frozen=True)
class PartitionLimits:
    """DynamoDB's throughput per partition: "a single partition can support a maximum of 3,000
    read capacity units (RCUs) or 1,000 write capacity units (WCUs)" (AWS's developer guide,
    partitions and data distribution; on-demand and provisioned tables alike, adaptive capacity
    does not raise it). All items of one partition-key value live in one partition, so that is the
    most one key's items get. "Or": a second's capacity is spent by reads at 1/3,000 and by writes
    at 1/1,000 each (one bucket, not two). Burst capacity: "DynamoDB currently retains up to 5
    minutes (300 seconds) of unused read and write capacity"; ``saved_s`` is how much a key has
    saved when the model starts: none by default (the worst case: a pipeline whose key was just
    busy), ``burst_s`` for a key idle for five minutes.

    A unit is 1 KB written, 4 KB read with ``ConsistentRead`` (half a unit without); a transaction
    costs each of its items twice (AWS: "two underlying reads or writes of every item"). An item's
    size is its request's JSON for a write (the whole item for ``PutItem``; for ``UpdateItem`` and
    ``DeleteItem`` the key and the update, an undercount of an item larger than that), and its
    reply's JSON for a read. A ``BatchWriteItem`` with one item over its key's capacity is refused
    whole (AWS returns the others as written and that one as ``UnprocessedItems``): the model
    retries more of a batch than AWS would."""

    read_units_per_s: float = 3000
    write_units_per_s: float = 1000
    burst_s: float = 300
    saved_s: float = 0
    key_attribute: str = "pk"


WRITE_UNIT_BYTES, READ_UNIT_BYTES = 1024, 4096


class VirtualClock:
    """Seconds that pass except while an emulator serves a call (:meth:`paused`, one at a time),
    but for the CPU this process used meanwhile: the other threads go on working while one call
    is paused, and that work would take its time on AWS too.

    Each process has a clock of its own. With ``emulator_lock`` (a file every process of the run
    names), one call at a time of all of them goes to the emulators, and a call waiting for
    another process's is paused too: on AWS the processes' calls do not wait for one another."""

    def __init__(self, emulator_lock: Path | None = None) -> None:
        self._lock = threading.Lock()
        self._emulator = threading.Lock()
        self._emulator_lock = emulator_lock
        self._paused_s = 0.0
        self._paused_since: float | None = None

    def now(self) -> float:
        with self._lock:
            real = time.perf_counter()
            pausing = real - self._paused_since if self._paused_since is not None else 0.0
            return real - self._paused_s - pausing

    @contextmanager
    def paused(self) -> Iterator[None]:
        with self._emulator:
            with self._lock:
                self._paused_since, cpu_since = time.perf_counter(), time.process_time()
            try:
                with _held(self._emulator_lock) if self._emulator_lock else nullcontext():
                    yield
            finally:
                with self._lock:
                    paused = time.perf_counter() - (self._paused_since or 0.0)
                    self._paused_s += max(0.0, paused - (time.process_time() - cpu_since))
                    self._paused_since = None

    def paused_seconds(self) -> float:
        """Real seconds taken out of this clock so far: the emulators' time serving calls."""
        with self._lock:
            return self._paused_s

    def sleep(self, seconds: float) -> None:
        """Wait until ``seconds`` have passed on this clock (longer in real time if it pauses meanwhile)."""
        until = self.now() + seconds
        while (left := until - self.now()) > 0:
            _real_sleep(left)


@contextmanager
def _held(path: Path) -> Iterator[None]:
    """``path`` locked against every other process (an advisory lock of the kernel's: released
    when the holder ends, killed or not)."""
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)


class _Body:
    """The raw stream of a reply the model writes itself."""

    def __init__(self, content: bytes) -> None:
        self._content = content

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._content


class AwsModel:
    """Latency and call limits of AWS around the emulators (see the module's docstring)."""

    def __init__(
        self, latency: Mapping[str, float] = LATENCY_S, limits: Mapping[str, Limit] = LIMITS,
        partitions: PartitionLimits = PartitionLimits(), tail: LatencyTail = LatencyTail(),
        clock: VirtualClock | None = None,
    ) -> None:  # fmt: skip
        self.clock = clock or VirtualClock()
        self._latency, self._limits, self._tail = latency, limits, tail
        self._lock = threading.Lock()
        self._admitted: dict[tuple[str, str], deque[float]] = {}
        self._iterator_shards: dict[str, str] = {}
        self._draws = random.Random(tail.seed)
        self.partitions = _PartitionBuckets(partitions, self.clock)
        self.items_in_flight = _ItemsInFlight(partitions.key_attribute, self.clock)
        self.throttled: Counter[str] = Counter()
        """Calls refused with AWS's error code, by operation, since the model was made."""
        self.slow: Counter[str] = Counter()
        """Calls that took the tail's latency, by operation."""
        self.sent: Counter[str] = Counter()
        """Calls that passed the model, admitted or refused, by operation (botocore's retries each count)."""

    @contextmanager
    def active(self) -> Iterator[None]:
        """Every botocore request and ``time.sleep`` of this process goes through the model meanwhile."""
        model = self

        def send(endpoint: Endpoint, request: AWSPreparedRequest) -> AWSResponse:
            return model.send(endpoint, request)

        Endpoint._send = send  # type: ignore[method-assign]
        time.sleep = self.clock.sleep
        try:
            yield
        finally:
            Endpoint._send = _original_send  # type: ignore[method-assign]
            time.sleep = _real_sleep

    def send(self, endpoint: Endpoint, request: AWSPreparedRequest) -> AWSResponse:
        target = request.headers.get("X-Amz-Target")
        if not target:
            return _original_send(endpoint, request)
        operation = (target.decode() if isinstance(target, bytes) else target).rsplit(".", 1)[-1]
        with self._lock:
            self.sent[operation] += 1
        # Only a limited operation's parameters are read: parsing every body (a chunk's content
        # among them) would add the model's own CPU to the driver's on the clock.
        dynamodb = target.startswith(b"DynamoDB" if isinstance(target, bytes) else "DynamoDB")
        params = json.loads(request.body or b"{}") if operation in self._limits or dynamodb else {}
        refused = self._refusal(operation, params)
        if dynamodb and not refused and not self.partitions.admit(operation, params):
            with self._lock:
                self.throttled[operation] += 1
            refused = THROUGHPUT
        latency = self._latency_of(operation)
        conflict = self.items_in_flight.conflict(operation, params, latency) if dynamodb and not refused else None
        self.clock.sleep(latency)
        if refused:
            return _error_reply(request.url, refused, f"Rate exceeded for {operation} (AWS model)")
        if conflict is not None:
            return _error_reply(request.url, *conflict)
        with self.clock.paused():
            reply = _original_send(endpoint, request)
            if reply.status_code == 200 and operation in ("GetShardIterator", "GetRecords"):
                self._follow_iterator(operation, params, json.loads(reply.content))
            if reply.status_code == 200 and dynamodb:
                self.partitions.spend_reads(operation, params, json.loads(reply.content))
        return reply

    def _latency_of(self, operation: str) -> float:
        latency = self._latency.get(operation, OTHER_LATENCY_S)
        with self._lock:
            if self._draws.random() >= self._tail.share:
                return latency
            self.slow[operation] += 1
        return latency * self._tail.factor

    def _refusal(self, operation: str, params: Mapping[str, Any]) -> str | None:
        """AWS's error code if this call is one too many in the last second of its scope, else None (admitted)."""
        limit = self._limits.get(operation)
        if limit is None:
            return None
        key = (operation, self._scope(limit, operation, params))
        now = self.clock.now()
        with self._lock:
            admitted = self._admitted.setdefault(key, deque())
            while admitted and admitted[0] <= now - 1.0:
                admitted.popleft()
            if len(admitted) >= limit.calls:
                self.throttled[operation] += 1
                return limit.error
            admitted.append(now)
            return None

    def _scope(self, limit: Limit, operation: str, params: Mapping[str, Any]) -> str:
        stream = str(params.get("StreamARN") or params.get("StreamName") or "")
        if limit.scope == "account":
            return "account"
        if limit.scope == "stream":
            return stream
        if operation == "GetRecords":
            with self._lock:
                return self._iterator_shards.get(params["ShardIterator"], params["ShardIterator"])
        return f"{stream}/{params['ShardId']}"

    def _follow_iterator(self, operation: str, params: Mapping[str, Any], reply: Mapping[str, Any]) -> None:
        """Which shard each iterator reads: GetRecords names only its iterator."""
        with self._lock:
            if operation == "GetShardIterator":
                stream = str(params.get("StreamARN") or params.get("StreamName") or "")
                shard = f"{stream}/{params['ShardId']}"
            else:
                shard = self._iterator_shards.pop(params["ShardIterator"], params["ShardIterator"])
            following = reply.get("ShardIterator" if operation == "GetShardIterator" else "NextShardIterator")
            if following:
                self._iterator_shards[following] = shard


class _ItemsInFlight:
    """DynamoDB's transaction conflicts: while a ``TransactWriteItems`` is in flight (its modelled
    latency), a write of one of its items is refused with ``TransactionConflictException``, and
    another transaction on one of them is cancelled with ``TransactionCanceledException`` naming
    ``TransactionConflict`` for it; a transaction is cancelled too on an item a single write holds
    in flight (AWS's developer guide, "Transaction conflict handling in DynamoDB")."""

    def __init__(self, key_attribute: str, clock: VirtualClock) -> None:
        self._key_attribute, self._clock = key_attribute, clock
        self._lock = threading.Lock()
        self._transactions: dict[tuple[str, str], float] = {}  # item → until when a transaction holds it
        self._writes: dict[tuple[str, str], float] = {}  # item → until when a single write holds it
        self.conflicts: Counter[str] = Counter()
        """Writes refused and transactions cancelled for a conflict, by operation."""

    def conflict(self, operation: str, params: Mapping[str, Any], latency: float) -> tuple[str, str, dict[str, Any]] | None:
        """AWS's error (code, message, extra fields) if the write meets an item in flight, else
        None, and the write's items are then in flight for ``latency``."""
        items = _written_items(operation, params, self._key_attribute)
        if not items:
            return None
        now = self._clock.now()
        with self._lock:
            in_transactions = [item for item in items if self._transactions.get(item, now) > now]
            if operation != "TransactWriteItems":
                if in_transactions:
                    self.conflicts[operation] += 1
                    return "TransactionConflictException", "Transaction is ongoing for the item (AWS model)", {}
                self._writes.update((item, now + latency) for item in items)
                return None
            held = set(in_transactions) | {item for item in items if self._writes.get(item, now) > now}
            if held:
                self.conflicts[operation] += 1
                reasons = [{"Code": "TransactionConflict" if item in held else "None"} for item in items]
                return "TransactionCanceledException", "Transaction cancelled (AWS model)", {"CancellationReasons": reasons}
            self._transactions.update((item, now + latency) for item in items)
            if len(self._transactions) > 10_000:  # forget the items whose transactions ended
                self._transactions = {item: until for item, until in self._transactions.items() if until > now}
                self._writes = {item: until for item, until in self._writes.items() if until > now}
        return None


def _written_items(operation: str, params: Mapping[str, Any], attribute: str) -> list[tuple[str, str]]:
    """The items a DynamoDB write names, as (table, key), in its request's order (none for a read)."""
    if operation in ("PutItem", "UpdateItem", "DeleteItem"):
        bodies = [params]
    elif operation == "TransactWriteItems":
        bodies = [body for entry in params["TransactItems"] for body in entry.values()]
    else:
        return []
    items = []
    for body in bodies:
        key = body.get("Key") or body["Item"]
        items.append((body["TableName"], json.dumps({name: key[name] for name in (attribute, SORT_KEY) if name in key}, sort_keys=True)))
    return items


class _PartitionBuckets:
    """Each partition-key value's capacity (:class:`PartitionLimits`), in seconds of one
    partition's throughput: refilled at one a second up to ``burst_s``, spent by every call that
    touches the key. A write is admitted if its units are there; a read if the key's capacity is
    not spent, and it pays for what its reply held (AWS meters a read by what it returned)."""

    def __init__(self, limits: PartitionLimits, clock: VirtualClock) -> None:
        self.limits, self._clock = limits, clock
        self._lock = threading.Lock()
        self._seconds: dict[str, tuple[float, float]] = {}  # key → (capacity left, when)
        self.units: Counter[str] = Counter()
        """Capacity units spent by each partition-key value (``table/value``), reads and writes."""

    def admit(self, operation: str, params: Mapping[str, Any]) -> bool:
        writes = _write_units(operation, params, self.limits.key_attribute)
        keys = set(writes) | set(_read_keys(operation, params, self.limits.key_attribute))
        with self._lock:
            left = {key: self._refilled(key) for key in keys}
            if any(seconds <= 0 for seconds in left.values()) or any(
                left[key] < units / self.limits.write_units_per_s for key, units in writes.items()
            ):
                return False
            for key, units in writes.items():
                self._spend(key, left[key], units / self.limits.write_units_per_s)
                self.units[key] += units
        return True

    def spend_reads(self, operation: str, params: Mapping[str, Any], reply: Mapping[str, Any]) -> None:
        reads = _read_units(operation, params, reply, self.limits.key_attribute)
        with self._lock:
            for key, units in reads.items():
                self._spend(key, self._refilled(key), units / self.limits.read_units_per_s)
                self.units[key] += units

    def _refilled(self, key: str) -> float:
        now = self._clock.now()
        left, since = self._seconds.get(key, (1.0 + self.limits.saved_s, now))
        return min(left + (now - since), max(self.limits.burst_s, 1.0))

    def _spend(self, key: str, left: float, seconds: float) -> None:
        # A read may take the key below zero: it was admitted before its size was known.
        self._seconds[key] = (left - seconds, self._clock.now())


def _key(table: str, item_or_key: Mapping[str, Any], attribute: str) -> str:
    (value,) = item_or_key[attribute].values()
    return f"{table}/{value}"


def _units(payload: Any, unit_bytes: int) -> int:
    return max(1, math.ceil(len(json.dumps(payload)) / unit_bytes))


def _write_units(operation: str, params: Mapping[str, Any], attribute: str) -> Counter[str]:
    """Write units by partition-key value of a DynamoDB write (none for a read)."""
    units: Counter[str] = Counter()
    if operation in ("PutItem", "UpdateItem", "DeleteItem"):
        units[_key(params["TableName"], params.get("Item") or params["Key"], attribute)] += _units(params, WRITE_UNIT_BYTES)
    elif operation == "BatchWriteItem":
        for table, requests in params["RequestItems"].items():
            for request in requests:
                body = request.get("PutRequest", {}).get("Item") or request["DeleteRequest"]["Key"]
                units[_key(table, body, attribute)] += _units(request, WRITE_UNIT_BYTES)
    elif operation == "TransactWriteItems":
        for entry in params["TransactItems"]:
            ((kind, body),) = entry.items()
            if kind != "ConditionCheck":  # a check reads: metered as a read unit by AWS, left out here
                units[_key(body["TableName"], body.get("Item") or body["Key"], attribute)] += 2 * _units(body, WRITE_UNIT_BYTES)
    return units


def _read_keys(operation: str, params: Mapping[str, Any], attribute: str) -> list[str]:
    """The partition-key values a DynamoDB read touches, known before its reply."""
    if operation == "GetItem":
        return [_key(params["TableName"], params["Key"], attribute)]
    if operation == "Query":
        value = _query_key_value(params, attribute)
        return [f"{params['TableName']}/{value}"] if value is not None else []
    if operation == "BatchGetItem":
        return [_key(table, key, attribute) for table, request in params["RequestItems"].items() for key in request["Keys"]]
    if operation == "TransactGetItems":
        return [_key(entry["Get"]["TableName"], entry["Get"]["Key"], attribute) for entry in params["TransactItems"]]
    return []


def _query_key_value(params: Mapping[str, Any], attribute: str) -> str | None:
    """The partition-key value a Query's ``KeyConditionExpression`` names (``pk = :pk ...``)."""
    condition = params.get("KeyConditionExpression", "")
    names = {alias for alias, name in params.get("ExpressionAttributeNames", {}).items() if name == attribute}
    for clause in condition.split(" AND "):
        left, _, right = (part.strip() for part in clause.partition("="))
        if left in names | {attribute} and right in params.get("ExpressionAttributeValues", {}):
            (value,) = params["ExpressionAttributeValues"][right].values()
            return str(value)
    return None


def _read_units(operation: str, params: Mapping[str, Any], reply: Mapping[str, Any], attribute: str) -> Counter[str]:
    """Read units by partition-key value of a DynamoDB read's reply (none for a write)."""
    units: Counter[str] = Counter()
    factor = 1.0 if params.get("ConsistentRead") else 0.5
    if operation == "GetItem":
        units[_key(params["TableName"], params["Key"], attribute)] += factor * _units(reply.get("Item", {}), READ_UNIT_BYTES)
    elif operation == "Query":
        value = _query_key_value(params, attribute)
        if value is not None:
            units[f"{params['TableName']}/{value}"] += factor * _units(reply.get("Items", []), READ_UNIT_BYTES)
    elif operation == "BatchGetItem":
        for table, items in reply.get("Responses", {}).items():
            consistent = 1.0 if params["RequestItems"][table].get("ConsistentRead") else 0.5
            for item in items:
                if attribute in item:  # a projection without the key is left unmetered
                    units[_key(table, item, attribute)] += consistent * _units(item, READ_UNIT_BYTES)
    elif operation == "TransactGetItems":
        for entry, response in zip(params["TransactItems"], reply.get("Responses", [])):
            units[_key(entry["Get"]["TableName"], entry["Get"]["Key"], attribute)] += 2 * _units(response.get("Item", {}), READ_UNIT_BYTES)
    return units


def _error_reply(url: str, code: str, message: str, extra: Mapping[str, Any] | None = None) -> AWSResponse:
    content = json.dumps({"__type": code, "message": message, **(extra or {})}).encode()
    headers = {"Content-Type": "application/x-amz-json-1.1", "Content-Length": str(len(content))}
    return AWSResponse(url, 400, headers, _Body(content))
