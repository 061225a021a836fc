"""Scaling benchmark: what one interval costs the control plane as the shard count grows.

For each shard count it creates a fresh stream on kinesis-mock, puts ``--records-per-shard``
records into every shard within one interval, then runs ``run_interval`` in the task's process
(no Spark) for that loaded interval and for the quiet interval after it, counting every AWS call
the process makes by operation (botocore's ``_make_api_call``, in every client and thread).

One JSON line per shard count: seconds of the loaded and the quiet interval, AWS calls per shard
by operation (GetRecords calls that returned records are counted apart: they are the data path,
not the control plane), the seconds spent inside each operation's calls (summed over the driver's
threads: where the interval's time goes), DynamoDB write calls, checkpoint items per shard, and
the driver's peak RSS, and the CPU seconds each process of the stack used during each run (``cpu_s_*``:
on the 2-core machine, a run whose CPU seconds add up to twice its wall time waited for the CPU).
Each count has a checkpoint table of its own (moto's Query reads its whole table).

Two recurring intervals show the steady state of a pipeline with data flowing, its start cut
stored by the run before and records in it: ``steady`` has records after it too (its end cuts
are records), ``tip`` none (every shard's end cut is at the tip: a quiet or slow shard at seal
time). ``--shapes`` picks them; both by default.

Then a history line: ``--history-intervals`` consecutive intervals of one small stream, each
followed by a pruning that keeps the last ``--history-keep`` intervals (what the hourly pruning
keeps, one retention period and label window, scaled down), with the checkpoint items per shard
before and after each pruning. A last JSON line holds the targets and whether each is met.

With ``--aws-model`` (``make bench-shards-aws``) every interval runs through
``benchmarks/aws_model.py``: AWS's latency per operation and its call limits, on a clock without
the emulators' service time. Each line then also has ``*_aws_s`` (seconds on that clock) and
``throttled_*`` (calls refused by AWS's limits), ``conflicts_*`` (writes a transaction in flight
refused), ``slow_*`` (calls that took the latency tail's time), and PASS/FAIL lines judge issue 37's targets at the
largest shard count.

With ``--processes N`` the loads run in N loader processes (``InProcessRunner(processes=N)``); each
counts its calls and, under the model, runs one of its own (:class:`LoaderProcesses`). Every line
has ``phase_s_*``: the interval's seconds in the plan, the loads, the commit and the rest.

With ``--runner spark`` the loads run in Spark on ``--spark-master`` (:class:`SparkWorkers`): its
Python workers count their calls and, under the model, run one of their own, and the master's
cores find each plan's cuts ahead in as many loader processes, as the operator's ``SparkRunner`` on
a local master does. This process starts its session once, before the first count
(``spark_session_start_s``); before each interval it judges with a Spark job (the first and the
recurring ones), once the emulators are idle, a fresh task's Spark start is measured in a process of
its own with the product's settings (``spark_cold_start_s_<shape>``). The verdicts add it to the
interval when it ran a Spark job, as a fresh Airflow task pays it.

Usage (from the repository root; ``make bench-shards`` runs the default)::

    .venv/bin/python -m benchmarks.shards [--shards 4,64,256] [--records-per-shard 5] [--interval-s 10]
        [--driver-concurrency 8] [--shapes steady,tip] [--history-intervals 12] [--history-keep 3] [--json-out F]
        [--aws-model] [--processes N] [--runner spark] [--spark-master local[2]]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import botocore.client

from airflow_provider_kinesis_doris.core.model import ChunkLimits
from airflow_provider_kinesis_doris.core.concurrency import DEFAULT_DRIVER_CONCURRENCY
from airflow_provider_kinesis_doris.core.kinesis.topology import list_shards
from airflow_provider_kinesis_doris.core.settings import Credentials
from airflow_provider_kinesis_doris.core.load import run_here
from airflow_provider_kinesis_doris.core.load_job import LoadJob
from airflow_provider_kinesis_doris.core.report import RangeReport
from airflow_provider_kinesis_doris.core import load, loader_processes, pipeline
from airflow_provider_kinesis_doris.core.loader_processes import find_cuts_in_processes, run_in_processes
from airflow_provider_kinesis_doris.core.pipeline import PipelineConfig, Runner, run_interval
from airflow_provider_kinesis_doris.core.prune import prune_shards
from airflow_provider_kinesis_doris.core.stores.dynamodb import dynamo_store
from airflow_provider_kinesis_doris.spark.runner import SparkSettings, local_cores, run_spark_job
from benchmarks.aws_model import AwsModel, LatencyTail, VirtualClock
from benchmarks.run import CHECKPOINT_TABLE, SPARK_MASTER, Stack, _cpu_ticks, connect, cpu_seconds, create_tables, pipeline_config
from kinesis_doris_devstack.scenario import create_stream, wait_past
from kinesis_doris_devstack.stack import LocalStack

log = logging.getLogger("benchmark.shards")

WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"})
DATA_PAGES = "GetRecords (with records)"
TARGET_SHARDS = 256
RECURRING_SHAPES = ("steady", "tip")
"""The recurring interval's shapes: records after its end (``steady``), or none, so every shard's
end cut is at the tip (``tip``: a quiet or slow shard at seal time)."""
TARGETS = {
    "calls_per_shard_loaded_max": 6,
    "calls_per_shard_steady_max": 6,
    "calls_per_shard_quiet_max": 3,
    "quiet_s_max": 10.0,
    "loaded_s_max": 20.0,
    "steady_s_max": 20.0,
    "growth_16_to_256_max": 4.0,
    "steady_growth_16_to_256_max": 4.0,
    "tip_to_steady_s_max": 1.5,
}
"""The issue's targets; a loaded interval is measured twice: a new pipeline's first (``loaded``,
with what only a shard's first interval costs) and a later one (``steady``), each against them."""
AWS_TARGETS: Mapping[str, tuple[str, float]] = {
    "steady_aws_s": ("recurring interval with records, records after its end (s, in process)", 20.0),
    "tip_aws_s": ("recurring interval with records, its end at the tip (s, in process)", 20.0),
    "quiet_aws_s": ("quiet interval (s)", 10.0),
    "control_calls_per_shard_loaded": ("control calls per shard, first interval", 6),
    "control_calls_per_shard_steady": ("control calls per shard, recurring, records after its end", 3),
    "control_calls_per_shard_tip": ("control calls per shard, recurring, its end at the tip", 3),
    "control_calls_per_shard_quiet": ("control calls per shard, quiet interval", 3),
    "steady_aws_growth_from_16": ("growth of the recurring interval from 16 shards (x)", 8.0),
    "tip_to_steady_aws": ("tip / records after the end, recurring interval (x)", 1.5),
}
"""Issue 37's targets under the AWS model (``--aws-model``), judged at the largest shard count run:
what each figure is, and its maximum."""
INTERVAL_TARGETS_S: Mapping[str, Mapping[str, float]] = {
    "in process": {"loaded": 40.0, "quiet": 5.0, "steady": 15.0, "tip": 20.0},
    "spark": {"loaded": 60.0, "quiet": 5.0, "steady": 30.0, "tip": 35.0},
}
"""Issue 46's targets at 1,000 shards under the AWS model, by runner: each interval's modelled
seconds; with Spark as a fresh task pays them (its Spark start included), and the quiet
interval starts no Spark job."""
INTERVAL_NAMES = {
    "loaded": "first interval", "quiet": "quiet interval",
    "steady": "recurring interval, records after its end", "tip": "recurring interval, its end at the tip",
}  # fmt: skip
MODEL_COUNTS = ("throttled", "conflicts", "slow", "sent")
"""What the AWS model counts by operation: calls its limits refused, writes a transaction in flight
refused, calls that took the latency tail's time, and every call that passed it."""
LOADER_PROCESSES_ENV = "KD_BENCH_LOADER_PROCESSES"
"""Set by the benchmark for its loader processes (``--processes``): where they report, whether the
AWS model runs in them and whether calls are counted by caller, as JSON. Multiprocessing's children
import the main module of the process that started them; this one reads it then (its last lines)."""
SPARK_WORKERS_ENV = "KD_BENCH_SPARK_WORKERS"
"""Set by the benchmark's Spark runner (``--runner spark``) before Spark starts, for its Python
workers (``benchmarks/spark_daemon.py``): where they report, whether the AWS model runs in them and
whether calls are counted by caller, as JSON."""
EMULATOR_LOCK = "emulator.lock"
"""The file in the loader processes' report folder that lets one call at a time of every process
of the run go to the emulators (``VirtualClock``)."""


class CallCounter:
    """Counts the AWS operations this process calls while :meth:`counting` is open, and, with
    ``by_caller``, which function of the pipeline asked for each (the innermost frame of
    ``airflow_provider_kinesis_doris`` outside the store and the shard-page client, which only
    carry the call)."""

    def __init__(self, *, by_caller: bool = False) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] | None = None
        self.seconds: Counter[str] = Counter()
        """Seconds spent inside the calls of each operation (summed over the pool's threads)
        during the last :meth:`counting`: where an interval's time goes."""
        self._original = botocore.client.BaseClient._make_api_call
        self._by_caller = by_caller

    def install(self) -> None:
        counter, original = self, self._original

        def counted(client: Any, operation: str, params: dict[str, Any]) -> Any:
            started = time.perf_counter()
            response = original(client, operation, params)
            name = DATA_PAGES if operation == "GetRecords" and response.get("Records") else operation
            counter._count(f"{name} <- {_caller()}" if counter._by_caller else name, name, time.perf_counter() - started)
            return response

        botocore.client.BaseClient._make_api_call = counted  # type: ignore[method-assign]

    def uninstall(self) -> None:
        botocore.client.BaseClient._make_api_call = self._original  # type: ignore[method-assign]

    @property
    def by_caller(self) -> bool:
        return self._by_caller

    def _count(self, key: str, operation: str, seconds: float) -> None:
        with self._lock:
            if self._counts is not None:
                self._counts[key] += 1
                self.seconds[operation] += seconds

    @contextmanager
    def counting(self) -> Iterator[Counter[str]]:
        counts: Counter[str] = Counter()
        with self._lock:
            self._counts, self.seconds = counts, Counter()
        try:
            yield counts
        finally:
            with self._lock:
                self._counts = None


def _caller() -> str:
    for frame in reversed(traceback.extract_stack()[:-2]):
        path = frame.filename.replace("\\", "/")
        if "airflow_provider_kinesis_doris/" in path and not any(skip in path for skip in _CARRIERS):
            module = path.rsplit("airflow_provider_kinesis_doris/", 1)[1].removesuffix(".py").replace("/", ".")
            return f"{module}.{frame.name}"
    return "?"


_CARRIERS = ("/core/stores/", "/core/kinesis/shard_pages.py", "/core/retry.py")


@dataclass
class LoadsElsewhere:
    """What one interval's loader processes did, from their reports, by phase: ``plan`` (the ends
    of new ranges found ahead) and ``load``."""

    waited_s: Counter[str] = field(default_factory=Counter)
    """The driver's modelled seconds while it waited for them (its clock runs on meanwhile)."""
    slowest_s: Counter[str] = field(default_factory=Counter)
    """Each run of processes' slowest process, on its own clock, summed over the interval."""
    calls: Counter[str] = field(default_factory=Counter)
    counts: dict[str, Counter[str]] = field(default_factory=lambda: {kind: Counter() for kind in MODEL_COUNTS})

    def add(self, phase: str, reports: Sequence[Mapping[str, Any]], waited_s: float) -> None:
        self.waited_s[phase] += waited_s
        self.slowest_s[phase] += max((report["aws_s"] for report in reports), default=0.0)
        for report in reports:
            self.calls.update(report["calls"])
            for kind in MODEL_COUNTS:
                self.counts[kind].update(report.get(kind, {}))


class LoaderProcesses:
    """The benchmark's loader processes (``InProcessRunner(processes=N)``): each counts its own
    calls and, under the AWS model, runs a model of its own on a clock of its own, and writes what
    it counted into ``reports`` as it ends (:func:`_in_a_loader_process`). An interval's modelled
    time is then the driver's clock without its wait for them, plus each load's slowest process:
    the driver and each loader with a CPU of its own, as on AWS with a core for each."""

    def __init__(self, processes: int, reports: Path, *, aws_model: bool, by_caller: bool) -> None:
        reports.mkdir(parents=True, exist_ok=True)
        self.processes, self.reports = processes, reports
        # Before the first load starts the fork server, whose environment its children take.
        os.environ[LOADER_PROCESSES_ENV] = json.dumps({"reports": str(reports), "aws_model": aws_model, "by_caller": by_caller})

    @contextmanager
    def watching(self, model: AwsModel | None) -> Iterator[LoadsElsewhere]:
        """Each load of the interval meanwhile, with its processes' reports, into what it yields."""
        elsewhere, original = LoadsElsewhere(), loader_processes._in_children
        clock = model.clock.now if model else time.perf_counter

        def watched(work: Any, *args: Any, **kwargs: Any) -> Any:
            for stale in self.reports.glob("*.json"):
                stale.unlink()
            started = clock()
            try:
                return original(work, *args, **kwargs)
            finally:  # the processes have ended: their reports are written
                reports = [json.loads(path.read_text()) for path in self.reports.glob("*.json")]
                phase = "plan" if work is loader_processes._find_cuts_here else "load"
                elsewhere.add(phase, reports, clock() - started)

        loader_processes._in_children = watched
        try:
            yield elsewhere
        finally:
            loader_processes._in_children = original


def _in_a_loader_process(settings: Mapping[str, Any]) -> None:
    """The benchmark in one of its loader processes, as it starts: its calls counted and, under the
    AWS model, run through a model of its own; what it counted is written once its share is loaded."""
    reports = Path(settings["reports"])
    calls, model, within = _measures_of_this_process(settings, reports)
    started = model.clock.now() if model else 0.0

    def reporting(work: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                return work(*args, **kwargs)
            finally:
                figures = {"calls": dict(calls), "aws_s": model.clock.now() - started if model else 0.0,
                           **{kind: dict(count) for kind, count in _model_counts(model).items()}}  # fmt: skip
                within.close()
                (reports / f"{os.getpid()}.json").write_text(json.dumps(figures))

        return run

    # Not at the process's exit: multiprocessing clears the finalizers registered before its start.
    # A process either loads its share or finds the plan's cuts for its share.
    loader_processes.load_share_here = reporting(loader_processes.load_share_here)
    loader_processes.find_cuts = reporting(loader_processes.find_cuts)


class SparkWorkers:
    """The benchmark's Spark runner (``--runner spark``): ``run_spark_job`` on a local master, its
    Python workers started by ``benchmarks/spark_daemon.py``, so each counts its calls and, under
    the AWS model, runs a model of its own on a clock of its own; each range group writes what it
    counted as it ends (:func:`_in_spark_workers`). A Spark job's modelled time is then its real
    time outside the ranges (Spark's fixed cost: the data source's planning, task scheduling, the
    workers' task starts, as this machine pays it) plus the ranges' time on the clock of the worker
    whose ranges took the longest, in place of their real time."""

    def __init__(self, master: str, reports: Path, *, aws_model: bool, by_caller: bool) -> None:
        reports.mkdir(parents=True, exist_ok=True)
        self.reports = reports
        # Before Spark starts: its JVM, and the Python workers it starts, take this environment.
        os.environ[SPARK_WORKERS_ENV] = json.dumps({"reports": str(reports), "aws_model": aws_model, "by_caller": by_caller})
        self.settings = SparkSettings(master=master, conf={"spark.python.daemon.module": "benchmarks.spark_daemon"})
        self.into: LoadsElsewhere | None = None
        """Where the next jobs' figures go (the interval being measured); nowhere when None."""
        self.jobs = 0
        """Spark jobs run so far, the one of :meth:`start` aside."""
        self.empty: LoadJob | None = None
        """The job without ranges that :meth:`start` and :meth:`fresh_start` run."""
        self.credentials: Credentials | None = None
        self.session_start_s: float | None = None
        """The seconds this process's own session took to start (with the counting daemon)."""

    def start(self, config: PipelineConfig, credentials: Credentials) -> None:
        """Starts this process's session with a job without ranges, as a fresh task's first job
        does: every later job of this process reuses it, as no fresh Airflow task can."""
        self.empty, self.credentials = LoadJob(config, (), ()), credentials
        started = time.perf_counter()
        run_spark_job(self.empty, credentials, self.settings)
        self.session_start_s = round(time.perf_counter() - started, 2)

    def fresh_start(self, services: Mapping[str, int]) -> float:
        """A fresh task's Spark start (:func:`fresh_task_spark_start`), once the emulators are idle:
        a task starts Spark after its plan, when the services (AWS's, on other machines in
        production) have nothing to do for it. Measured right after the emulators started, with
        kinesis-mock's JVM still warming up on the same cores, it took 19.7 s where 12 s is this
        machine's (docs/benchmarks.md)."""
        assert self.empty is not None and self.credentials is not None, "start() first"
        wait_until_idle(services)
        return fresh_task_spark_start(self.settings.master, self.empty, self.credentials)

    def __call__(self, job: LoadJob, credentials: Credentials) -> list[RangeReport]:
        for stale in self.reports.glob("*.jsonl"):
            stale.unlink()
        self.jobs += 1
        try:
            return run_spark_job(job, credentials, self.settings)
        finally:  # the job has ended: every range group's line is written
            if self.into is not None:
                workers = [_summed(path) for path in self.reports.glob("*.jsonl")]
                self.into.add("load", workers, max((worker["real_s"] for worker in workers), default=0.0))


def fresh_task_spark_start(master: str, job: LoadJob, credentials: Credentials) -> float:
    """The seconds of a fresh process's first Spark job (``job``, without ranges) on ``master``,
    with the product's own Spark settings (``benchmarks/spark_fresh_start.py``): the JVM, the
    session, the data source and the first Python workers a fresh Airflow task starts before its
    first range loads, without this benchmark's counting daemon or its session already up."""
    asked = json.dumps({"job": job.to_json(), "credentials": asdict(credentials), "master": master})
    completed = subprocess.run(  # noqa: S603 - our own module; the credentials go through stdin
        [sys.executable, "-m", "benchmarks.spark_fresh_start"], input=asked, capture_output=True, text=True,
        check=False, timeout=600, cwd=Path(__file__).resolve().parent.parent,
    )  # fmt: skip
    if completed.returncode != 0:
        raise RuntimeError(f"a fresh process's Spark start failed: {completed.stderr[-2000:]}")
    return float(json.loads(completed.stdout.splitlines()[-1])["seconds"])


IDLE_CPU_SHARE = 0.1
"""The emulators are idle when, together, they use less than this share of one core over a second."""


def wait_until_idle(services: Mapping[str, int], timeout_s: float = 60.0) -> None:
    """Return once ``services``' processes use less than ``IDLE_CPU_SHARE`` of a core over a second
    (or after ``timeout_s``, with a warning)."""
    deadline = time.monotonic() + timeout_s
    while True:
        before = cpu_seconds(services)
        time.sleep(1.0)
        after = cpu_seconds(services)
        used = sum(after[name] - before[name] for name in services)
        if used < IDLE_CPU_SHARE:
            return
        if time.monotonic() > deadline:
            log.warning("the emulators still use %.2f of a core after %.0f s: measuring anyway", used, timeout_s)
            return


def _summed(path: Path) -> dict[str, Any]:
    """One Spark worker's range groups, their figures added up."""
    total: dict[str, Any] = {"real_s": 0.0, "aws_s": 0.0, "calls": Counter(), **{kind: Counter() for kind in MODEL_COUNTS}}
    for text in path.read_text().splitlines():
        group = json.loads(text)
        total["real_s"] += group["real_s"]
        total["aws_s"] += group["aws_s"]
        for key in ("calls", *MODEL_COUNTS):
            total[key].update(group.get(key, {}))
    return total


def _in_spark_workers(settings: Mapping[str, Any]) -> None:
    """Spark's Python daemon of the benchmark's Spark runner, before it forks its first worker:
    each worker, at its first range group, counts its calls from then on and, under the AWS model,
    runs them through a model of its own (no thread may start before the daemon forks, so nothing
    is started here); each partition appends what it counted and its seconds, real and on the
    model's clock, to the worker's report (``<pid>.jsonl``)."""
    reports, original = Path(settings["reports"]), load.load_share_here
    measures: dict[int, tuple[Counter[str], AwsModel | None, ExitStack]] = {}

    def measured(job: LoadJob, share: load.Share, credentials: Credentials, lanes: int, where: str) -> list[RangeReport]:
        if os.getpid() not in measures:
            measures[os.getpid()] = _measures_of_this_process(settings, reports)
        calls, model, _ = measures[os.getpid()]
        calls_before, counts_before = Counter(calls), _model_counts(model)
        real_started, started = time.perf_counter(), model.clock.now() if model else 0.0
        try:
            return original(job, share, credentials, lanes, where)
        finally:
            group = {"real_s": time.perf_counter() - real_started, "aws_s": model.clock.now() - started if model else 0.0,
                     "calls": dict(Counter(calls) - calls_before),
                     **{kind: dict(count - counts_before[kind]) for kind, count in _model_counts(model).items()}}  # fmt: skip
            with (reports / f"{os.getpid()}.jsonl").open("a") as report:
                report.write(json.dumps(group) + "\n")

    load.load_share_here = measured


def _measures_of_this_process(
    settings: Mapping[str, Any], reports: Path
) -> tuple[Counter[str], AwsModel | None, ExitStack]:
    """A loader process's or Spark worker's call counts and AWS model, open until the stack that
    holds them closes: the caller keeps it (once collected, its contexts would close)."""
    within = ExitStack()
    counter = CallCounter(by_caller=settings["by_caller"])
    counter.install()
    calls = within.enter_context(counter.counting())
    model = None
    if settings["aws_model"]:
        # A seed of its own: the processes' slow calls are not the same calls.
        model = AwsModel(tail=LatencyTail(seed=os.getpid()), clock=VirtualClock(reports / EMULATOR_LOCK))
        within.enter_context(model.active())
    return calls, model, within


@contextmanager
def _timing_phases(clock: Callable[[], float]) -> Iterator[Counter[str]]:
    """Seconds on ``clock`` in the plan (``plan_interval``) and the commit (``commit_reports``) of
    the runs meanwhile, into what it yields; :func:`_phases` makes the rest of the interval's
    time the loads' and the driver's other work's."""
    spent: Counter[str] = Counter()
    originals = {"plan": pipeline.plan_interval, "commit": pipeline.commit_reports}

    def timed(phase: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            started = clock()
            try:
                return function(*args, **kwargs)
            finally:
                spent[phase] += clock() - started

        return run

    pipeline.plan_interval = timed("plan", originals["plan"])  # type: ignore[assignment]
    pipeline.commit_reports = timed("commit", originals["commit"])  # type: ignore[assignment]
    try:
        yield spent
    finally:
        pipeline.plan_interval, pipeline.commit_reports = originals["plan"], originals["commit"]  # type: ignore[assignment]


def _phases(spent: Mapping[str, float], load_s: float, total_s: float) -> dict[str, float]:
    """Where an interval's seconds went: the plan, the loads (with loader processes, the slowest
    process's of each load and what the driver did around them), the commit, and the rest (the
    stream's listing aside, the empty check, the load job, the label window's canary)."""
    phases = {"plan": spent["plan"], "load": load_s, "commit": spent["commit"]}
    return {name: round(seconds, 2) for name, seconds in {**phases, "other": total_s - sum(phases.values())}.items()}


def put_per_shard(kinesis: Any, stream: str, records_per_shard: int) -> int:
    """``records_per_shard`` records into every shard (each aimed at its shard's first hash key)."""
    shards = list_shards(kinesis, stream)  # every page: ListShards returns at most 100 shards a call
    entries = [
        {"Data": json.dumps({"event_id": n * len(shards) + i}).encode(), "PartitionKey": f"k{i}",
         "ExplicitHashKey": str(shard.starting_hash_key)}
        for i, shard in enumerate(shards) for n in range(records_per_shard)
    ]  # fmt: skip
    for first in range(0, len(entries), 500):
        reply = kinesis.put_records(StreamName=stream, Records=entries[first : first + 500])
        if reply.get("FailedRecordCount"):
            raise RuntimeError(f"{reply['FailedRecordCount']} records of {stream} were not put")
    return len(entries)


def measure(
    stack: Stack, counter: CallCounter, shards: int, records_per_shard: int, interval_ms: int, concurrency: int,
    services: Mapping[str, int], shapes: Sequence[str] = RECURRING_SHAPES, model: AwsModel | None = None,
    loaders: LoaderProcesses | None = None, spark: SparkWorkers | None = None,
) -> dict[str, Any]:
    """The figures of one shard count. With ``loaders``, the loads run in loader processes
    (``InProcessRunner(processes=...)``, ``concurrency`` lanes each), which also find each plan's
    cuts ahead; with ``spark``, the loads run in Spark instead (``spark_jobs_*``: the jobs an
    interval ran). The loaders' or Spark workers' calls are counted with the driver's, which are
    also counted apart (``driver_control_calls_per_shard_*``), and ``cpu_s_*`` tells the driver's
    CPU from the whole tree's (``loader``)."""
    processes = loaders.processes if loaders else 1
    runner = spark or partial(run_in_processes, processes=processes, lanes=concurrency)
    config = _fresh_pipeline(stack, f"scale-{shards}-{int(time.time())}", shards)
    stream = config.stream_name
    start = (int(time.time() * 1000) // interval_ms + 1) * interval_ms
    wait_past(start)
    produced = put_per_shard(stack.kinesis, stream, records_per_shard)
    if produced != shards * records_per_shard:
        raise RuntimeError(f"{shards} shards: put {produced} records, not {records_per_shard} into every shard")
    loaded = _interval(
        config, stack, counter, start, start + interval_ms, concurrency, services, model, runner, loaders, fresh_start=True
    )  # fmt: skip
    if loaded["records"] != produced:
        raise RuntimeError(f"{shards} shards: loaded {loaded['records']} of {produced} records")
    quiet = _interval(
        config, stack, counter, start + interval_ms, start + 2 * interval_ms, concurrency, services, model, runner, loaders
    )  # fmt: skip
    recurring, caught_up = {}, start + 2 * interval_ms
    for shape in shapes:
        recurring[shape], caught_up = _steady_interval(
            config, stack, counter, caught_up, interval_ms, records_per_shard, concurrency, services, model,
            records_after_end=shape == "steady", runner=runner, loaders=loaders,
        )  # fmt: skip
    loaded_calls, quiet_calls = _by_operation(loaded["calls"]), _by_operation(quiet["calls"])
    items = _item_count(stack, config)
    stack.kinesis.delete_stream(StreamName=stream)  # kinesis-mock's shard limit counts every stream
    return {
        "shards": shards,
        "driver_concurrency": concurrency,
        "loader_processes": processes,
        "runner": f"spark {spark.settings.master}" if spark else "in process",
        **({"spark_session_start_s": spark.session_start_s, "spark_cold_start_s_loaded": loaded["spark_cold_start_s"]}
           if spark else {}),
        "records": produced,
        "loaded_s": loaded["seconds"],
        "quiet_s": quiet["seconds"],
        "calls_per_shard_loaded": _per_shard(loaded_calls, shards),
        "calls_per_shard_quiet": _per_shard(quiet_calls, shards),
        "control_calls_per_shard_loaded": round(_control(loaded_calls) / shards, 2),
        "control_calls_per_shard_quiet": round(_control(quiet_calls) / shards, 2),
        "call_seconds_loaded": loaded["call_seconds"],
        "phase_s_loaded": loaded["phase_seconds"],
        "phase_s_quiet": quiet["phase_seconds"],
        "call_seconds_quiet": quiet["call_seconds"],
        "cpu_s_loaded": loaded["cpu_seconds"],
        "cpu_s_quiet": quiet["cpu_seconds"],
        **_modelled_figures("loaded", loaded),
        **_modelled_figures("quiet", quiet),
        **_driver_figures("loaded", loaded, shards),
        **_driver_figures("quiet", quiet, shards),
        **({"spark_jobs_loaded": loaded["spark_jobs"], "spark_jobs_quiet": quiet["spark_jobs"]} if spark else {}),
        **{key: value for shape, run in recurring.items() for key, value in _recurring_figures(shape, run, shards).items()},
        "dynamodb_items_written": sum(loaded_calls[op] + quiet_calls[op] for op in WRITES),
        "checkpoint_items_per_shard": round(items / shards, 2),
        "peak_rss_driver_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        **({"calls_per_shard_by_caller_loaded": _per_shard(loaded["calls"], shards),
            "calls_per_shard_by_caller_quiet": _per_shard(quiet["calls"], shards),
            **{f"calls_per_shard_by_caller_{shape}": _per_shard(run["calls"], shards) for shape, run in recurring.items()}}
           if counter.by_caller else {}),
    }


def _recurring_figures(shape: str, run: dict[str, Any], shards: int) -> dict[str, Any]:
    """The figures of one recurring interval, its keys named after its shape (``steady``: records
    after the interval's end; ``tip``: none, so every shard's end cut is at the tip)."""
    calls = _by_operation(run["calls"])
    return {
        f"{shape}_s": run["seconds"],
        f"calls_per_shard_{shape}": _per_shard(calls, shards),
        f"control_calls_per_shard_{shape}": round(_control(calls) / shards, 2),
        f"call_seconds_{shape}": run["call_seconds"],
        f"phase_s_{shape}": run["phase_seconds"],
        f"cpu_s_{shape}": run["cpu_seconds"],
        **_modelled_figures(shape, run),
        **_driver_figures(shape, run, shards),
        **({f"spark_jobs_{shape}": run["spark_jobs"]} if "spark_jobs" in run else {}),
        **({f"spark_cold_start_s_{shape}": run["spark_cold_start_s"]} if "spark_cold_start_s" in run else {}),
    }


def _modelled_figures(name: str, run: dict[str, Any]) -> dict[str, Any]:
    """Under the AWS model: the interval's seconds on the model's clock (the emulators' service time
    left out, AWS's latency in), with loader processes their loads' part of it (``loads_*_aws_s``)
    and the plan's cuts they found ahead (``cuts_*_aws_s``), and what the models counted by
    operation (``MODEL_COUNTS``); nothing without it."""
    if "aws_seconds" not in run:
        return {}
    loads = {f"loads_{name}_aws_s": run["loads_aws_seconds"], f"cuts_{name}_aws_s": run["cuts_aws_seconds"]} \
        if "loads_aws_seconds" in run else {}
    return {f"{name}_aws_s": run["aws_seconds"], **loads, **{f"{kind}_{name}": run[kind] for kind in MODEL_COUNTS}}


def _driver_figures(name: str, run: dict[str, Any], shards: int) -> dict[str, Any]:
    """With loader processes: the control calls per shard the driver made itself."""
    if "driver_calls" not in run:
        return {}
    return {f"driver_control_calls_per_shard_{name}": round(_control(_by_operation(run["driver_calls"])) / shards, 2)}


def _model_counts(model: AwsModel | None) -> dict[str, Counter[str]]:
    """What the model counted so far, by operation (``MODEL_COUNTS``)."""
    if model is None:
        return {}
    return {"throttled": Counter(model.throttled), "conflicts": Counter(model.items_in_flight.conflicts),
            "slow": Counter(model.slow), "sent": Counter(model.sent)}  # fmt: skip


def measure_history(
    stack: Stack, counter: CallCounter, shards: int, intervals: int, keep: int, interval_ms: int
) -> dict[str, Any]:
    """Checkpoint items per shard after each of ``intervals`` consecutive loaded intervals, before and
    after a pruning that keeps the last ``keep`` (``core.prune.prune_shards``), and the AWS calls of
    those prunings per shard and pruning (in the operator a run prunes once an hour)."""
    config = _fresh_pipeline(stack, f"history-{shards}-{int(time.time())}", shards)
    store = dynamo_store(stack.dynamodb, config.checkpoint_table, config.pipeline_id)
    credentials = Credentials(doris_password=stack.password, aws_access_key_id="local", aws_secret_access_key="local")
    first = (int(time.time() * 1000) // interval_ms + 1) * interval_ms
    before, after, pruning_calls = [], [], Counter[str]()
    for k in range(intervals):
        start, end = first + k * interval_ms, first + (k + 1) * interval_ms
        wait_past(start)
        if time.time() * 1000 < end - 500:  # a run that took longer than an interval leaves the next quiet
            put_per_shard(stack.kinesis, config.stream_name, 2)
        wait_past(end + 1_000)
        run_interval(
            replace(config, prune=False), start, end, kinesis=stack.kinesis, store=store, credentials=credentials,
            runner=run_here,
        )  # fmt: skip
        before.append(round(_item_count(stack, config) / shards, 2))
        with counter.counting() as calls:
            prune_shards(store, store.ledger.list_shard_checkpoints(), end - keep * interval_ms)
        pruning_calls.update(calls)
        after.append(round(_item_count(stack, config) / shards, 2))
    stack.kinesis.delete_stream(StreamName=config.stream_name)
    return {
        "history": {"shards": shards, "intervals": intervals, "keep": keep},
        "items_per_shard_before_pruning": before,
        "items_per_shard_after_pruning": after,
        "pruning_calls_per_shard": _per_shard(_by_operation(pruning_calls), shards * intervals),
    }


def _fresh_pipeline(stack: Stack, name: str, shards: int) -> PipelineConfig:
    """A stream of ``shards`` shards, its Doris tables and a checkpoint table of its own."""
    create_stream(stack.kinesis, name, shards)
    table = name.replace("-", "_")
    create_tables(stack, table)
    config = replace(pipeline_config(stack, name, table, ChunkLimits()), checkpoint_table=f"{CHECKPOINT_TABLE}_{table}")
    dynamo_store(stack.dynamodb, config.checkpoint_table, config.pipeline_id).items.create_table_if_missing()
    return config


def _steady_interval(
    config: PipelineConfig, stack: Stack, counter: CallCounter, quiet_end: int, interval_ms: int,
    records_per_shard: int, concurrency: int, services: Mapping[str, int], model: AwsModel | None, *,
    records_after_end: bool, runner: Runner, loaders: LoaderProcesses | None,
) -> tuple[dict[str, Any], int]:
    """An interval as a pipeline with data flowing runs it, and its end: the cut at its start
    stored by the run before, records in it and, with ``records_after_end``, after it (its end cut
    is a record, found by one probe); without, every shard's end cut is at the tip (a quiet or
    slow shard at seal time).

    The intervals before it down to ``quiet_end`` run unmeasured, as one, once its records are in
    (they have passed while the runs before ran)."""
    start = (int(time.time() * 1000) // interval_ms + 1) * interval_ms
    wait_past(start)
    produced = put_per_shard(stack.kinesis, config.stream_name, records_per_shard)
    _interval(config, stack, counter, quiet_end, start, concurrency, services, model, runner, loaders)
    if records_after_end:
        wait_past(start + interval_ms)
        put_per_shard(stack.kinesis, config.stream_name, records_per_shard)  # the next interval's
    steady = _interval(
        config, stack, counter, start, start + interval_ms, concurrency, services, model, runner, loaders, fresh_start=True
    )  # fmt: skip
    if steady["records"] != produced:
        raise RuntimeError(f"{config.stream_name}: a recurring interval loaded {steady['records']} of {produced} records")
    return steady, start + interval_ms


def _interval(
    config: PipelineConfig, stack: Stack, counter: CallCounter, start: int, end: int, concurrency: int,
    services: Mapping[str, int], model: AwsModel | None = None, runner: Runner = run_here,
    loaders: LoaderProcesses | None = None, *, fresh_start: bool = False,
) -> dict[str, Any]:
    """One run of ``[start, end)`` with a store of its own, as the operator's task makes one; with
    the CPU seconds each service's processes and this one (``loader``) used meanwhile: on a machine
    of N cores, a run whose CPU seconds add up to N times its wall time waited for the CPU. With
    ``model``, the run goes through it, and its seconds on the model's clock and the calls the
    model throttled are kept too; with ``loaders``, what the loader processes counted is added
    (:class:`LoaderProcesses` says how their time is). With ``fresh_start`` and a Spark runner, a
    fresh task's Spark start is measured first (``spark_cold_start_s``: :meth:`SparkWorkers.fresh_start`)."""
    store = dynamo_store(stack.dynamodb, config.checkpoint_table, config.pipeline_id)
    wait_past(end + 1_000)
    spark = runner if isinstance(runner, SparkWorkers) else None
    cold_start = {"spark_cold_start_s": spark.fresh_start(services)} if spark and fresh_start else {}
    credentials = Credentials(doris_password=stack.password, aws_access_key_id="local", aws_secret_access_key="local")
    cpu_before = _with_driver(cpu_seconds(services))
    before = _model_counts(model)
    clock = model.clock.now if model else time.perf_counter
    watching = loaders.watching(model) if loaders else nullcontext(LoadsElsewhere())
    elsewhere_counted = loaders is not None or spark is not None
    with counter.counting() as calls, model.active() if model else nullcontext(), watching as elsewhere, \
            _timing_phases(clock) as in_phases:  # fmt: skip
        if spark:
            spark.into, jobs_before = elsewhere, spark.jobs  # its jobs' figures are this interval's
        started = time.perf_counter()
        clock_started, loading = model.clock.now() if model else started, Counter[str]()

        def timed_runner(*args: Any) -> Any:
            load_started = clock()
            try:
                return runner(*args)
            finally:
                loading["load"] += clock() - load_started

        # Without the hourly pruning: its cost is in the history line (one run an hour pays it).
        # The loader processes find each plan's cuts ahead, as the operator has them do.
        find_cuts = partial(find_cuts_in_processes, processes=loaders.processes, lanes=concurrency) if loaders else None
        result = run_interval(
            replace(config, driver_concurrency=concurrency, prune=False), start, end, kinesis=stack.kinesis,
            store=store, credentials=credentials, runner=timed_runner, find_cuts=find_cuts,
        )  # fmt: skip
        ended_real = time.perf_counter()
        if spark:
            spark.into = None
        ended = model.clock.now() if model else ended_real  # one reading: the phases add up to the seconds
        seconds = round(ended_real - started, 2)
        # Under the model with loader processes or Spark workers, the driver's clock ran on while
        # it waited for them: their own clocks' time stands in for that wait (for Spark, its time
        # in the ranges: SparkWorkers).
        waited, slowest = (elsewhere.waited_s, elsewhere.slowest_s) if model else (Counter[str](), Counter[str]())
        total = ended - clock_started - sum(waited.values()) + sum(slowest.values())
        in_phases["plan"] += slowest["plan"] - waited["plan"]
        phases = _phases(in_phases, loading["load"] - waited["load"] + slowest["load"], total)
        modelled = {
            "aws_seconds": round(total, 2),
            **({"loads_aws_seconds": round(elsewhere.slowest_s["load"], 2),
                "cuts_aws_seconds": round(elsewhere.slowest_s["plan"], 2)} if elsewhere_counted else {}),
            **{kind: dict(count - before[kind] + elsewhere.counts[kind]) for kind, count in _model_counts(model).items()},
        } if model else {}  # fmt: skip
    cpu_after = _with_driver(cpu_seconds(services))
    return {
        "seconds": seconds, "calls": Counter(calls) + elsewhere.calls, "records": result.summary()["records"],
        "phase_seconds": phases,
        **({"driver_calls": Counter(calls)} if elsewhere_counted else {}),
        **({"spark_jobs": spark.jobs - jobs_before} if spark else {}),
        **cold_start,
        "cpu_seconds": {name: round(cpu_after[name] - cpu_before[name], 2) for name in sorted(cpu_after)},
        "call_seconds": {operation: round(spent, 2) for operation, spent in sorted(counter.seconds.items())},
        **modelled,
    }


def _with_driver(cpu: dict[str, float]) -> dict[str, float]:
    """``cpu`` and the driver's own CPU seconds (``driver``: this process alone, without the loader
    processes it started, which ``loader`` counts once they are reaped)."""
    return {**cpu, "driver": _cpu_ticks(os.getpid(), with_children=False) / os.sysconf("SC_CLK_TCK")}


def _by_operation(calls: Counter[str]) -> Counter[str]:
    totals: Counter[str] = Counter()
    for key, count in calls.items():
        totals[key.split(" <- ")[0]] += count
    return totals


def _control(calls: Counter[str]) -> int:
    return sum(count for operation, count in calls.items() if operation != DATA_PAGES)


def _per_shard(calls: Counter[str], shards: int) -> dict[str, float]:
    return {operation: round(count / shards, 2) for operation, count in sorted(calls.items())}


def _item_count(stack: Stack, config: PipelineConfig) -> int:
    """The pipeline's items in the checkpoint table, over all its partition-key buckets
    (``<pipeline id>#<bucket>``, core/stores/buckets.py)."""
    pages = stack.dynamodb.get_paginator("scan").paginate(
        TableName=config.checkpoint_table, FilterExpression="begins_with(pk, :pipeline)",
        ExpressionAttributeValues={":pipeline": {"S": f"{config.pipeline_id}#"}}, Select="COUNT",
    )  # fmt: skip
    return sum(page["Count"] for page in pages)


def targets(lines: Sequence[dict[str, Any]], history: dict[str, Any] | None = None) -> dict[str, Any]:
    """The targets at ``TARGET_SHARDS`` shards (None where that count or 16 was not run), and
    whether pruning kept the items per shard flat: no more after any later interval than once the
    first ``keep`` intervals were in the table."""
    by_count = {line["shards"]: line for line in lines}
    at = by_count.get(TARGET_SHARDS)
    small = by_count.get(16)
    growth = steady_growth = None
    if at and small and "steady_s" in at:
        growth = round((at["loaded_s"] + at["quiet_s"]) / (small["loaded_s"] + small["quiet_s"]), 2)
        steady_growth = round((at["steady_s"] + at["quiet_s"]) / (small["steady_s"] + small["quiet_s"]), 2)
    figures = {
        "calls_per_shard_loaded_max": at and at["control_calls_per_shard_loaded"],
        "calls_per_shard_steady_max": at and at.get("control_calls_per_shard_steady"),
        "calls_per_shard_quiet_max": at and at["control_calls_per_shard_quiet"],
        "quiet_s_max": at and at["quiet_s"],
        "loaded_s_max": at and at["loaded_s"],
        "steady_s_max": at and at.get("steady_s"),
        "growth_16_to_256_max": growth,
        "steady_growth_16_to_256_max": steady_growth,
        "tip_to_steady_s_max": round(at["tip_s"] / at["steady_s"], 2) if at and "tip_s" in at and "steady_s" in at else None,
    }
    met: dict[str, bool | None] = {name: None if value is None else value <= TARGETS[name] for name, value in figures.items()}
    if history is not None:
        kept, keep = history["items_per_shard_after_pruning"], history["history"]["keep"]
        # Flat: once the first window is full, no later interval holds more than it did.
        figures["items_per_shard_after_pruning_max_first_later"] = [max(kept[: keep + 1]), max(kept[keep:])]
        met["items_per_shard_flat"] = max(kept[keep:]) <= max(kept[: keep + 1])
    return {"targets": TARGETS, "figures": figures, "met": met}


def aws_targets(lines: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """:data:`AWS_TARGETS` at the largest shard count of ``lines`` (measured under the AWS model);
    a figure that count did not measure (a shape not run, growth without 16 shards) is None."""
    by_count = {line["shards"]: line for line in lines}
    shards = max(by_count)
    at, small = by_count[shards], by_count.get(16) if shards > 16 else None
    figures = {key: at.get(key) for key in AWS_TARGETS}
    if small and "steady_aws_s" in at:
        figures["steady_aws_growth_from_16"] = round(at["steady_aws_s"] / small["steady_aws_s"], 2)
    if "tip_aws_s" in at and "steady_aws_s" in at:
        figures["tip_to_steady_aws"] = round(at["tip_aws_s"] / at["steady_aws_s"], 2)
    met = {key: None if value is None else value <= AWS_TARGETS[key][1] for key, value in figures.items()}
    runner = "spark" if at["runner"].startswith("spark") else "in process"
    intervals = {shape: _fresh_task_seconds(at, shape) for shape in INTERVAL_TARGETS_S[runner] if f"{shape}_aws_s" in at}
    intervals_met = {
        shape: seconds <= INTERVAL_TARGETS_S[runner][shape] and not (shape == "quiet" and at.get("spark_jobs_quiet"))
        for shape, seconds in intervals.items()
    }  # fmt: skip
    return {"aws_model_shards": shards, "aws_figures": figures, "aws_met": met,
            "interval_runner": runner, "interval_figures": intervals, "interval_met": intervals_met}  # fmt: skip


def _fresh_task_seconds(line: Mapping[str, Any], shape: str) -> float:
    """An interval's modelled seconds as a fresh Airflow task pays them: with a fresh task's Spark
    start measured before it (``spark_cold_start_s_<shape>``) when it ran a Spark job (this
    benchmark's process keeps its session)."""
    started_spark = bool(line.get(f"spark_jobs_{shape}"))
    return round(line[f"{shape}_aws_s"] + (line[f"spark_cold_start_s_{shape}"] if started_spark else 0.0), 2)


def verdicts(judged: Mapping[str, Any]) -> list[str]:
    """One line per AWS-model target: PASS, FAIL or NOT MEASURED, the figure and its maximum."""
    shards, lines = judged["aws_model_shards"], []
    for key, (what, limit) in AWS_TARGETS.items():
        value, met = judged["aws_figures"][key], judged["aws_met"][key]
        verdict = "NOT MEASURED" if met is None else "PASS" if met else "FAIL"
        lines.append(f"{verdict} {what} at {shards} shards, AWS model: {value} (target <= {limit})")
    runner = judged["interval_runner"]
    for shape, seconds in judged["interval_figures"].items():
        verdict = "PASS" if judged["interval_met"][shape] else "FAIL"
        with_start = ", a fresh task's Spark start included" if runner == "spark" and shape != "quiet" else ""
        lines.append(f"{verdict} {INTERVAL_NAMES[shape]} ({runner}{with_start}) at {shards} shards, AWS model: "
                     f"{seconds} s (target <= {INTERVAL_TARGETS_S[runner][shape]} s at 1,000 shards)")  # fmt: skip
    if runner != "spark":
        lines.append("NOT MEASURED the intervals with Spark local: run with --runner spark")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", default="4,16,64,256", help="comma-separated shard counts")
    parser.add_argument("--records-per-shard", type=int, default=5, help="records put into each shard")
    parser.add_argument("--interval-s", type=int, default=10, help="interval length in seconds")
    parser.add_argument("--state-dir", type=Path, default=None, help="logs of the local stack (default: a temp dir)")
    parser.add_argument("--json-out", type=Path, default=None, help="also write every JSON line here")
    parser.add_argument(
        "--driver-concurrency", type=int, default=DEFAULT_DRIVER_CONCURRENCY, help="the loader's driver_concurrency"
    )
    parser.add_argument(
        "--shapes", default=",".join(RECURRING_SHAPES),
        help="recurring intervals to measure: steady (records after its end), tip (its end at the tip)",
    )  # fmt: skip
    parser.add_argument(
        "--aws-model", action="store_true",
        help="run each interval through the AWS model (latency, call limits, the emulators' time left out)",
    )  # fmt: skip
    parser.add_argument("--by-caller", action="store_true", help="also count calls by the pipeline function asking")
    parser.add_argument(
        "--processes", type=int, default=1,
        help="InProcessRunner's loader processes, each with --driver-concurrency lanes (with --aws-model, "
        "each runs the model on a clock of its own)",
    )  # fmt: skip
    parser.add_argument(
        "--runner", choices=("in-process", "spark"), default="in-process",
        help="what loads the ranges: the in-process loader, or Spark on --spark-master, whose cores then find "
        "each plan's cuts ahead in as many processes (as the operator's SparkRunner on a local master does; "
        "--processes is ignored)",
    )  # fmt: skip
    parser.add_argument("--spark-master", default=SPARK_MASTER, help="the local master of --runner spark")
    parser.add_argument("--history-intervals", type=int, default=12, help="intervals of the pruning line (0: none)")
    parser.add_argument("--history-keep", type=int, default=3, help="intervals the pruning keeps")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log.setLevel(logging.INFO)
    counts = [int(count) for count in args.shards.split(",")]
    state_dir = args.state_dir or Path(tempfile.mkdtemp(prefix="kinesis-doris-bench-shards-"))
    counter = CallCounter(by_caller=args.by_caller)
    processes = local_cores(args.spark_master) if args.runner == "spark" else args.processes
    loaders = (
        LoaderProcesses(processes, state_dir / "loader-processes", aws_model=args.aws_model, by_caller=args.by_caller)
        if processes > 1 else None
    )  # fmt: skip
    spark = (
        SparkWorkers(args.spark_master, state_dir / "spark-workers", aws_model=args.aws_model, by_caller=args.by_caller)
        if args.runner == "spark" else None
    )  # fmt: skip
    # One call at a time of every process of the run goes to the emulators.
    emulator_lock = loaders.reports / EMULATOR_LOCK if loaders else spark.reports / EMULATOR_LOCK if spark else None
    model = AwsModel(clock=VirtualClock(emulator_lock)) if args.aws_model else None
    lines: list[dict[str, Any]] = []
    with LocalStack(state_dir, ["kinesis_mock", "dynamodb", "doris"], kinesis_shard_limit=max(500, max(counts) + 10)) as local:
        stack = connect(local, "kinesis_mock")
        services = {name: service.pid for name, service in local.running.items()}
        counter.install()
        try:
            if spark:
                log.info("starting Spark on %s ...", args.spark_master)
                warm = _fresh_pipeline(stack, f"spark-start-{int(time.time())}", 1)
                spark.start(warm, Credentials(doris_password=stack.password))
            for shards in counts:
                log.info("%d shards ...", shards)
                lines.append(
                    measure(
                        stack, counter, shards, args.records_per_shard, args.interval_s * 1000, args.driver_concurrency,
                        services, args.shapes.split(","), model, loaders, spark,
                    )
                )
                print(json.dumps(lines[-1], sort_keys=True), flush=True)
            history = None
            if args.history_intervals:
                log.info("history: %d intervals, pruned to the last %d ...", args.history_intervals, args.history_keep)
                history = measure_history(stack, counter, 8, args.history_intervals, args.history_keep, 4_000)
                print(json.dumps(history, sort_keys=True), flush=True)
        finally:
            counter.uninstall()
            stack.doris.close()
    final = targets(lines, history) | (aws_targets(lines) if model else {})
    print(json.dumps(final, sort_keys=True), flush=True)
    if model:
        print("\n".join(verdicts(final)), flush=True)
    if args.json_out:
        written = [*lines, *([history] if history else []), final]
        args.json_out.write_text("".join(json.dumps(line, sort_keys=True) + "\n" for line in written))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

if __name__ == "__mp_main__" and LOADER_PROCESSES_ENV in os.environ:
    # One of the benchmark's loader processes, importing the benchmark as its main module as it starts.
    _in_a_loader_process(json.loads(os.environ[LOADER_PROCESSES_ENV]))
