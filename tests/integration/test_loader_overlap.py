"""The loader loads chunk k while it reads chunk k+1, in order, and stops at a failed load: on the
real local stack (kinesis-mock, moto DynamoDB, the Doris stand-in)."""

from __future__ import annotations

import dataclasses
import json
import threading
from typing import Any

import pytest

from airflow_provider_kinesis_doris.core.stores.items import CHUNK_INTENT
from airflow_provider_kinesis_doris.core.load import LoadClients
from airflow_provider_kinesis_doris.testing.faults import FailOnNthCall, InjectedCrash, runner_with
from kinesis_doris_devstack.scenario import event, now_ms, put_records, sealed_end, wait_past

pytestmark = pytest.mark.integration

CHUNK_ROWS = 7  # the world's chunk limit
EVENTS = 30  # chunks of 7, 7, 7, 7, 2 rows
PAGE = 5  # records per GetRecords page, so that every chunk takes more than one page
HOLD_TIMEOUT_S = 20


class OverlapWitness:
    """Holds the first Stream Load until the reader has fetched the records of the second chunk,
    and keeps the order of pages and loads. A loader that reads only between loads cannot fetch
    them while its first load is pending: the hold then runs out and ``overlapped`` stays False."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []
        self._fetched = 0
        self._second_chunk_read = threading.Event()
        self._lock = threading.Lock()
        self.overlapped = False

    def page(self, records: int) -> None:
        with self._lock:
            self.events.append(("page", records))
            self._fetched += records
            if self._fetched >= 2 * CHUNK_ROWS:
                self._second_chunk_read.set()

    def load(self, label: str, first: bool) -> None:
        with self._lock:
            self.events.append(("load", label))
        if first:
            self.overlapped = self._second_chunk_read.wait(HOLD_TIMEOUT_S)

    def loaded(self, label: str) -> None:
        with self._lock:
            self.events.append(("loaded", label))


class SmallPages:
    """The real boto3 Kinesis client, asked for ``PAGE`` records per GetRecords call."""

    def __init__(self, client: Any, witness: OverlapWitness) -> None:
        self._client = client
        self._witness = witness

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def get_records(self, **kwargs: Any) -> dict[str, Any]:
        response = self._client.get_records(**{**kwargs, "Limit": PAGE})
        self._witness.page(len(response["Records"]))
        return response


class WitnessedLoads:
    """The real Doris Stream Load client; the first load is held by the witness."""

    def __init__(self, client: Any, witness: OverlapWitness) -> None:
        self._client = client
        self._witness = witness
        self._calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def load_idempotently(self, database: str, table: str, label: str, *args: Any, **kwargs: Any) -> Any:
        self._calls += 1
        self._witness.load(label, first=self._calls == 1)
        try:
            return self._client.load_idempotently(database, table, label, *args, **kwargs)
        finally:
            self._witness.loaded(label)


def _one_shard_interval(kinesis_client: Any, stream: str) -> tuple[int, int]:
    """``EVENTS`` events, all in one shard (one partition key), inside a sealed interval."""
    start = now_ms()
    wait_past(start)
    results = put_records(kinesis_client, stream, (("one-key", json.dumps(event(i)).encode()) for i in range(EVENTS)))
    return start, sealed_end(kinesis_client, stream, results)


def test_a_chunk_loads_while_the_next_one_is_read_in_chunk_order(world, kinesis_client) -> None:
    start, end = _one_shard_interval(kinesis_client, world["stream"])
    witness = OverlapWitness()

    def wrap(clients: LoadClients) -> LoadClients:
        kinesis, doris = SmallPages(clients.kinesis, witness), WitnessedLoads(clients.doris, witness)
        return dataclasses.replace(clients, kinesis=kinesis, doris=doris)

    result = world["run"](start, end, runner=runner_with(wrap))

    [report] = [r for r in result.reports if r.records]
    labels = report.labels
    assert witness.overlapped, f"the second chunk was not read while the first one loaded: {witness.events}"
    first_loaded = witness.events.index(("loaded", labels[0]))
    assert sum(n for kind, n in witness.events[:first_loaded] if kind == "page") >= 2 * CHUNK_ROWS
    # One load at a time, in chunk order.
    loads = [(kind, label) for kind, label in witness.events if kind != "page"]
    assert loads == [(kind, label) for label in labels for kind in ("load", "loaded")]
    assert [row[0] for row in world["rows"]()] == list(range(EVENTS))
    chunks = world["store"].chunks.chunks_for_range(report.shard_id, start)
    assert [c.label for c in chunks] == labels and {c.state for c in chunks} == {"VISIBLE"}
    assert report.chunks == 5 and report.rows_loaded == EVENTS


def test_a_failed_load_stops_the_range_before_any_later_chunk(world, kinesis_client) -> None:
    start, end = _one_shard_interval(kinesis_client, world["stream"])
    witness = OverlapWitness()
    failing: list[FailOnNthCall] = []

    def wrap(clients: LoadClients) -> LoadClients:
        failing.append(FailOnNthCall(clients.doris, "load_idempotently", 2))
        return dataclasses.replace(clients, kinesis=SmallPages(clients.kinesis, witness), doris=failing[-1])

    with pytest.raises(InjectedCrash):
        world["run"](start, end, runner=runner_with(wrap))

    [doris] = failing
    assert doris.calls == 2, "a chunk after the failed one was sent"
    assert [row[0] for row in world["rows"]()] == list(range(CHUNK_ROWS))
    shards = kinesis_client.list_shards(StreamName=world["stream"])["Shards"]
    chunks = [c for shard in shards for c in world["store"].chunks.chunks_for_range(shard["ShardId"], start)]
    assert [c.state for c in chunks] == ["VISIBLE", CHUNK_INTENT]

    rerun = world["run"](start, end)

    assert [row[0] for row in world["rows"]()] == list(range(EVENTS))
    assert rerun.summary()["loaded"] == EVENTS - CHUNK_ROWS
