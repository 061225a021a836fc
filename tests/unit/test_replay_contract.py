"""Regressions of the replay contract over the in-memory fakes: retention (I6) and per-run reads
that do not grow with the pipeline's history (issue: unbounded history reads)."""

from __future__ import annotations

import json
import re
import logging
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from airflow_provider_kinesis_doris.config import LoadConfig, MappingConfig, check_groups_together
from airflow_provider_kinesis_doris.core.errors import (
    ConfigurationError,
    DataTrimmed,
    RetryableStreamLoadError,
    ShardsWaiting,
)
from airflow_provider_kinesis_doris.core.settings import PipelineConfig
from airflow_provider_kinesis_doris.core.pipeline import IntervalResult
from airflow_provider_kinesis_doris.core.rebalance import RECENT_INTERVALS
from airflow_provider_kinesis_doris.core.mapping import RecordMapping
from airflow_provider_kinesis_doris.testing.builders import pipeline_config, run_in_memory
from airflow_provider_kinesis_doris.testing.fake_kinesis import FakeKinesis
from airflow_provider_kinesis_doris.testing.faults import FailOnNthCall
from airflow_provider_kinesis_doris.testing.memory_doris import MemoryDoris
from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
from airflow_provider_kinesis_doris.core.stores.memory import MemoryItems, memory_store

STREAM = "events"
T0 = 1_700_000_000_000
IV = 60_000
HOUR_MS = 3_600_000


def _config() -> PipelineConfig:
    return pipeline_config(
        stream_name=STREAM, mapping=RecordMapping(metadata_columns=("_kinesis_sequence",)),
        chunk_max_rows=5,
    )  # fmt: skip


def _run(k: int, kinesis: FakeKinesis, store: CheckpointStore, doris: MemoryDoris) -> IntervalResult:
    return _run_with(_config(), k, kinesis, store, doris)


def _put(kinesis: FakeKinesis, event_id: int, at_ms: int, key: str = "k") -> None:
    kinesis.now_ms = max(kinesis.now_ms, at_ms)
    kinesis.put_record(StreamName=STREAM, Data=json.dumps({"event_id": event_id}).encode(), PartitionKey=key)


def test_a_backfill_of_an_interval_older_than_retention_fails_with_data_trimmed() -> None:
    """repro_backfill_trimmed: the probe of a trimmed instant lands on the first record still kept,
    so the old planner stored an empty range and the run was green with three records gone."""
    kinesis = FakeKinesis(now_ms=T0, retention_hours=24)
    kinesis.create_stream(StreamName=STREAM, ShardCount=1)
    for event_id in range(3):
        _put(kinesis, event_id, T0 + 1_000 + event_id)  # interval 0
    _put(kinesis, 3, T0 + IV + 1_000)  # interval 1
    kinesis.now_ms = T0 + 3 * IV
    store, doris = memory_store("p", clock=lambda: kinesis.now_ms), MemoryDoris()
    _run(1, kinesis, store, doris)

    kinesis.now_ms = T0 + 25 * HOUR_MS  # a day later retention has deleted interval 0's records
    del kinesis.shard(STREAM, "shardId-000000000000").records[:3]
    with pytest.raises(DataTrimmed, match=r"shardId-000000000000 .* older than the stream's trim horizon"):
        _run(0, kinesis, store, doris)

    assert doris.tally("t", "event_id") == Counter({3: 1})
    assert store.ranges.get_range("shardId-000000000000", T0) is None, "nothing may be planned for the trimmed interval"


def test_a_replay_inside_retention_still_loads_after_the_probe_instant_aged() -> None:
    """The trim check guards probes only: a stored cut is replayed by its sequence number."""
    kinesis = FakeKinesis(now_ms=T0, retention_hours=24)
    kinesis.create_stream(StreamName=STREAM, ShardCount=1)
    _put(kinesis, 0, T0 + 1_000)
    kinesis.now_ms = T0 + 2 * IV
    store, doris = memory_store("p", clock=lambda: kinesis.now_ms), MemoryDoris()
    _run(0, kinesis, store, doris)
    kinesis.now_ms = T0 + 23 * HOUR_MS

    replay = _run(0, kinesis, store, doris)

    assert replay.summary()["records"] == 1 and doris.tally("t", "event_id") == Counter({0: 1})


class _CountingItems(MemoryItems):
    """Counts the items each kind of query returns."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.items_read: Counter[str] = Counter()

    def query(self, prefix: str, **kwargs: Any) -> list[dict[str, Any]]:
        items = super().query(prefix, **kwargs)
        self.items_read[prefix.split("#")[0]] += len(items)
        return items


def test_items_a_run_reads_do_not_grow_with_the_pipelines_history() -> None:
    """repro_unbounded_query: every plan read every range and boundary of each shard."""
    kinesis = FakeKinesis(now_ms=T0)
    kinesis.create_stream(StreamName=STREAM, ShardCount=2)
    counting = _CountingItems("p", clock=lambda: kinesis.now_ms)
    store, doris = CheckpointStore(counting), MemoryDoris()
    reads: dict[int, Counter[str]] = {}
    for k in range(60):
        for j in range(6):
            _put(kinesis, k * 100 + j, T0 + k * IV + 100 + j, key=f"p{j}")
        kinesis.now_ms = T0 + (k + 1) * IV + 1
        counting.items_read.clear()
        _run(k, kinesis, store, doris)
        reads[k] = Counter(counting.items_read)

    assert reads[59]["range"] == reads[5]["range"] and reads[59]["boundary"] == reads[5]["boundary"], reads
    assert reads[59]["chunk"] == reads[5]["chunk"], "a run reads only its own ranges' chunk items"
    # Per shard: the recent ranges that weigh the Spark partitions, and a neighbour or two.
    assert reads[59]["range"] + reads[59]["boundary"] <= 2 * (RECENT_INTERVALS + 2)


def test_a_waiting_child_fails_its_run_names_its_parent_and_is_flagged_once_it_waited_too_long(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """repro_waiting_green: run 1 ended green with the children's records of interval 1 unloaded."""
    kinesis = FakeKinesis(now_ms=T0)
    kinesis.create_stream(StreamName=STREAM, ShardCount=1)
    parent = "shardId-000000000000"
    _put(kinesis, 0, T0 + 10_000)
    _put(kinesis, 1, T0 + IV + 5_000)
    kinesis.now_ms = T0 + IV + 10_000
    kinesis.split_shard(StreamName=STREAM, ShardToSplit=parent, NewStartingHashKey=str(2**127))
    _put(kinesis, 2, T0 + IV + 20_000)
    kinesis.now_ms = T0 + 2 * IV + 1
    store, doris = memory_store("p", clock=lambda: kinesis.now_ms), MemoryDoris()
    doris.down = True  # run 0 plans its ranges, then fails: Airflow will retry it later
    with pytest.raises(RetryableStreamLoadError):
        _run(0, kinesis, store, doris)
    doris.down = False

    with pytest.raises(ShardsWaiting, match=rf"waits for {parent} \(nothing loaded\)") as first:
        _run(1, kinesis, store, doris)
    assert set(first.value.waiting) == {"shardId-000000000001", "shardId-000000000002"}
    # A person reads the times; the span is what runs of interval 0 must load (no run of it may exist).
    message = str(first.value)
    assert message.startswith(
        "Pipeline p interval [2023-11-14T22:14:20Z, 2023-11-14T22:15:20Z) (1700000060000, 1700000120000): "
    ), message
    assert "which must be loaded up to 2023-11-14T22:14:20Z (1700000060000)" in message
    assert (
        "The parents lack the intervals [2023-11-14T22:13:20Z, 2023-11-14T22:14:20Z) (1700000000000, "
        "1700000060000): once runs of those intervals have loaded them, this run's retry loads these shards."
    ) in message
    assert first.value.lacking == (T0, T0 + IV)
    assert "let those runs run" not in message
    assert doris.tally("t", "event_id") == Counter({1: 1}), "the parent's part of interval 1 is loaded"

    kinesis.now_ms += 2 * HOUR_MS
    with caplog.at_level(logging.ERROR), pytest.raises(ShardsWaiting, match="waiting for 7200 s"):
        _run(1, kinesis, store, doris)
    assert any("has waited 7200 s" in r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)

    _run(0, kinesis, store, doris)
    _run(1, kinesis, store, doris)
    assert doris.tally("t", "event_id") == Counter({0: 1, 1: 1, 2: 1})


@pytest.mark.parametrize("value", [True, "true"])
def test_two_phase_commit_is_refused_before_anything_is_planned(value: object) -> None:
    """repro_2pc: chunks stayed PRECOMMITTED while the range was marked LOADED and the mark moved.
    ``load.options`` is the only way to it (the dead-letter options are the pipeline's own):
    refused when the DAG is parsed."""
    with pytest.raises(ConfigurationError, match="two_phase_commit=.* is not supported by the pipeline"):
        check_groups_together(MappingConfig(), LoadConfig(options={"two_phase_commit": value}), rendered=False)


def test_a_templated_two_phase_commit_is_refused_once_rendered() -> None:
    load = LoadConfig(options={"two_phase_commit": "{{ params.two_phase }}"})
    check_groups_together(MappingConfig(), load, rendered=False)  # a template: left for after rendering
    load.options = {"two_phase_commit": "true"}  # as Airflow renders it
    with pytest.raises(ConfigurationError, match="two_phase_commit='true' is not supported by the pipeline"):
        check_groups_together(MappingConfig(), load, rendered=True)


def test_a_load_that_never_reached_doris_is_sent_again_after_the_label_window() -> None:
    """repro_false_unresolvable: the intent stayed INTENT, and a retry 13 h later raised
    UnresolvableLoad for data that provably never left this process."""
    kinesis = FakeKinesis(now_ms=T0)
    kinesis.create_stream(StreamName=STREAM, ShardCount=1)
    for event_id in range(3):
        _put(kinesis, event_id, T0 + 1_000 + event_id)
    kinesis.now_ms = T0 + 2 * IV
    store, doris = memory_store("p", clock=lambda: kinesis.now_ms), MemoryDoris()
    doris.down = True
    with pytest.raises(RetryableStreamLoadError):
        _run(0, kinesis, store, doris)
    (chunk,) = store.chunks.chunks_for_range("shardId-000000000000", T0)
    assert chunk.state == "NOT_LOADED"

    doris.down = False
    kinesis.now_ms += 13 * HOUR_MS  # past Doris's label window
    _run(0, kinesis, store, doris)

    assert doris.tally("t", "event_id") == Counter({0: 1, 1: 1, 2: 1})
    assert [c.state for c in store.chunks.chunks_for_range("shardId-000000000000", T0)] == ["VISIBLE"]


def _sweep_config() -> PipelineConfig:
    return replace(_config(), initial_position="TRIM_HORIZON", chunk_max_rows=2)


def _run_with(config: PipelineConfig, k: int, kinesis: FakeKinesis, store: CheckpointStore, doris: Any) -> IntervalResult:
    return run_in_memory(config, T0 + k * IV, T0 + (k + 1) * IV, kinesis=kinesis, store=store, doris=doris)


@pytest.mark.parametrize("trimmed_into", ["the loaded chunk", "the chunk whose load failed"])
def test_a_partly_loaded_sweep_retried_after_trimming_is_not_re_cut_under_new_labels(trimmed_into: str) -> None:
    """repro_trim_horizon_replay (A): retention trimmed the first record of a loaded chunk before
    the retry; the old loader cut the rest of that chunk anew, under a new label (duplicates)."""
    kinesis = FakeKinesis(now_ms=T0 - 10_000)
    kinesis.create_stream(StreamName=STREAM, ShardCount=1)
    for event_id in range(5):
        _put(kinesis, event_id, T0 - 5_000 + event_id)  # before the floor interval: the sweep's
    kinesis.now_ms = T0 + 2 * IV
    store, doris = memory_store("p", clock=lambda: kinesis.now_ms), MemoryDoris()
    failing = FailOnNthCall(doris, "load_idempotently", 2, lambda method, call: RetryableStreamLoadError("-235"))
    with pytest.raises(RetryableStreamLoadError):
        _run_with(_sweep_config(), 0, kinesis, store, failing)
    assert doris.tally("t", "event_id") == Counter({0: 1, 1: 1})
    records = kinesis.shard(STREAM, "shardId-000000000000").records
    del records[: 1 if trimmed_into == "the loaded chunk" else 3]

    if trimmed_into == "the loaded chunk":
        _run_with(_sweep_config(), 0, kinesis, store, doris)
        assert doris.tally("t", "event_id") == Counter({0: 1, 1: 1, 2: 1, 3: 1, 4: 1})
    else:
        with pytest.raises(DataTrimmed, match="cannot be loaded exactly once"):
            _run_with(_sweep_config(), 0, kinesis, store, doris)
        assert doris.tally("t", "event_id") == Counter({0: 1, 1: 1})


def test_a_later_interval_run_while_a_commit_marks_its_ranges_is_walked_by_one_of_the_two_commits() -> None:
    """The commit does not look for ranges after the grid's latest interval, which it reads once
    its ranges are marked LOADED: a run that registers a later interval after that read commits
    after them, so one of the two commits moves the mark across both ranges. Here run 2 plans,
    loads and commits just before run 1 marks its range loaded (run 2's walk stops at that range);
    a grid read before the marks would have left the mark at the end of interval 1 for good."""
    kinesis = FakeKinesis(now_ms=T0)
    kinesis.create_stream(StreamName=STREAM, ShardCount=1)
    for k in range(3):
        _put(kinesis, k, T0 + k * IV + 1_000)
    kinesis.now_ms = T0 + 4 * IV
    store, doris = memory_store("p", clock=lambda: kinesis.now_ms), MemoryDoris()
    _run(0, kinesis, store, doris)
    rival = memory_store("p", store.items.table, clock=lambda: kinesis.now_ms)

    _run(1, kinesis, FailOnNthCall(store, "ranges.mark_ranges_loaded", 1, before=lambda: _run(2, kinesis, rival, doris)), doris)

    (shard,) = memory_store("p", store.items.table).ledger.list_shard_checkpoints()
    assert shard.high_water_mark is not None and shard.high_water_mark.instant_ms == T0 + 3 * IV
    assert doris.tally("t", "event_id") == Counter({0: 1, 1: 1, 2: 1})


def test_the_task_log_gives_every_instant_in_iso_8601_utc_with_epoch_ms_only_in_parentheses(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The log said "interval 1795745820000": a person had to convert epoch milliseconds."""
    kinesis = FakeKinesis(now_ms=T0)
    kinesis.create_stream(StreamName=STREAM, ShardCount=1)
    _put(kinesis, 0, T0 + 10_000)
    kinesis.now_ms = T0 + IV + 1
    store, doris = memory_store("p", clock=lambda: kinesis.now_ms), MemoryDoris()

    with caplog.at_level(logging.DEBUG, logger="airflow_provider_kinesis_doris"):
        _run(0, kinesis, store, doris)

    lines = [r.getMessage() for r in caplog.records if r.name.startswith("airflow_provider_kinesis_doris")]
    assert "plan p [2023-11-14T22:13:20Z, 2023-11-14T22:14:20Z) (1700000000000, 1700000060000) shard" in "\n".join(lines)
    assert any(line.startswith("shard shardId-000000000000 interval 2023-11-14T22:13:20Z (1700000000000): ") for line in lines)
    # An epoch-ms instant (13 digits) stands only in parentheses after its ISO form.
    bare = [line for line in lines if re.search(r"(?<![(\d])(?<!, )\b1\d{12}\b", line)]
    assert not bare, bare
