"""What one interval would take at shard counts this machine cannot run (4,000): a simulation of
the processes of a run, each with its CPU on a clock of its own, fed with figures measured here.

A run is four phases one after the other, as ``core.pipeline`` runs them: the end cuts, the plan,
the loads and the commit. Each phase is a number of calls per shard, made by ``threads`` threads of one process
at a time; a call takes ``cpu_ms`` of its process's one CPU (the GIL: one thread at a time runs
Python), then waits AWS's latency (``benchmarks.aws_model``'s figures and tail) off the CPU. The
plan and the commit run on the driver; the loads on the driver too with the in-process runner
(its lanes are threads of the task's process), or in ``executors`` processes of their own with
Spark, after Spark's fixed start, or in a pool of the task's own processes (which also find the
plan's end cuts).

Assumptions, stated where they are used: the calls per shard and the CPU per call are this
machine's measurements (``--calls`` and ``--cpu-ms``, from a ``benchmarks.shards --aws-model``
line); AWS's latencies and tail are the model's (``LATENCY_S``, ``LatencyTail``); no call is
throttled (the bucket layout spreads a pipeline's keys, docs/checkpoints.md); a phase's calls are
spread evenly over its shards.

Usage::

    .venv/bin/python -m benchmarks.scale_model [--shards 256,1000,4000] [--executors 8]
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from benchmarks.aws_model import LATENCY_S, LatencyTail

DORIS_REQUEST_S = 0.005
"""A Stream Load's round trip (FE probe or BE load) of a small chunk: assumed, within a region."""


@dataclass(frozen=True)
class Phase:
    """``calls`` by operation per shard, made by ``threads`` threads of the process ``where``."""

    name: str
    calls: Mapping[str, float]
    threads: int
    where: str  # "driver" or "loaders"
    shard_cpu_ms: float = 0.0
    """CPU a shard costs the phase besides its calls (deciding, walking, building requests)."""


OWN_WORK = "(own work)"


# The recurring interval with records after its end, per shard, by the function that asked
# (docs/benchmarks.md, "Where the driver's CPU goes"): the end cut (found ahead in the loader
# processes when the runner has them, else by the planner); the planner's grouped range write (at
# once, with the cuts found ahead: PLAN_WITH_CUTS_AHEAD); the
# loader's read, its chunk log's two writes and its Stream Load (an FE probe and the BE's load); the
# commit's two grouped writes of every shard at once, one writer's transactions of 100 one after
# the other.
RECURRING = (
    Phase("cuts", {"GetShardIterator": 1, "GetRecords": 1}, 8, "loaders"),
    Phase("plan", {"TransactWriteItems": 0.47}, 8, "driver"),
    Phase("load", {"GetShardIterator": 1, "GetRecords": 1, "TransactWriteItems": 1, "UpdateItem": 1, "Doris": 2}, 8, "loaders"),
    Phase("commit", {"TransactWriteItems": 0.02}, 1, "driver"),
)
PLAN_WITH_CUTS_AHEAD = Phase("plan", {"TransactWriteItems": 0.02}, 1, "driver")
"""The plan when its cuts were found ahead: its new ranges, each with its end cut, handed over at
once before it plans the shards (one writer's transactions of 50 ranges, one after the other)."""


def latency_of(operation: str) -> float:
    return DORIS_REQUEST_S if operation == "Doris" else LATENCY_S[operation]


def simulate_phase(phase: Phase, shards: int, cpus: int, cpu_s: float, draws: random.Random, tail: LatencyTail) -> float:
    """Seconds the phase takes: ``shards`` tasks of the phase's calls over its threads, which share
    ``cpus`` CPUs (one per process) round robin, each call first on its CPU then waiting its latency."""
    calls = [(operation, count) for operation, count in phase.calls.items()]
    # Each task's calls: whole calls per shard, and the fractional rest spread over the tasks; first
    # its own work on the CPU, when it has any.
    own = [OWN_WORK] if phase.shard_cpu_ms else []
    plan = [own + [op for op, count in calls for _ in range(int(count) + (draws.random() < count % 1))] for _ in range(shards)]
    threads = min(phase.threads * cpus, shards)
    cpu_free = [0.0] * cpus
    ready = [(0.0, thread, iter(())) for thread in range(threads)]  # (time, thread, its task's calls left)
    heapq.heapify(ready)
    tasks = iter(plan)
    finished = 0.0
    while ready:
        now, thread, left = heapq.heappop(ready)
        operation = next(left, None)
        if operation is None:
            task = next(tasks, None)
            if task is None:
                finished = max(finished, now)
                continue
            left = iter(task)
            operation = next(left, None)
            if operation is None:
                heapq.heappush(ready, (now, thread, left))
                continue
        cpu = thread % cpus
        start = max(now, cpu_free[cpu])
        if operation == OWN_WORK:
            cpu_free[cpu] = start + phase.shard_cpu_ms / 1000
            heapq.heappush(ready, (cpu_free[cpu], thread, left))
            continue
        cpu_free[cpu] = start + cpu_s
        slow = draws.random() < tail.share
        heapq.heappush(ready, (cpu_free[cpu] + latency_of(operation) * (tail.factor if slow else 1), thread, left))
    return finished


def simulate(
    shards: int, *, cpu_ms: float, executors: int | None, spark_start_s: float, threads_per_executor: int = 8, seed: int = 37,
    cuts_ahead: bool = False, shard_cpu_ms: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """One recurring interval at ``shards``: each phase's seconds, the total, and the driver's CPU
    per shard. ``executors`` None: the in-process runner (the loads on the driver's CPU); else the
    loads in that many processes of ``threads_per_executor`` threads each (a Spark executor's core
    runs one task, a partition's ranges one after the other), after ``spark_start_s`` (0: a pool
    of the task's own processes). ``cuts_ahead``: the loader processes find the plan's end cuts
    (``InProcessRunner(processes=N)``); else the driver does. ``shard_cpu_ms``: by phase, the CPU
    a shard costs it besides its calls (measured: ``phase_cpu_ms_per_shard`` below)."""
    draws, tail = random.Random(seed), LatencyTail()
    figures: dict[str, float] = {}
    driver_cpu_ms = 0.0
    for phase in RECURRING:
        phase = PLAN_WITH_CUTS_AHEAD if phase.name == "plan" and cuts_ahead else phase
        phase = replace(phase, shard_cpu_ms=(shard_cpu_ms or {}).get(phase.name, 0.0))
        on_driver = phase.where == "driver" or executors is None or (phase.name == "cuts" and not cuts_ahead)
        cpus = 1 if on_driver else executors
        if not on_driver:
            phase = replace(phase, threads=threads_per_executor)
        figures[f"{phase.name}_s"] = round(simulate_phase(phase, shards, cpus, cpu_ms / 1000, draws, tail), 2)
        if on_driver:
            driver_cpu_ms += sum(phase.calls.values()) * cpu_ms + phase.shard_cpu_ms
    start = spark_start_s if executors is not None else 0.0
    figures["total_s"] = round(start + sum(v for k, v in figures.items() if k.endswith("_s")), 2)
    figures["driver_cpu_ms_per_shard"] = round(driver_cpu_ms, 1)
    return figures


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", default="256,1000,4000", help="shard counts, comma-separated")
    parser.add_argument("--cpu-ms", type=float, default=4.0, help="CPU per call (ms; measured: docs/benchmarks.md)")
    parser.add_argument("--executors", type=int, default=8, help="loader processes (Spark's executors, or a pool), one CPU each")
    parser.add_argument("--spark-start-s", type=float, default=26.5, help="Spark's fixed start (make bench's cold start)")
    parser.add_argument("--plan-cpu-ms", type=float, default=0.0, help="the plan's CPU a shard besides its calls (ms)")
    parser.add_argument("--commit-cpu-ms", type=float, default=0.0, help="the commit's CPU a shard besides its calls (ms)")
    args = parser.parse_args(argv)
    own = {"plan": args.plan_cpu_ms, "commit": args.commit_cpu_ms}
    for shards in (int(n) for n in args.shards.split(",")):
        # The runners as they are, and the loads in a pool of the task's own processes (no Spark
        # start): what moving the in-process loader's lanes off the driver's CPU would give.
        for runner, executors, start_s, threads, ahead in (
            ("in_process", None, 0.0, 8, False), ("spark", args.executors, args.spark_start_s, 1, False),
            ("process_pool", args.executors, 0.0, 8, True),
        ):
            figures = simulate(shards, cpu_ms=args.cpu_ms, executors=executors, spark_start_s=start_s, threads_per_executor=threads,
                               cuts_ahead=ahead, shard_cpu_ms=own)  # fmt: skip
            print(json.dumps({"shards": shards, "runner": runner, **figures}))


if __name__ == "__main__":
    main()
