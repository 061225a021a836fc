"""Holes found while the deployment moves under the guarantee
(/work/shared/repro/replay-contract-4), each pinned by a test that failed before its fix: two
tries of one chunk at once, and a pipeline's settings changed between its runs. The real planner,
loader and commit (``run_interval``) over the in-memory fakes; faults only through
``testing.faults.FailOnNthCall`` on the store and the Doris client."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from airflow_provider_kinesis_doris.core.catch_up import CatchUp
from airflow_provider_kinesis_doris.core.errors import ConfigurationError, RetryableStreamLoadError, UnresolvableLoad
from airflow_provider_kinesis_doris.core.pipeline import IntervalResult, run_interval
from airflow_provider_kinesis_doris.core.report import xcom_summary
from airflow_provider_kinesis_doris.core.settings import Credentials, PipelineConfig
from airflow_provider_kinesis_doris.core.stores.items import CHUNK_INTENT, CHUNK_NOT_LOADED, INITIAL_POSITION_KEY
from airflow_provider_kinesis_doris.core.stores.memory import memory_store
from airflow_provider_kinesis_doris.testing.builders import load_in_thread, pipeline_config
from airflow_provider_kinesis_doris.testing.fake_kinesis import FakeKinesis
from airflow_provider_kinesis_doris.testing.faults import FailOnNthCall, InjectedCrash
from airflow_provider_kinesis_doris.testing.memory_doris import MemoryDoris
from tests.faults.memory_world import IV, SHARD, STREAM, T0


A_DAY_MS = 24 * 3_600_000


class _World:
    """One shard holding ``per_interval`` records in each of intervals ``0..intervals-1``, the
    checkpoint store and Doris; ``run(k)`` runs interval k as the operator does (catch-up on)."""

    def __init__(self, intervals: int, per_interval: int) -> None:
        self.kinesis = FakeKinesis(now_ms=T0)
        self.kinesis.create_stream(StreamName=STREAM, ShardCount=1)
        self.produced: list[int] = []
        for k in range(intervals):
            for j in range(per_interval):
                self.kinesis.now_ms = T0 + k * IV + 1_000 + j
                event_id = k * 10 + j
                self.kinesis.put_record(StreamName=STREAM, Data=json.dumps({"event_id": event_id}).encode(), PartitionKey="k")
                self.produced.append(event_id)
        self.kinesis.now_ms = T0 + intervals * IV + 100
        self.store = memory_store("p", clock=lambda: self.kinesis.now_ms)
        self.doris = MemoryDoris()
        self.own_runs: set[tuple[int, int]] = set()
        self.catch_up = CatchUp(
            next_interval=lambda start, end: (end, end + IV),
            with_own_runs=lambda intervals: {i for i in intervals if i in self.own_runs},
        )

    def run(
        self, k: int, config: PipelineConfig | None = None, *, store: Any = None, doris: Any = None
    ) -> IntervalResult:
        return run_interval(
            config or pipeline_config(), T0 + k * IV, T0 + (k + 1) * IV, kinesis=self.kinesis, store=self.store,
            credentials=Credentials(), clock=lambda: self.kinesis.now_ms, catch_up=self.catch_up, doris=self.doris,
            runner=load_in_thread(self.kinesis, store or self.store, doris or self.doris),
        )  # fmt: skip

    def copies(self) -> Counter[int]:
        return self.doris.tally("t", "event_id")

    def chunk_states(self, k: int) -> list[str]:
        return [chunk.state for chunk in self.store.chunks.chunks_for_range(SHARD, T0 + k * IV)]


def _refused(method: str, call: int) -> RetryableStreamLoadError:
    error = RetryableStreamLoadError("Doris unreachable: connection refused")
    error.definitely_not_loaded = True
    return error


def _doris_refusing(doris: MemoryDoris, times: int = 1) -> FailOnNthCall:
    return FailOnNthCall(doris, "load_idempotently", 1, error=_refused, times=times)


# --- two tries of one chunk at once ---------------------------------------------------------------


def test_a_try_that_read_not_loaded_never_turns_a_chunk_another_try_loaded_back_into_not_loaded() -> None:
    """repro_fresh_intent_overwrites_visible: the retry B of the run of interval 2 replays the
    skipped interval 1, whose chunk an earlier try recorded NOT_LOADED. Just before B writes the
    chunk's fresh intent, a backfill run A of interval 1 loads it (VISIBLE). B's connection is then
    refused. Before, B rewrote the intent over VISIBLE without a condition and recorded NOT_LOADED;
    a replay a day later (past Doris's label window) loaded the chunk's records twice, green."""
    world = _World(intervals=3, per_interval=2)
    world.run(0)
    with pytest.raises(RetryableStreamLoadError):  # N takes on interval 1; Doris is unreachable
        world.run(2, doris=_doris_refusing(world.doris, times=100))
    assert world.chunk_states(1) == [CHUNK_NOT_LOADED]

    def backfill_run_of_interval_1() -> None:
        world.own_runs.add((T0 + IV, T0 + 2 * IV))
        world.run(1)

    # B's first outcome write comes after its pass read the chunk log; A runs just before it.
    b_store = FailOnNthCall(world.store, ("chunks.renew_chunk_intent", "chunks.record_chunk_outcome"), 1, before=backfill_run_of_interval_1)
    with pytest.raises(RetryableStreamLoadError):
        world.run(2, store=b_store, doris=_doris_refusing(world.doris))
    assert world.chunk_states(1) == ["VISIBLE"], "the outcome A recorded stays"

    world.kinesis.now_ms += A_DAY_MS // 2  # Doris has forgotten the label, Kinesis still keeps it
    world.doris.forget_labels()
    world.own_runs.clear()
    world.run(2)
    assert world.copies() == Counter(world.produced)


class _AnotherSendLandsThenOursIsRefused:
    """Doris as try C sees it: just before C's send, the send of the same label and body by try D
    (which wrote the intent, then stalled on the wire) lands; C's own connection is refused."""

    def __init__(self, doris: MemoryDoris) -> None:
        self._doris = doris

    def __getattr__(self, name: str) -> Any:
        return getattr(self._doris, name)

    def load_idempotently(self, *args: Any, **kwargs: Any) -> Any:
        self._doris.load_idempotently(*args, **kwargs)
        raise _refused("load_idempotently", 1)


def test_a_try_that_found_another_tries_intent_never_records_the_chunk_not_loaded() -> None:
    """The README's second variant: try D writes the chunk's intent and its send stalls; try C
    begins its pass with the chunk at INTENT and asks Doris (UNKNOWN), then D's send lands and C's
    connection is refused. Before, C recorded NOT_LOADED (the state was still INTENT, and C took the
    send for its own), and a replay after Doris's label window loaded the chunk twice, green. Now
    only the attempt that wrote an intent may record it not loaded: the replay asks Doris and, once
    the label is forgotten, fails loud naming the chunk instead of sending it."""
    world = _World(intervals=1, per_interval=2)
    with pytest.raises(InjectedCrash):  # D: intent written, its send still on the wire
        world.run(0, doris=FailOnNthCall(world.doris, "load_idempotently", 1))
    assert world.chunk_states(0) == [CHUNK_INTENT] and not world.copies()

    with pytest.raises(RetryableStreamLoadError, match="connection refused"):
        world.run(0, doris=_AnotherSendLandsThenOursIsRefused(world.doris))
    assert world.chunk_states(0) == [CHUNK_INTENT], "C does not own the intent: it records nothing"
    assert world.copies() == Counter(world.produced)

    world.kinesis.now_ms += A_DAY_MS // 2  # Doris has forgotten the label, Kinesis still keeps it
    world.doris.forget_labels()
    with pytest.raises(UnresolvableLoad, match="Doris no longer knows its label"):
        world.run(0)
    assert world.copies() == Counter(world.produced)


# --- settings that decide where ranges lie ----------------------------------------------------------


def test_a_pipeline_that_started_at_interval_refuses_trim_horizon_before_planning() -> None:
    """repro_initial_position_switch, world A: intervals 0-2 load with INTERVAL, then the setting
    becomes TRIM_HORIZON (the README's way "to load what the stream still keeps"). Before, the run
    of interval 3 settled a floor there and swept the shard from its start over the loaded ranges of
    intervals 0-2 (5 records twice, green). Now the run fails before planning, naming the setting,
    the recorded value and what to do, and the setting put back loads the rest once."""
    world = _World(intervals=4, per_interval=3)
    for k in range(3):
        world.run(k)
    with pytest.raises(ConfigurationError) as refused:
        world.run(3, pipeline_config(initial_position="TRIM_HORIZON"))
    assert "initial_position TRIM_HORIZON applies to a new pipeline_id only" in str(refused.value)
    assert "started with initial_position INTERVAL" in str(refused.value)
    assert "Set initial_position back to INTERVAL" in str(refused.value)
    assert world.store.ranges.get_floor() is None and world.store.ranges.get_range(SHARD, T0 + 3 * IV) is None

    world.run(3)
    assert world.copies() == Counter(world.produced)


def test_a_pipeline_that_started_at_trim_horizon_keeps_its_floor_when_set_to_interval() -> None:
    """World B: intervals 2 and 3 load with TRIM_HORIZON (the floor, interval 2, sweeps 0-2); the
    setting goes back to INTERVAL and interval 1 is backfilled. Before, interval 1 got a range of
    its own inside the sweep (3 records twice, green). Now the floor is a fact of the pipeline,
    read whatever the run's setting: interval 1 is covered by it and loads nothing."""
    world = _World(intervals=4, per_interval=3)
    for k in (2, 3):
        world.run(k, pipeline_config(initial_position="TRIM_HORIZON"))
    backfill = xcom_summary(world.run(1))
    assert backfill["decisions"] == {"COVERED": 1} and backfill["loaded"] == 0
    assert world.store.ranges.get_range(SHARD, T0 + IV) is None
    assert world.copies() == Counter(world.produced)


def test_a_pipeline_planned_before_the_fact_was_recorded_keeps_what_its_items_show() -> None:
    """Tables written before the initial position was recorded: a pipeline with ranges and no
    floor started at INTERVAL, one with a floor at TRIM_HORIZON."""
    world = _World(intervals=2, per_interval=1)
    world.run(0)
    world.store.items.delete([INITIAL_POSITION_KEY])
    with pytest.raises(ConfigurationError, match="started with initial_position INTERVAL"):
        world.run(1, pipeline_config(initial_position="TRIM_HORIZON"))

    swept = _World(intervals=2, per_interval=1)
    swept.run(1, pipeline_config(initial_position="TRIM_HORIZON"))
    swept.store.items.delete([INITIAL_POSITION_KEY])
    assert swept.store.ranges.settle_initial_position("INTERVAL") == "TRIM_HORIZON"
