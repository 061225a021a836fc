"""Benchmark: the loader end to end against the floor of the local stack.

One run starts kinesalite (volume), moto (DynamoDB) and the Doris stand-in as child processes on
loopback, and for N records (then N/10):

0. starts Spark on a new JVM with a job without ranges: a fresh task's start, measured apart;
1. produces N JSON records of about ``--record-bytes`` into a fresh 4-shard stream;
2. measures the floor, a bare client: a boto3 GetRecords loop over every shard (``Limit=10000``)
   and a Stream Load of the same bytes in the same chunks (``requests`` PUT straight to the BE),
   with the CPU seconds each took in this process;
3. runs ``run_interval`` with the Spark runner on ``local[2]``, then in this process
   (``run_here``; fresh pipeline id and table, so the second run really loads), with the CPU
   seconds of the loader's process tree (this process, the JVM, Spark's Python workers) and, for
   the in-process run, a py-spy sampling profile split into read / decode+map / load / bookkeeping;
   at N, then in this process again with enhanced fan-out (``SubscribeToShard`` through the
   devstack's ``EfoServer``; fresh pipeline id and table) on the same interval;
4. (at N) runs an interval without new data, which must not start Spark;
5. loads a small interval (``--auto-records``) with ``runner=SparkOrInProcess()`` and times it from the end
   of planning.

It prints a table and, last, one JSON line with the figures and the targets of the hot path.
``KINESIS_DORIS_PROFILE_DIR`` (read by ``spark/source.py``) makes every Spark partition dump a
cProfile file there.

Usage::

    .venv/bin/python benchmarks/run.py [--records 1000000] [--record-bytes 200] [--chunk-rows 100000] [--json-out F]
"""

from __future__ import annotations

import argparse
import http.client
import json
import logging
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests

from airflow_provider_kinesis_doris.core.aws_clients import lean_client_config
from airflow_provider_kinesis_doris.core.stores.dynamodb import dynamo_store
from airflow_provider_kinesis_doris.core.chunks import cut_chunks
from airflow_provider_kinesis_doris.core.model import ChunkLimits
from airflow_provider_kinesis_doris.core.load_job import LoadJob
from airflow_provider_kinesis_doris.core.settings import AwsSettings, Credentials
from airflow_provider_kinesis_doris.core.report import RangeReport
from airflow_provider_kinesis_doris.core.model import KinesisRecord, Position
from airflow_provider_kinesis_doris.core.concurrency import DEFAULT_DRIVER_CONCURRENCY
from airflow_provider_kinesis_doris.core.load import run_here
from airflow_provider_kinesis_doris.core.pipeline import PipelineConfig, run_interval
from airflow_provider_kinesis_doris.core.runner_choice import AutoRunner
from airflow_provider_kinesis_doris.core.kinesis.consumer import ensure_consumer
from airflow_provider_kinesis_doris.core.kinesis.reader import MAX_RECORDS_PER_CALL
from airflow_provider_kinesis_doris.core.kinesis.shard_pages import arrival_ms
from airflow_provider_kinesis_doris.core.doris.client import DorisStreamLoadClient
from airflow_provider_kinesis_doris.core.doris.options import StreamLoadOptions
from airflow_provider_kinesis_doris.core.doris.connection import DorisConnectionConfig, RetryPolicy
from airflow_provider_kinesis_doris.core.mapping import RecordMapping, map_record
from airflow_provider_kinesis_doris.spark.runner import SparkSettings, run_spark_job
from kinesis_doris_devstack.efo_server import EfoServer
from kinesis_doris_devstack.quiet_server import QuietThreadingHTTPServer
from kinesis_doris_devstack.scenario import create_stream, now_ms, put_records, sealed_end, wait_past
from kinesis_doris_devstack.stack import LocalStack, ServiceProcess, local_client

log = logging.getLogger("benchmark")

SHARDS = 4
PRODUCERS = 2
DATABASE = "bench"
CHECKPOINT_TABLE = "bench_checkpoints"
REGION = "us-east-1"
SENTINEL_KEY = "sentinel"
MAPPING = RecordMapping(
    metadata_columns=("_kinesis_shard", "_kinesis_sequence", "_kinesis_arrival"), required_fields=("event_id",)
)
TABLE_DDL = """CREATE TABLE `{table}` (
    event_id BIGINT NOT NULL, user_id VARCHAR(32) NULL, amount INT NULL, note STRING NULL,
    _kinesis_shard VARCHAR(64) NULL, _kinesis_sequence VARCHAR(80) NULL, _kinesis_arrival BIGINT NULL
) DUPLICATE KEY(event_id) DISTRIBUTED BY HASH(event_id) BUCKETS 1 PROPERTIES ("replication_num" = "1")"""
DEAD_LETTER_DDL = """CREATE TABLE `{table}` (
    stream_name VARCHAR(128) NOT NULL, shard_id VARCHAR(64) NOT NULL, sequence_number VARCHAR(64) NOT NULL,
    sub_sequence_number INT NOT NULL, arrival_ms BIGINT NULL, partition_key VARCHAR(256) NULL,
    reason STRING NULL, payload_base64 STRING NULL
) DUPLICATE KEY(stream_name, shard_id, sequence_number) DISTRIBUTED BY HASH(shard_id) BUCKETS 1
PROPERTIES ("replication_num" = "1")"""
RESULT_KEYS = (
    "records", "e2e_s", "raw_read_s", "raw_load_s", "ratio_e2e_to_floor", "spark_fixed_cost_s",
    "empty_interval_s", "empty_interval_started_spark", "peak_rss_mb", "peak_rss_small_mb",
    "peak_rss_loader_mb", "peak_rss_loader_small_mb", "peak_rss_loader_parts_mb", "get_records_calls_per_shard",
    "get_records_min_per_shard", "get_records_ratio", "small", "load_average",
    "empty_interval_probe_s", "chunk_rows", "cpu_share", "in_process_s", "cpu_us_per_record",
    "cpu_ratio_to_bare", "cpu_s_loader_parts", "cpu_split_in_process", "auto_small", "targets",
    "cpu_us_per_record_marginal", "cpu_ratio_to_bare_marginal", "cpu_s_fixed", "spark_cold_start",
    "ratio_e2e_with_cold_start_to_floor", "polling_records_per_s", "polling_get_records_calls_per_shard",
    "efo_records_per_s", "efo_subscribe_calls_per_shard", "efo_get_records_calls_per_shard", "efo_events_sent",
    "efo_rows_match",
)  # fmt: skip
LOADER_PARTS = ("driver", "jvm", "python_workers")
"""The loader's process tree: this process, Spark's JVM, Spark's Python daemon and workers."""
TARGETS = {"cpu_ratio_to_bare_max": 1.25, "ratio_e2e_to_floor_max": 1.25, "auto_small_s_max": 2.0}
IN_PROCESS = "in_process"
SPARK_MASTER = "local[2]"


# --- memory and CPU of the process tree ---------------------------------------------------------


class RssSampler:
    """Samples the resident memory of this process and all its descendants every ``interval`` s.

    ``window()`` yields a dict that, once the block ends, holds the peak of the whole tree
    (``tree_mb``), of the tree without the local stack's services (``loader_mb``) and of each of
    its ``LOADER_PARTS`` (``<part>_mb``), the loader's CPU seconds in all and per part
    (``cpu_s_<part>``), and per service and for the loader the CPU seconds used per second of the
    block (``cpu_<name>``: 1.0 is one core busy throughout, the ceiling of a single-threaded server).

    :param services: name → PID of the emulators and the stand-in (roots of their subtrees).
    """

    def __init__(self, services: Mapping[str, int], interval: float = 0.2) -> None:
        self._services = dict(services)
        self._excluded_roots = set(services.values())
        self._interval = interval
        self._page_kb = os.sysconf("SC_PAGE_SIZE") // 1024
        self._peaks = self._no_peaks()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    @contextmanager
    def window(self) -> Iterator[dict[str, float]]:
        with self._lock:
            self._peaks = self._no_peaks()
        result: dict[str, float] = {}
        cpu_before, parts_before = cpu_seconds(self._services), loader_cpu_by_part(self._services)
        started = time.perf_counter()
        try:
            yield result
        finally:
            self._sample()
            elapsed = time.perf_counter() - started
            cpu_after, parts_after = cpu_seconds(self._services), loader_cpu_by_part(self._services)
            with self._lock:
                result.update({name: round(value, 1) for name, value in self._peaks.items()})
            result.update({f"cpu_{name}": round((cpu_after[name] - cpu_before[name]) / elapsed, 2) for name in cpu_after})
            result["cpu_s_loader"] = round(cpu_after["loader"] - cpu_before["loader"], 2)
            result.update({f"cpu_s_{part}": round(parts_after[part] - parts_before[part], 2) for part in LOADER_PARTS})

    @staticmethod
    def _no_peaks() -> dict[str, float]:
        return {"tree_mb": 0.0, "loader_mb": 0.0, **{f"{part}_mb": 0.0 for part in LOADER_PARTS}}

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._sample()

    def _sample(self) -> None:
        sizes = self._tree_rss_mb()
        with self._lock:
            for name, size in sizes.items():
                self._peaks[name] = max(self._peaks[name], size)

    def _tree_rss_mb(self) -> dict[str, float]:
        parts = loader_parts(self._services)
        children = children_by_parent()
        sizes_kb = dict.fromkeys(self._peaks, 0)
        pending = [os.getpid()]
        while pending:
            pid = pending.pop()
            kb = self._rss_kb(pid)
            sizes_kb["tree_mb"] += kb
            if pid in parts:
                sizes_kb["loader_mb"] += kb
                sizes_kb[f"{parts[pid]}_mb"] += kb
            pending.extend(children.get(pid, ()))
        return {name: kb / 1024 for name, kb in sizes_kb.items()}

    def _rss_kb(self, pid: int) -> int:
        try:
            with open(f"/proc/{pid}/statm") as handle:
                return int(handle.read().split()[1]) * self._page_kb
        except (OSError, IndexError, ValueError):
            return 0  # the process ended between the listing and the read


def cpu_seconds(services: Mapping[str, int]) -> dict[str, float]:
    """User + system CPU seconds used so far by each service's process tree and by the rest of this
    process's tree (``loader``: this process, the JVM, Spark's Python workers), reaped children
    included."""
    children = children_by_parent()
    owner_of = {pid: name for name, pid in services.items()}
    totals = dict.fromkeys([*services, "loader"], 0.0)
    ticks = os.sysconf("SC_CLK_TCK")
    pending = [(os.getpid(), "loader")]
    while pending:
        pid, owner = pending.pop()
        if _command_name(pid) == "py-spy":
            continue  # the benchmark's profiler, not the loader
        owner = owner_of.get(pid, owner)
        totals[owner] += _cpu_ticks(pid) / ticks
        pending.extend((child, owner) for child in children.get(pid, ()))
    return totals


def loader_parts(services: Mapping[str, int]) -> dict[int, str]:
    """The loader's processes (this process's tree without the services and a profiler), each
    with its part of ``LOADER_PARTS``."""
    children = children_by_parent()
    skipped = set(services.values())
    parts: dict[int, str] = {}
    pending = [os.getpid()]
    while pending:
        pid = pending.pop()
        name = _command_name(pid)
        if pid in skipped or name == "py-spy":
            continue
        parts[pid] = "driver" if pid == os.getpid() else "jvm" if name == "java" else "python_workers"
        pending.extend(children.get(pid, ()))
    return parts


def loader_cpu_by_part(services: Mapping[str, int]) -> dict[str, float]:
    """CPU seconds used so far by the loader's live processes, per part (a process that already
    ended counts in its parent's reaped children: Spark's workers end with their JVM)."""
    ticks = os.sysconf("SC_CLK_TCK")
    totals = dict.fromkeys(LOADER_PARTS, 0.0)
    for pid, part in loader_parts(services).items():
        totals[part] += _cpu_ticks(pid, with_children=pid != os.getpid()) / ticks
    return totals


def _command_name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def _cpu_ticks(pid: int, *, with_children: bool = True) -> int:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0  # the process ended between the listing and the read
    # utime, stime, cutime, cstime (fields 14-17; the split starts at field 3).
    return sum(int(value) for value in fields[11 : 15 if with_children else 13])


def children_by_parent() -> dict[int, list[int]]:
    """PID → its children's PIDs, for every process /proc lists now."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                # The command name is in parentheses and may contain spaces: split after it.
                parent = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry))
    return children


# --- the stack and the data ----------------------------------------------------------------------


@dataclass
class Stack:
    """Clients and addresses of the running local stack."""

    kinesis: Any
    dynamodb: Any
    doris: DorisStreamLoadClient
    doris_service: ServiceProcess
    aws: AwsSettings

    @property
    def be_url(self) -> str:
        return f"http://127.0.0.1:{self.doris_service.extra['be_port']}"

    @property
    def password(self) -> str:
        return str(self.doris_service.extra["password"])

    @property
    def user(self) -> str:
        return str(self.doris_service.extra["user"])


@dataclass(frozen=True)
class Interval:
    """A sealed interval holding ``records`` records, followed by ``[end_ms, quiet_end_ms)`` holding none."""

    stream: str
    start_ms: int
    end_ms: int
    quiet_end_ms: int
    records: int


def payload(event_id: int, record_bytes: int) -> bytes:
    """A JSON event of about ``record_bytes`` bytes (padded by its ``note``)."""
    head = {"event_id": event_id, "user_id": f"user-{event_id % 17}", "amount": event_id % 1000, "note": ""}
    padding = max(record_bytes - len(json.dumps(head, separators=(",", ":"))), 0)
    head["note"] = "x" * padding
    return json.dumps(head, separators=(",", ":")).encode()


def put_events(kinesis: Any, stream: str, event_ids: range, record_bytes: int) -> list[dict[str, Any]]:
    return put_records(kinesis, stream, ((f"pk-{i}", payload(i, record_bytes)) for i in event_ids))


def produce(stack: Stack, stream: str, records: int, record_bytes: int) -> Interval:
    """Create a 4-shard stream and put ``records`` events into it inside one sealed interval, then,
    after a quiet interval, one sentinel record per shard.

    The sentinels are there because kinesalite never answers GetShardIterator AT_TIMESTAMP for an
    instant after a shard's last record (AWS returns an iterator at the tip): the planner's
    boundary probe at the loaded interval's end would hang without them (the quiet interval's end
    is then carried forward from that boundary, without a probe). They are never loaded.
    """
    shards = create_stream(stack.kinesis, stream, SHARDS)
    start = now_ms()
    wait_past(start)
    # Two producers: one encodes and signs while the emulator stores the other's batch.
    shares = [range(first, records, PRODUCERS) for first in range(PRODUCERS)]
    with ThreadPoolExecutor(max_workers=PRODUCERS) as pool:
        results = [entry for put in pool.map(lambda ids: put_events(stack.kinesis, stream, ids, record_bytes), shares)
                   for entry in put]  # fmt: skip
    end = sealed_end(stack.kinesis, stream, results)
    quiet_end = end + 50
    wait_past(quiet_end)
    for shard in stack.kinesis.list_shards(StreamName=stream)["Shards"]:
        stack.kinesis.put_record(
            StreamName=stream, PartitionKey=SENTINEL_KEY, Data=payload(-1, record_bytes),
            ExplicitHashKey=shard["HashKeyRange"]["StartingHashKey"],
        )  # fmt: skip
    assert len(shards) == SHARDS
    return Interval(stream, start, end, quiet_end, records)


# --- the floor -----------------------------------------------------------------------------------


@dataclass
class RawRead:
    seconds: float
    cpu_s: float
    calls_per_shard: dict[str, int]
    pages: dict[str, list[list[dict[str, Any]]]] = field(repr=False)


@dataclass(frozen=True)
class RawLoad:
    seconds: float
    cpu_s: float


def raw_read(kinesis: Any, stream: str) -> RawRead:
    """Every shard from TRIM_HORIZON to its tip with plain GetRecords calls (``Limit=10000``), by a
    plain boto3 client; its CPU seconds are this thread's (the RSS sampler's are not counted)."""
    shard_ids = [shard["ShardId"] for shard in kinesis.list_shards(StreamName=stream)["Shards"]]
    calls: dict[str, int] = {}
    pages: dict[str, list[list[dict[str, Any]]]] = {}
    started, cpu_started = time.perf_counter(), time.thread_time()
    for shard_id in shard_ids:
        iterator = kinesis.get_shard_iterator(StreamName=stream, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON")[
            "ShardIterator"
        ]
        calls[shard_id], pages[shard_id] = 0, []
        while iterator:
            response = kinesis.get_records(ShardIterator=iterator, Limit=MAX_RECORDS_PER_CALL)
            calls[shard_id] += 1
            if response["Records"]:
                pages[shard_id].append(response["Records"])
            elif response.get("MillisBehindLatest") == 0:
                break
            iterator = response.get("NextShardIterator")
    return RawRead(time.perf_counter() - started, time.thread_time() - cpu_started, calls, pages)


def chunk_bodies(read: RawRead, mapping: RecordMapping, limits: ChunkLimits) -> list[bytes]:
    """The loader's Stream Load bodies for what ``read`` returned: same lines, same chunk cuts."""
    bodies = []
    for shard_id, pages in read.pages.items():
        records = (
            KinesisRecord(
                shard_id, Position(int(raw["SequenceNumber"]), 0), arrival_ms(raw["ApproximateArrivalTimestamp"]),
                raw["PartitionKey"], raw["Data"],
            )
            for page in pages
            for raw in page
            if raw["PartitionKey"] != SENTINEL_KEY
        )  # fmt: skip
        mapped = (map_record(record, mapping) for record in records)
        bodies.extend(chunk.body for chunk in cut_chunks(mapped, limits))
    return bodies


def raw_load(stack: Stack, table: str, bodies: Sequence[bytes]) -> RawLoad:
    """PUT every body straight to the BE under its own label, one after the other."""
    url = f"{stack.be_url}/api/{DATABASE}/{table}/_stream_load"
    headers = {"format": "json", "read_json_by_line": "true", "group_commit": "off_mode"}
    started, cpu_started = time.perf_counter(), time.thread_time()
    with requests.Session() as session:
        for index, body in enumerate(bodies):
            response = session.put(
                url, data=body, auth=(stack.user, stack.password), timeout=600,
                headers={**headers, "label": f"raw-{table}-{index}"},
            )  # fmt: skip
            reply = response.json()
            if reply.get("Status") != "Success":
                raise RuntimeError(f"raw Stream Load {index} into {table} failed: {reply}")
    return RawLoad(time.perf_counter() - started, time.thread_time() - cpu_started)


# --- the loader ----------------------------------------------------------------------------------


@dataclass
class LoaderRun:
    master: str
    seconds: float
    runner_seconds: float
    spark_fixed_cost_s: float
    rows_loaded: int
    calls_per_shard: dict[str, int]
    records_per_shard: dict[str, int]
    rss: dict[str, float]
    split: dict[str, float] = field(default_factory=dict)
    subscribe_calls_per_shard: dict[str, int] = field(default_factory=dict)
    table: str = ""


HOT_PATH_PARTS = (
    ("/core/kinesis/", "read"),
    ("/core/mapping.py", "decode_map"),
    ("/core/chunks.py", "decode_map"),
    ("/core/doris/", "load"),
)
"""Where a sample's innermost frame of this package lies → its part; any other is bookkeeping
(the chunk log, labels, planning, the commit)."""
SPLIT_PARTS = ("read", "decode_map", "load", "bookkeeping")


@contextmanager
def sampled(folder: Path, rate: int = 250) -> Iterator[dict[str, float]]:
    """py-spy samples this process's busy threads while the block runs; afterwards the dict holds
    the share of the loader's samples in each of ``SPLIT_PARTS`` (empty without py-spy, which
    ``make bench`` installs, or where it may not attach)."""
    executable = shutil.which("py-spy", path=os.path.dirname(sys.executable)) or shutil.which("py-spy")
    split: dict[str, float] = {}
    if executable is None:
        log.warning("py-spy is not installed: no split of the in-process CPU")
        yield split
        return
    out = folder / f"py-spy-{time.monotonic_ns()}.txt"
    profiler = subprocess.Popen(  # noqa: S603 - a fixed command line of our own
        [executable, "record", "--pid", str(os.getpid()), "--rate", str(rate), "--format", "raw",
         "--nonblocking", "--output", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    time.sleep(1.0)  # attached before the work starts
    try:
        yield split
    finally:
        profiler.send_signal(signal.SIGINT)
        _, errors = profiler.communicate(timeout=120)
        if out.exists():
            split.update(split_samples(out.read_text()))
        else:
            log.warning("py-spy wrote no profile: %s", errors[-500:])


def split_samples(raw: str) -> dict[str, float]:
    """Shares of ``SPLIT_PARTS`` among py-spy's raw samples (``frame;frame;... count`` lines),
    leaving out the benchmark's own threads."""
    counts = dict.fromkeys(SPLIT_PARTS, 0)
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if "airflow_provider_kinesis_doris/" not in stack:
            continue  # the benchmark's own threads (the RSS sampler)
        ours = next((frame for frame in reversed(frames) if "airflow_provider_kinesis_doris/" in frame), "")
        part = next((name for prefix, name in HOT_PATH_PARTS if prefix in ours), "bookkeeping")
        counts[part] += int(count)
    total = sum(counts.values()) or 1
    return {part: round(counts[part] / total, 3) for part in SPLIT_PARTS}


class TimedRunner:
    """The Spark runner on ``master``, or the in-process one (``IN_PROCESS``), timed."""

    def __init__(self, master: str) -> None:
        self.master = master
        self.settings = None if master == IN_PROCESS else SparkSettings(master=master)
        self.started = 0.0
        self.seconds = 0.0
        self.reports: list[RangeReport] = []

    def __call__(self, job: LoadJob, credentials: Credentials) -> list[RangeReport]:
        self.started = time.perf_counter()
        if self.settings is None:
            self.reports = run_here(job, credentials)
        else:
            self.reports = run_spark_job(job, credentials, self.settings)
        self.seconds = time.perf_counter() - self.started
        return self.reports

    def fixed_cost(self, slots: int) -> float:
        """Runner time not spent inside range loads: session, planning, workers, collect.

        The task work is the sum of range seconds spread over ``slots`` (ranges are equal-sized).
        """
        work = sum(report.seconds for report in self.reports)
        return self.seconds - work / min(slots, max(len(self.reports), 1))


def pipeline_config(stack: Stack, stream: str, table: str, chunk_limits: ChunkLimits) -> PipelineConfig:
    return PipelineConfig(
        pipeline_id=f"{stream}.{DATABASE}.{table}",
        stream_name=stream,
        checkpoint_table=CHECKPOINT_TABLE,
        doris_database=DATABASE,
        doris_table=table,
        dead_letter_table=f"{table}_dead_letter",
        doris=DorisConnectionConfig(host="127.0.0.1", port=stack.doris.config.port, user=stack.user),
        aws=stack.aws,
        load_options=StreamLoadOptions.json_lines(),
        mapping=MAPPING,
        chunk_max_rows=chunk_limits.chunk_max_rows,
        chunk_max_bytes=chunk_limits.chunk_max_bytes,
        retry_policy=RetryPolicy(max_attempts=3, initial_backoff_seconds=0.5, max_backoff_seconds=2),
    )


def create_tables(stack: Stack, table: str) -> None:
    stack.doris.run_sql(DATABASE, TABLE_DDL.format(table=table))
    stack.doris.run_sql(DATABASE, DEAD_LETTER_DDL.format(table=f"{table}_dead_letter"))


def run_loader(
    stack: Stack, interval: Interval, table: str, master: str, limits: ChunkLimits, sampler: RssSampler, folder: Path,
    reading: Callable[[PipelineConfig], PipelineConfig] | None = None,
) -> tuple[LoaderRun, PipelineConfig]:
    """``run_interval`` over ``interval`` into a fresh table with the Spark runner on ``master`` or
    in this process (``IN_PROCESS``, sampled by py-spy); ``reading`` changes how the loaders read
    (enhanced fan-out)."""
    create_tables(stack, table)
    config = pipeline_config(stack, interval.stream, table, limits)
    if reading is not None:
        config = reading(config)
    runner = TimedRunner(master)
    # The profiler outlives the window, so that its own CPU (it is reaped into this process's
    # children's time when it ends) stays out of the loader's.
    with sampled(folder) if master == IN_PROCESS else nullcontext({}) as split, sampler.window() as rss:
        started = time.perf_counter()
        result = run_interval(config, interval.start_ms, interval.end_ms, **_world(stack, config), runner=runner)
        seconds = time.perf_counter() - started
    summary = result.summary()
    if summary["loaded"] != interval.records:
        raise RuntimeError(f"{master} loaded {summary['loaded']} of {interval.records} records into {table}")
    slots = DEFAULT_DRIVER_CONCURRENCY if master == IN_PROCESS else int(master.strip("local[]") or 1)
    run = LoaderRun(
        master, seconds, runner.seconds, runner.fixed_cost(slots), summary["loaded"],
        per_shard(result.reports, "get_records_calls"), per_shard(result.reports, "records"), rss, split,
        per_shard(result.reports, "subscribe_calls"), table,
    )  # fmt: skip
    return run, config


def per_shard(reports: Sequence[RangeReport], figure: str) -> dict[str, int]:
    """``figure`` of the range reports summed per shard."""
    totals: dict[str, int] = {}
    for report in reports:
        totals[report.shard_id] = totals.get(report.shard_id, 0) + getattr(report, figure)
    return totals


def _world(stack: Stack, config: PipelineConfig) -> dict[str, Any]:
    return {
        "kinesis": stack.kinesis,
        "store": dynamo_store(stack.dynamodb, config.checkpoint_table, config.pipeline_id),
        "credentials": Credentials(doris_password=stack.password, aws_access_key_id="local", aws_secret_access_key="local"),
    }


@dataclass(frozen=True)
class EmptyInterval:
    """The quiet interval: its seconds, the seconds of the emulator's timestamp probes alone, and
    whether it started a Spark session."""

    seconds: float
    probe_seconds: float
    started_spark: bool


def empty_interval(stack: Stack, config: PipelineConfig, interval: Interval) -> EmptyInterval:
    """Run the quiet interval after ``interval`` (it holds no record) with no Spark session running before."""
    from pyspark.sql import SparkSession

    stop_spark()
    probe_s = timestamp_probe_seconds(stack.kinesis, interval.stream, interval.quiet_end_ms)
    log.info("GetShardIterator AT_TIMESTAMP on all shards: %.2fs", probe_s)
    started = time.perf_counter()
    result = run_interval(
        config, interval.end_ms, interval.quiet_end_ms, **_world(stack, config), runner=TimedRunner("local[2]")
    )
    seconds = time.perf_counter() - started
    if result.summary()["records"]:
        raise RuntimeError(f"the quiet interval of {interval.stream} read {result.summary()['records']} records")
    return EmptyInterval(seconds, probe_s, SparkSession.getActiveSession() is not None)


def timestamp_probe_seconds(kinesis: Any, stream: str, instant_ms: int) -> float:
    """Seconds the emulator takes to open one AT_TIMESTAMP iterator per shard: the planner's
    boundary probe, the part of an empty interval that grows with what the shard holds."""
    started = time.perf_counter()
    for shard in kinesis.list_shards(StreamName=stream)["Shards"]:
        kinesis.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="AT_TIMESTAMP",
            Timestamp=datetime.fromtimestamp(instant_ms / 1000, tz=timezone.utc),
        )  # fmt: skip
    return time.perf_counter() - started


def stop_spark(workers_timeout_s: float = 60.0) -> None:
    """Stop this process's Spark session so the next run starts one on another master, and wait
    for its Python workers to end: one still ending in the next run's window would move its CPU
    from the workers' part to the JVM's there (on a loaded machine it took seconds)."""
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is not None:
        session.stop()
    deadline = time.monotonic() + workers_timeout_s
    while spark_python_workers() and time.monotonic() < deadline:
        time.sleep(0.1)


def spark_python_workers() -> list[int]:
    """PIDs of the processes under this process's JVMs: Spark's Python workers."""
    children = children_by_parent()
    workers: list[int] = []
    pending = [(os.getpid(), False)]
    while pending:
        pid, under_jvm = pending.pop()
        if under_jvm:
            workers.append(pid)
        under_jvm = under_jvm or _command_name(pid) == "java"
        pending.extend((child, under_jvm) for child in children.get(pid, ()))
    return workers


# --- one size ------------------------------------------------------------------------------------


@dataclass
class SizeResult:
    records: int
    produce_s: float
    raw: RawRead
    raw_load: RawLoad
    runs: dict[str, LoaderRun]
    config: PipelineConfig | None = None
    interval: Interval | None = None
    efo: EfoRun | None = None

    @property
    def e2e(self) -> LoaderRun:
        return self.runs[SPARK_MASTER]

    @property
    def ratio(self) -> float:
        return self.e2e.seconds / max(self.raw.seconds, self.raw_load.seconds)

    def bare_cpu_us(self) -> float:
        """The bare client's CPU per record: its GetRecords loop plus its Stream Load PUTs."""
        return (self.raw.cpu_s + self.raw_load.cpu_s) / self.records * 1e6

    def loader_cpu_us(self, runner: str, spark_start_cpu_s: float = 0.0) -> float:
        """The loader's process tree's CPU per record in the run on ``runner``, a Spark run's with
        ``spark_start_cpu_s`` (the JVM's start, which the measured runs share) added."""
        start = spark_start_cpu_s if runner != IN_PROCESS else 0.0
        return (self.runs[runner].rss["cpu_s_loader"] + start) / self.records * 1e6

    def min_calls(self) -> dict[str, int]:
        """ceil(records/10000) pages with records plus the one empty page at the tip, per shard."""
        return {shard: math.ceil(n / MAX_RECORDS_PER_CALL) + 1 for shard, n in self.e2e.records_per_shard.items()}

    def calls_ratio(self) -> float:
        minimum = self.min_calls()
        return max(self.e2e.calls_per_shard[shard] / minimum[shard] for shard in minimum)


def run_size(
    stack: Stack, records: int, record_bytes: int, limits: ChunkLimits, tag: str, sampler: RssSampler, folder: Path
) -> SizeResult:
    """Steps 1-3 for ``records`` records."""
    stream = f"bench-{tag}"
    started = time.perf_counter()
    interval = produce(stack, stream, records, record_bytes)
    produce_s = time.perf_counter() - started
    log.info("produced %d records in %.1fs", records, produce_s)
    raw = raw_read(stack.kinesis, stream)
    log.info("raw read %.1fs (%.1f CPU-s), calls %s", raw.seconds, raw.cpu_s, raw.calls_per_shard)
    bodies = chunk_bodies(raw, MAPPING, limits)
    raw.pages.clear()
    raw_table = f"raw_{tag}"
    create_tables(stack, raw_table)
    loaded = raw_load(stack, raw_table, bodies)
    log.info("raw load of %d bodies %.1fs (%.1f CPU-s)", len(bodies), loaded.seconds, loaded.cpu_s)
    del bodies
    result = SizeResult(records, produce_s, raw, loaded, {}, interval=interval)
    for master in (SPARK_MASTER, IN_PROCESS):
        stop_spark()
        table = f"events_{tag}_{master.strip('local[]')}"
        run, config = run_loader(stack, interval, table, master, limits, sampler, folder)
        log.info("%s: %.1fs (runner %.1fs), loader %.1f CPU-s", master, run.seconds, run.runner_seconds, run.rss["cpu_s_loader"])
        result.runs[master] = run
        if master == SPARK_MASTER:
            result.config = config
    return result


def spark_cold_start(stack: Stack, limits: ChunkLimits, sampler: RssSampler) -> dict[str, float]:
    """What a fresh task's Spark start costs before its first record: a job without ranges on a new
    JVM (the measured runs after it reuse that JVM, each with a new session and Python workers)."""
    config = pipeline_config(stack, "bench-start", "start", limits)
    with sampler.window() as rss:
        started = time.perf_counter()
        run_spark_job(LoadJob(config, (), ()), _world(stack, config)["credentials"], SparkSettings(master=SPARK_MASTER))
        seconds = time.perf_counter() - started
    stop_spark()
    return {"seconds": round(seconds, 2), "cpu_s": rss["cpu_s_loader"], **{part: rss[f"cpu_s_{part}"] for part in LOADER_PARTS}}


@dataclass(frozen=True)
class AutoSmall:
    """A small interval loaded with ``runner=SparkOrInProcess()``: where, and how long after planning."""

    records: int
    runner: str
    estimated_records: int
    s_after_planning: float


def auto_small(stack: Stack, records: int, record_bytes: int, limits: ChunkLimits) -> AutoSmall:
    """Step 5: ``records`` records in a fresh stream, loaded by ``AutoRunner`` with no Spark session
    running before; seconds from the end of planning (the runner's start) to the end of the commit."""
    stop_spark()
    interval = produce(stack, "bench-auto", records, record_bytes)
    create_tables(stack, "events_auto")
    config = pipeline_config(stack, interval.stream, "events_auto", limits)
    world = _world(stack, config)
    spark, in_process = TimedRunner(SPARK_MASTER), TimedRunner(IN_PROCESS)
    auto = AutoRunner(world["store"], spark=spark, in_process=in_process)
    result = run_interval(config, interval.start_ms, interval.end_ms, **world, runner=auto)
    finished = time.perf_counter()
    if result.summary()["loaded"] != records or auto.choice is None:
        raise RuntimeError(f"runner=SparkOrInProcess() loaded {result.summary()['loaded']} of {records} records")
    chosen = spark if auto.choice.runner == "spark" else in_process
    return AutoSmall(records, auto.choice.runner, auto.choice.estimated_records, round(finished - chosen.started, 2))


# --- enhanced fan-out ----------------------------------------------------------------------------

CONSUMER_NAME = "bench-efo"
CONSUMER_OPERATIONS = ("RegisterStreamConsumer", "DescribeStreamConsumer")
JSON_CONTENT_TYPE = "application/x-amz-json-1.1"
# Headers of one HTTP hop (or of a body the shim may rewrite): never passed on as they came.
HOP_HEADERS = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "host"})


@contextmanager
def consumer_shim(upstream: str) -> Iterator[str]:
    """A loopback proxy in front of kinesalite (yields its endpoint) with what the ``EfoServer``
    needs of its upstream and kinesalite (3.3) lacks: stream consumers (registered ``ACTIVE`` at
    once, described by ARN or by name) and calls naming their stream by ``StreamARN`` (the
    server's ``GetShardIterator`` and ``ListShards``), which it passes on by name. Every other
    request passes unchanged.

    The tests put the ``EfoServer`` in front of kinesis-mock, which has consumers, but kinesis-mock
    stores records far too slowly for this benchmark (about 600 records/s once it holds 10^4, and
    slower as it grows): this keeps the enhanced fan-out run on the very records the polling runs read.
    """
    parts = urlsplit(upstream)
    handler = _shim_handler((parts.hostname or "", parts.port or 80), Consumers())
    httpd = QuietThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, name="consumer-shim", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


class Consumers:
    """The shim's stream consumers, by ARN."""

    def __init__(self) -> None:
        self._consumers: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def call(self, operation: str, request: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        """Answer ``RegisterStreamConsumer`` or ``DescribeStreamConsumer`` as Kinesis does: status, body."""
        arn = request.get("ConsumerARN") or f"{request.get('StreamARN')}/consumer/{request.get('ConsumerName')}:1"
        with self._lock:
            known = self._consumers.get(arn)
            if operation == "DescribeStreamConsumer":
                if known is None:
                    return 400, {"__type": "ResourceNotFoundException", "message": f"Consumer {arn} not found."}
                return 200, {"ConsumerDescription": known}
            if known is not None:
                return 400, {"__type": "ResourceInUseException", "message": f"Consumer {arn} exists."}
            self._consumers[arn] = known = {
                "ConsumerName": request["ConsumerName"], "ConsumerARN": arn, "ConsumerStatus": "ACTIVE",
                "ConsumerCreationTimestamp": time.time(), "StreamARN": request["StreamARN"],
            }  # fmt: skip
        return 200, {"Consumer": {name: value for name, value in known.items() if name != "StreamARN"}}


def _shim_handler(upstream: tuple[str, int], consumers: Consumers) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the EfoServer polls over one connection
        upstream: http.client.HTTPConnection | None = None

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature of the base class
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            request = json.loads(body or b"{}")
            operation = self.headers.get("X-Amz-Target", "").rpartition(".")[2]
            if operation in CONSUMER_OPERATIONS:
                status, reply = consumers.call(operation, request)
                self._reply(status, [("Content-Type", JSON_CONTENT_TYPE)], json.dumps(reply).encode())
                return
            if "StreamARN" in request:
                request["StreamName"] = request.pop("StreamARN").split(":stream/", 1)[1]
                body = json.dumps(request).encode()
            headers = {name: value for name, value in self.headers.items() if name.lower() not in HOP_HEADERS}
            self._reply(*self._forward(body, headers))

        def _forward(self, body: bytes, headers: dict[str, str]) -> tuple[int, list[tuple[str, str]], bytes]:
            # kinesalite (Node's HTTP server) closes a keep-alive connection idle for 5 s: reopen it once.
            for attempt in range(2):
                if self.upstream is None:
                    self.upstream = http.client.HTTPConnection(*upstream, timeout=120)
                try:
                    self.upstream.request("POST", self.path, body=body, headers=headers)
                    response = self.upstream.getresponse()
                    return response.status, response.getheaders(), response.read()
                except (http.client.HTTPException, ConnectionError):
                    self.upstream.close()
                    self.upstream = None
                    if attempt:
                        raise
            raise AssertionError("unreachable")

        def _reply(self, status: int, headers: Sequence[tuple[str, str]], body: bytes) -> None:
            self.send_response(status)
            for name, value in headers:
                if name.lower() not in HOP_HEADERS:
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


@dataclass(frozen=True)
class EfoRun:
    """The in-process run at N again, its ranges read through a stream consumer (``SubscribeToShard``)."""

    run: LoaderRun
    events_sent: int
    rows_match: bool


def efo_run(stack: Stack, size: SizeResult, limits: ChunkLimits, sampler: RssSampler, folder: Path) -> EfoRun:
    """Step 3 with enhanced fan-out: ``size``'s interval in this process into a fresh table (a new
    pipeline id, so nothing is deduplicated against the polling runs), every range read through
    ``SubscribeToShard`` on a registered consumer, served by the devstack's ``EfoServer`` with
    AWS's subscription lifetime (5 minutes) and the server's default heartbeat."""
    assert size.interval is not None
    polling = size.runs[IN_PROCESS]
    with consumer_shim(stack.aws.kinesis_endpoint_url) as shim, EfoServer(shim, subscription_seconds=300) as efo:
        consumer_arn = ensure_consumer(local_client("kinesis", efo.endpoint), size.interval.stream, CONSUMER_NAME)

        def through_consumer(config: PipelineConfig) -> PipelineConfig:
            aws = replace(config.aws, kinesis_endpoint_url=efo.endpoint)
            return replace(config, aws=aws, efo_consumer_arn=consumer_arn)

        run, _ = run_loader(stack, size.interval, f"{polling.table}_efo", IN_PROCESS, limits, sampler, folder,
                            through_consumer)  # fmt: skip
        events_sent = efo.events_sent
    log.info("%s with enhanced fan-out: %.1fs, SubscribeToShard %s, %d events", IN_PROCESS, run.seconds,
             run.subscribe_calls_per_shard, events_sent)  # fmt: skip
    # The loader's count could agree while the rows differ (one lost, another doubled): compare
    # what the two tables hold too.
    digests = table_digest(stack, run.table), table_digest(stack, polling.table)
    rows_match = run.rows_loaded == polling.rows_loaded and digests[0] == digests[1]
    return EfoRun(run, events_sent, rows_match)


def table_digest(stack: Stack, table: str) -> tuple[Any, ...]:
    """Rows, distinct events and distinct Kinesis positions of ``table``, and the sum of its events' ids."""
    query = ("SELECT COUNT(*), COUNT(DISTINCT event_id), COUNT(DISTINCT _kinesis_sequence), SUM(event_id) "
             f"FROM `{table}`")  # fmt: skip
    return tuple(stack.doris.run_sql(DATABASE, query).rows[0])


# --- report --------------------------------------------------------------------------------------


def summarize(
    big: SizeResult, small: SizeResult, empty: EmptyInterval, auto: AutoSmall, cold_start: dict[str, float],
    load_average: list[float], limits: ChunkLimits,
) -> dict[str, Any]:
    bare = big.bare_cpu_us()
    # A fresh Airflow task pays the JVM's start too: the Spark run's figure includes it.
    per_record = {runner: round(big.loader_cpu_us(runner, cold_start["cpu_s"]), 1) for runner in big.runs}
    ratios = {runner: round(value / bare, 2) for runner, value in per_record.items()}
    # What one more record costs, apart from each run's fixed cost (sessions, processes, imports,
    # planning): the slope between the two sizes of the same run.
    added = big.records - small.records
    bare_marginal = (big.raw.cpu_s + big.raw_load.cpu_s - small.raw.cpu_s - small.raw_load.cpu_s) / added * 1e6
    marginal = {runner: (big.runs[runner].rss["cpu_s_loader"] - small.runs[runner].rss["cpu_s_loader"]) / added * 1e6
                for runner in big.runs}  # fmt: skip
    marginal_ratios = {runner: round(value / bare_marginal, 2) for runner, value in marginal.items()}
    result = {
        "records": big.records,
        "chunk_rows": limits.chunk_max_rows,
        "e2e_s": round(big.e2e.seconds, 2),
        "in_process_s": round(big.runs[IN_PROCESS].seconds, 2),
        "raw_read_s": round(big.raw.seconds, 2),
        "raw_load_s": round(big.raw_load.seconds, 2),
        "ratio_e2e_to_floor": round(big.ratio, 2),
        # At most what a fresh task's Spark run takes: the measured run reused a warm JVM.
        "ratio_e2e_with_cold_start_to_floor": round(
            (big.e2e.seconds + cold_start["seconds"]) / max(big.raw.seconds, big.raw_load.seconds), 2
        ),
        "spark_fixed_cost_s": round(statistics.median(s.e2e.spark_fixed_cost_s for s in (big, small)), 2),
        "empty_interval_s": round(empty.seconds, 2),
        "empty_interval_probe_s": round(empty.probe_seconds, 2),
        "empty_interval_started_spark": empty.started_spark,
        # CPU seconds per record: the bare client (boto3 GetRecords + requests PUT, this thread)
        # and the loader's whole process tree in each run.
        "cpu_us_per_record": {
            "bare": round(bare, 1),
            "bare_read": round(big.raw.cpu_s / big.records * 1e6, 1),
            "bare_load": round(big.raw_load.cpu_s / big.records * 1e6, 1),
            **per_record,
        },
        "cpu_ratio_to_bare": ratios,
        "cpu_us_per_record_marginal": {"bare": round(bare_marginal, 1), **{r: round(v, 1) for r, v in marginal.items()}},
        "cpu_ratio_to_bare_marginal": marginal_ratios,
        "cpu_s_fixed": {runner: round(big.runs[runner].rss["cpu_s_loader"] - value * big.records / 1e6
                                      + (cold_start["cpu_s"] if runner == SPARK_MASTER else 0), 1)
                        for runner, value in marginal.items()},  # fmt: skip
        "spark_cold_start": cold_start,
        "cpu_s_loader_parts": _parts_cpu_s(big),
        "cpu_split_in_process": big.runs[IN_PROCESS].split,
        "peak_rss_mb": big.e2e.rss["tree_mb"],
        "peak_rss_small_mb": small.e2e.rss["tree_mb"],
        "peak_rss_loader_mb": big.e2e.rss["loader_mb"],
        "peak_rss_loader_small_mb": small.e2e.rss["loader_mb"],
        "peak_rss_loader_parts_mb": _parts_mb(big),
        # CPU seconds per second of each run at N, per process tree: which one saturates a core.
        "cpu_share": {master: _cpu_share(run) for master, run in big.runs.items()},
        "get_records_calls_per_shard": big.e2e.calls_per_shard,
        "get_records_min_per_shard": big.min_calls(),
        "get_records_ratio": round(big.calls_ratio(), 3),
        **_efo_beside_polling(big),
        "auto_small": {"records": auto.records, "runner": auto.runner, "estimated_records": auto.estimated_records,
                       "s_after_planning": auto.s_after_planning},  # fmt: skip
        "small": {
            "records": small.records,
            "e2e_s": round(small.e2e.seconds, 2),
            "in_process_s": round(small.runs[IN_PROCESS].seconds, 2),
            "raw_read_s": round(small.raw.seconds, 2),
            "raw_load_s": round(small.raw_load.seconds, 2),
            "ratio_e2e_to_floor": round(small.ratio, 2),
            "get_records_ratio": round(small.calls_ratio(), 3),
            "cpu_us_per_record": {"bare": round(small.bare_cpu_us(), 1),
                                  **{runner: round(small.loader_cpu_us(runner, cold_start["cpu_s"]), 1) for runner in small.runs}},  # fmt: skip
            "peak_rss_loader_parts_mb": _parts_mb(small),
            "cpu_s_loader_parts": _parts_cpu_s(small),
        },
        # 1-minute load average at the start and the end: the machine is shared, read figures with it.
        "load_average": load_average,
    }
    result["targets"] = {
        **TARGETS,
        "cpu_ratio_to_bare_met": {runner: ratio <= TARGETS["cpu_ratio_to_bare_max"] for runner, ratio in ratios.items()},
        "cpu_ratio_to_bare_marginal_met": {
            runner: ratio <= TARGETS["cpu_ratio_to_bare_max"] for runner, ratio in marginal_ratios.items()
        },
        "ratio_e2e_to_floor_met": result["ratio_e2e_to_floor"] <= TARGETS["ratio_e2e_to_floor_max"],
        "auto_small_met": auto.runner == "in_process" and auto.s_after_planning <= TARGETS["auto_small_s_max"],
    }
    return result


def _efo_beside_polling(size: SizeResult) -> dict[str, Any]:
    """The in-process runs at N, polling and enhanced fan-out, on the same records: their records
    per second (of ``run_interval``, planning and commit included) and calls per shard."""
    assert size.efo is not None
    polling, efo = size.runs[IN_PROCESS], size.efo.run
    return {
        "polling_records_per_s": round(size.records / polling.seconds),
        "polling_get_records_calls_per_shard": polling.calls_per_shard,
        "efo_records_per_s": round(size.records / efo.seconds),
        "efo_subscribe_calls_per_shard": efo.subscribe_calls_per_shard,
        # Range reads go through the subscription only: any GetRecords here is a regression.
        "efo_get_records_calls_per_shard": efo.calls_per_shard,
        "efo_events_sent": size.efo.events_sent,
        "efo_rows_match": size.efo.rows_match,
    }


def _parts_mb(size: SizeResult) -> dict[str, dict[str, float]]:
    return {runner: {part: run.rss[f"{part}_mb"] for part in LOADER_PARTS} for runner, run in size.runs.items()}


def _parts_cpu_s(size: SizeResult) -> dict[str, dict[str, float]]:
    return {runner: {part: run.rss[f"cpu_s_{part}"] for part in LOADER_PARTS} for runner, run in size.runs.items()}


def _cpu_share(run: LoaderRun) -> dict[str, float]:
    return {name.removeprefix("cpu_"): value for name, value in run.rss.items() if name.startswith("cpu_") and not name.startswith("cpu_s_")}


def print_table(sizes: Sequence[SizeResult], empty: EmptyInterval, auto: AutoSmall, cold_start: dict[str, float]) -> None:
    print(f"{'records':>9} {'produce':>8} {'raw read':>9} {'raw load':>9} {'e2e L2':>8} {'fixed L2':>9} "
          f"{'in-proc':>8} {'ratio':>6} {'GR calls/min':>13} {'RSS tree':>9} {'RSS loader':>11}")  # fmt: skip
    for size in sizes:
        l2, here = size.runs[SPARK_MASTER], size.runs[IN_PROCESS]
        calls = sum(l2.calls_per_shard.values())
        print(
            f"{size.records:>9} {size.produce_s:>7.1f}s {size.raw.seconds:>8.1f}s {size.raw_load.seconds:>8.1f}s "
            f"{l2.seconds:>7.1f}s {l2.spark_fixed_cost_s:>8.1f}s {here.seconds:>7.1f}s "
            f"{size.ratio:>6.2f} {calls:>6}/{sum(size.min_calls().values()):<6} {l2.rss['tree_mb']:>7.0f}MB "
            f"{l2.rss['loader_mb']:>9.0f}MB"
        )
        print(f"{'':>9} CPU µs per record: bare {size.bare_cpu_us():.1f}, "
              + ", ".join(f"{runner} {size.loader_cpu_us(runner, cold_start['cpu_s']):.1f}" for runner in size.runs))  # fmt: skip
        for master, run in size.runs.items():
            print(f"{'':>9} {master}: CPU-s by part {[run.rss[f'cpu_s_{p}'] for p in LOADER_PARTS]}, "
                  f"peak MB by part {[run.rss[f'{p}_mb'] for p in LOADER_PARTS]} ({', '.join(LOADER_PARTS)})"
                  + (f", split {run.split}" if run.split else ""))  # fmt: skip
        if size.efo is not None:
            efo = size.efo.run
            print(f"{'':>9} {IN_PROCESS} with enhanced fan-out: {efo.seconds:.1f}s "
                  f"({size.records / efo.seconds:.0f} records/s, polling {size.records / here.seconds:.0f}), "
                  f"SubscribeToShard {efo.subscribe_calls_per_shard}, GetRecords {efo.calls_per_shard}, "
                  f"{size.efo.events_sent} events, rows match: {size.efo.rows_match}")  # fmt: skip
    print(f"interval without new data: {empty.seconds:.2f}s (timestamp probes {empty.probe_seconds:.2f}s), "
          f"started Spark: {empty.started_spark}")  # fmt: skip
    print(f"Spark's cold start (a job without ranges on a new JVM), counted in each Spark run's CPU per record: {cold_start}")
    print(f"runner=SparkOrInProcess(), {auto.records} records: {auto.runner} (estimate {auto.estimated_records}), "
          f"{auto.s_after_planning:.2f}s after planning")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records at full size (N/10 runs too)")
    parser.add_argument("--record-bytes", type=int, default=200, help="approximate JSON size of a record")
    parser.add_argument("--chunk-rows", type=int, default=ChunkLimits().chunk_max_rows, help="rows per Stream Load")
    parser.add_argument("--auto-records", type=int, default=10_000, help="records of the runner=SparkOrInProcess() interval")
    parser.add_argument("--state-dir", type=Path, default=None, help="logs of the local stack (default: a temp dir)")
    parser.add_argument("--json-out", type=Path, default=None, help="also write the final JSON line here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log.setLevel(logging.INFO)
    state_dir = args.state_dir or Path(tempfile.mkdtemp(prefix="kinesis-doris-bench-"))
    load_average = [round(os.getloadavg()[0], 2)]
    limits = ChunkLimits(chunk_max_rows=args.chunk_rows)
    with LocalStack(state_dir, services=["kinesalite", "dynamodb", "doris"]) as local:
        stack = connect(local)
        services = {name: service.pid for name, service in local.running.items()}
        with RssSampler(services) as sampler:
            cold_start = spark_cold_start(stack, limits, sampler)
            log.info("Spark's cold start: %s", cold_start)
            big = run_size(stack, args.records, args.record_bytes, limits, "n", sampler, state_dir)
            assert big.config is not None and big.interval is not None
            big.efo = efo_run(stack, big, limits, sampler, state_dir)
            empty = empty_interval(stack, big.config, big.interval)
            small_n = max(args.records // 10, 1)
            small = run_size(stack, small_n, args.record_bytes, limits, "n10", sampler, state_dir)
            auto = auto_small(stack, args.auto_records, args.record_bytes, limits)
        stop_spark()
        stack.doris.close()
    load_average.append(round(os.getloadavg()[0], 2))
    result = summarize(big, small, empty, auto, cold_start, load_average, limits)
    print_table((big, small), empty, auto, cold_start)
    line = json.dumps(result, sort_keys=True)
    if args.json_out:
        args.json_out.write_text(line + "\n")
    print(line)
    return 0


def connect(local: LocalStack, kinesis_service: str = "kinesalite") -> Stack:
    """Clients of the running ``local`` stack, with the bench database and checkpoint table made."""
    kinesis_endpoint = local.running[kinesis_service].endpoint
    dynamodb_endpoint = local.running["dynamodb"].endpoint
    doris = local.running["doris"]
    client = DorisStreamLoadClient(
        DorisConnectionConfig(
            host="127.0.0.1", port=int(doris.extra["fe_port"]), user=str(doris.extra["user"]),
            password=str(doris.extra["password"]),
        )
    )  # fmt: skip
    client.run_sql("information_schema", f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
    # The clients the operator's hook builds for the driver: the pipeline's options over botocore's.
    dynamodb = local_client("dynamodb", dynamodb_endpoint, lean_client_config())
    dynamo_store(dynamodb, CHECKPOINT_TABLE, "bench").items.create_table_if_missing()
    return Stack(
        kinesis=local_client("kinesis", kinesis_endpoint, lean_client_config()),
        dynamodb=dynamodb,
        doris=client,
        doris_service=doris,
        aws=AwsSettings(REGION, kinesis_endpoint, dynamodb_endpoint),
    )


if __name__ == "__main__":
    raise SystemExit(main())
