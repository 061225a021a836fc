"""A model of AWS in the shard benchmark's path: latency per operation, AWS's call limits, and a
clock that leaves the emulators' own service time out.

Every botocore request of this process that carries an ``X-Amz-Target`` (Kinesis and DynamoDB,
whose JSON protocols the emulators speak) passes :meth:`AwsModel.send` while :meth:`AwsModel.active`
is open: the call is admitted or throttled against AWS's per-shard, per-stream and per-account
limits (a throttled call gets AWS's error code as a 400 reply, so botocore's retries and the
driver's back-off meet it as they would on AWS), waits the operation's modelled latency on the
:class:`VirtualClock`, and only then goes to the emulator, one call at a time, with the clock
paused. Time read on the clock is therefore the driver's own work (its CPU during a pause
included), the Doris stand-in's replies and the modelled latency, without the emulators' service
time: calls in flight overlap as on AWS, while the emulators (moto serves one request at a time)
answer them in turn off the clock. ``time.sleep`` is the clock's too while the model is active,
so back-off pauses are not shortened by paused time.

The figures and their sources are in docs/benchmarks.md ("An AWS model").
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter, deque
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
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
class Limit:
    """AWS admits ``calls`` of an operation per second for each ``scope``; the next is refused with ``error``."""

    calls: int
    scope: Literal["shard", "stream", "account"]
    error: str


THROUGHPUT = "ProvisionedThroughputExceededException"
LIMITS: Mapping[str, Limit] = {
    "GetRecords": Limit(5, "shard", THROUGHPUT),
    "GetShardIterator": Limit(5, "shard", THROUGHPUT),
    "ListShards": Limit(1000, "stream", "LimitExceededException"),
    "DescribeStreamSummary": Limit(20, "account", "LimitExceededException"),
    "DescribeStream": Limit(10, "account", "LimitExceededException"),
}


class VirtualClock:
    """Seconds that pass except while an emulator serves a call (:meth:`paused`, one at a time),
    but for the CPU this process used meanwhile: the other threads go on working while one call
    is paused, and that work would take its time on AWS too."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._emulator = threading.Lock()
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


class _Body:
    """The raw stream of a reply the model writes itself."""

    def __init__(self, content: bytes) -> None:
        self._content = content

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._content


class AwsModel:
    """Latency and call limits of AWS around the emulators (see the module's docstring)."""

    def __init__(self, latency: Mapping[str, float] = LATENCY_S, limits: Mapping[str, Limit] = LIMITS) -> None:
        self.clock = VirtualClock()
        self._latency, self._limits = latency, limits
        self._lock = threading.Lock()
        self._admitted: dict[tuple[str, str], deque[float]] = {}
        self._iterator_shards: dict[str, str] = {}
        self.throttled: Counter[str] = Counter()
        """Calls refused with AWS's error code, by operation, since the model was made."""

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
        # Only a limited operation's parameters are read: parsing every body (a chunk's content
        # among them) would add the model's own CPU to the driver's on the clock.
        params = json.loads(request.body or b"{}") if operation in self._limits else {}
        refused = self._refusal(operation, params)
        self.clock.sleep(self._latency.get(operation, OTHER_LATENCY_S))
        if refused:
            return _error_reply(request.url, refused, f"Rate exceeded for {operation} (AWS model)")
        with self.clock.paused():
            reply = _original_send(endpoint, request)
            if reply.status_code == 200 and operation in ("GetShardIterator", "GetRecords"):
                self._follow_iterator(operation, params, json.loads(reply.content))
        return reply

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


def _error_reply(url: str, code: str, message: str) -> AWSResponse:
    content = json.dumps({"__type": code, "message": message}).encode()
    headers = {"Content-Type": "application/x-amz-json-1.1", "Content-Length": str(len(content))}
    return AWSResponse(url, 400, headers, _Body(content))
