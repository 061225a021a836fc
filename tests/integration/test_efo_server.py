"""EfoServer: ``SubscribeToShard`` over kinesis-mock's data, checked with plain boto3 against what
``GetRecords`` returns from the same position, and its framing against botocore's own decoder."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from aws_kinesis_agg.aggregator import RecordAggregator
from botocore.config import Config
from botocore.eventstream import ChecksumMismatch, EventStreamBuffer
from botocore.exceptions import ClientError, EventStreamError

from airflow_provider_kinesis_doris.core.kinesis.kpl import deaggregate
from airflow_provider_kinesis_doris.testing.builders import wait_stream_active
from kinesis_doris_devstack.efo_server import EfoServer, encode_message, exception_message
from kinesis_doris_devstack.scenario import split

pytestmark = pytest.mark.integration

HEARTBEAT = 0.2
POLL = 0.05


@dataclass(frozen=True)
class Stream:
    name: str
    arn: str
    shard_id: str
    starting_sequence: str


def efo_client(endpoint: str) -> Any:
    # No retries: every refusal must reach the test as it was sent. A read timeout well above the
    # heartbeat, so that a stream that stops sending fails the test instead of hanging it.
    return boto3.client(
        "kinesis", endpoint_url=endpoint, region_name="us-east-1",
        config=Config(read_timeout=10, connect_timeout=5, retries={"max_attempts": 1, "mode": "standard"}),
    )  # fmt: skip


@pytest.fixture
def efo(kinesis_mock_endpoint: str) -> Iterator[EfoServer]:
    server = EfoServer(kinesis_mock_endpoint, subscription_seconds=30, heartbeat_seconds=HEARTBEAT, poll_seconds=POLL)
    with server:  # stopped also when the test fails
        yield server


@pytest.fixture
def client(efo: EfoServer) -> Any:
    return efo_client(efo.endpoint)


@pytest.fixture
def stream(kinesis_client: Any) -> Iterator[Stream]:
    name = f"efo-{uuid.uuid4().hex[:12]}"
    kinesis_client.create_stream(StreamName=name, ShardCount=1)
    wait_stream_active(kinesis_client, name)
    arn = kinesis_client.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]["StreamARN"]
    (shard,) = kinesis_client.list_shards(StreamName=name)["Shards"]
    yield Stream(name, arn, shard["ShardId"], shard["SequenceNumberRange"]["StartingSequenceNumber"])
    kinesis_client.delete_stream(StreamName=name, EnforceConsumerDeletion=True)


def register(kinesis: Any, stream: Stream, name: str = "reader") -> str:
    arn = str(kinesis.register_stream_consumer(StreamARN=stream.arn, ConsumerName=name)["Consumer"]["ConsumerARN"])
    deadline = time.monotonic() + 15
    while kinesis.describe_stream_consumer(ConsumerARN=arn)["ConsumerDescription"]["ConsumerStatus"] != "ACTIVE":
        assert time.monotonic() < deadline, f"consumer {arn} never became ACTIVE"
        time.sleep(0.05)
    return arn


@pytest.fixture
def consumer(kinesis_client: Any, stream: Stream) -> str:
    return register(kinesis_client, stream)


def subscribe(client: Any, consumer: str, stream: Stream, **position: Any) -> Any:
    response = client.subscribe_to_shard(ConsumerARN=consumer, ShardId=stream.shard_id, StartingPosition=position)
    return response["EventStream"]


def events(event_stream: Any) -> Iterator[dict[str, Any]]:
    for event in event_stream:
        assert set(event) == {"SubscribeToShardEvent"}, event
        yield event["SubscribeToShardEvent"]


def read_records(event_stream: Any, count: int, timeout: float = 10.0) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Records of the next events until ``count`` came; also the last event read."""
    records: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    for event in events(event_stream):
        records += event["Records"]
        if len(records) >= count:
            return records, event
        assert time.monotonic() < deadline, f"only {len(records)} of {count} records within {timeout} s"
    raise AssertionError(f"the stream ended after {len(records)} of {count} records")


def close(event_stream: Any, efo: EfoServer, consumer: str, stream: Stream) -> None:
    """Hang up as a client does, and wait until the server has noticed and freed the slot."""
    event_stream.close()
    deadline = time.monotonic() + 5
    while (consumer, stream.shard_id) in efo.open_subscriptions():
        assert time.monotonic() < deadline, "the server did not notice the client hanging up"
        time.sleep(0.02)


def put(kinesis: Any, stream: Stream, key: str, data: bytes) -> str:
    return str(kinesis.put_record(StreamName=stream.name, PartitionKey=key, Data=data)["SequenceNumber"])


def put_aggregate(kinesis: Any, stream: Stream, users: list[tuple[str, bytes]]) -> str:
    aggregator = RecordAggregator()
    for key, data in users:
        assert aggregator.add_user_record(key, data) is None
    key, _, blob = aggregator.clear_and_get().get_contents()
    return put(kinesis, stream, key, blob)


def get_records(kinesis: Any, stream: Stream, **iterator: Any) -> list[dict[str, Any]]:
    """Everything plain GetRecords returns from a position, up to the tip."""
    shard_iterator = kinesis.get_shard_iterator(StreamName=stream.name, ShardId=stream.shard_id, **iterator)
    shard_iterator = shard_iterator["ShardIterator"]
    records: list[dict[str, Any]] = []
    while shard_iterator:
        page = kinesis.get_records(ShardIterator=shard_iterator, Limit=10_000)
        records += page["Records"]
        if not page["Records"]:
            break
        shard_iterator = page.get("NextShardIterator")
    return records


def as_read(records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r["SequenceNumber"], r["PartitionKey"], r["Data"], r["ApproximateArrivalTimestamp"]) for r in records]


def sequences(records: list[dict[str, Any]]) -> list[str]:
    return [record["SequenceNumber"] for record in records]


def error_code(error: ClientError) -> str:
    return str(error.response["Error"]["Code"])


# --- records ---------------------------------------------------------------------------------


def test_records_equal_get_records_from_each_starting_position(kinesis_client, client, efo, stream, consumer) -> None:
    written = [put(kinesis_client, stream, f"k{i}", f"plain {i}".encode()) for i in range(3)]
    users = [(f"user-{i}", f'{{"n": {i}}}'.encode()) for i in range(4)]
    written.append(put_aggregate(kinesis_client, stream, users))
    written.append(put(kinesis_client, stream, "raw", b"\x00\xff raw bytes"))
    written.append(put(kinesis_client, stream, "k5", b"plain 5"))
    everything = get_records(kinesis_client, stream, ShardIteratorType="TRIM_HORIZON")
    assert sequences(everything) == written
    arrival = everything[2]["ApproximateArrivalTimestamp"]

    positions = [
        ({"Type": "TRIM_HORIZON"}, {"ShardIteratorType": "TRIM_HORIZON"}),
        ({"Type": "AT_SEQUENCE_NUMBER", "SequenceNumber": written[3]},
         {"ShardIteratorType": "AT_SEQUENCE_NUMBER", "StartingSequenceNumber": written[3]}),
        ({"Type": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": written[3]},
         {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "StartingSequenceNumber": written[3]}),
        ({"Type": "AT_TIMESTAMP", "Timestamp": arrival}, {"ShardIteratorType": "AT_TIMESTAMP", "Timestamp": arrival}),
    ]  # fmt: skip
    for position, iterator in positions:
        expected = get_records(kinesis_client, stream, **iterator)
        assert expected, position
        event_stream = subscribe(client, consumer, stream, **position)
        received, last_event = read_records(event_stream, len(expected))
        close(event_stream, efo, consumer, stream)
        assert as_read(received) == as_read(expected), position
        assert last_event["ContinuationSequenceNumber"] == expected[-1]["SequenceNumber"]

    # The aggregate's bytes came through untouched: they still unpack into the user records.
    aggregate = next(record for record in everything if record["SequenceNumber"] == written[3])
    unpacked = deaggregate(aggregate["Data"], aggregate["PartitionKey"])
    assert [(user.partition_key, user.data) for user in unpacked] == users


def test_requests_other_than_subscribe_are_forwarded(kinesis_client, client, stream) -> None:
    direct = kinesis_client.describe_stream_summary(StreamName=stream.name)["StreamDescriptionSummary"]
    forwarded = client.describe_stream_summary(StreamName=stream.name)["StreamDescriptionSummary"]
    assert (forwarded["StreamARN"], forwarded["OpenShardCount"]) == (direct["StreamARN"], 1)

    put_result = client.put_record(StreamName=stream.name, PartitionKey="p", Data=b"through the EFO server")
    sequence = put_result["SequenceNumber"]
    (record,) = get_records(kinesis_client, stream, ShardIteratorType="TRIM_HORIZON")
    assert (record["SequenceNumber"], record["Data"]) == (sequence, b"through the EFO server")

    with pytest.raises(ClientError) as missing:
        client.describe_stream_summary(StreamName=f"{stream.name}-missing")
    assert error_code(missing.value) == "ResourceNotFoundException"


# --- continuation and heartbeats -------------------------------------------------------------


def test_continuation_sequence_number_and_heartbeats(kinesis_client, client, efo, stream, consumer) -> None:
    # An empty shard from TRIM_HORIZON: empty events, at the heartbeat, continuing at the shard's
    # start (AFTER it skips nothing).
    event_stream = subscribe(client, consumer, stream, Type="TRIM_HORIZON")
    idle = events(event_stream)
    first = next(idle)
    assert first["Records"] == [] and first["MillisBehindLatest"] == 0
    assert first["ContinuationSequenceNumber"] == stream.starting_sequence
    started = time.monotonic()
    second = next(idle)
    gap = time.monotonic() - started
    assert second["Records"] == [] and second["ContinuationSequenceNumber"] == stream.starting_sequence
    assert HEARTBEAT * 0.5 <= gap <= HEARTBEAT * 10, f"heartbeat after {gap:.2f} s"

    r1 = put(kinesis_client, stream, "a", b"r1")
    received, event = read_records(event_stream, 1)
    assert sequences(received) == [r1] and event["ContinuationSequenceNumber"] == r1
    assert isinstance(event["MillisBehindLatest"], int)
    heartbeat = next(idle)
    assert heartbeat["Records"] == [] and heartbeat["ContinuationSequenceNumber"] == r1
    close(event_stream, efo, consumer, stream)

    # LATEST on a shard holding r1: before anything new arrives, the continuation is r1.
    event_stream = subscribe(client, consumer, stream, Type="LATEST")
    first = next(events(event_stream))
    assert first["Records"] == [] and first["ContinuationSequenceNumber"] == r1
    r2 = put(kinesis_client, stream, "b", b"r2")
    received, event = read_records(event_stream, 1)
    assert sequences(received) == [r2] and event["ContinuationSequenceNumber"] == r2
    close(event_stream, efo, consumer, stream)

    # Resuming AFTER a continuation from an empty event skips nothing.
    for continuation, expected in ((stream.starting_sequence, [r1, r2]), (r1, [r2])):
        event_stream = subscribe(client, consumer, stream, Type="AFTER_SEQUENCE_NUMBER", SequenceNumber=continuation)
        received, _ = read_records(event_stream, len(expected))
        close(event_stream, efo, consumer, stream)
        assert sequences(received) == expected


# --- one subscription per consumer and shard ---------------------------------------------------


def test_one_open_subscription_per_consumer_and_shard(kinesis_client, client, efo, stream, consumer) -> None:
    first = subscribe(client, consumer, stream, Type="TRIM_HORIZON")
    next(events(first))
    calls = efo.subscribe_calls
    with pytest.raises(ClientError) as refused:
        subscribe(client, consumer, stream, Type="TRIM_HORIZON")
    assert error_code(refused.value) == "ResourceInUseException"
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert efo.subscribe_calls == calls + 1  # refusals count

    # Another consumer has its own subscription to the same shard.
    other = register(kinesis_client, stream, "other-reader")
    other_stream = subscribe(client, other, stream, Type="TRIM_HORIZON")
    next(events(other_stream))
    other_stream.close()

    # Once the client hangs up, the slot is free again.
    first.close()
    deadline = time.monotonic() + 5
    while True:
        try:
            again = subscribe(client, consumer, stream, Type="TRIM_HORIZON")
            break
        except ClientError as error:
            assert error_code(error) == "ResourceInUseException"
            assert time.monotonic() < deadline, "the slot stayed taken after the client hung up"
            time.sleep(0.05)
    next(events(again))
    close(again, efo, consumer, stream)

    # occupy() holds the slot as another subscriber would.
    assert efo.occupy(consumer, stream.shard_id)
    assert not efo.occupy(consumer, stream.shard_id)
    with pytest.raises(ClientError) as occupied:
        subscribe(client, consumer, stream, Type="TRIM_HORIZON")
    assert error_code(occupied.value) == "ResourceInUseException"
    assert efo.release(consumer, stream.shard_id)
    assert not efo.release(consumer, stream.shard_id)
    freed = subscribe(client, consumer, stream, Type="TRIM_HORIZON")
    next(events(freed))
    close(freed, efo, consumer, stream)


def test_a_later_call_takes_over_when_enabled(kinesis_mock_endpoint, stream, consumer) -> None:
    server = EfoServer(kinesis_mock_endpoint, heartbeat_seconds=HEARTBEAT, poll_seconds=POLL, takeover_after_seconds=2.0)
    with server as efo:
        client = efo_client(efo.endpoint)
        subscribed = time.monotonic()
        first = events(subscribe(client, consumer, stream, Type="TRIM_HORIZON"))
        next(first)
        with pytest.raises(ClientError) as early:
            subscribe(client, consumer, stream, Type="TRIM_HORIZON")
        assert error_code(early.value) == "ResourceInUseException"
        time.sleep(max(0.0, subscribed + 2.2 - time.monotonic()))
        second = subscribe(client, consumer, stream, Type="TRIM_HORIZON")
        next(events(second))
        with pytest.raises(EventStreamError) as taken_over:
            for _ in first:
                pass
        assert error_code(taken_over.value) == "ResourceInUseException"
        assert efo.open_subscriptions() == [(consumer, stream.shard_id)]
        close(second, efo, consumer, stream)


# --- expiry --------------------------------------------------------------------------------------


def test_expired_subscriptions_resume_after_the_continuation_without_gaps(
    kinesis_client, client, efo, stream, consumer
) -> None:
    written: list[str] = []
    received: list[dict[str, Any]] = []
    position: dict[str, Any] = {"Type": "TRIM_HORIZON"}
    for round_number in range(3):
        batch = [put(kinesis_client, stream, f"k{round_number}-{i}", f"{round_number}/{i}".encode()) for i in range(4)]
        written += batch
        events_before = efo.events_sent
        event_stream = subscribe(client, consumer, stream, **position)
        got, event = read_records(event_stream, len(batch))
        seen_events, continuation = 1, event["ContinuationSequenceNumber"]
        received += got
        assert efo.expire_subscriptions() == 1
        expired = time.monotonic()
        for event in events(event_stream):  # ends cleanly: no exception
            seen_events += 1
            received += event["Records"]
            continuation = event["ContinuationSequenceNumber"]
        assert time.monotonic() - expired < 2.0, "the stream outlived expire_subscriptions()"
        # Every event written reached the client, and nothing is open any more.
        assert efo.events_sent - events_before == seen_events
        assert efo.open_subscriptions() == []
        position = {"Type": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": continuation}
    assert sequences(received) == written


def test_a_subscription_ends_after_subscription_seconds(kinesis_mock_endpoint, stream, consumer) -> None:
    server = EfoServer(kinesis_mock_endpoint, subscription_seconds=1.0, heartbeat_seconds=HEARTBEAT, poll_seconds=POLL)
    with server as efo:
        started = time.monotonic()
        idle = list(events(subscribe(efo_client(efo.endpoint), consumer, stream, Type="LATEST")))
        lasted = time.monotonic() - started
        assert 0.9 <= lasted < 4.0, f"the subscription lasted {lasted:.2f} s"
        assert len(idle) >= 3 and all(event["Records"] == [] for event in idle)  # heartbeats until the end
        assert efo.open_subscriptions() == []


# --- shard end -----------------------------------------------------------------------------------


def test_a_split_ends_the_parent_subscription_with_child_shards(kinesis_client, client, efo, stream, consumer) -> None:
    written = [put(kinesis_client, stream, f"k{i}", f"before split {i}".encode()) for i in range(2)]
    event_stream = subscribe(client, consumer, stream, Type="TRIM_HORIZON")
    received, _ = read_records(event_stream, 2)
    written.append(put(kinesis_client, stream, "k2", b"just before the split"))
    children = split(kinesis_client, stream.name, stream.shard_id)

    tail = list(events(event_stream))  # the server ends the stream at the shard end
    received += [record for event in tail for record in event["Records"]]
    assert sequences(received) == written
    final = tail[-1]
    assert "ContinuationSequenceNumber" not in final
    assert sorted(child["ShardId"] for child in final["ChildShards"]) == sorted(children)
    assert all(child["ParentShards"] == [stream.shard_id] for child in final["ChildShards"])
    assert all("ChildShards" not in event and "ContinuationSequenceNumber" in event for event in tail[:-1])
    assert efo.open_subscriptions() == []

    # Resubscribing after the last record of the closed parent goes straight to its end.
    (only,) = events(subscribe(client, consumer, stream, Type="AFTER_SEQUENCE_NUMBER", SequenceNumber=written[-1]))
    assert only["Records"] == [] and "ContinuationSequenceNumber" not in only
    assert sorted(child["ShardId"] for child in only["ChildShards"]) == sorted(children)


# --- errors --------------------------------------------------------------------------------------


def test_errors_before_the_stream_are_json_errors(kinesis_client, client, efo, stream, consumer) -> None:
    unknown_consumer = f"{stream.arn}/consumer/nobody:1"
    with pytest.raises(ClientError) as not_found:
        subscribe(client, unknown_consumer, stream, Type="LATEST")
    assert error_code(not_found.value) == "ResourceNotFoundException"
    assert not_found.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400

    # A sequence number kinesis-mock does not know, and a shard that does not exist: the
    # upstream's own code and message (for the request the server makes: by StreamARN).
    sequence = put(kinesis_client, stream, "k", b"r")
    unknown_sequence = str(int(sequence) + 1)
    with pytest.raises(ClientError) as upstream:
        kinesis_client.get_shard_iterator(
            StreamARN=stream.arn, ShardId=stream.shard_id,
            ShardIteratorType="AT_SEQUENCE_NUMBER", StartingSequenceNumber=unknown_sequence,
        )  # fmt: skip
    with pytest.raises(ClientError) as via_efo:
        subscribe(client, consumer, stream, Type="AT_SEQUENCE_NUMBER", SequenceNumber=unknown_sequence)
    assert via_efo.value.response["Error"] == upstream.value.response["Error"]

    missing_shard = Stream(stream.name, stream.arn, "shardId-000000000099", stream.starting_sequence)
    with pytest.raises(ClientError) as no_shard:
        subscribe(client, consumer, missing_shard, Type="TRIM_HORIZON")
    assert error_code(no_shard.value) == "ResourceNotFoundException"
    assert efo.open_subscriptions() == []  # refusals hold no slot

    # A consumer that is not ACTIVE yet (kinesis-mock keeps it CREATING for 500 ms).
    requested = time.monotonic()
    fresh = kinesis_client.register_stream_consumer(StreamARN=stream.arn, ConsumerName="fresh")["Consumer"]
    fresh = fresh["ConsumerARN"]
    try:
        subscribe(client, fresh, stream, Type="LATEST").close()
    except ClientError as creating:
        assert error_code(creating) == "ResourceInUseException"
    else:
        if time.monotonic() - requested > 0.4:
            pytest.skip("the machine took longer than kinesis-mock's 500 ms consumer creation")
        pytest.fail("a consumer that is still CREATING was subscribed")


def test_an_injected_failure_raises_event_stream_error_and_the_stream_resumes(
    kinesis_client, client, efo, stream, consumer
) -> None:
    r1 = put(kinesis_client, stream, "a", b"r1")
    events_before = efo.events_sent
    event_stream = subscribe(client, consumer, stream, Type="TRIM_HORIZON")
    received, event = read_records(event_stream, 1)
    continuation = event["ContinuationSequenceNumber"]
    assert continuation == r1
    efo.fail_next_event("InternalFailureException")
    r2 = put(kinesis_client, stream, "b", b"r2")
    seen_events = 1
    with pytest.raises(EventStreamError) as failed:
        for event in events(event_stream):
            seen_events += 1
            received += event["Records"]
    assert error_code(failed.value) == "InternalFailureException"
    assert efo.events_sent - events_before == seen_events + 1  # the events read, then the exception
    assert efo.open_subscriptions() == []

    event_stream = subscribe(client, consumer, stream, Type="AFTER_SEQUENCE_NUMBER", SequenceNumber=continuation)
    received += read_records(event_stream, 1)[0]
    close(event_stream, efo, consumer, stream)
    assert sequences(received) == [r1, r2]


# --- framing -------------------------------------------------------------------------------------


def test_framing_round_trips_through_botocores_decoder_and_crcs_are_checked() -> None:
    headers = {":message-type": "event", ":event-type": "SubscribeToShardEvent", ":content-type": "application/json",
               "x-ünïcode": "värde"}  # fmt: skip
    payload = b'{"Records":[],"ContinuationSequenceNumber":"1","MillisBehindLatest":0}'
    message = encode_message(headers, payload)
    failure = exception_message("InternalFailureException", "boom")

    # Fed in awkward pieces, as a network delivers them.
    buffer, decoded = EventStreamBuffer(), []
    wire = message + failure + message
    for start in range(0, len(wire), 7):
        buffer.add_data(wire[start:start + 7])
        decoded += list(buffer)
    assert [(m.headers, m.payload) for m in decoded] == [
        (headers, payload),
        ({":message-type": "exception", ":exception-type": "InternalFailureException",
          ":content-type": "application/json"}, b'{"message":"boom"}'),
        (headers, payload),
    ]  # fmt: skip
    assert decoded[0].prelude.total_length == len(message)
    assert decoded[1].to_response_dict()["status_code"] == 400

    for index in (5, len(message) - 10):  # a prelude byte (prelude CRC), a payload byte (message CRC)
        corrupted = bytearray(message)
        corrupted[index] ^= 0x01
        buffer = EventStreamBuffer()
        buffer.add_data(bytes(corrupted))
        with pytest.raises(ChecksumMismatch):
            list(buffer)

    with pytest.raises(ValueError):
        encode_message({"x" * 256: "too long a name"}, b"")
