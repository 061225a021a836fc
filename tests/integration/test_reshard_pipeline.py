"""Splits and merges while a producer keeps writing, loaded by ``run_interval`` on the real local
stack (kinesis-mock, moto DynamoDB, the Doris stand-in), without the reshard sensor: the planner
reconciles the topology itself (I5), so correctness never depends on rebalancing.

Every Kinesis call of the planner and the readers goes through :class:`RecordingKinesis`, a thin
wrapper of the boto3 client that notes which shard each GetShardIterator / GetRecords call read.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
from airflow_provider_kinesis_doris.core.stores.dynamodb import dynamo_store
from airflow_provider_kinesis_doris.core.concurrency import DEFAULT_DRIVER_CONCURRENCY
from airflow_provider_kinesis_doris.core.load_job import LoadJob
from airflow_provider_kinesis_doris.core.settings import Credentials
from airflow_provider_kinesis_doris.core.report import RangeReport
from airflow_provider_kinesis_doris.core.model import BoundaryKind, ShardState
from airflow_provider_kinesis_doris.core.pipeline import IntervalResult, PipelineConfig, run_interval
from airflow_provider_kinesis_doris.core.errors import ShardsWaiting
from airflow_provider_kinesis_doris.core.plan import ShardDecision
from airflow_provider_kinesis_doris.core.rebalance import rebalance, weights_for_plan
from airflow_provider_kinesis_doris.core.doris.options import StreamLoadOptions
from airflow_provider_kinesis_doris.core.doris.connection import RetryPolicy
from airflow_provider_kinesis_doris.core.kinesis.topology import list_shards
from airflow_provider_kinesis_doris.core.mapping import RecordMapping
from airflow_provider_kinesis_doris.testing.faults import FailOnNthCall, InjectedCrash, runner_with
from kinesis_doris_devstack.scenario import events_table_ddl, merge, now_ms, split, wait_past
from airflow_provider_kinesis_doris.testing.builders import local_pipeline_config, wait_stream_active
from tests.conftest import DORIS_PASSWORD, DORIS_USER

pytestmark = pytest.mark.integration

DB = "reshard_it"
CHECKPOINT_TABLE = "checkpoints_reshard_it"
_names = itertools.count()


# --- recording the reads ------------------------------------------------------------------------


@dataclass
class CallLog:
    """(role, operation, shard id) of every read call, in order, across clients; the role is
    ``planner`` (boundary probes) or ``reader`` (records that get loaded)."""

    calls: list[tuple[str, str, str]] = field(default_factory=list)

    def shards_read(self, since: int = 0) -> set[str]:
        return {shard for _, _, shard in self.calls[since:]}

    def reader_indices(self, shard_id: str) -> list[int]:
        return [i for i, (role, _, shard) in enumerate(self.calls) if role == "reader" and shard == shard_id]


class RecordingKinesis:
    """A boto3 Kinesis client that records which shard every iterator and page belongs to."""

    def __init__(self, client: Any, log: CallLog, role: str) -> None:
        self._client = client
        self._log = log
        self._role = role
        self._shard_of_iterator: dict[str, str] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def get_shard_iterator(self, **kwargs: Any) -> dict[str, Any]:
        self._log.calls.append((self._role, "GetShardIterator", kwargs["ShardId"]))
        response = self._client.get_shard_iterator(**kwargs)
        self._shard_of_iterator[response["ShardIterator"]] = kwargs["ShardId"]
        return response

    def get_records(self, **kwargs: Any) -> dict[str, Any]:
        shard_id = self._shard_of_iterator[kwargs["ShardIterator"]]
        self._log.calls.append((self._role, "GetRecords", shard_id))
        response = self._client.get_records(**kwargs)
        if response.get("NextShardIterator"):
            self._shard_of_iterator[response["NextShardIterator"]] = shard_id
        return response


def recording_runner(log: CallLog) -> Callable[[LoadJob, Credentials], list[RangeReport]]:
    """``core.load.run_here`` with the readers' Kinesis client wrapped in :class:`RecordingKinesis`."""
    return runner_with(lambda executor: replace(executor, kinesis=RecordingKinesis(executor.kinesis, log, "reader")))


# --- the stack ------------------------------------------------------------------------------------


@dataclass
class Loader:
    """One pipeline (stream → table) driven interval by interval."""

    config: PipelineConfig
    store: CheckpointStore
    kinesis: Any
    log: CallLog
    query: Callable[[str], list[tuple]]
    driver_concurrency: int = DEFAULT_DRIVER_CONCURRENCY

    def run(self, start_ms: int, end_ms: int) -> IntervalResult:
        return run_interval(
            replace(self.config, driver_concurrency=self.driver_concurrency), start_ms, end_ms,
            kinesis=RecordingKinesis(self.kinesis, self.log, "planner"), store=self.store,
            credentials=Credentials(doris_password=DORIS_PASSWORD), runner=recording_runner(self.log),
        )  # fmt: skip

    def state(self, shard_id: str) -> ShardState:
        return self.store.ledger.get_shard(shard_id).state


UNIQUE_BY_USER_DDL = """CREATE TABLE `{table}` (
    user_id VARCHAR(32) NOT NULL,
    event_id BIGINT NULL,
    amount INT NULL,
    _kinesis_arrival BIGINT NULL
) UNIQUE KEY(user_id)
DISTRIBUTED BY HASH(user_id) BUCKETS 1
PROPERTIES ("replication_num" = "1", "function_column.sequence_type" = "BIGINT")"""

DEAD_LETTER_DDL = (
    "CREATE TABLE {table} (stream_name VARCHAR(128) NOT NULL, shard_id VARCHAR(64) NOT NULL, "
    "sequence_number VARCHAR(64) NOT NULL, sub_sequence_number INT NOT NULL, arrival_ms BIGINT NULL, "
    "partition_key VARCHAR(256) NULL, reason STRING NULL, payload_base64 STRING NULL) "
    "DUPLICATE KEY(stream_name, shard_id, sequence_number) DISTRIBUTED BY HASH(shard_id) BUCKETS 1 "
    "PROPERTIES ('replication_num' = '1')"
)


@pytest.fixture
def stack(  # type: ignore[no-untyped-def]
    kinesis_client, dynamodb_client, kinesis_mock_endpoint, dynamodb_endpoint, doris_server
):
    """Makes a stream and loaders (a DUPLICATE table, or a UNIQUE table keyed by partition key)."""
    doris_server.execute_sql("", f"CREATE DATABASE IF NOT EXISTS {DB}")
    table_store = dynamo_store(dynamodb_client, CHECKPOINT_TABLE, "setup")
    table_store.items.create_table_if_missing()
    log = CallLog()

    def make_stream(shards: int) -> str:
        stream = f"reshard-{uuid.uuid4().hex[:10]}"
        kinesis_client.create_stream(StreamName=stream, ShardCount=shards)
        wait_stream_active(kinesis_client, stream)
        return stream

    def make_loader(stream: str, unique_by_user: bool = False) -> Loader:
        table = f"events_{next(_names)}"
        ddl = UNIQUE_BY_USER_DDL.format(table=table) if unique_by_user else events_table_ddl(table)
        metadata = ("_kinesis_arrival",) if unique_by_user else ("_kinesis_shard", "_kinesis_sequence")
        doris_server.execute_sql(DB, ddl)
        doris_server.execute_sql(DB, DEAD_LETTER_DDL.format(table=f"{table}_dead_letter"))
        config = local_pipeline_config(
            stream, DB, table, doris_port=doris_server.fe_port, doris_user=DORIS_USER,
            kinesis_endpoint=kinesis_mock_endpoint, dynamodb_endpoint=dynamodb_endpoint,
            checkpoint_table=CHECKPOINT_TABLE,
            load_options=(
                StreamLoadOptions.json_lines(sequence_col="_kinesis_arrival")
                if unique_by_user else StreamLoadOptions.json_lines()
            ),  # fmt: skip
            mapping=RecordMapping(metadata_columns=metadata, required_fields=("event_id",)),
            chunk_max_rows=50,
            retry_policy=RetryPolicy(max_attempts=3, initial_backoff_seconds=0.2, max_backoff_seconds=1),
            parallelism=2,
        )
        store = dynamo_store(dynamodb_client, CHECKPOINT_TABLE, config.pipeline_id)
        query = lambda sql: doris_server.execute_sql(DB, sql.format(table=table))  # noqa: E731
        return Loader(config, store, kinesis_client, log, query)

    return {"stream": make_stream, "loader": make_loader, "log": log, "kinesis": kinesis_client}


def shards(client: Any, stream: str) -> dict[str, Any]:
    return {shard.shard_id: shard for shard in list_shards(client, stream)}


def pause() -> int:
    """An instant no arrival stamp equals: batches before it arrive earlier, after it later."""
    time.sleep(0.02)
    instant = now_ms()
    wait_past(instant, margin_ms=20)
    return instant


class Producer:
    """Writes batches of events: every batch writes each user once, with a new event id."""

    def __init__(self, client: Any, stream: str, users: int) -> None:
        self.client, self.stream, self.users = client, stream, users
        self.batches = 0
        self.written: list[dict[str, Any]] = []

    def write_batch(self) -> None:
        """One event per user, routed by its partition key (the user)."""
        self._put([f"u{u}" for u in range(self.users)], {})

    def to_shard(self, shard_id: str, count: int) -> None:
        """``count`` events written straight into ``shard_id`` (by its starting hash key)."""
        hash_key = str(shards(self.client, self.stream)[shard_id].starting_hash_key)
        response = self._put([f"s{i}" for i in range(count)], {"ExplicitHashKey": hash_key})
        assert {entry["ShardId"] for entry in response["Records"]} == {shard_id}

    def _put(self, users: list[str], routing: dict[str, str]) -> dict[str, Any]:
        batch = [{"event_id": self.batches * 1000 + i, "user_id": user, "amount": self.batches}
                 for i, user in enumerate(users)]  # fmt: skip
        records = [{"PartitionKey": e["user_id"], "Data": json.dumps(e).encode(), **routing} for e in batch]
        response = self.client.put_records(StreamName=self.stream, Records=records)
        assert response.get("FailedRecordCount", 0) == 0
        self.batches += 1
        self.written += batch
        return response


def loaded_ids(loader: Loader) -> list[int]:
    return [row[0] for row in loader.query("SELECT event_id FROM {table} ORDER BY event_id")]


# --- tests ----------------------------------------------------------------------------------------


def test_split_and_merge_under_load_loads_every_record_once_and_the_last_write_per_key_wins(stack) -> None:
    kinesis = stack["kinesis"]
    stream = stack["stream"](2)
    low, high = sorted(shards(kinesis, stream), key=lambda s: shards(kinesis, stream)[s].starting_hash_key)
    every, latest = stack["loader"](stream), stack["loader"](stream, unique_by_user=True)
    producer = Producer(kinesis, stream, users=24)
    log: CallLog = stack["log"]

    def run_both(start: int, end: int) -> IntervalResult:
        result = every.run(start, end)
        latest.run(start, end)
        return result

    bounds = [pause()]
    producer.write_batch()
    bounds.append(pause())
    run_both(bounds[0], bounds[1])  # before the reshard

    producer.write_batch()
    low_left, low_right = split(kinesis, stream, low)
    producer.write_batch()  # into the children
    bounds.append(pause())
    during = run_both(bounds[1], bounds[2])  # the split is inside this interval
    assert every.state(low) is ShardState.DRAINED
    assert {s.shard_id: s.decision for s in during.plan.shards}[low_left] is ShardDecision.NEW

    producer.write_batch()
    merged = merge(kinesis, stream, low_right, high)
    producer.write_batch()  # into the merge child
    bounds.append(pause())
    reads_after_drain = len(log.calls)
    run_both(bounds[2], bounds[3])  # the merge is inside this interval

    producer.write_batch()
    bounds.append(pause())
    run_both(bounds[3], bounds[4])  # after

    assert low not in log.shards_read(since=reads_after_drain), "a drained parent was read again"
    closed = (low, low_right, high)
    assert {sid: every.state(sid) for sid in closed} == dict.fromkeys(closed, ShardState.DRAINED)
    assert every.state(merged) is ShardState.OPEN and every.state(low_left) is ShardState.OPEN
    written_ids = sorted(e["event_id"] for e in producer.written)
    assert loaded_ids(every) == written_ids  # every record, once (sorted lists, so duplicates would show)
    assert every.query("SELECT COUNT(DISTINCT event_id), COUNT(*) FROM {table}")[0] == (len(written_ids),) * 2
    last_per_user = {e["user_id"]: e["event_id"] for e in producer.written}
    assert dict(latest.query("SELECT user_id, event_id FROM {table}")) == last_per_user


def test_a_merge_child_waits_for_both_parents_even_when_they_drain_in_different_runs(stack) -> None:
    """Parents A and B1 of merge child C finish in different runs: B1 (a split child of X) waits
    for X's unloaded interval, while A is loaded through its end. Runs: I1, I3, I2, I3 again."""
    kinesis = stack["kinesis"]
    stream = stack["stream"](2)
    by_hash = sorted(shards(kinesis, stream).values(), key=lambda s: s.starting_hash_key)
    a, x = by_hash[0].shard_id, by_hash[1].shard_id
    loader = stack["loader"](stream)
    producer = Producer(kinesis, stream, users=0)
    log: CallLog = stack["log"]

    t0 = pause()
    producer.to_shard(a, 5)
    producer.to_shard(x, 5)
    t1 = pause()
    producer.to_shard(a, 5)
    producer.to_shard(x, 5)
    b1, b2 = split(kinesis, stream, x)
    producer.to_shard(b1, 5)
    producer.to_shard(b2, 5)
    t2 = pause()
    producer.to_shard(a, 5)
    producer.to_shard(b1, 5)
    c = merge(kinesis, stream, a, b1)
    producer.to_shard(c, 5)
    t3 = pause()

    loader.run(t0, t1)
    with pytest.raises(ShardsWaiting) as first_i3:  # interval I2 is still missing: the run fails
        loader.run(t2, t3)
    assert first_i3.value.waiting == {b1: (x,), b2: (x,), c: (a, b1)}
    loader.run(t1, t2)  # backfill: A and X are loaded through their ends, B1 up to t2
    assert loader.store.ledger.get_shard(a).high_water_mark.kind is BoundaryKind.SHARD_END
    assert loader.store.ledger.get_shard(b1).high_water_mark.kind is not BoundaryKind.SHARD_END
    # (Its boundaries were probed when the waiting run stored its range; no record was read.)
    assert log.reader_indices(c) == [], "the merge child was read before its parent B1 was drained"

    last = loader.run(t2, t3)  # B1's last range becomes readable, then C after it
    # Stored by the run that had to wait, and loaded now.
    assert last.plan.shard(c).decision is ShardDecision.REPLAYED and not last.plan.waiting
    c_reads, parent_reads = log.reader_indices(c), log.reader_indices(a) + log.reader_indices(b1)
    assert c_reads and parent_reads
    assert max(parent_reads) < min(c_reads), "C was read before its parents were read to their ends"
    assert loader.state(b1) is ShardState.DRAINED and loader.state(x) is ShardState.DRAINED
    assert loaded_ids(loader) == sorted(e["event_id"] for e in producer.written)


def test_out_of_order_runs_across_a_chain_of_reshards_load_every_record_once(stack) -> None:
    """Issue 13 item 3 as a new user met it: three shards; split one, merge two adjacent ones,
    split the merge child; the intervals run out of order, one run is killed between its loads
    and its commit, children wait; then every interval runs in order until none waits."""
    kinesis = stack["kinesis"]
    stream = stack["stream"](3)
    s0, s1, s2 = sorted(shards(kinesis, stream), key=lambda sid: shards(kinesis, stream)[sid].starting_hash_key)
    loader = stack["loader"](stream)
    producer = Producer(kinesis, stream, users=0)
    instants = [pause()]
    for shard_id in (s0, s1, s2):
        producer.to_shard(shard_id, 3)
    instants.append(pause())
    a, b = split(kinesis, stream, s0)
    for shard_id, count in ((a, 3), (b, 3), (s1, 2), (s2, 2)):
        producer.to_shard(shard_id, count)
    instants.append(pause())
    m = merge(kinesis, stream, s1, s2)
    producer.to_shard(m, 3)
    producer.to_shard(a, 2)
    instants.append(pause())
    m1, m2 = split(kinesis, stream, m)
    for shard_id, count in ((m1, 3), (m2, 3), (b, 2)):
        producer.to_shard(shard_id, count)
    instants.append(pause())
    producer.to_shard(m1, 2)
    producer.to_shard(a, 2)
    instants.append(pause())
    intervals = list(zip(instants, instants[1:]))

    # Like Airflow: a run that succeeded is never run again; a failed one is retried later.
    failed: set[int] = set()
    outcomes: list[tuple[int, str]] = []

    def attempt(k: int, runner: Loader = loader) -> None:
        try:
            runner.run(*intervals[k])
            failed.discard(k)
            outcomes.append((k, "ok"))
        except (ShardsWaiting, InjectedCrash) as error:
            failed.add(k)
            outcomes.append((k, type(error).__name__))

    # The kill strikes the first commit before it marks any range loaded (it marks them all at once).
    killed = replace(loader, store=FailOnNthCall(loader.store, "ranges.mark_ranges_loaded", 1), driver_concurrency=1)
    attempt(0)
    attempt(1, killed)  # s0 split in I1: its run dies between the loads and the commit
    attempt(2)  # s0's children wait for s0's I1 range
    attempt(1)  # the retry of I1
    for k in (4, 3):
        attempt(k)
    assert outcomes[1] == (1, "InjectedCrash") and outcomes[2] == (2, "ShardsWaiting"), outcomes
    for _ in range(5):  # retries of the failed runs, oldest first
        for k in sorted(failed):
            attempt(k)
    assert not failed, outcomes

    assert loaded_ids(loader) == sorted(e["event_id"] for e in producer.written)
    assert {sid: loader.state(sid) for sid in (s0, s1, s2, m)} == dict.fromkeys((s0, s1, s2, m), ShardState.DRAINED)


def test_rebalance_applies_the_reshard_and_weights_follow_the_traffic(stack) -> None:
    kinesis = stack["kinesis"]
    stream = stack["stream"](3)
    loader = stack["loader"](stream)
    producer = Producer(kinesis, stream, users=0)
    hot, cool, cold = sorted(shards(kinesis, stream), key=lambda s: shards(kinesis, stream)[s].starting_hash_key)
    start = pause()
    producer.to_shard(hot, 30)
    producer.to_shard(cool, 6)
    end = pause()
    loader.run(start, end)

    weights = weights_for_plan(loader.store.ledger, loader.store.ranges)
    assert weights[hot] > weights[cool] > weights[cold] > 0
    assert sum(weights.values()) == pytest.approx(3.0)

    first = rebalance(kinesis, loader.store, stream, partitions=2)
    left, right = split(kinesis, stream, hot)
    second = rebalance(kinesis, loader.store, stream, partitions=2)

    assert first.version + 1 == second.version and set(second.registered) == {left, right}
    assert second.closed == (hot,) and loader.state(hot) is ShardState.CLOSED
    topology = loader.store.ledger.get_topology()
    assert set(topology.shard_ids) == {hot, cool, cold, left, right}
    # The closed parent and its children share a partition, the parent first.
    (group,) = [g for g in second.assignment.groups if hot in g]
    assert group.index(hot) < group.index(left) and group.index(hot) < group.index(right)
    assert dict(topology.assignment) == second.assignment.partition_of

    later = pause()
    loader.run(end, later)  # drains the parent and starts the children
    third = rebalance(kinesis, loader.store, stream, partitions=2)
    assert loader.state(hot) is ShardState.DRAINED and third.retired == (hot,)
    assert hot not in third.assignment.partition_of
