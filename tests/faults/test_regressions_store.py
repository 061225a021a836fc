"""Holes in the checkpoint store's writes, each pinned by a test that failed before its fix: the
reproductions ``shared/repro/replay-contract-3/repro_grouped_range_without_end_cut.py`` and
``repro_rewind_race_mark_past_backfill.py``."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import boto3
import pytest
from moto import mock_aws

from airflow_provider_kinesis_doris.testing.builders import pipeline_config
from airflow_provider_kinesis_doris.core.model import ChunkLimits
from airflow_provider_kinesis_doris.core.errors import ShardsWaiting
from airflow_provider_kinesis_doris.core.load import LoadClients, load_ranges
from airflow_provider_kinesis_doris.core.report import RangeReport
from airflow_provider_kinesis_doris.core.load_job import LoadJob
from airflow_provider_kinesis_doris.core.settings import Credentials
from airflow_provider_kinesis_doris.core.mapping import RecordMapping
from airflow_provider_kinesis_doris.core.model import Boundary, BoundaryKind, RangeState, ShardRange, ShardState
from airflow_provider_kinesis_doris.core.pipeline import run_interval
from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
from airflow_provider_kinesis_doris.core.stores.dynamodb import _TRANSACTIONS_IN_FLIGHT, dynamo_store
from airflow_provider_kinesis_doris.core.stores.items import boundary_sk
from airflow_provider_kinesis_doris.core.stores.memory import MemoryItems, memory_store, MemoryTable
from airflow_provider_kinesis_doris.testing.fake_kinesis import FakeKinesis
from airflow_provider_kinesis_doris.testing.faults import FailOnNthCall, InjectedCrash, client_error
from airflow_provider_kinesis_doris.testing.memory_doris import MemoryDoris

PIPELINE = "p"
STREAM = "events"
T0 = 1_700_000_000_000
IV = 60_000
WAIT_SECONDS = 20


def _shard(n: int) -> str:
    return f"shardId-{n:012d}"


def _new_range(n: int) -> ShardRange:
    return ShardRange(
        PIPELINE, STREAM, _shard(n), T0, T0 + IV, Boundary(_shard(n), T0, BoundaryKind.PENDING),
        Boundary(_shard(n), T0 + IV, BoundaryKind.PENDING), chunk_limits=ChunkLimits(2, 64 * 1024 * 1024),
    )  # fmt: skip


class _FailsTheTransactionOf:
    """A DynamoDB client whose TransactWriteItems holding the item ``sk`` fails (InternalServerError,
    not applied): the group that holds it, whichever thread sends it and when."""

    def __init__(self, client: Any, sk: str) -> None:
        self._client, self._sk, self.fired = client, sk, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def transact_write_items(self, **request: Any) -> Any:
        if f'"{self._sk}"' in json.dumps(request["TransactItems"]):
            self.fired += 1
            raise client_error("InternalServerError")("transact_write_items", self.fired)
        return self._client.transact_write_items(**request)


def test_a_range_and_its_end_cut_never_straddle_two_grouped_transactions() -> None:
    """More than 100 grouped writes queue behind slow requests (more than 50 planner threads), every
    slot for a transaction on its way taken: a lone cut put, then 55 writers of a range with its end
    cut. The group of 100 holding the lone cut fails as a whole. Before the fix the group ended with
    the end cut of the 50th pair, the next group began with its range and was applied: a range
    stored without its end cut, which every later read of it refused (``CheckpointNotFound``). A
    writer's puts now go whole into one group."""
    pairs, slots = 55, _TRANSACTIONS_IN_FLIGHT
    with mock_aws():
        raw = boto3.client("dynamodb", region_name="us-east-1")
        setup = dynamo_store(raw, "cp", PIPELINE)
        setup.items.create_table_if_missing()
        for n in range(slots + pairs):  # the interval's start cuts, stored by the previous interval's run
            setup.ledger.put_boundary(Boundary(_shard(n), T0, BoundaryKind.PENDING))
        on_the_wire = threading.Semaphore(0)
        release = threading.Event()

        def hold() -> None:
            on_the_wire.release()
            release.wait(WAIT_SECONDS)

        lone_cut = Boundary(_shard(slots + pairs), T0 + 5 * IV, BoundaryKind.PENDING)  # another thread's put
        held = FailOnNthCall(raw, "transact_write_items", 1, before=hold, times=slots)
        client = _FailsTheTransactionOf(held, boundary_sk(lone_cut.shard_id, lone_cut.instant_ms))
        store = dynamo_store(client, "cp", PIPELINE)  # one run's store, shared by its planner threads
        failed: dict[str, BaseException] = {}

        def start(name: str, write: Callable[[], Any]) -> threading.Thread:
            def record() -> None:
                try:
                    write()
                except Exception as error:  # noqa: BLE001 - the answer under test
                    failed[name] = error

            thread = threading.Thread(target=record)
            thread.start()
            return thread

        def queued() -> int:
            with store.items._grouped._lock:
                return len(store.items._grouped._queue)

        threads = []
        for n in range(slots):  # each slot taken by a range and its cut, held on its way
            threads.append(start(_shard(n), lambda n=n: store.ranges.create_range(_new_range(n), with_end=True)))
            assert on_the_wire.acquire(timeout=WAIT_SECONDS)
        threads.append(start("lone cut", lambda: store.ledger.put_boundary(lone_cut)))
        for n in range(slots, slots + pairs):
            # One writer after the other, so the queue's order (and the group boundary) is fixed.
            while queued() < 1 + 2 * (n - slots):
                threading.Event().wait(0.001)
            threads.append(start(_shard(n), lambda n=n: store.ranges.create_range(_new_range(n), with_end=True)))
        while queued() < 1 + 2 * pairs:
            threading.Event().wait(0.001)
        release.set()
        for thread in threads:
            thread.join(WAIT_SECONDS)
            assert not thread.is_alive()

        fresh = dynamo_store(raw, "cp", PIPELINE)
        stored = {n: fresh.ranges.get_range(_shard(n), T0) for n in range(slots + pairs)}  # CheckpointNotFound before the fix
        assert client.fired == 1 and "lone cut" in failed and _shard(slots + pairs - 1) not in failed
        assert sum(_shard(n) in failed for n in range(slots + pairs)) == 49  # the lone cut's group: it and 49 pairs
        for n, shard_range in stored.items():
            assert (shard_range is None) == (_shard(n) in failed), (n, failed.get(_shard(n)))
            assert (fresh.ledger.get_boundary(_shard(n), T0 + IV) is None) == (shard_range is None), n


class _World:
    """Shard X of a one-shard stream with an event in each of intervals 0-2; X splits in interval 2
    and event 3 lands on a child in interval 3. Interval 1 is loaded, interval 0 is not (a backfill)."""

    shard = _shard(0)

    def __init__(self) -> None:
        self.kinesis = FakeKinesis(now_ms=T0)
        self.kinesis.create_stream(StreamName=STREAM, ShardCount=1)
        for k in range(3):
            self._put(k, T0 + k * IV + 1_000)
        self.kinesis.advance(1_000)
        self.kinesis.split_shard(StreamName=STREAM, ShardToSplit=self.shard, NewStartingHashKey=str(2**127))
        self._put(3, T0 + 3 * IV + 1_000)
        self.kinesis.now_ms = T0 + 5 * IV
        self.table = MemoryTable()
        self.doris = MemoryDoris()
        self.config = pipeline_config(
            pipeline_id=PIPELINE, stream_name=STREAM, mapping=RecordMapping(metadata_columns=("_kinesis_sequence",)),
            chunk_max_rows=10,
        )  # fmt: skip

    def _put(self, event_id: int, at_ms: int) -> None:
        self.kinesis.now_ms = at_ms
        self.kinesis.put_record(StreamName=STREAM, Data=json.dumps({"event_id": event_id}).encode(), PartitionKey="k")

    def store(self) -> CheckpointStore:
        return memory_store(PIPELINE, self.table, clock=lambda: self.kinesis.now_ms)

    def run(self, k: int, store: CheckpointStore | None = None, loader_store: Any = None) -> None:
        store = store or self.store()

        def runner(job: LoadJob, credentials: Credentials) -> list[RangeReport]:
            clients = LoadClients(job=job, kinesis=self.kinesis, store=loader_store or store, doris=self.doris,
                                  clock_ms=lambda: self.kinesis.now_ms)  # fmt: skip
            return list(load_ranges(clients))

        run_interval(
            self.config, T0 + k * IV, T0 + (k + 1) * IV, kinesis=self.kinesis, store=store, credentials=Credentials(),
            runner=runner, clock=lambda: self.kinesis.now_ms, doris=self.doris,
        )  # fmt: skip

    def visible(self) -> Counter[int]:
        return self.doris.tally("t", "event_id")


class _PausingItems(MemoryItems):
    """Calls ``pause`` once, at the first write on ``shard``'s item that ``at`` picks out."""

    def __init__(self, *args: Any, shard: str, at: Callable[[Mapping[str, Any]], bool], pause: Callable[[], None],
                 after: bool, **kwargs: Any) -> None:  # fmt: skip
        super().__init__(*args, **kwargs)
        self._sk, self._at, self._pause, self._after = f"shard#{shard}", at, pause, after
        self._paused = False

    def update(self, sk: str, changes: Any, expected: Any) -> dict[str, Any] | None:
        pauses = sk == self._sk and not self._paused and self._at(changes)
        self._paused |= pauses
        if pauses and not self._after:
            self._pause()
        updated = super().update(sk, changes, expected)
        if pauses and self._after:
            self._pause()
        return updated


def test_a_commit_that_read_the_shard_before_a_backfilled_range_existed_cannot_mark_past_it() -> None:
    """A backfill P of interval 0 drops X's mark (rewind #1); a commit C of interval 2 reads X and
    walks from X's earliest range (interval 1's, loaded); P stores its range, its rewind #2 finds no
    mark; C writes its mark. Before the fix rewind #2 wrote nothing and C's fence held: X's mark
    reached SHARD_END and X was DRAINED with P's range stored and unloaded (I4), and X's child
    loaded event 3 before X's event 0 (I5). Rewind #2 now bumps X's counter: C re-reads and walks
    from P's range."""
    world = _World()
    world.run(1)
    p_rewound, c_walked, p_done = threading.Event(), threading.Event(), threading.Event()
    outcome: dict[str, BaseException | None] = {}

    def drops_the_mark(changes: Mapping[str, Any]) -> bool:
        return "hwm_kind" in changes and changes["hwm_kind"] is None

    def sets_a_mark(changes: Mapping[str, Any]) -> bool:
        return changes.get("hwm_kind") is not None

    def backfill() -> None:
        # P stores its range once C has walked; it dies in its loader, its range stays unloaded.
        store = CheckpointStore(_PausingItems(PIPELINE, world.table, clock=lambda: world.kinesis.now_ms, shard=world.shard,
                              at=drops_the_mark, pause=lambda: (p_rewound.set(), c_walked.wait(WAIT_SECONDS)), after=True))  # fmt: skip
        try:
            world.run(0, store, loader_store=FailOnNthCall(store, "chunks.put_chunk_intent_with_content", 1))
        except InjectedCrash as error:
            outcome["P"] = error
        finally:
            p_done.set()

    def later() -> None:
        # C writes its mark once P's rewind #2 is done.
        store = CheckpointStore(_PausingItems(PIPELINE, world.table, clock=lambda: world.kinesis.now_ms, shard=world.shard,
                              at=sets_a_mark, pause=lambda: (c_walked.set(), p_done.wait(WAIT_SECONDS)), after=False))  # fmt: skip
        try:
            world.run(2, store)
            outcome["C"] = None
        except Exception as error:  # noqa: BLE001 - recorded and asserted below
            outcome["C"] = error

    p = threading.Thread(target=backfill)
    p.start()
    assert p_rewound.wait(WAIT_SECONDS)
    c = threading.Thread(target=later)
    c.start()
    for thread in (p, c):
        thread.join(WAIT_SECONDS * 3)
        assert not thread.is_alive()
    assert isinstance(outcome["P"], InjectedCrash) and outcome["C"] is None and c_walked.is_set()

    view = world.store()
    x = view.ledger.get_shard(world.shard)
    assert x is not None and view.ranges.get_range(world.shard, T0).state is RangeState.PLANNED  # type: ignore[union-attr]
    assert x.state is not ShardState.DRAINED and x.high_water_mark is None, x
    with pytest.raises(ShardsWaiting):
        world.run(3)  # the child waits for X's backfilled range
    assert world.visible() == Counter({1: 1, 2: 1})
    world.run(0)  # Airflow retries the backfill
    world.run(3)
    assert world.visible() == Counter({0: 1, 1: 1, 2: 1, 3: 1})
