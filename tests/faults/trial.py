"""One seeded fault-injection trial: produce, run an interval with a fault, recover, count.

A trial is a pure function of its seed: the matrix cell (table model, KPL aggregation, reshard,
concurrent second run, read modes), the fault and where it strikes, the chunk size and the records
all come from ``random.Random(seed)``. Names are fresh per trial, so trials share only the servers.

Read modes: the faulty run and the recovery each read with GetRecords (``polling``) or through a
stream consumer (``efo``, ``SubscribeToShard`` on the devstack's event-stream server in front of
kinesis-mock, whose subscriptions expire after a second); a recovery in the other mode than the
faulty run replays what it loaded, which must load nothing twice.
"""

from __future__ import annotations

import base64
import json
import random
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import boto3
from aws_kinesis_agg.aggregator import RecordAggregator
from botocore.config import Config

from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
from airflow_provider_kinesis_doris.core.stores.dynamodb import dynamo_store
from airflow_provider_kinesis_doris.core.errors import UnresolvableLoad
from airflow_provider_kinesis_doris.core.kinesis.consumer import ensure_consumer
from airflow_provider_kinesis_doris.core.settings import Credentials
from airflow_provider_kinesis_doris.core.doris.labels import chunk_label
from airflow_provider_kinesis_doris.core.model import Position, RangeState
from airflow_provider_kinesis_doris.core.pipeline import IntervalResult, PipelineConfig, run_interval
from airflow_provider_kinesis_doris.core.doris.options import StreamLoadOptions
from airflow_provider_kinesis_doris.core.doris.connection import RetryPolicy
from airflow_provider_kinesis_doris.core.mapping import RecordMapping
from kinesis_doris_devstack.doris_server import DorisServer
from kinesis_doris_devstack.efo_server import EfoServer
from airflow_provider_kinesis_doris.testing.faults import FailOnNthCall, client_error, runner_with, with_clients
from tests.faults.tally import Delivery, ProofTally
from kinesis_doris_devstack.scenario import create_stream, events_table_ddl, now_ms, put_records, sealed_end, wait_past
from airflow_provider_kinesis_doris.testing.builders import local_pipeline_config, wait_stream_active

DB = "proof"
CHECKPOINT_TABLE = "proof_checkpoints"
DORIS_USER = "loader"
DORIS_PASSWORD = "proof-doris-Pa55word"
AWS_ACCESS_KEY_ID = "AKIAPROOFKEYID000001"
AWS_SECRET_ACCESS_KEY = "proof/Secret+Access+Key/0123456789abcdefXYZ"
TIGHT_RETRIES = RetryPolicy(max_attempts=3, initial_backoff_seconds=0.05, max_backoff_seconds=0.2,
                            running_wait_seconds=10, running_poll_seconds=0.1)  # fmt: skip
SHORT_LABEL_KEEP_SECONDS = 1
RECOVERY_RUNS = 6
_MARKER = re.compile(rb"#id=(\d+)#")

# Where a crash strikes: the store or Kinesis method that raises, and whether the call it replaces
# was applied first (the process dies right after it).
CRASHES = {
    "crash_after_planning": ("store", "chunks.put_chunk_intent_with_content", False),
    "crash_while_reading": ("kinesis", "get_records", False),
    "crash_before_load": ("store", "chunks.put_chunk_intent_with_content", True),
    "crash_after_doris_commit": ("store", "chunks.record_chunk_outcome", False),
    "crash_before_checkpoint": ("store", "ranges.mark_ranges_loaded", False),
    "crash_mid_checkpoint": ("store", "marks.advance_high_water_marks", False),
}
ONCE_PER_COMMIT = ("ranges.mark_ranges_loaded", "marks.advance_high_water_marks")
"""Store methods a commit calls once for all its shards: their fault strikes the run's first call
(a later one would belong to no run of the fault phase)."""
SINK_FAULTS = ("publish_timeout", "http_500", "reset_before_commit", "reset_after_commit",
               "too_many_versions", "running_txn_limit", "slow")  # fmt: skip
# A "slow" load outlives the client's read timeout: the client gives up in the middle of the load
# while Doris goes on and commits it.
SLOW_LOAD_SECONDS = 0.6
SLOW_READ_TIMEOUT_SECONDS = 0.3
SOURCE_FAULTS = {
    "kinesis_throttled": "ProvisionedThroughputExceededException",
    "kinesis_iterator_expired": "ExpiredIteratorException",
}
STORE_FAULTS = ("dynamodb_throttled", "dynamodb_conditional_conflict", "crash_after_dynamodb_write")
# Writes of the checkpoint store: items one by one, and grouped or together in transactions.
DYNAMODB_WRITES = ("put_item", "update_item", "transact_write_items")
LABEL_EXPIRED = "label_expired"
# Enhanced fan-out: subscriptions ended while a range is read (as Kinesis does after 5 minutes),
# held by another subscriber when the run subscribes, or failing with an exception event.
EFO_FAULTS = ("efo_subscription_expired", "efo_resource_in_use", "efo_stream_failure")
FAULT_KINDS = (*CRASHES, *SINK_FAULTS, *SOURCE_FAULTS, *STORE_FAULTS, LABEL_EXPIRED, *EFO_FAULTS)
GET_RECORDS_FAULTS = ("crash_while_reading", *SOURCE_FAULTS)
READ_MODES = (("polling", "polling"), ("polling", "polling"), ("efo", "efo"), ("efo", "polling"), ("polling", "efo"))
"""(faulty run, recovery), drawn per trial; the EFO faults read the faulty run with ``efo``."""
EFO_CONSUMER = "proof-consumer"


@dataclass(frozen=True)
class TrialSpec:
    """The matrix cell and fault of one trial, drawn from its seed."""

    seed: int
    model: str
    kpl: bool
    reshard: str | None
    concurrent: bool
    fault: str
    nth: int
    times: int
    events: int
    chunk_rows: int
    rival_chunk_rows: int
    """Rows per chunk of the concurrent run: a rerun may come with another chunk size."""
    read_modes: tuple[str, str] = ("polling", "polling")
    """How the faulty run (and a concurrent one) and the recovery read: ``polling`` or ``efo``."""

    @classmethod
    def from_seed(cls, seed: int) -> TrialSpec:
        rng = random.Random(seed)
        return cls(
            seed=seed,
            model=rng.choice(("DUPLICATE", "UNIQUE")),
            kpl=rng.random() < 0.5,
            reshard=rng.choice((None, None, "split", "merge")),
            concurrent=rng.random() < 0.3,
            # Cycled, not drawn: every kind is tried in any run of len(FAULT_KINDS) seeds.
            fault=FAULT_KINDS[seed % len(FAULT_KINDS)],
            nth=rng.randint(1, 2),
            times=rng.randint(1, 4),
            events=rng.randint(10, 24),
            chunk_rows=rng.randint(2, 6),
            rival_chunk_rows=rng.randint(2, 6),
            read_modes=_read_modes(seed),
        )

    @property
    def cell(self) -> str:
        return "/".join((self.model, "kpl" if self.kpl else "plain", self.reshard or "static",
                         "concurrent" if self.concurrent else "single", "+".join(self.read_modes)))  # fmt: skip

    def __str__(self) -> str:
        return f"seed {self.seed} [{self.cell}] {self.fault} nth={self.nth} times={self.times}"


def _read_modes(seed: int) -> tuple[str, str]:
    """Drawn apart from the rest of the spec, so that adding read modes left every other draw of
    a seed as it was. The faults aimed at GetRecords strike a faulty run that polls; the EFO
    faults, one that reads through the consumer."""
    fault, rng = FAULT_KINDS[seed % len(FAULT_KINDS)], random.Random(seed * 7919)
    if fault in EFO_FAULTS:
        return ("efo", rng.choice(("efo", "polling")))
    if fault in GET_RECORDS_FAULTS:
        return ("polling", rng.choice(("efo", "polling")))
    return rng.choice(READ_MODES)


@dataclass(frozen=True)
class Stack:
    """The servers every trial shares."""

    kinesis_endpoint: str
    dynamodb_endpoint: str
    doris: DorisServer
    doris_short_labels: DorisServer
    efo: EfoServer

    def kinesis_for(self, mode: str) -> Any:
        """A Kinesis client reading in ``mode``: kinesis-mock, or the event-stream server in front of it."""
        return aws_client("kinesis", self.efo.endpoint if mode == "efo" else self.kinesis_endpoint)


@dataclass
class Produced:
    """What a trial put into the stream: ids of good events and of bad records (markers)."""

    good: dict[int, dict[str, Any]] = field(default_factory=dict)
    bad: set[int] = field(default_factory=set)
    position_of: dict[tuple[str, Position], int] = field(default_factory=dict)

    @property
    def ids(self) -> set[int]:
        return set(self.good) | self.bad


@dataclass
class TrialResult:
    spec: TrialSpec
    delivery: Delivery
    fired: int
    errors: list[BaseException]
    unresolvable: int
    last: IntervalResult | None


def aws_client(service: str, endpoint: str) -> Any:
    return boto3.client(
        service, endpoint_url=endpoint, region_name="us-east-1",
        aws_access_key_id=AWS_ACCESS_KEY_ID, aws_secret_access_key=AWS_SECRET_ACCESS_KEY,
        config=Config(retries={"max_attempts": 2, "mode": "standard"}),
    )  # fmt: skip


def dead_letter_ddl(table: str) -> str:
    return (
        f"CREATE TABLE `{table}` (stream_name VARCHAR(128) NOT NULL, shard_id VARCHAR(64) NOT NULL, "
        "sequence_number VARCHAR(64) NOT NULL, sub_sequence_number INT NOT NULL, arrival_ms BIGINT NULL, "
        "partition_key VARCHAR(256) NULL, reason STRING NULL, payload_base64 STRING NULL) "
        "DUPLICATE KEY(stream_name, shard_id, sequence_number) DISTRIBUTED BY HASH(shard_id) BUCKETS 1 "
        "PROPERTIES ('replication_num' = '1')"
    )


def pipeline_config(stack: Stack, doris: DorisServer, stream: str, table: str, *, model: str = "DUPLICATE",
                    chunk_rows: int = 5, strict_mode: bool | None = True) -> PipelineConfig:  # fmt: skip
    """The trial's pipeline: tight retries, the Kinesis metadata columns, a sequence column on
    UNIQUE tables, strict mode as the operator sets it (None: Doris's default, not strict)."""
    keep = SHORT_LABEL_KEEP_SECONDS if doris is stack.doris_short_labels else 43200
    sequence = {"sequence_col": "_kinesis_arrival"} if model == "UNIQUE" else {}
    config = local_pipeline_config(
        stream, DB, table, doris_port=doris.fe_port, doris_user=DORIS_USER,
        kinesis_endpoint=stack.kinesis_endpoint, dynamodb_endpoint=stack.dynamodb_endpoint,
        checkpoint_table=CHECKPOINT_TABLE,
        load_options=StreamLoadOptions.json_lines(strict_mode=strict_mode, **sequence),
        mapping=RecordMapping(
            metadata_columns=("_kinesis_shard", "_kinesis_sequence", "_kinesis_arrival"), required_fields=("event_id",)
        ),
        chunk_max_rows=chunk_rows,
        retry_policy=TIGHT_RETRIES,
    )
    return replace(config, doris=replace(config.doris, label_keep_seconds=keep))


CREDENTIALS = Credentials(
    doris_password=DORIS_PASSWORD, aws_access_key_id=AWS_ACCESS_KEY_ID, aws_secret_access_key=AWS_SECRET_ACCESS_KEY
)


# --- producing ---------------------------------------------------------------------------------


def _payloads(rng: random.Random, first_id: int, count: int, produced: Produced) -> list[tuple[str, bytes, int]]:
    """``count`` records: mostly JSON events (some with unicode), one malformed, one binary, and one
    that Doris refuses under strict mode (a word in the INT column ``amount``) amid the others."""
    records = []
    for offset in range(count):
        identifier = first_id + offset
        kind = rng.random()
        if offset == 1:
            data = b'{"event_id": ' + str(identifier).encode() + b", #id=" + str(identifier).encode() + b"# broken"
            produced.bad.add(identifier)
        elif offset == 2:
            data = b"\xff\xfe\x00binary #id=" + str(identifier).encode() + b"#\x81"
            produced.bad.add(identifier)
        elif offset == 3:
            data = json.dumps({"event_id": identifier, "user_id": "poison", "amount": f"#id={identifier}#"}).encode()
            produced.bad.add(identifier)
        else:
            user = f"ユーザー-{identifier % 5}" if kind < 0.3 else f"user-{identifier % 7}"
            event = {"event_id": identifier, "user_id": user, "amount": rng.randint(-50, 50)}
            produced.good[identifier] = event
            data = json.dumps(event, ensure_ascii=False).encode()
        records.append((f"pk-{rng.randint(0, 99)}", data, identifier))
    return records


def _put(kinesis: Any, stream: str, records: list[tuple[str, bytes, int]], kpl: bool, rng: random.Random,
         produced: Produced) -> list[dict[str, Any]]:  # fmt: skip
    """Put ``records`` plainly, or packed into KPL aggregates of 1..4 user records; return the
    put result entries."""
    if not kpl:
        results = put_records(kinesis, stream, ((key, data) for key, data, _ in records))
        for result, (_, _, identifier) in zip(results, records):
            produced.position_of[(result["ShardId"], Position(int(result["SequenceNumber"])))] = identifier
        return results
    groups: list[list[tuple[str, bytes, int]]] = []
    remaining = list(records)
    while remaining:
        size = rng.randint(1, 4)
        groups.append(remaining[:size])
        remaining = remaining[size:]
    aggregates = []
    for group in groups:
        aggregator = RecordAggregator()
        for key, data, _ in group:
            aggregator.add_user_record(key, data)
        key, _, data = aggregator.clear_and_get().get_contents()
        aggregates.append((key, data))
    results = put_records(kinesis, stream, aggregates)
    for result, group in zip(results, groups):
        for index, (_, _, identifier) in enumerate(group):
            produced.position_of[(result["ShardId"], Position(int(result["SequenceNumber"]), index))] = identifier
    return results


def _reshard(kinesis: Any, stream: str, how: str) -> None:
    shards = sorted(kinesis.list_shards(StreamName=stream)["Shards"], key=lambda s: s["ShardId"])
    open_shards = [s for s in shards if "EndingSequenceNumber" not in s["SequenceNumberRange"]]
    if how == "split":
        shard = open_shards[0]
        low, high = int(shard["HashKeyRange"]["StartingHashKey"]), int(shard["HashKeyRange"]["EndingHashKey"])
        kinesis.split_shard(StreamName=stream, ShardToSplit=shard["ShardId"], NewStartingHashKey=str((low + high) // 2))
    else:
        ordered = sorted(open_shards, key=lambda s: int(s["HashKeyRange"]["StartingHashKey"]))
        kinesis.merge_shards(StreamName=stream, ShardToMerge=ordered[0]["ShardId"],
                             AdjacentShardToMerge=ordered[1]["ShardId"])  # fmt: skip
    wait_stream_active(kinesis, stream)


def produce(kinesis: Any, stream: str, spec: TrialSpec) -> tuple[Produced, int, int]:
    """Put the trial's records in one interval (resharding halfway if asked); return them and
    the sealed interval."""
    rng = random.Random(spec.seed * 7919)
    produced = Produced()
    first_id = spec.seed * 1000
    half = spec.events // 2
    start = now_ms()
    wait_past(start)
    results = _put(kinesis, stream, _payloads(rng, first_id, half, produced), spec.kpl, rng, produced)
    if spec.reshard:
        _reshard(kinesis, stream, spec.reshard)
    results += _put(kinesis, stream, _payloads(rng, first_id + half, spec.events - half, produced), spec.kpl, rng,
                    produced)  # fmt: skip
    return produced, start, sealed_end(kinesis, stream, results)


# --- faults ------------------------------------------------------------------------------------


@dataclass
class Armed:
    """The faulty dependencies of the first run, and how to read how often the fault struck.

    ``planner_kinesis`` is the Kinesis client of planning and commit (default: ``kinesis``, the
    loader's), so a source fault can be aimed at the loader alone.
    """

    kinesis: Any
    store: Any
    fired: Callable[[], int]
    disarm: Callable[[], None] = lambda: None
    planner_kinesis: Any = None


def arm(spec: TrialSpec, stack: Stack, doris: DorisServer, config: PipelineConfig) -> Armed:
    """Wrap the real clients so that ``spec.fault`` strikes at ``spec.nth``."""
    kinesis = stack.kinesis_for(spec.read_modes[0])
    dynamodb = aws_client("dynamodb", stack.dynamodb_endpoint)
    store = dynamo_store(dynamodb, CHECKPOINT_TABLE, config.pipeline_id)
    if spec.fault in EFO_FAULTS:
        return _arm_efo(spec, stack, config, kinesis, store)
    if spec.fault in CRASHES:
        target, method, applied = CRASHES[spec.fault]
        nth = 1 if method in ONCE_PER_COMMIT else spec.nth
        wrapped = FailOnNthCall(kinesis if target == "kinesis" else store, method, nth, applied=applied)
        if target == "kinesis":
            return Armed(wrapped, store, lambda: wrapped.fired)
        return Armed(kinesis, wrapped, lambda: wrapped.fired)
    if spec.fault in SOURCE_FAULTS:
        # nth 1: the planner's boundary probes meet the fault first; nth 2: only the loader does.
        # A fresh iterator does not expire at once: expiry strikes one call, throttling a few.
        times = 1 if spec.fault == "kinesis_iterator_expired" else min(spec.times, 3)
        wrapped = FailOnNthCall(kinesis, "get_records", 1, client_error(SOURCE_FAULTS[spec.fault]), times=times)
        planner = wrapped if spec.nth == 1 else aws_client("kinesis", stack.kinesis_endpoint)
        return Armed(wrapped, store, lambda: wrapped.fired, planner_kinesis=planner)
    if spec.fault == "dynamodb_throttled":
        method = "update_item" if spec.nth == 1 else "put_item"
        client = FailOnNthCall(dynamodb, method, spec.nth, client_error("ProvisionedThroughputExceededException"))
        faulty = dynamo_store(client, CHECKPOINT_TABLE, config.pipeline_id)
        return Armed(kinesis, faulty, lambda: client.fired)
    if spec.fault == "crash_after_dynamodb_write":
        # The run dies among its writes (a grouped cut put, a range, a chunk record), after
        # DynamoDB applied the one on the wire; the retry meets the items it never heard of.
        client = FailOnNthCall(dynamodb, DYNAMODB_WRITES, 1 + 2 * spec.times, applied=True)
        return Armed(kinesis, dynamo_store(client, CHECKPOINT_TABLE, config.pipeline_id), lambda: client.fired)
    if spec.fault == "dynamodb_conditional_conflict":
        rival = dynamo_store(aws_client("dynamodb", stack.dynamodb_endpoint), CHECKPOINT_TABLE, config.pipeline_id)
        # Every shard's counter moves under the run's grouped mark writes: each is moved again on a fresh read.
        wrapped = FailOnNthCall(store, "marks.advance_high_water_marks", 1, before=lambda: _bump_counters(rival))
        return Armed(kinesis, wrapped, lambda: wrapped.fired)
    if spec.fault == LABEL_EXPIRED:
        # The first run dies after Doris committed a chunk (or after its load failed for good),
        # then the retry comes after the label was forgotten.
        wrapped = FailOnNthCall(store, "chunks.record_chunk_outcome", spec.nth)
        if spec.times > 2:
            doris.inject_fault("reset_before_commit", TIGHT_RETRIES.max_attempts)
        return Armed(kinesis, wrapped, lambda: wrapped.fired or int(doris.pending_faults() == 0 and spec.times > 2),
                     disarm=doris.clear_faults)  # fmt: skip
    params = {"publish_timeout": {"visible_after_seconds": 0.2}, "slow": {"seconds": SLOW_LOAD_SECONDS}}
    doris.inject_fault(spec.fault, spec.times, **params.get(spec.fault, {}))
    return Armed(kinesis, store, lambda: spec.times - doris.pending_faults(), disarm=doris.clear_faults)


def _arm_efo(spec: TrialSpec, stack: Stack, config: PipelineConfig, kinesis: Any, store: Any) -> Armed:
    efo, consumer = stack.efo, config.efo_consumer_arn
    assert consumer is not None, f"{spec}: an EFO fault needs the faulty run to read through a consumer"
    if spec.fault == "efo_subscription_expired":
        # While the loader writes a chunk's intent, its reader's subscriptions end.
        wrapped = FailOnNthCall(store, "chunks.put_chunk_intent_with_content", spec.nth, before=efo.expire_subscriptions,
                                times=spec.times)  # fmt: skip
        return Armed(kinesis, wrapped, lambda: wrapped.fired)
    if spec.fault == "efo_resource_in_use":
        shards = [shard["ShardId"] for shard in kinesis.list_shards(StreamName=config.stream_name)["Shards"]]
        held = [shard for shard in shards if efo.occupy(consumer, shard)]
        refused = efo.refused_in_use
        stop = threading.Event()

        def let_go_after_refusals() -> None:
            # Another subscriber holds every shard until the run was refused ``times`` times
            # (the loader backs off and retries), then lets go.
            while efo.refused_in_use - refused < spec.times and not stop.wait(0.05):
                pass
            for shard in held:
                efo.release(consumer, shard)

        releaser = threading.Thread(target=let_go_after_refusals, daemon=True)
        releaser.start()

        def disarm() -> None:
            stop.set()
            releaser.join()

        return Armed(kinesis, store, lambda: min(efo.refused_in_use - refused, 1), disarm=disarm)
    for _ in range(spec.times):
        efo.fail_next_event("InternalFailureException", consumer_arn=consumer)
    return Armed(kinesis, store, lambda: int(efo.pending_failures() < spec.times), disarm=efo.clear_failures)


def _bump_counters(rival: CheckpointStore) -> None:
    """A concurrent writer updates every shard first: the real conditional write then fails."""
    for shard in rival.ledger.list_shard_checkpoints():
        rival.marks.advance_high_water_mark(shard.shard_id, expected_counter=shard.lease_counter, last_lag_ms=4242)


# --- running -----------------------------------------------------------------------------------


def run_with(config: PipelineConfig, start: int, end: int, kinesis: Any, store: Any,
             planner_kinesis: Any = None) -> IntervalResult:  # fmt: skip
    """``run_interval`` in this process with the given clients for planning, loading and commit
    (``planner_kinesis``: another Kinesis client for planning)."""
    runner = runner_with(with_clients(kinesis=kinesis, store=store))
    return run_interval(config, start, end, kinesis=planner_kinesis or kinesis, store=store, credentials=CREDENTIALS,
                        runner=runner)  # fmt: skip


def _attempt(run: Callable[[], IntervalResult]) -> tuple[IntervalResult | None, BaseException | None]:
    try:
        return run(), None
    except Exception as exc:  # noqa: BLE001 - a failed run is an outcome the trial records
        return None, exc


def _fault_phase(spec: TrialSpec, config: PipelineConfig, start: int, end: int, armed: Armed, stack: Stack) -> list[BaseException]:
    """The faulty run, and with ``concurrent`` a clean run of the same interval beside it."""
    errors: list[BaseException] = []
    runs = [lambda: run_with(config, start, end, armed.kinesis, armed.store, armed.planner_kinesis)]
    if spec.concurrent:
        kinesis = stack.kinesis_for(spec.read_modes[0])
        store = dynamo_store(aws_client("dynamodb", stack.dynamodb_endpoint), CHECKPOINT_TABLE, config.pipeline_id)
        rival = replace(config, chunk_max_rows=spec.rival_chunk_rows)
        runs.append(lambda: run_with(rival, start, end, kinesis, store))

    def attempt(run: Callable[[], IntervalResult]) -> None:
        error = _attempt(run)[1]
        if error is not None:
            errors.append(error)

    threads = [threading.Thread(target=attempt, args=(run,)) for run in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return errors


def _recover(config: PipelineConfig, start: int, end: int, stack: Stack, doris: DorisServer,
             produced: Produced, mode: str) -> tuple[IntervalResult | None, list[BaseException], int]:  # fmt: skip
    """Re-run the interval cleanly, reading in ``mode``, until it succeeds (a run with waiting
    shards fails); resolve an unresolvable chunk as its message tells an operator to."""
    kinesis = stack.kinesis_for(mode)
    store = dynamo_store(aws_client("dynamodb", stack.dynamodb_endpoint), CHECKPOINT_TABLE, config.pipeline_id)
    errors: list[BaseException] = []
    unresolvable = 0
    for _ in range(RECOVERY_RUNS):
        result, error = _attempt(lambda: run_with(config, start, end, kinesis, store))
        if isinstance(error, UnresolvableLoad):
            unresolvable += 1
            _resolve_as_operator(error, config, store, doris, produced)
        if error is not None:
            errors.append(error)
            continue
        assert result is not None
        return result, errors, unresolvable
    return None, errors, unresolvable


def _resolve_as_operator(error: UnresolvableLoad, config: PipelineConfig, store: CheckpointStore,
                         doris: DorisServer, produced: Produced) -> None:  # fmt: skip
    """Look the chunk's records up in Doris: all there → VISIBLE; none → ABORTED (load again)."""
    match = re.search(r"Chunk (\S+) of shard (\S+) .*range of interval [^(]*\((\d+)\)", str(error))
    assert match, f"UnresolvableLoad does not name its label, shard and range: {error}"
    chunk = store.chunks.get_chunk(match.group(1), match.group(2), int(match.group(3)))
    assert chunk is not None, f"the unresolvable chunk {match.group(1)} has no item"
    ids = {identifier for (shard, position), identifier in produced.position_of.items()
           if shard == chunk.shard_id and chunk.first <= position <= chunk.last}  # fmt: skip
    is_rows = chunk.label == chunk_label(config.pipeline_id, config.stream_name, chunk.shard_id, chunk.first, chunk.last)
    found = set(table_ids(doris, config.doris_table)) if is_rows else set(dead_letter_ids(doris, config.dead_letter_table))
    expected = (ids & set(produced.good)) if is_rows else (ids & produced.bad)
    present = expected & found
    assert present in (set(), expected), f"chunk {chunk.label} is partly visible: {sorted(present)} of {sorted(expected)}"
    store.chunks.record_chunk_outcome(chunk.label, "VISIBLE" if present else "ABORTED", shard_id=chunk.shard_id,
                               interval_start_ms=chunk.interval_start_ms)


def _assert_checkpoints_follow_the_sink(spec: TrialSpec, config: PipelineConfig, doris: DorisServer,
                                        produced: Produced) -> None:  # fmt: skip
    """I4 after the faulty run: a range marked LOADED, or a shard whose high-water mark moved, has
    every record of the shard in Doris (the trial's records all lie in its one interval)."""
    store = dynamo_store(aws_client("dynamodb", config.aws.dynamodb_endpoint_url), CHECKPOINT_TABLE,
                                  config.pipeline_id)  # fmt: skip
    time.sleep(0.25)  # a Publish Timeout load becomes visible a moment later
    delivered = set(table_ids(doris, config.doris_table)) | set(dead_letter_ids(doris, config.dead_letter_table))
    for shard in store.ledger.list_shard_checkpoints():
        loaded = any(r.state is RangeState.LOADED for r in store.ranges.ranges_for_shard(shard.shard_id))
        if loaded or shard.high_water_mark is not None:
            ids = {i for (shard_id, _), i in produced.position_of.items() if shard_id == shard.shard_id}
            missing = sorted(ids - delivered)
            assert not missing, f"{spec}: shard {shard.shard_id} checkpointed before records {missing} were in Doris"


def table_ids(doris: DorisServer, table: str) -> list[int]:
    return [int(row[0]) for row in doris.execute_sql(DB, f"SELECT event_id FROM `{table}`")]


def dead_letter_ids(doris: DorisServer, table: str) -> list[int]:
    found = []
    for (payload,) in doris.execute_sql(DB, f"SELECT payload_base64 FROM `{table}`"):
        match = _MARKER.search(base64.b64decode(payload))
        assert match, f"dead letter without a marker: {payload}"
        found.append(int(match.group(1)))
    return found


def create_tables(doris: DorisServer, table: str, model: str) -> None:
    doris.execute_sql("", f"CREATE DATABASE IF NOT EXISTS {DB}")
    doris.execute_sql(DB, events_table_ddl(table, model))
    doris.execute_sql(DB, dead_letter_ddl(f"{table}_dead_letter"))


def new_names(seed: int) -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:6]
    return f"proof-{seed}-{suffix}", f"proof_{seed}_{suffix}"


def run_trial(spec: TrialSpec, stack: Stack, configure: Callable[[PipelineConfig], PipelineConfig] = lambda c: c) -> TrialResult:
    """Produce, run with the fault, recover, and compare what Doris holds with what was produced.

    :param configure: changes the trial's pipeline config (to show what a misconfiguration costs).
    """
    stream, table = new_names(spec.seed)
    kinesis = aws_client("kinesis", stack.kinesis_endpoint)
    create_stream(kinesis, stream, 1 if spec.reshard == "split" else 2)
    try:
        return _trial_on(stream, table, spec, stack, configure)
    finally:
        # kinesis-mock counts the shards of every stream against one limit (500).
        kinesis.delete_stream(StreamName=stream, EnforceConsumerDeletion=True)


def _trial_on(stream: str, table: str, spec: TrialSpec, stack: Stack,
              configure: Callable[[PipelineConfig], PipelineConfig]) -> TrialResult:  # fmt: skip
    doris = stack.doris_short_labels if spec.fault == LABEL_EXPIRED else stack.doris
    create_tables(doris, table, spec.model)
    produced, start, end = produce(aws_client("kinesis", stack.kinesis_endpoint), stream, spec)
    config = pipeline_config(stack, doris, stream, table, model=spec.model, chunk_rows=spec.chunk_rows)
    if spec.fault == "slow":
        config = replace(config, doris=replace(config.doris, read_timeout_seconds=SLOW_READ_TIMEOUT_SECONDS))
    config = configure(config)
    consumer = ensure_consumer(aws_client("kinesis", stack.kinesis_endpoint), stream, EFO_CONSUMER) \
        if "efo" in spec.read_modes else None
    in_mode = {mode: replace(config, efo_consumer_arn=consumer if mode == "efo" else None) for mode in set(spec.read_modes)}
    config = in_mode[spec.read_modes[0]]
    armed = arm(spec, stack, doris, config)
    failures = _fault_phase(spec, config, start, end, armed, stack)
    fired = armed.fired()
    armed.disarm()
    _assert_checkpoints_follow_the_sink(spec, config, doris, produced)
    if spec.fault == LABEL_EXPIRED:
        time.sleep(SHORT_LABEL_KEEP_SECONDS + 0.3)
    last, recovery_errors, unresolvable = _recover(in_mode[spec.read_modes[1]], start, end, stack, doris, produced,
                                                   spec.read_modes[1])  # fmt: skip
    time.sleep(0.25)  # a Publish Timeout load becomes visible a moment later
    delivered = table_ids(doris, table) + dead_letter_ids(doris, f"{table}_dead_letter")
    # Rows a UNIQUE table replaced leave no row behind; the stand-in counts every application.
    reapplied = doris.applied_row_count(DB, table) - len(table_ids(doris, table))
    delivery = Delivery.compare(produced.ids, delivered, reapplied=reapplied)
    return TrialResult(spec, delivery, fired, failures + recovery_errors, unresolvable, last)


def record(tally: ProofTally, result: TrialResult) -> None:
    tally.add(str(result.spec), result.spec.fault, result.fired, result.delivery, unresolvable=result.unresolvable,
              failures=[type(error).__name__ for error in result.errors], cell=result.spec.cell)  # fmt: skip
