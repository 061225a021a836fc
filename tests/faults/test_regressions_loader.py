"""Holes in the loader found by the third round of reproductions
(/work/shared/repro/replay-contract-3), each pinned by a test that failed before its fix; and the
clock-skew margin of the label window. The real planner, loader and commit (``run_interval``)
over the in-memory fakes, or the Doris stand-in in-process with the real Stream Load client."""

from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from airflow_provider_kinesis_doris.core.doris.client import DorisStreamLoadClient
from airflow_provider_kinesis_doris.core.doris.connection import DorisConnectionConfig, RetryPolicy
from airflow_provider_kinesis_doris.core.doris.options import StreamLoadOptions
from airflow_provider_kinesis_doris.core.errors import UnresolvableLoad
from airflow_provider_kinesis_doris.core.report import RangeReport
from airflow_provider_kinesis_doris.core.load_job import LoadJob
from airflow_provider_kinesis_doris.core.settings import Credentials, PipelineConfig
from airflow_provider_kinesis_doris.core.mapping import RecordMapping, dead_letter_ddl
from airflow_provider_kinesis_doris.core.pipeline import IntervalResult, Runner, run_interval
from airflow_provider_kinesis_doris.core.stores.memory import memory_store, MemoryTable
from airflow_provider_kinesis_doris.testing.fake_kinesis import FakeKinesis
from airflow_provider_kinesis_doris.testing.faults import FailOnNthCall, InjectedCrash
from airflow_provider_kinesis_doris.testing.memory_doris import MemoryDoris
from airflow_provider_kinesis_doris.testing.builders import load_in_thread, pipeline_config
from tests.faults.memory_world import IV, SHARD, STREAM, T0
from kinesis_doris_devstack.doris_server import DorisServer
from kinesis_doris_devstack.scenario import events_table_ddl






def _run(config: PipelineConfig, kinesis: FakeKinesis, store: Any, runner: Runner, doris: Any) -> IntervalResult:
    return run_interval(
        config, T0, T0 + IV, kinesis=kinesis, store=store, credentials=Credentials(), runner=runner,
        clock=lambda: kinesis.now_ms, doris=doris,
    )  # fmt: skip


def _put(kinesis: FakeKinesis, at_ms: int, **payload: Any) -> None:
    kinesis.now_ms = at_ms
    kinesis.put_record(StreamName=STREAM, Data=json.dumps(payload).encode(), PartitionKey="k")


# --- a Spark task retry of a range this run's plan created ----------------------------------------


def test_a_spark_retry_of_a_new_shard_start_range_whose_head_was_trimmed_loads_each_record_once() -> None:
    """repro_spark_retry_of_fresh_range: a TRIM_HORIZON sweep (a range from SHARD_START, new in
    this run's plan) loads two chunks, then its Spark task dies (not a KinesisDorisError) and
    retention trims event 0 before Spark runs the task again with the same job. Before, the job
    marked the range ``fresh``, the retry read no chunk log, cut its chunks from event 1 under new
    labels and loaded events 1-3 twice, green."""
    kinesis = FakeKinesis(now_ms=T0 - 10_000)
    kinesis.create_stream(StreamName=STREAM, ShardCount=1)
    for event_id in range(8):
        _put(kinesis, T0 - 5_000 + event_id, event_id=event_id)  # before the first interval: the sweep's
    kinesis.now_ms = T0 + 2 * IV
    store, doris = memory_store("p", clock=lambda: kinesis.now_ms), MemoryDoris()
    crashes: list[InjectedCrash] = []

    def spark_task_retried(job: LoadJob, credentials: Credentials) -> list[RangeReport]:
        # The first attempt's executor is lost before the third chunk's first write.
        first_attempt = load_in_thread(kinesis, FailOnNthCall(store, "chunks.put_chunk_intent_with_content", 3), doris)
        try:
            return first_attempt(job, credentials)
        except InjectedCrash as crash:
            crashes.append(crash)
        del kinesis.shard(STREAM, SHARD).records[:1]  # retention trims event 0, loaded by the first attempt
        return load_in_thread(kinesis, store, doris)(job, credentials)  # Spark runs the task again, same job

    result = _run(pipeline_config(initial_position="TRIM_HORIZON"), kinesis, store, spark_task_retried, doris)

    assert len(crashes) == 1 and result.reports[0].failure is None
    assert doris.tally("t", "event_id") == Counter(range(8))


# --- a dead-letter set read before another run amended the content --------------------------------


class _PausedBeforeItsRowLoad:
    """The run's Stream Load client; before its first row load, ``meanwhile`` runs (another run
    of the same range, in a process of its own)."""

    def __init__(self, client: DorisStreamLoadClient, meanwhile: Callable[[], None]) -> None:
        self._client, self._meanwhile = client, meanwhile

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def load_idempotently(self, database: str, table: str, label: str, *args: Any, **kwargs: Any) -> Any:
        meanwhile, self._meanwhile = self._meanwhile, lambda: None
        if label.startswith("kd:"):
            meanwhile()
        return self._client.load_idempotently(database, table, label, *args, **kwargs)


@pytest.fixture
def doris_standin() -> Iterator[DorisServer]:
    with DorisServer(host="127.0.0.1", user="root", password="") as server:
        server.execute_sql("", "CREATE DATABASE db")
        server.execute_sql("db", events_table_ddl("t"))
        server.execute_sql("db", dead_letter_ddl("db", "t_dl", {"replication_num": "1"}))
        yield server


def test_dead_letters_follow_an_amendment_another_run_made_after_this_run_settled_the_chunk(
    doris_standin: DorisServer,
) -> None:
    """repro_refused_rows_stale_dead_letters: run B settles a chunk of a good record, one Doris
    refuses, one the mapping dead-letters and a good one. Before B's row load, run A of the same
    range loads it: Doris refuses record 2, A bisects with 2PC probes, amends the content (2 is a
    dead letter now), re-sends the rows and dies before its dead-letter load. B's row load is
    ALREADY_LOADED. Before, B then sent its dead-letter load with the set it settled (record 3
    only) under the label: record 2 was in neither table and B ended green."""
    kinesis = FakeKinesis(now_ms=T0)
    kinesis.create_stream(StreamName=STREAM, ShardCount=1)
    _put(kinesis, T0 + 1_000, event_id=1, user_id="a", amount=1)
    _put(kinesis, T0 + 1_001, event_id=2, user_id="b", amount="many")  # refused by Doris (strict mode)
    _put(kinesis, T0 + 1_002, event_id=3, amount=1)  # no user_id: a dead letter of the mapping
    _put(kinesis, T0 + 1_003, event_id=4, user_id="d", amount=1)
    kinesis.now_ms = T0 + 2 * IV
    config = pipeline_config(
        doris=DorisConnectionConfig(host="127.0.0.1", port=doris_standin.fe_port, user="root"),
        load_options=StreamLoadOptions.json_lines(strict_mode=True),
        mapping=RecordMapping(metadata_columns=("_kinesis_shard", "_kinesis_sequence"), required_fields=("user_id",)),
        chunk_max_rows=10,
        retry_policy=RetryPolicy(max_attempts=3, initial_backoff_seconds=0.01, max_backoff_seconds=0.01),
    )
    table = MemoryTable()

    def run(doris: Any) -> IntervalResult:
        store = memory_store("p", table, clock=lambda: kinesis.now_ms)  # a process of its own
        return _run(config, kinesis, store, load_in_thread(kinesis, store, doris), doris)

    def run_a() -> None:
        # A's Stream Loads: the refused rows, the rows again without record 2, then the dead letters.
        with pytest.raises(InjectedCrash):
            run(FailOnNthCall(DorisStreamLoadClient(config.doris, retry_policy=config.retry_policy), "load_idempotently", 3))

    result = run(_PausedBeforeItsRowLoad(DorisStreamLoadClient(config.doris, retry_policy=config.retry_policy), run_a))

    rows = sorted(row[0] for row in doris_standin.execute_sql("db", "SELECT event_id FROM t"))
    dead = sorted(json.loads(base64.b64decode(row[0]))["event_id"]
                  for row in doris_standin.execute_sql("db", "SELECT payload_base64 FROM t_dl"))  # fmt: skip
    assert (rows, dead) == ([1, 4], [2, 3])
    assert result.reports[0].failure is None


# --- the label window and the workers' clocks -----------------------------------------------------


def test_a_replayer_whose_clock_is_behind_reports_a_label_doris_forgot_instead_of_sending_it_again() -> None:
    """Suspected in the third round: the intent's age is this worker's clock minus the writer's
    ``updated_ms``. A chunk loaded VISIBLE whose task died before recording it, replayed just past
    Doris's label window (which forgot the label) by a worker whose clock is 5 minutes behind,
    measured the intent as inside the window, took the label as free and loaded the chunk twice."""
    keep_seconds = 3600
    config = pipeline_config(doris=DorisConnectionConfig(host="fe", label_keep_seconds=keep_seconds))
    kinesis = FakeKinesis(now_ms=T0)
    kinesis.create_stream(StreamName=STREAM, ShardCount=1)
    for event_id in range(2):
        _put(kinesis, T0 + 1_000 + event_id, event_id=event_id)
    kinesis.now_ms = T0 + 2 * IV
    store, doris = memory_store("p", clock=lambda: kinesis.now_ms), MemoryDoris()
    with pytest.raises(InjectedCrash):  # Doris made the chunk visible; its outcome was never recorded
        _run(config, kinesis, store, load_in_thread(kinesis, FailOnNthCall(store, "chunks.record_chunk_outcome", 1), doris), doris)

    kinesis.now_ms += keep_seconds * 1000 + 1_000  # just past the label window ...
    doris.forget_labels()  # ... which Doris has applied
    behind_ms = 5 * 60_000  # within what AWS accepts of each worker's clock (see CLOCK_SKEW_MARGIN_SECONDS)
    with pytest.raises(UnresolvableLoad, match="Doris no longer knows its label"):
        _run(config, kinesis, store, load_in_thread(kinesis, store, doris, clock_ms=lambda: kinesis.now_ms - behind_ms), doris)

    assert doris.tally("t", "event_id") == Counter({0: 1, 1: 1})
