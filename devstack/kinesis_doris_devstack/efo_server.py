"""Enhanced fan-out (``SubscribeToShard``) for the local stack, in front of kinesis-mock.

What it emulates
----------------
Kinesis Data Streams' ``SubscribeToShard`` as the API reference describes it
(https://docs.aws.amazon.com/kinesis/latest/APIReference/API_SubscribeToShard.html and
``API_SubscribeToShardEvent.html``), on the wire botocore parses: a 200 response of type
``application/vnd.amazon.eventstream`` whose first message is the ``initial-response`` event,
followed by ``SubscribeToShardEvent`` events (``Records``, ``ContinuationSequenceNumber``,
``MillisBehindLatest``, and ``ChildShards`` on the last event of a closed shard). The data comes
from kinesis-mock (``GetShardIterator`` / ``GetRecords``); every other request is forwarded to
kinesis-mock unchanged, so one endpoint serves the whole Kinesis API.

kinesis-mock (npm ``kinesis-local`` 0.6.2, the version in this repository's ``package.json``)
registers consumers correctly, but its own ``SubscribeToShard`` answer starts directly with a
``SubscribeToShardEvent`` message; botocore requires an ``initial-response`` event first and fails
with ``ResponseParserError: First event was not of type initial-response``. Hence this server.

Behaviour, as AWS documents it
------------------------------
- The consumer must exist (``ResourceNotFoundException``) and be ``ACTIVE``
  (``ResourceInUseException``); errors before the stream starts are ordinary JSON error
  responses (HTTP 400, ``{"__type", "message"}``), which botocore raises as ``ClientError``.
- One subscription per (consumer, shard): another ``SubscribeToShard`` while one is open gets
  ``ResourceInUseException``. The slot frees when the stream ends or the client goes away.
- Starting positions ``AT_SEQUENCE_NUMBER``, ``AFTER_SEQUENCE_NUMBER``, ``AT_TIMESTAMP``,
  ``TRIM_HORIZON``, ``LATEST`` become an upstream ``GetShardIterator`` on the consumer's stream;
  its errors (unknown shard, unknown or trimmed sequence number) are returned with the upstream's
  code and message.
- Events: one per non-empty ``GetRecords`` page (records exactly as kinesis-mock returns them);
  when there is no new data, an empty event at most every ``heartbeat_seconds``. A closed shard
  read to its end gets a last event with ``ChildShards`` and *no* ``ContinuationSequenceNumber``
  (AWS: it is null at the shard end, which is how KCL recognises the shard end), then the stream
  ends. After ``subscription_seconds`` (AWS: 5 minutes) the stream ends normally and the client
  resubscribes.

ContinuationSequenceNumber
--------------------------
AWS documents it as the value to pass as ``SequenceNumber`` with ``AT_SEQUENCE_NUMBER`` or
``AFTER_SEQUENCE_NUMBER`` in the next ``SubscribeToShard``, to be used for checkpointing "because
it captures your shard progress even when no data is written to the shard"
(``API_SubscribeToShardEvent.html``). KCL resubscribes with ``AFTER_SEQUENCE_NUMBER`` and the last
event's value, also after empty events (amazon-kinesis-client PR #371, ``FanOutRecordsPublisher``).
So the value must be one after which nothing undelivered lies. This server sends:

- after records were delivered in this subscription: the sequence number of the last record
  delivered (a KPL aggregate counts as one record);
- before any record was delivered: the sequence number of the record just *before* the starting
  position, i.e. ``SequenceNumber`` itself for ``AFTER_SEQUENCE_NUMBER``; the last record before
  ``SequenceNumber`` (``AT_SEQUENCE_NUMBER``) or before the timestamp (``AT_TIMESTAMP``); the last
  record in the shard when the subscription started (``LATEST``, looked up before the iterator is
  taken, so nothing written after the start can be skipped); and the shard's
  ``StartingSequenceNumber`` when no record precedes the start (always for ``TRIM_HORIZON``).
  kinesis-mock accepts exactly these values in ``GetShardIterator`` (a record's sequence number or
  the shard's starting one; made-up numbers in between are rejected), so resuming
  ``AFTER_SEQUENCE_NUMBER`` with any value this server sent neither skips nor repeats a record.

Known differences from AWS
--------------------------
- AWS's value keeps advancing on an idle shard (it encodes time); here it stays at the last
  record delivered, which resumes at the same place.
- Empty events every ``heartbeat_seconds`` (default 1 s; AWS about every 5 s); new data is seen
  within ``poll_seconds`` (AWS documents an average propagation delay of about 70 ms,
  https://docs.aws.amazon.com/streams/latest/dev/enhanced-consumers.html).
- HTTP/1.1 with chunked transfer encoding instead of HTTP/2 (botocore speaks HTTP/1.1 only).
- No throughput limit (2 MB/s per consumer and shard), no limit of one ``SubscribeToShard`` per
  second (``LimitExceededException``), no ``KMS*`` exceptions; the caller's signature is not
  checked (kinesis-mock only wants the headers to be there).
- A second subscription is refused for as long as the first is open; AWS lets a call made 5 s or
  more after the first take the subscription over (the old one then fails with
  ``ResourceInUseException``). Pass ``takeover_after_seconds=5`` to get that.
- ``SubscribeToShard`` bodies must be JSON (botocore's ``application/x-amz-json-1.1``), not CBOR.

Use it in-process::

    with EfoServer(upstream="http://127.0.0.1:4567") as efo:
        client = boto3.client("kinesis", endpoint_url=efo.endpoint, ...)
        client.subscribe_to_shard(ConsumerARN=..., ShardId=..., StartingPosition={"Type": "LATEST"})
"""

from __future__ import annotations

import binascii
import contextlib
import http.client
import json
import logging
import select
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import urlsplit

from kinesis_doris_devstack.quiet_server import QuietThreadingHTTPServer

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
SUBSCRIBE_TARGET = "Kinesis_20131202.SubscribeToShard"
_TARGET_PREFIX = "Kinesis_20131202."
JSON_CONTENT_TYPE = "application/x-amz-json-1.1"
EVENT_STREAM_CONTENT_TYPE = "application/vnd.amazon.eventstream"
GET_RECORDS_LIMIT = 10_000
STARTING_POSITION_TYPES = ("AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER", "AT_TIMESTAMP", "TRIM_HORIZON", "LATEST")
# Exceptions the SubscribeToShardEventStream models; botocore raises others by header only.
STREAM_EXCEPTIONS = (
    "ResourceNotFoundException", "ResourceInUseException", "KMSDisabledException", "KMSInvalidStateException",
    "KMSAccessDeniedException", "KMSNotFoundException", "KMSOptInRequired", "KMSThrottlingException",
    "InternalFailureException",
)  # fmt: skip

# Event stream framing (the layout botocore.eventstream decodes).
_PRELUDE_LENGTH = 12
_MESSAGE_CRC_LENGTH = 4
_STRING_HEADER_TYPE = 7
_MAX_HEADER_NAME_BYTES = 255
_MAX_HEADER_VALUE_BYTES = 32_767  # the value length is a 2-byte field; keep to the signed range
MAX_HEADERS_BYTES = 128 * 1024  # botocore's decoder refuses more
MAX_PAYLOAD_BYTES = 24 * 1024 * 1024  # botocore's decoder refuses more

# Request and response headers that describe one HTTP hop, not the message: never forwarded.
_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization", "te", "trailer",
     "transfer-encoding", "upgrade", "expect", "host", "content-length"}
)  # fmt: skip
_NOT_COPIED_BACK = _HOP_BY_HOP | {"date", "server"}
_THROTTLED = ("ProvisionedThroughputExceededException", "LimitExceededException", "ThrottlingException")
_SCAN_PAGE_CAP = 10_000  # bounds a predecessor scan of a shard that never stops growing


# --- event stream encoding -------------------------------------------------------------------


def encode_message(headers: Mapping[str, str], payload: bytes) -> bytes:
    """One ``application/vnd.amazon.eventstream`` message with string headers.

    Layout: total length (uint32 BE), headers length (uint32 BE), CRC32 of those 8 bytes; the
    headers (name length uint8, name, value type 7 = string, value length uint16 BE, value); the
    payload; CRC32 of everything before it.
    """
    encoded_headers = b"".join(_encode_string_header(name, value) for name, value in headers.items())
    if len(encoded_headers) > MAX_HEADERS_BYTES:
        raise ValueError(f"headers of {len(encoded_headers)} bytes exceed the decoder's {MAX_HEADERS_BYTES}")
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise ValueError(f"payload of {len(payload)} bytes exceeds the decoder's {MAX_PAYLOAD_BYTES}")
    total = _PRELUDE_LENGTH + len(encoded_headers) + len(payload) + _MESSAGE_CRC_LENGTH
    prelude = struct.pack(">II", total, len(encoded_headers))
    prelude += struct.pack(">I", binascii.crc32(prelude))
    message = prelude + encoded_headers + payload
    return message + struct.pack(">I", binascii.crc32(message))


def _encode_string_header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode("utf-8"), value.encode("utf-8")
    if not 0 < len(raw_name) <= _MAX_HEADER_NAME_BYTES:
        raise ValueError(f"header name {name!r} must be 1..{_MAX_HEADER_NAME_BYTES} bytes")
    if len(raw_value) > _MAX_HEADER_VALUE_BYTES:
        raise ValueError(f"header {name!r} value exceeds {_MAX_HEADER_VALUE_BYTES} bytes")
    value_prefix = struct.pack(">BH", _STRING_HEADER_TYPE, len(raw_value))
    return struct.pack(">B", len(raw_name)) + raw_name + value_prefix + raw_value


def _json_bytes(body: Mapping[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


def event_message(event_type: str, body: Mapping[str, Any]) -> bytes:
    """An ``event`` message (``initial-response``, ``SubscribeToShardEvent``) with a JSON payload."""
    headers = {":message-type": "event", ":event-type": event_type, ":content-type": "application/json"}
    return encode_message(headers, _json_bytes(body))


def exception_message(exception_type: str, message: str) -> bytes:
    """An ``exception`` message; botocore raises it as ``EventStreamError`` with that code."""
    headers = {":message-type": "exception", ":exception-type": exception_type, ":content-type": "application/json"}
    return encode_message(headers, _json_bytes({"message": message}))


# --- upstream (kinesis-mock) -------------------------------------------------------------------


class UpstreamError(Exception):
    """An error answer of the upstream, with the status, code and message to hand on."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.status, self.code, self.message = status, code, message


class _Upstream:
    """A keep-alive HTTP connection to the upstream; one per thread (not thread-safe).

    A subscription polls every few hundred milliseconds for minutes: one reused connection
    instead of a socket (and a TIME_WAIT entry) per poll.
    """

    def __init__(self, endpoint: str, timeout: float = 60.0) -> None:
        parts = urlsplit(endpoint)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"upstream must be an http:// URL, got {endpoint!r}")
        self._host, self._port, self._timeout = parts.hostname, parts.port or 80, timeout
        self._connection: http.client.HTTPConnection | None = None

    def request(
        self, method: str, path: str, body: bytes | None, headers: Mapping[str, str]
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """Send one request; a connection the upstream closed while idle is reopened once."""
        for attempt in range(2):
            reused = self._connection is not None
            if self._connection is None:
                self._connection = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
            try:
                self._connection.request(method, path, body=body, headers=dict(headers))
                response = self._connection.getresponse()
                data = response.read()
            except (http.client.CannotSendRequest, BrokenPipeError, ConnectionResetError):  # incl. RemoteDisconnected
                self.close()
                if reused and attempt == 0:
                    continue
                raise
            except BaseException:
                self.close()
                raise
            if response.will_close:
                self.close()
            return response.status, response.getheaders(), data
        raise AssertionError("unreachable")

    def call(self, operation: str, payload: Mapping[str, Any], auth: Mapping[str, str]) -> dict[str, Any]:
        """A Kinesis JSON API call; :class:`UpstreamError` for an error answer."""
        headers = {
            **auth,
            "X-Amz-Target": _TARGET_PREFIX + operation,
            "Content-Type": JSON_CONTENT_TYPE,
            # kinesis-mock wants a date next to the Authorization header; it checks no signature.
            "X-Amz-Date": time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()),
        }
        status, _, body = self.request("POST", "/", _json_bytes(payload), headers)
        try:
            parsed = json.loads(body) if body else {}
        except ValueError:
            parsed = {}
        if status >= 300:
            raw_code = str(parsed.get("__type", f"HTTP{status}"))
            message = str(parsed.get("message", parsed.get("Message", body[:200].decode("utf-8", "replace"))))
            raise UpstreamError(status, raw_code.rsplit("#", 1)[-1], message)
        return parsed

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


# --- subscriptions ---------------------------------------------------------------------------


class _ApiError(Exception):
    """An error answered before the stream starts, as AWS answers it (JSON, HTTP 400)."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.status = code, message, status


class _StreamEnded(Exception):
    """Ends the event loop of a subscription; ``reason`` goes to the log line."""

    def __init__(self, reason: str, client_gone: bool = False) -> None:
        super().__init__(reason)
        self.reason, self.client_gone = reason, client_gone


@dataclass(eq=False)
class _Slot:
    """Who holds a (consumer, shard): a subscription, or :meth:`EfoServer.occupy`."""

    consumer_arn: str
    shard_id: str
    occupied: bool
    started: float = field(default_factory=time.monotonic)
    wake: threading.Event = field(default_factory=threading.Event)
    # Set (under the server's lock) when the stream must end: "expired", "server stopping", ...
    end_reason: str | None = None
    taken_over: bool = False

    def end(self, reason: str, *, taken_over: bool = False) -> None:
        if self.end_reason is None:
            self.end_reason, self.taken_over = reason, taken_over
        self.wake.set()


@dataclass
class _Failure:
    code: str
    message: str
    consumer_arn: str | None
    shard_id: str | None

    def matches(self, consumer_arn: str, shard_id: str) -> bool:
        return self.consumer_arn in (None, consumer_arn) and self.shard_id in (None, shard_id)


@dataclass(frozen=True)
class _StartingPosition:
    type: str
    sequence_number: str | None = None
    timestamp: float | None = None

    def describe(self) -> str:
        detail = self.sequence_number if self.sequence_number is not None else self.timestamp
        return self.type if detail is None else f"{self.type} {detail}"


class _Subscription:
    """One accepted ``SubscribeToShard``: pumps upstream pages into events until it ends."""

    def __init__(self, efo: EfoServer, handler: _Handler, upstream: _Upstream, auth: Mapping[str, str],
                 slot: _Slot, stream_arn: str, position: _StartingPosition) -> None:  # fmt: skip
        self.efo, self.handler, self.upstream, self.auth = efo, handler, upstream, auth
        self.slot, self.stream_arn, self.position = slot, stream_arn, position
        self.shard_id = slot.shard_id
        self.iterator = ""
        self.deadline = slot.started + efo.subscription_seconds
        # The ContinuationSequenceNumber to send (see the module docstring); None until known.
        self.resume_after: str | None = position.sequence_number if position.type == "AFTER_SEQUENCE_NUMBER" else None
        self.records_sent = 0
        self.events_sent = 0

    # Before the stream: may raise UpstreamError, answered as a JSON error.
    def open(self) -> None:
        if self.position.type == "LATEST":
            # Before the iterator is taken: a record written between the two is then after the
            # value and so never skipped by a resume (see the module docstring).
            self.resume_after = self._sequence_before(lambda record: False)
        request: dict[str, Any] = {
            "StreamARN": self.stream_arn, "ShardId": self.shard_id, "ShardIteratorType": self.position.type,
        }  # fmt: skip
        if self.position.sequence_number is not None:
            request["StartingSequenceNumber"] = self.position.sequence_number
        if self.position.timestamp is not None:
            request["Timestamp"] = self.position.timestamp
        self.iterator = self.upstream.call("GetShardIterator", request, self.auth)["ShardIterator"]

    def run(self) -> str:
        """Send the stream (the 200 response is already out); how it ended."""
        try:
            self._write(event_message("initial-response", {}))
            self._pump()
        except _StreamEnded as ended:
            if ended.client_gone:
                self.handler.close_connection = True
            else:
                self._let_go()
                self._finish_body()
            return ended.reason
        raise AssertionError("the pump ends only by _StreamEnded")

    def _pump(self) -> None:
        efo = self.efo
        last_event_at: float | None = None
        while True:
            self._check_interrupted()
            page = self._get_records()
            records: list[dict[str, Any]] = page.get("Records") or []
            event: dict[str, Any] = {"Records": records, "MillisBehindLatest": int(page.get("MillisBehindLatest") or 0)}
            next_iterator = page.get("NextShardIterator")
            if next_iterator is None:
                # The closed shard is read to its end: children, and no continuation (AWS: null).
                event["ChildShards"] = page.get("ChildShards") or []
                self._send_event(event, last=True)
                raise _StreamEnded("shard end")
            self.iterator = next_iterator
            if records:
                self.resume_after = str(records[-1]["SequenceNumber"])
                event["ContinuationSequenceNumber"] = self.resume_after
                self._send_event(event)
                last_event_at = time.monotonic()
                continue  # more may be waiting: poll again at once
            if last_event_at is None or time.monotonic() - last_event_at >= efo.heartbeat_seconds:
                event["ContinuationSequenceNumber"] = self._upstream_step(self._resume_point, "ListShards/GetRecords")
                self._send_event(event)
                last_event_at = time.monotonic()
            self.slot.wake.wait(max(0.0, min(efo.poll_seconds, self.deadline - time.monotonic())))

    def _check_interrupted(self) -> None:
        if self.slot.end_reason is not None:
            if self.slot.taken_over:
                message = "A newer subscription took over this consumer and shard."
                self._write_exception("ResourceInUseException", message)
            raise _StreamEnded(self.slot.end_reason)
        if time.monotonic() >= self.deadline:
            raise _StreamEnded(f"expired after {self.efo.subscription_seconds:g} s")
        if self._client_gone():
            raise _StreamEnded("client disconnected", client_gone=True)

    def _get_records(self) -> dict[str, Any]:
        backoff = self.efo.poll_seconds
        request = {"ShardIterator": self.iterator, "Limit": GET_RECORDS_LIMIT}
        while True:
            try:
                return self._upstream_step(lambda: self.upstream.call("GetRecords", request, self.auth), "GetRecords")
            except UpstreamError:
                # Throttled: a consumer's fan-out throughput is its own, so the upstream's
                # polling limit must not surface; wait and poll again.
                self.slot.wake.wait(backoff)
                backoff = min(backoff * 2, 2.0)
                self._check_interrupted()

    def _upstream_step(self, step: Callable[[], Any], what: str) -> Any:
        """Run upstream calls inside the stream: a failure ends it with an exception event, as
        AWS ends a failed stream; only throttling is handed back (as UpstreamError) to retry."""
        try:
            return step()
        except UpstreamError as error:
            if error.code in _THROTTLED:
                raise
            code = error.code if error.code in STREAM_EXCEPTIONS else "InternalFailureException"
            self._write_exception(code, f"upstream {what} failed: {error.code}: {error.message}")
            raise _StreamEnded(f"upstream error {error.code}") from error
        except OSError as error:
            self._write_exception("InternalFailureException", f"upstream unreachable: {error}")
            raise _StreamEnded(f"upstream unreachable ({error})") from error

    def _resume_point(self) -> str:
        if self.resume_after is None:
            if self.position.type == "AT_SEQUENCE_NUMBER":
                first = int(self.position.sequence_number or 0)
                self.resume_after = self._sequence_before(lambda record: int(record["SequenceNumber"]) >= first)
            elif self.position.type == "AT_TIMESTAMP":
                instant = float(self.position.timestamp or 0)
                self.resume_after = self._sequence_before(
                    lambda record: float(record["ApproximateArrivalTimestamp"]) >= instant
                )
            else:  # TRIM_HORIZON: nothing precedes the first record
                self.resume_after = self._shard_start()
        return self.resume_after

    def _sequence_before(self, is_past_start: Callable[[dict[str, Any]], bool]) -> str:
        """The last record of the shard before the first one ``is_past_start`` accepts (read from
        the trim horizon), or the shard's starting sequence number when there is none."""
        iterator = self.upstream.call(
            "GetShardIterator",
            {"StreamARN": self.stream_arn, "ShardId": self.shard_id, "ShardIteratorType": "TRIM_HORIZON"},
            self.auth,
        )["ShardIterator"]
        last: str | None = None
        for _ in range(_SCAN_PAGE_CAP):
            page = self.upstream.call("GetRecords", {"ShardIterator": iterator, "Limit": GET_RECORDS_LIMIT}, self.auth)
            for record in page.get("Records") or []:
                if is_past_start(record):
                    return last or self._shard_start()
                last = str(record["SequenceNumber"])
            iterator = page.get("NextShardIterator")
            if not iterator or not page.get("Records"):
                break
        return last or self._shard_start()

    def _shard_start(self) -> str:
        request: dict[str, Any] = {"StreamARN": self.stream_arn}
        while True:
            page = self.upstream.call("ListShards", request, self.auth)
            for shard in page.get("Shards") or []:
                if shard["ShardId"] == self.shard_id:
                    return str(shard["SequenceNumberRange"]["StartingSequenceNumber"])
            if not page.get("NextToken"):
                raise UpstreamError(400, "ResourceNotFoundException", f"Shard {self.shard_id} not in {self.stream_arn}")
            request = {"NextToken": page["NextToken"]}

    def _send_event(self, event: Mapping[str, Any], last: bool = False) -> None:
        failure = self.efo._take_failure(self.slot.consumer_arn, self.shard_id)
        if failure is not None:
            self._write_exception(failure.code, failure.message)
            raise _StreamEnded(f"injected {failure.code}")
        if last:
            self._let_go()
        self._write_event(event_message("SubscribeToShardEvent", event))
        self.records_sent += len(event["Records"])

    def _write_exception(self, code: str, message: str) -> None:
        """An exception event; it always ends the stream."""
        self._let_go()
        self._write_event(exception_message(code, message))

    def _let_go(self) -> None:
        """Free the slot before the stream's last bytes go out: a client may resubscribe the
        moment it reads them, and must not find its own ended subscription still holding it."""
        self.efo._release(self.slot)

    def _write_event(self, message: bytes) -> None:
        # Counted before the write: a client that reads the event may look at the counter
        # before this thread runs again, and must find the event counted.
        self.efo._count_event(1)
        try:
            self._write(message)
        except _StreamEnded:
            self.efo._count_event(-1)
            raise
        self.events_sent += 1

    def _write(self, message: bytes) -> None:
        """One message as one HTTP chunk: urllib3 hands each chunk on as it arrives."""
        try:
            self.handler.wfile.write(b"%X\r\n%s\r\n" % (len(message), message))
        except (OSError, ValueError) as error:  # ValueError: the file was closed by a stop()
            raise _StreamEnded("client disconnected", client_gone=True) from error

    def _finish_body(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.handler.wfile.write(b"0\r\n\r\n")

    def _client_gone(self) -> bool:
        """A readable socket with nothing to read is a closed one: the client sends nothing
        while a response streams, so this notices a hang-up before a write fails."""
        connection = self.handler.connection
        try:
            readable, _, _ = select.select([connection], [], [], 0)
            return bool(readable) and connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True


# --- HTTP ------------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Also bounds a write to a client that stopped reading: it then counts as gone.
    timeout = 120
    server: _EfoHTTPServer
    _upstream: _Upstream | None = None

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature of the base class
        log.debug("%s - %s", self.address_string(), format % args)

    def do_POST(self) -> None:
        self._dispatch()

    def do_GET(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def do_HEAD(self) -> None:
        self._dispatch()

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            if self._upstream is not None:
                self._upstream.close()

    @property
    def upstream(self) -> _Upstream:
        # One upstream connection per client connection, so per thread.
        if self._upstream is None:
            self._upstream = _Upstream(self.server.efo.upstream)
        return self._upstream

    def _dispatch(self) -> None:
        body = self._read_body()
        if self.command == "POST" and self.headers.get("X-Amz-Target", "").strip() == SUBSCRIBE_TARGET:
            self.server.efo._subscribe(self, body)
        else:
            self._forward(body)

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _forward(self, body: bytes) -> None:
        headers = {name: value for name, value in self.headers.items() if name.lower() not in _HOP_BY_HOP}
        try:
            status, response_headers, response_body = self.upstream.request(
                self.command, self.path, body or None, headers
            )
        except OSError as error:
            self.send_api_error(500, "InternalFailure", f"upstream {self.server.efo.upstream} unreachable: {error}")
            return
        self.send_response(status)
        for name, value in response_headers:
            if name.lower() not in _NOT_COPIED_BACK:
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(response_body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(response_body)

    def send_api_error(self, status: int, code: str, message: str) -> None:
        body = _json_bytes({"__type": code, "message": message})
        self.send_response(status)
        self.send_header("Content-Type", JSON_CONTENT_TYPE)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("x-amzn-RequestId", str(uuid.uuid4()))
        self.end_headers()
        self.wfile.write(body)


class _EfoHTTPServer(QuietThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], efo: EfoServer) -> None:
        self.efo = efo
        self._clients: set[socket.socket] = set()
        self._clients_lock = threading.Lock()
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._clients_lock:
            self._clients.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._clients_lock:
            self._clients.discard(request)
        super().shutdown_request(request)

    def hang_up_all(self) -> None:
        """Close every client connection, so that no handler thread waits on an idle one."""
        with self._clients_lock:
            clients = list(self._clients)
        for client in clients:
            with contextlib.suppress(OSError):
                client.shutdown(socket.SHUT_RDWR)


# --- the server ------------------------------------------------------------------------------


class EfoServer:
    """``SubscribeToShard`` over kinesis-mock's data; every other request forwarded to it.

    :param upstream: kinesis-mock's endpoint URL (``http://127.0.0.1:<port>``).
    :param subscription_seconds: a subscription's lifetime; the stream then ends normally (AWS:
        5 minutes).
    :param heartbeat_seconds: how often an empty event is pushed while there is no new data (AWS:
        about 5 s).
    :param poll_seconds: pause between upstream ``GetRecords`` polls at the tip of the shard.
    :param takeover_after_seconds: None refuses a second subscription for the same consumer and
        shard for as long as the first is open; a number lets a call made that long after the
        first take over (AWS: 5 s), the first then ending with ``ResourceInUseException``.
    :param port: port on 127.0.0.1; 0 picks a free one.
    """

    def __init__(
        self,
        upstream: str,
        subscription_seconds: float = 300.0,
        heartbeat_seconds: float = 1.0,
        *,
        poll_seconds: float = 0.15,
        takeover_after_seconds: float | None = None,
        port: int = 0,
    ) -> None:
        if subscription_seconds <= 0 or heartbeat_seconds <= 0 or poll_seconds <= 0:
            raise ValueError("subscription_seconds, heartbeat_seconds and poll_seconds must be positive")
        _Upstream(upstream)  # validates the URL now rather than at the first request
        self.upstream = upstream.rstrip("/")
        self.subscription_seconds = subscription_seconds
        self.heartbeat_seconds = heartbeat_seconds
        self.poll_seconds = poll_seconds
        self.takeover_after_seconds = takeover_after_seconds
        self.port = port
        self._lock = threading.Lock()
        self._slots: dict[tuple[str, str], _Slot] = {}
        self._failures: list[_Failure] = []
        self._subscribe_calls = 0
        self._refused_in_use = 0
        self._events_sent = 0
        self._stopping = False
        self._httpd: _EfoHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"EfoServer(endpoint={self.endpoint!r}, upstream={self.upstream!r})"

    @property
    def endpoint(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    # --- lifecycle ---

    def start(self) -> EfoServer:
        """Bind 127.0.0.1 and serve in a background thread."""
        self._stopping = False
        self._httpd = _EfoHTTPServer((LOOPBACK, self.port), self)
        self.port = int(self._httpd.server_address[1])
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1}, name=f"efo-server-{self.port}", daemon=True
        )
        self._thread.start()
        log.info("EFO server on %s, upstream %s", self.endpoint, self.upstream)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """End open streams, stop serving, close client connections."""
        with self._lock:
            self._stopping = True
            for slot in self._slots.values():
                slot.end("server stopping")
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            deadline = time.monotonic() + timeout
            while self.open_subscriptions() and time.monotonic() < deadline:
                time.sleep(0.02)
            httpd.hang_up_all()
            httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def __enter__(self) -> EfoServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # --- fault controls (thread-safe) ---

    def expire_subscriptions(self) -> int:
        """End every open subscription now, normally, as the 5-minute expiry does; how many."""
        with self._lock:
            streams = [slot for slot in self._slots.values() if not slot.occupied]
            for slot in streams:
                slot.end("expired by expire_subscriptions()")
        return len(streams)

    def occupy(self, consumer_arn: str, shard_id: str) -> bool:
        """Hold the (consumer, shard) slot as another subscriber would; False if already held."""
        with self._lock:
            if (consumer_arn, shard_id) in self._slots:
                return False
            self._slots[(consumer_arn, shard_id)] = _Slot(consumer_arn, shard_id, occupied=True)
            return True

    def release(self, consumer_arn: str, shard_id: str) -> bool:
        """Free a slot taken by :meth:`occupy`; False if :meth:`occupy` does not hold it."""
        with self._lock:
            slot = self._slots.get((consumer_arn, shard_id))
            if slot is None or not slot.occupied:
                return False
            del self._slots[(consumer_arn, shard_id)]
            return True

    def fail_next_event(self, error_code: str = "InternalFailureException", message: str | None = None, *,
                        consumer_arn: str | None = None, shard_id: str | None = None) -> None:  # fmt: skip
        """Send the next event (of any subscription, or of the one named) as an exception event
        with ``error_code``, then end that stream. Several calls queue up."""
        message = message or f"Injected {error_code} (EfoServer.fail_next_event)"
        failure = _Failure(error_code, message, consumer_arn, shard_id)
        with self._lock:
            self._failures.append(failure)

    def clear_failures(self) -> int:
        """Drop the failures :meth:`fail_next_event` queued that no event has met yet; how many."""
        with self._lock:
            pending, self._failures = len(self._failures), []
        return pending

    def pending_failures(self) -> int:
        """Failures queued by :meth:`fail_next_event` that no event has met yet."""
        with self._lock:
            return len(self._failures)

    # --- observation ---

    @property
    def subscribe_calls(self) -> int:
        """``SubscribeToShard`` requests received, accepted or refused."""
        with self._lock:
            return self._subscribe_calls

    @property
    def refused_in_use(self) -> int:
        """``SubscribeToShard`` requests refused because their (consumer, shard) slot was held."""
        with self._lock:
            return self._refused_in_use

    @property
    def events_sent(self) -> int:
        """``SubscribeToShardEvent`` and exception events written (not ``initial-response``)."""
        with self._lock:
            return self._events_sent

    def open_subscriptions(self) -> list[tuple[str, str]]:
        """(consumer ARN, shard id) of every open stream (not slots held by :meth:`occupy`)."""
        with self._lock:
            return [key for key, slot in self._slots.items() if not slot.occupied]

    # --- internals used by the handler ---

    def _count_event(self, delta: int) -> None:
        with self._lock:
            self._events_sent += delta

    def _take_failure(self, consumer_arn: str, shard_id: str) -> _Failure | None:
        with self._lock:
            for index, failure in enumerate(self._failures):
                if failure.matches(consumer_arn, shard_id):
                    return self._failures.pop(index)
        return None

    def _claim(self, consumer_arn: str, shard_id: str) -> _Slot:
        key = (consumer_arn, shard_id)
        with self._lock:
            if self._stopping:
                raise _ApiError("InternalFailureException", "The EFO server is stopping.", status=500)
            current = self._slots.get(key)
            if current is not None:
                held_for = time.monotonic() - current.started
                if self.takeover_after_seconds is None or held_for < self.takeover_after_seconds:
                    self._refused_in_use += 1
                    raise _ApiError(
                        "ResourceInUseException",
                        f"Another active subscription exists for consumer {consumer_arn} on shard {shard_id}.",
                    )
                current.end("taken over by a newer subscription", taken_over=True)
            slot = _Slot(consumer_arn, shard_id, occupied=False)
            self._slots[key] = slot
            return slot

    def _release(self, slot: _Slot) -> None:
        with self._lock:
            if self._slots.get((slot.consumer_arn, slot.shard_id)) is slot:
                del self._slots[(slot.consumer_arn, slot.shard_id)]

    def _subscribe(self, handler: _Handler, body: bytes) -> None:
        with self._lock:
            self._subscribe_calls += 1
        consumer_arn, shard_id, position = "?", "?", "?"
        slot: _Slot | None = None
        try:
            consumer_arn, shard_id, starting = _parse_subscribe(body)
            position = starting.describe()
            auth = _upstream_auth(handler.headers, consumer_arn)
            described = handler.upstream.call("DescribeStreamConsumer", {"ConsumerARN": consumer_arn}, auth)
            consumer = described["ConsumerDescription"]
            status = consumer.get("ConsumerStatus")
            if status != "ACTIVE":
                raise _ApiError("ResourceInUseException", f"Consumer {consumer_arn} is {status}, not ACTIVE.")
            stream_arn = str(consumer.get("StreamARN") or consumer_arn.split("/consumer/", 1)[0])
            slot = self._claim(consumer_arn, shard_id)
            subscription = _Subscription(self, handler, handler.upstream, auth, slot, stream_arn, starting)
            subscription.open()
        except (_ApiError, UpstreamError) as error:
            if slot is not None:
                self._release(slot)
            log.info("SubscribeToShard consumer=%s shard=%s position=%s refused: %s: %s",
                     consumer_arn, shard_id, position, error.code, error.message)  # fmt: skip
            handler.send_api_error(error.status, error.code, error.message)
            return
        except OSError as error:
            if slot is not None:
                self._release(slot)
            log.info("SubscribeToShard consumer=%s shard=%s position=%s failed: upstream unreachable: %s",
                     consumer_arn, shard_id, position, error)  # fmt: skip
            handler.send_api_error(500, "InternalFailureException", f"upstream unreachable: {error}")
            return
        reason = "?"
        try:
            handler.send_response(200)
            handler.send_header("Content-Type", EVENT_STREAM_CONTENT_TYPE)
            handler.send_header("Transfer-Encoding", "chunked")
            handler.send_header("x-amzn-RequestId", str(uuid.uuid4()))
            handler.end_headers()
            reason = subscription.run()
        except OSError:
            reason = "client disconnected"
            handler.close_connection = True
        finally:
            self._release(slot)
            if reason in ("server stopping",):
                handler.close_connection = True
            log.info(
                "SubscribeToShard consumer=%s shard=%s position=%s ended: %s (%d events, %d records)",
                consumer_arn, shard_id, position, reason, subscription.events_sent, subscription.records_sent,
            )  # fmt: skip


def _parse_subscribe(body: bytes) -> tuple[str, str, _StartingPosition]:
    try:
        request = json.loads(body or b"{}")
    except ValueError as error:
        raise _ApiError("SerializationException", f"SubscribeToShard body is not JSON: {error}") from error
    if not isinstance(request, dict):
        raise _ApiError("SerializationException", "SubscribeToShard body must be a JSON object")
    consumer_arn, shard_id, start = request.get("ConsumerARN"), request.get("ShardId"), request.get("StartingPosition")
    if not isinstance(consumer_arn, str) or not consumer_arn:
        raise _ApiError("InvalidArgumentException", "ConsumerARN is required")
    if not isinstance(shard_id, str) or not shard_id:
        raise _ApiError("InvalidArgumentException", "ShardId is required")
    if not isinstance(start, dict) or start.get("Type") not in STARTING_POSITION_TYPES:
        choices = ", ".join(STARTING_POSITION_TYPES)
        raise _ApiError("InvalidArgumentException", f"StartingPosition.Type must be one of {choices}")
    kind = str(start["Type"])
    sequence = start.get("SequenceNumber")
    timestamp = start.get("Timestamp")
    if kind in ("AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER"):
        if not isinstance(sequence, str) or not sequence.isdigit():
            raise _ApiError("InvalidArgumentException", f"StartingPosition.SequenceNumber is required for {kind}")
        return consumer_arn, shard_id, _StartingPosition(kind, sequence_number=sequence)
    if kind == "AT_TIMESTAMP":
        if not isinstance(timestamp, (int, float)) or isinstance(timestamp, bool):
            raise _ApiError("InvalidArgumentException", "StartingPosition.Timestamp is required for AT_TIMESTAMP")
        return consumer_arn, shard_id, _StartingPosition(kind, timestamp=float(timestamp))
    return consumer_arn, shard_id, _StartingPosition(kind)


def _upstream_auth(headers: Mapping[str, str], consumer_arn: str) -> dict[str, str]:
    """Authorization for this subscription's upstream calls: the caller's own header (kinesis-mock
    reads the region from its credential scope and checks no signature), or one in the
    consumer's region when the caller sent none."""
    auth = headers.get("Authorization")
    if not auth:
        parts = consumer_arn.split(":")
        region = parts[3] if len(parts) > 3 and parts[3] else "us-east-1"
        scope = f"{time.strftime('%Y%m%d', time.gmtime())}/{region}/kinesis/aws4_request"
        auth = f"AWS4-HMAC-SHA256 Credential=efo-server/{scope}, SignedHeaders=host;x-amz-date, Signature={'0' * 64}"
    result = {"Authorization": auth}
    token = headers.get("X-Amz-Security-Token")
    if token:
        result["X-Amz-Security-Token"] = token
    return result
