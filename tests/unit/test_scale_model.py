"""The scale model (``benchmarks/scale_model.py``) in the two regimes it must get right: a phase
bound by its process's one CPU takes the calls' CPU one after the other, and a phase bound by
AWS's latency takes the latency divided among its threads; more processes divide the first."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from benchmarks.aws_model import LATENCY_S, LatencyTail
from benchmarks.scale_model import Phase, simulate, simulate_phase

NO_TAIL = LatencyTail(share=0)
TWO_READS = Phase("reads", {"GetItem": 2}, threads=8, where="driver")


def test_a_cpu_bound_phase_takes_every_calls_cpu_in_turn_and_a_process_each_divides_it() -> None:
    one = simulate_phase(TWO_READS, 100, cpus=1, cpu_s=0.05, draws=random.Random(1), tail=NO_TAIL)
    four = simulate_phase(TWO_READS, 100, cpus=4, cpu_s=0.05, draws=random.Random(1), tail=NO_TAIL)

    assert one == pytest.approx(100 * 2 * 0.05 + LATENCY_S["GetItem"], abs=0.01)
    assert four == pytest.approx(one / 4, rel=0.05)


def test_a_latency_bound_phase_takes_the_latency_divided_among_its_threads() -> None:
    seconds = simulate_phase(TWO_READS, 800, cpus=1, cpu_s=1e-6, draws=random.Random(1), tail=NO_TAIL)

    assert seconds == pytest.approx(800 * 2 * LATENCY_S["GetItem"] / 8, rel=0.01)


def test_the_tail_slows_a_latency_bound_phase_by_its_share_and_factor() -> None:
    tail = LatencyTail(share=0.5, factor=3.0)
    seconds = simulate_phase(TWO_READS, 800, cpus=1, cpu_s=1e-6, draws=random.Random(1), tail=tail)

    assert seconds == pytest.approx(800 * 2 * LATENCY_S["GetItem"] * 2 / 8, rel=0.05)  # half the calls at 3x


def test_loads_off_the_driver_leave_it_the_plan_and_the_commit() -> None:
    here = simulate(1000, cpu_ms=4.0, executors=None, spark_start_s=0)
    pool = simulate(1000, cpu_ms=4.0, executors=8, spark_start_s=0)
    spark = simulate(1000, cpu_ms=4.0, executors=8, spark_start_s=20)

    assert pool["plan_s"] == here["plan_s"] and pool["load_s"] < here["load_s"] / 4
    assert spark["total_s"] == pytest.approx(pool["total_s"] + 20, abs=0.01)
    assert pool["driver_cpu_ms_per_shard"] < here["driver_cpu_ms_per_shard"] / 2


def test_a_phases_own_work_per_shard_takes_its_cpu_before_the_calls() -> None:
    own_only = simulate_phase(Phase("commit", {}, 8, "driver", shard_cpu_ms=5), 100, cpus=1, cpu_s=0.05,
                              draws=random.Random(1), tail=NO_TAIL)  # fmt: skip
    both = simulate_phase(replace(TWO_READS, shard_cpu_ms=5), 100, cpus=1, cpu_s=0.05, draws=random.Random(1), tail=NO_TAIL)

    assert own_only == pytest.approx(100 * 0.005, abs=0.001)
    assert both == pytest.approx(100 * (2 * 0.05 + 0.005) + LATENCY_S["GetItem"], abs=0.01)


def test_cuts_found_ahead_leave_the_driver_the_plans_writes_at_once() -> None:
    here = simulate(1000, cpu_ms=4.0, executors=8, spark_start_s=0)
    ahead = simulate(1000, cpu_ms=4.0, executors=8, spark_start_s=0, cuts_ahead=True)

    assert ahead["cuts_s"] < here["cuts_s"] / 4 and ahead["plan_s"] < here["plan_s"]
    # The two reads of each shard's end cut, and the plan's transactions: 0.47 a shard from its
    # threads, 0.02 handed over at once.
    assert here["driver_cpu_ms_per_shard"] - ahead["driver_cpu_ms_per_shard"] == pytest.approx((2 + 0.47 - 0.02) * 4.0)
