"""The loader's replay of recorded chunks (invariant I7) over the in-memory fakes: what an earlier
attempt left in the intent log decides what a retry sends, and nothing lands twice or nowhere."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from airflow_provider_kinesis_doris.core.chunks import ChunkLimits
from airflow_provider_kinesis_doris.core.errors import UnresolvableLoad
from airflow_provider_kinesis_doris.core.job import AwsSettings, Credentials, LoadJob, PipelineConfig
from airflow_provider_kinesis_doris.core.loader import Executor, RangeReport, load_range
from airflow_provider_kinesis_doris.core.pipeline import IntervalResult, run_interval
from airflow_provider_kinesis_doris.core.stream_load_options import DorisConnectionConfig, StreamLoadOptions
from airflow_provider_kinesis_doris.core.stream_load_result import LabelState
from airflow_provider_kinesis_doris.core.transform import RecordMapping
from airflow_provider_kinesis_doris.testing.fake_kinesis import FakeKinesis
from airflow_provider_kinesis_doris.testing.faults import FailOnNthCall, InjectedCrash
from airflow_provider_kinesis_doris.testing.memory_doris import MemoryDoris
from airflow_provider_kinesis_doris.testing.memory_store import MemoryCheckpointStore

STREAM = "events"
SHARD = "shardId-000000000000"
T0 = 1_700_000_000_000
IV = 60_000
HOUR_MS = 3_600_000


class SendCountingDoris(MemoryDoris):
    """The in-memory Doris, also counting every Stream Load sent per label (a re-send of a loaded
    label leaves no second row here, so only the count shows it)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: Counter[str] = Counter()

    def load_idempotently(self, database: str, table: str, label: str, body: bytes, *args: Any, **kwargs: Any) -> Any:
        self.sent[label] += 1
        return super().load_idempotently(database, table, label, body, *args, **kwargs)


def _config(**changes: Any) -> PipelineConfig:
    base = PipelineConfig(
        pipeline_id="p", stream_name=STREAM, checkpoint_table="cp", doris_database="db", doris_table="t",
        dead_letter_table="t_dl", doris=DorisConnectionConfig(host="fe"), aws=AwsSettings(),
        load_options=StreamLoadOptions.json_lines(), mapping=RecordMapping(), chunk_limits=ChunkLimits(max_rows=10),
    )  # fmt: skip
    return replace(base, **changes)


def _run(config: PipelineConfig, kinesis: FakeKinesis, store: Any, doris: Any) -> IntervalResult:
    def runner(job: LoadJob, credentials: Credentials) -> list[RangeReport]:
        executor = Executor(job=job, kinesis=kinesis, store=store, doris=doris, clock_ms=lambda: kinesis.now_ms)
        return [load_range(executor, job.ranges[i]) for group in job.partition_groups() for i in group]

    return run_interval(
        config, T0, T0 + IV, kinesis=kinesis, store=store, credentials=Credentials(), runner=runner,
        clock=lambda: kinesis.now_ms,
    )  # fmt: skip


def _stream(*payloads: dict[str, Any]) -> FakeKinesis:
    """One shard holding ``payloads`` inside interval 0, sealed."""
    kinesis = FakeKinesis(now_ms=T0)
    kinesis.create_stream(StreamName=STREAM, ShardCount=1)
    for offset, payload in enumerate(payloads):
        kinesis.now_ms = T0 + 1_000 + offset
        kinesis.put_record(StreamName=STREAM, Data=json.dumps(payload).encode(), PartitionKey="k")
    kinesis.now_ms = T0 + 2 * IV
    return kinesis


def _loaded_but_outcome_lost(config: PipelineConfig, kinesis: FakeKinesis, doris: MemoryDoris) -> MemoryCheckpointStore:
    """Run interval 0 and "die" right after Doris made the chunk visible, before its outcome is
    recorded: the chunk stays an INTENT whose label Doris knows as VISIBLE."""
    store = MemoryCheckpointStore("p", clock=lambda: kinesis.now_ms)
    with pytest.raises(InjectedCrash):
        _run(config, kinesis, FailOnNthCall(store, "record_chunk_outcome", 1), doris)
    assert [chunk.state for chunk in store.chunks_for_range(SHARD, T0)] == ["INTENT"]
    return store


# --- an INTENT is settled with get_load_state before anything is sent again ----------------------


def test_an_intent_whose_label_doris_knows_as_visible_is_recorded_without_sending_it_again() -> None:
    """Before, an INTENT inside the label window was sent again blind: harmless only while Doris
    still remembers the label, and it re-sent the whole body."""
    kinesis, doris = _stream(*({"event_id": i} for i in range(3))), SendCountingDoris()
    store = _loaded_but_outcome_lost(_config(), kinesis, doris)
    (label,) = doris.sent

    kinesis.now_ms += HOUR_MS  # inside the 12 h label window
    result = _run(_config(), kinesis, store, doris)

    assert doris.sent[label] == 1, "the chunk's label was sent again although Doris reported it VISIBLE"
    assert [chunk.state for chunk in store.chunks_for_range(SHARD, T0)] == ["VISIBLE"]
    assert result.reports[0].chunks_already_loaded == 1
    assert doris.tally("t", "event_id") == Counter({0: 1, 1: 1, 2: 1})


def test_an_intent_whose_load_doris_aborted_is_sent_again_inside_the_label_window() -> None:
    kinesis, doris = _stream({"event_id": 7}), SendCountingDoris()
    store = MemoryCheckpointStore("p", clock=lambda: kinesis.now_ms)
    with pytest.raises(InjectedCrash):  # the task died while its load was on the wire ...
        _run(_config(), kinesis, store, FailOnNthCall(doris, "load_idempotently", 1))
    (chunk,) = store.chunks_for_range(SHARD, T0)
    doris.labels[("db", chunk.label)] = LabelState.ABORTED  # ... and Doris aborted that transaction

    kinesis.now_ms += HOUR_MS
    _run(_config(), kinesis, store, doris)

    assert doris.tally("t", "event_id") == Counter({7: 1})
    assert [c.state for c in store.chunks_for_range(SHARD, T0)] == ["VISIBLE"]


def test_a_label_doris_forgot_early_is_reported_not_duplicated_once_label_keep_seconds_is_doris_real_retention() -> None:
    """The limit of what get_load_state proves (docs/checkpoints.md, "Chunks"): an UNKNOWN label
    inside ``label_keep_seconds`` is taken as free. A database whose ``label_num_threshold``
    evicts labels after about an hour sets ``label_keep_seconds=3600``; then a chunk whose label
    Doris forgot is reported, never loaded twice."""
    config = _config(doris=DorisConnectionConfig(host="fe", label_keep_seconds=3600))
    kinesis, doris = _stream(*({"event_id": i} for i in range(3))), SendCountingDoris()
    store = _loaded_but_outcome_lost(config, kinesis, doris)
    doris.forget_labels()  # evicted by label_num_threshold, well before 12 h

    kinesis.now_ms += 2 * HOUR_MS
    with pytest.raises(UnresolvableLoad, match="Doris no longer knows its label"):
        _run(config, kinesis, store, doris)

    assert doris.tally("t", "event_id") == Counter({0: 1, 1: 1, 2: 1})
    assert sum(doris.sent.values()) == 1


def test_doris_down_on_a_retry_does_not_mark_not_loaded_a_chunk_an_earlier_attempt_may_have_loaded() -> None:
    """A refused connection proves only that *this* attempt sent nothing. Before, the retry of an
    INTENT whose first load had landed recorded NOT_LOADED when Doris was down, and a run after
    the label window loaded the chunk a second time."""
    kinesis, doris = _stream(*({"event_id": i} for i in range(3))), SendCountingDoris()
    store = _loaded_but_outcome_lost(_config(), kinesis, doris)

    doris.down = True
    kinesis.now_ms += HOUR_MS
    with pytest.raises(Exception, match="unreachable"):
        _run(_config(), kinesis, store, doris)
    assert [chunk.state for chunk in store.chunks_for_range(SHARD, T0)] == ["INTENT"]

    doris.down = False
    doris.forget_labels()
    kinesis.now_ms += 13 * HOUR_MS  # past Doris's label window
    with pytest.raises(UnresolvableLoad):
        _run(_config(), kinesis, store, doris)
    assert doris.tally("t", "event_id") == Counter({0: 1, 1: 1, 2: 1})
