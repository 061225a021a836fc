"""The loader's replay of recorded chunks (invariant I7) over the in-memory fakes: what an earlier
attempt left in the intent log decides what a retry sends, and nothing lands twice or nowhere.

What a chunk contains (which records are rows, which dead letters) is fixed before its first
load, like its span: a record lands in exactly one of the two tables, once, whatever the mapping
says on a retry (repro_deadletter_transient.py, repro_deadletter_reclass.py).
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from airflow_provider_kinesis_doris.core.chunks import (
    MAX_CONTENT_CHARS,
    RECORDED_DEAD_LETTER,
    ChunkContent,
)
from airflow_provider_kinesis_doris.core.model import ChunkLimits
from airflow_provider_kinesis_doris.core.errors import ChunkContentChanged, ChunkContentTooLarge
from airflow_provider_kinesis_doris.core.errors import RetryableStreamLoadError, UnresolvableLoad
from airflow_provider_kinesis_doris.core.settings import PipelineConfig
from airflow_provider_kinesis_doris.core.model import Position
from airflow_provider_kinesis_doris.core.pipeline import IntervalResult
from airflow_provider_kinesis_doris.core.doris.connection import DorisConnectionConfig
from airflow_provider_kinesis_doris.core.doris.result import LabelState
from airflow_provider_kinesis_doris.core.mapping import RecordMapping
from airflow_provider_kinesis_doris.testing.builders import pipeline_config, run_in_memory
from airflow_provider_kinesis_doris.testing.fake_kinesis import FakeKinesis
from airflow_provider_kinesis_doris.testing.faults import FailOnNthCall, InjectedCrash
from airflow_provider_kinesis_doris.testing.counting import CountingClient
from airflow_provider_kinesis_doris.testing.memory_doris import MemoryDoris
from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
from airflow_provider_kinesis_doris.core.stores.memory import memory_store

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
    return pipeline_config(**{"stream_name": STREAM, "chunk_max_rows": 10, **changes})


def _run(config: PipelineConfig, kinesis: FakeKinesis, store: Any, doris: Any) -> IntervalResult:
    return run_in_memory(config, T0, T0 + IV, kinesis=kinesis, store=store, doris=doris)


def _stream(*payloads: dict[str, Any]) -> FakeKinesis:
    """One shard holding ``payloads`` inside interval 0, sealed."""
    kinesis = FakeKinesis(now_ms=T0)
    kinesis.create_stream(StreamName=STREAM, ShardCount=1)
    for offset, payload in enumerate(payloads):
        kinesis.now_ms = T0 + 1_000 + offset
        kinesis.put_record(StreamName=STREAM, Data=json.dumps(payload).encode(), PartitionKey="k")
    kinesis.now_ms = T0 + 2 * IV
    return kinesis


def _loaded_but_outcome_lost(config: PipelineConfig, kinesis: FakeKinesis, doris: MemoryDoris) -> CheckpointStore:
    """Run interval 0 and "die" right after Doris made the chunk visible, before its outcome is
    recorded: the chunk stays an INTENT whose label Doris knows as VISIBLE."""
    store = memory_store("p", clock=lambda: kinesis.now_ms)
    with pytest.raises(InjectedCrash):
        _run(config, kinesis, FailOnNthCall(store, "chunks.record_chunk_outcome", 1), doris)
    assert [chunk.state for chunk in store.chunks.chunks_for_range(SHARD, T0)] == ["INTENT"]
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
    assert [chunk.state for chunk in store.chunks.chunks_for_range(SHARD, T0)] == ["VISIBLE"]
    assert result.reports[0].chunks_already_loaded == 1
    assert doris.tally("t", "event_id") == Counter({0: 1, 1: 1, 2: 1})


def test_an_intent_whose_load_doris_aborted_is_sent_again_inside_the_label_window() -> None:
    kinesis, doris = _stream({"event_id": 7}), SendCountingDoris()
    store = memory_store("p", clock=lambda: kinesis.now_ms)
    with pytest.raises(InjectedCrash):  # the task died while its load was on the wire ...
        _run(_config(), kinesis, store, FailOnNthCall(doris, "load_idempotently", 1))
    (chunk,) = store.chunks.chunks_for_range(SHARD, T0)
    doris.labels[("db", chunk.label)] = LabelState.ABORTED  # ... and Doris aborted that transaction

    kinesis.now_ms += HOUR_MS
    _run(_config(), kinesis, store, doris)

    assert doris.tally("t", "event_id") == Counter({7: 1})
    assert [c.state for c in store.chunks.chunks_for_range(SHARD, T0)] == ["VISIBLE"]


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
    assert [chunk.state for chunk in store.chunks.chunks_for_range(SHARD, T0)] == ["INTENT"]

    doris.down = False
    doris.forget_labels()
    kinesis.now_ms += 13 * HOUR_MS  # past Doris's label window
    with pytest.raises(UnresolvableLoad):
        _run(_config(), kinesis, store, doris)
    assert doris.tally("t", "event_id") == Counter({0: 1, 1: 1, 2: 1})


# --- a chunk's content is settled before its first load ------------------------------------------


def _dead_letter_load_fails(doris: MemoryDoris, nth: int) -> FailOnNthCall:
    """``doris`` whose ``nth`` Stream Load fails as Doris's -235 "too many versions" does."""
    return FailOnNthCall(doris, "load_idempotently", nth, lambda method, call: RetryableStreamLoadError("-235"))


def _once_in_one_table(doris: MemoryDoris, ids: range) -> None:
    rows, dead = doris.tally("t", "event_id"), Counter(_dead_letter_ids(doris))
    assert rows + dead == Counter({i: 1 for i in ids}), f"rows {dict(rows)}, dead letters {dict(dead)}"


def _dead_letter_ids(doris: MemoryDoris) -> list[int]:
    return [json.loads(base64.b64decode(row["payload_base64"]))["event_id"] for row in doris.rows.get("t_dl", [])]


def _flaky_once(event_id: int) -> Callable[[dict[str, Any]], dict[str, Any]]:
    calls = Counter[int]()

    def enrich(row: dict[str, Any]) -> dict[str, Any]:  # a lookup that timed out once
        calls[row["event_id"]] += 1
        if row["event_id"] == event_id and calls[event_id] == 1:
            raise TimeoutError("lookup service timed out")
        return row

    return enrich


def test_a_record_dead_lettered_by_a_transient_transform_error_stays_a_dead_letter_on_the_retry() -> None:
    """repro_deadletter_transient: the data chunk loaded, the dead-letter load failed, the retry
    mapped the record to a row under the already VISIBLE data label: it was in neither table."""
    kinesis, doris = _stream(*({"event_id": i} for i in range(3))), MemoryDoris()
    store = memory_store("p", clock=lambda: kinesis.now_ms)
    config = _config(mapping=RecordMapping(transform=_flaky_once(1)))
    with pytest.raises(RetryableStreamLoadError):
        _run(config, kinesis, store, _dead_letter_load_fails(doris, 2))

    _run(config, kinesis, store, doris)  # Airflow's retry, same config

    _once_in_one_table(doris, range(3))
    assert _dead_letter_ids(doris) == [1]
    assert doris.rows["t_dl"][0]["reason"] == RECORDED_DEAD_LETTER


def test_a_record_a_relaxed_mapping_accepts_on_the_retry_stays_a_dead_letter() -> None:
    """repro_deadletter_reclass: ``required_fields`` relaxed between the failed try and the retry."""
    kinesis, doris = _stream({"event_id": 0, "amount": 5}, {"event_id": 1}, {"event_id": 2, "amount": 7}), MemoryDoris()
    store = memory_store("p", clock=lambda: kinesis.now_ms)
    with pytest.raises(RetryableStreamLoadError):
        _run(_config(mapping=RecordMapping(required_fields=("amount",))), kinesis, store, _dead_letter_load_fails(doris, 2))

    _run(_config(mapping=RecordMapping(required_fields=())), kinesis, store, doris)

    _once_in_one_table(doris, range(3))
    assert _dead_letter_ids(doris) == [1]


def test_a_loaded_row_that_fails_to_map_on_a_retry_is_not_dead_lettered_as_well() -> None:
    """The other direction: chunk 1 (records 0-1) loaded, chunk 2 failed; on the retry record 1
    failed in the transform. Before, it went to the dead-letter table too (both tables)."""
    kinesis, doris = _stream(*({"event_id": i} for i in range(4))), MemoryDoris()
    store = memory_store("p", clock=lambda: kinesis.now_ms)
    config = _config(chunk_max_rows=2)
    with pytest.raises(RetryableStreamLoadError):
        _run(config, kinesis, store, _dead_letter_load_fails(doris, 2))  # the second chunk's load
    flaky = _config(chunk_max_rows=2, mapping=RecordMapping(transform=_flaky_once(1)))

    with pytest.raises(ChunkContentChanged, match="is a row of chunk"):
        _run(flaky, kinesis, store, doris)
    _run(flaky, kinesis, store, doris)  # the lookup answers again

    _once_in_one_table(doris, range(4))
    assert doris.tally("t", "event_id") == Counter({0: 1, 1: 1, 2: 1, 3: 1})
    assert [chunk.state for chunk in store.chunks.chunks_for_range(SHARD, T0)] == ["VISIBLE", "VISIBLE"]


def test_contents_round_trip_in_runs_and_refuse_what_a_checkpoint_item_cannot_hold() -> None:
    first, last = Position(10, 0), Position(99, 0)
    content = ChunkContent(first, last, 9, (0, 1, 2, 5, 7, 8))
    assert '"dead": "0-2,5,7-8"' in content.encode()
    assert ChunkContent.decode(content.encode()) == content
    assert ChunkContent.decode(ChunkContent(first, last, 100_000, tuple(range(100_000))).encode()).records == 100_000

    alternating = ChunkContent(first, last, 200_000, tuple(range(0, 200_000, 2)))
    with pytest.raises(ChunkContentTooLarge, match=f"more than the {MAX_CONTENT_CHARS}"):
        alternating.encode()


# --- chunk limits are stored with the range when it is planned ------------------------------------


def test_a_retry_with_other_chunk_limits_cuts_the_chunks_the_range_was_planned_with() -> None:
    """The planner stores its chunk limits with each new range, so no loader has to settle them;
    a retry configured with other limits still cuts (and labels) the same chunks, and settles
    nothing (a loader-settled limit would have been written by the failed attempt's loader)."""
    kinesis, doris = _stream(*({"event_id": i} for i in range(4))), SendCountingDoris()
    store = memory_store("p", clock=lambda: kinesis.now_ms)
    with pytest.raises(InjectedCrash):
        _run(_config(chunk_max_rows=2), kinesis, store, FailOnNthCall(doris, "load_idempotently", 2))
    (planned,) = store.ranges.ranges_for_shard(SHARD)
    assert planned.chunk_limits == ChunkLimits(2, ChunkLimits().chunk_max_bytes)

    settled = FailOnNthCall(store, "ranges.settle_chunk_limits", 1, error=lambda *_: AssertionError("limits settled"))
    _run(_config(chunk_max_rows=10), kinesis, settled, doris)

    assert list(doris.sent.values()) == [1, 1]  # the first chunk, then the one that failed; no third label
    assert doris.tally("t", "event_id") == Counter({0: 1, 1: 1, 2: 1, 3: 1})
    assert [chunk.state for chunk in store.chunks.chunks_for_range(SHARD, T0)] == ["VISIBLE", "VISIBLE"]


def test_a_range_stored_before_planners_kept_chunk_limits_gets_them_from_its_first_loader() -> None:
    """Tables written by earlier versions: a stored range without limits is settled by its first
    loader, as before, and its job carries no limits."""
    kinesis, doris = _stream(*({"event_id": i} for i in range(3))), MemoryDoris()
    store = memory_store("p", clock=lambda: kinesis.now_ms)
    with pytest.raises(InjectedCrash):
        _run(_config(chunk_max_rows=2), kinesis, FailOnNthCall(store, "chunks.put_chunk_intent_with_content", 1), doris)
    (key,) = [key for key in store.items.table.items if key[1].startswith("range#")]
    for attribute in ("chunk_max_rows", "chunk_max_bytes"):
        del store.items.table.items[key][attribute]
    assert store.ranges.ranges_for_shard(SHARD)[0].chunk_limits is None

    _run(_config(chunk_max_rows=1), kinesis, store, doris)

    assert (store.items.table.items[key]["chunk_max_rows"], len(store.chunks.chunks_for_range(SHARD, T0))) == (1, 3)
    assert doris.tally("t", "event_id") == Counter({0: 1, 1: 1, 2: 1})


def test_a_range_this_run_planned_is_loaded_without_reading_the_chunk_log_and_its_retry_reads_it() -> None:
    """A ``NEW`` range has nothing recorded but what a concurrent run writes (met by the put-once
    writes and the labels): its first pass reads no chunk list and no contents. The retry of a run
    that died after loading a chunk replays the stored range, reads them, and sends nothing twice."""
    kinesis, doris = _stream(*({"event_id": i} for i in range(4))), SendCountingDoris()
    store = memory_store("p", clock=lambda: kinesis.now_ms)
    first, retry = _counting_chunks(store), _counting_chunks(store)
    with pytest.raises(InjectedCrash):
        _run(_config(chunk_max_rows=2), kinesis, FailOnNthCall(first, "chunks.put_chunk_intent_with_content", 2), doris)
    assert (first.chunks.calls["chunks_for_range"], first.chunks.calls["chunk_contents_for_range"]) == (0, 0)

    _run(_config(chunk_max_rows=2), kinesis, retry, doris)

    assert (retry.chunks.calls["chunks_for_range"], retry.chunks.calls["chunk_contents_for_range"]) == (1, 1)
    assert list(doris.sent.values()) == [1, 1]
    assert doris.tally("t", "event_id") == Counter({0: 1, 1: 1, 2: 1, 3: 1})


def _counting_chunks(store: CheckpointStore) -> Any:
    """A store on ``store``'s items whose chunk log counts the calls made to it."""
    counted: Any = CheckpointStore(store.items)
    counted.chunks = CountingClient(counted.chunks)
    return counted
