"""RangeReader through enhanced fan-out when subscriptions misbehave as Kinesis's may: ended
mid-read (the 5-minute expiry), held by another subscriber (ResourceInUseException), failed by an
exception event; and a finished read frees the consumer's subscription. Real SubscribeToShard
event streams from the devstack's server in front of kinesis-mock."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from botocore.exceptions import EventStreamError

from airflow_provider_kinesis_doris.core.kinesis.consumer import ensure_consumer
from airflow_provider_kinesis_doris.core.kinesis.reader import RangeReader
from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
from airflow_provider_kinesis_doris.core.stores.memory import memory_store
from tests.conftest import _client
from airflow_provider_kinesis_doris.core.model import BoundaryKind, ShardRange
from tests.integration.kinesis.test_reader_kinesis import (
    PIPELINE,
    as_written,
    cut,
    only_shard,
    pending,
    put_plain,
    sealed_instant,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def consumer(kinesis_client: Any, stream: str) -> str:
    return ensure_consumer(kinesis_client, stream, "faults-it")


def reader_of(efo_server: Any, stream: str, shard: str, consumer: str, end_instant: int) -> tuple[RangeReader, CheckpointStore]:
    store = memory_store(PIPELINE)
    start, end = cut(shard, 0, BoundaryKind.SHARD_START), pending(store, shard, end_instant)
    shard_range = ShardRange(PIPELINE, stream, shard, 0, end_instant, start, end)
    return RangeReader(_client("kinesis", efo_server.endpoint), shard_range, store.ledger, consumer_arn=consumer), store


def write(kinesis_client: Any, stream: str, count: int) -> list[Any]:
    return [entry for i in range(count) for entry in put_plain(kinesis_client, stream, f"k{i}", f"r{i}".encode())]


def test_a_subscription_ended_mid_read_continues_after_the_last_record(kinesis_client, stream, consumer, efo_server) -> None:
    written = write(kinesis_client, stream, 12)
    end_instant = sealed_instant()
    reader, _ = reader_of(efo_server, stream, only_shard(kinesis_client, stream), consumer, end_instant)

    records = []
    for record in reader:
        records.append(record)
        if len(records) in (1, 5):
            efo_server.expire_subscriptions()  # Kinesis ends a subscription after 5 minutes

    assert as_written(records) == written
    assert reader.outcome.subscribe_calls >= 2 and reader.outcome.end.position == written[-1][0]


def test_a_subscription_held_by_another_subscriber_is_waited_for(kinesis_client, stream, consumer, efo_server) -> None:
    written = write(kinesis_client, stream, 3)
    shard = only_shard(kinesis_client, stream)
    reader, _ = reader_of(efo_server, stream, shard, consumer, sealed_instant())
    assert efo_server.occupy(consumer, shard)
    threading.Timer(1.0, efo_server.release, (consumer, shard)).start()

    records = list(reader)

    assert as_written(records) == written
    assert efo_server.refused_in_use >= 1 and reader.outcome.subscribe_calls == efo_server.refused_in_use + 1


@pytest.mark.parametrize("code", ["InternalFailureException", "ResourceInUseException"])
def test_an_exception_event_kinesis_can_recover_from_is_followed_by_a_new_subscription(
    kinesis_client, stream, consumer, efo_server, code: str
) -> None:
    written = write(kinesis_client, stream, 4)
    reader, _ = reader_of(efo_server, stream, only_shard(kinesis_client, stream), consumer, sealed_instant())
    efo_server.fail_next_event(code, consumer_arn=consumer)  # ResourceInUse: another run took the shard over

    records = list(reader)

    assert as_written(records) == written and reader.outcome.subscribe_calls == 2
    assert efo_server.pending_failures() == 0


def test_an_exception_event_that_no_subscription_gets_past_fails_the_read(kinesis_client, stream, consumer, efo_server) -> None:
    write(kinesis_client, stream, 2)
    reader, _ = reader_of(efo_server, stream, only_shard(kinesis_client, stream), consumer, sealed_instant())
    efo_server.fail_next_event("KMSAccessDeniedException", consumer_arn=consumer)

    with pytest.raises(EventStreamError, match="KMSAccessDeniedException"):
        list(reader)
    assert efo_server.open_subscriptions() == []


def test_a_read_that_stops_at_its_end_closes_its_subscription(kinesis_client, stream, consumer, efo_server) -> None:
    write(kinesis_client, stream, 3)
    end_instant = sealed_instant()
    write(kinesis_client, stream, 3)  # after the range: the read stops before the tip
    shard = only_shard(kinesis_client, stream)
    reader, _ = reader_of(efo_server, stream, shard, consumer, end_instant)

    records = list(reader)

    assert len(records) == 3 and reader.outcome.end.kind is BoundaryKind.AT
    # The server sees the connection close at its next heartbeat; an open one would stay.
    deadline = time.monotonic() + 3
    while efo_server.open_subscriptions() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert efo_server.open_subscriptions() == []
    # The next range's reader subscribes without meeting its predecessor.
    refused = efo_server.refused_in_use
    assert len(list(reader_of(efo_server, stream, shard, consumer, sealed_instant())[0])) == 6
    assert efo_server.refused_in_use == refused
