"""What ``make bench`` reports, checked: every figure is there and sane. ``make bench`` runs these
on the figures of its own run (``KD_BENCH_JSON``); run alone, they run the benchmark at a tiny size
first (about 100 s). Not part of ``make test``: the benchmark starts Spark several times, which on
two cores beside the suite's workers took 560 s of a run (session 4's fresh-clone run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.run import SHARDS as BENCH_SHARDS

pytestmark = [pytest.mark.timeout(1100)]

SCRIPT = Path(__file__).resolve().parent / "run.py"
TINY_RECORDS = 2000


@pytest.fixture(scope="module")
def figures(tmp_path_factory: pytest.TempPathFactory) -> dict:
    if os.environ.get("KD_BENCH_JSON"):  # make bench: the figures of the run it just made
        return json.loads(Path(os.environ["KD_BENCH_JSON"]).read_text())
    folder = tmp_path_factory.mktemp("bench")
    out = folder / "result.json"
    # About 100 s alone on two cores.
    completed = subprocess.run(  # noqa: S603 - our own script, fixed arguments
        [sys.executable, str(SCRIPT), "--records", str(TINY_RECORDS), "--auto-records", "400",
         "--state-dir", str(folder / "stack"), "--json-out", str(out)],
        capture_output=True, text=True, timeout=1000, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    last_line = completed.stdout.strip().splitlines()[-1]
    assert json.loads(last_line) == json.loads(out.read_text())
    return json.loads(last_line)


def test_the_json_line_has_every_figure(figures: dict) -> None:
    from benchmarks.run import RESULT_KEYS

    assert sorted(figures) == sorted(RESULT_KEYS)
    assert figures["small"]["records"] == figures["records"] // 10


def test_the_figures_are_sane(figures: dict) -> None:
    for key in ("e2e_s", "in_process_s", "raw_read_s", "raw_load_s", "empty_interval_s", "ratio_e2e_to_floor"):
        assert figures[key] > 0, key
    # e2e includes starting Spark: it cannot beat the bare floor at this size.
    assert figures["e2e_s"] > max(figures["raw_read_s"], figures["raw_load_s"])
    assert figures["empty_interval_started_spark"] is False
    assert 0 < figures["peak_rss_loader_mb"] <= figures["peak_rss_mb"]
    assert 0 < figures["peak_rss_loader_small_mb"] <= figures["peak_rss_small_mb"]
    calls, minimum = figures["get_records_calls_per_shard"], figures["get_records_min_per_shard"]
    assert len(calls) == BENCH_SHARDS and calls.keys() == minimum.keys()
    assert all(1 <= calls[shard] <= minimum[shard] for shard in calls)
    assert figures["get_records_ratio"] == pytest.approx(max(calls[s] / minimum[s] for s in calls), abs=1e-3)


def test_the_cpu_figures_name_each_part_of_the_loader(figures: dict) -> None:
    per_record = figures["cpu_us_per_record"]
    assert per_record["bare"] == pytest.approx(per_record["bare_read"] + per_record["bare_load"], abs=0.15)
    assert per_record["bare_read"] > 0 and per_record["local[2]"] > per_record["in_process"] > 0
    assert figures["cpu_ratio_to_bare"]["local[2]"] == pytest.approx(per_record["local[2]"] / per_record["bare"], rel=0.02)
    spark, here = figures["cpu_s_loader_parts"]["local[2]"], figures["cpu_s_loader_parts"]["in_process"]
    # Spark's JVM and Python workers do the Spark run's work; the in-process run has no workers.
    assert spark["jvm"] > 0 and spark["python_workers"] > 0 and here["python_workers"] == 0 and here["driver"] > 0
    cold = figures["spark_cold_start"]
    assert cold["jvm"] > 0 and cold["seconds"] > 0 and cold["cpu_s"] >= cold["jvm"]
    memory = figures["peak_rss_loader_parts_mb"]["local[2]"]
    assert memory["jvm"] > 0 and memory["python_workers"] > 0 and memory["driver"] > 0
    assert figures["auto_small"]["runner"] == "in_process" and figures["auto_small"]["records"] > 0
    assert 0 < figures["auto_small"]["s_after_planning"] < figures["e2e_s"]
    split = figures["cpu_split_in_process"]
    if split:  # py-spy is installed by `make bench`, not by `make test`
        assert sum(split.values()) == pytest.approx(1, abs=0.01) and split["read"] > 0
    assert set(figures["targets"]["cpu_ratio_to_bare_met"]) == {"local[2]", "in_process"}


def test_enhanced_fan_out_loads_the_same_rows_through_subscriptions_only(figures: dict) -> None:
    assert figures["efo_rows_match"] is True
    subscribes, get_records = figures["efo_subscribe_calls_per_shard"], figures["efo_get_records_calls_per_shard"]
    assert len(subscribes) == BENCH_SHARDS and subscribes.keys() == get_records.keys()
    assert all(calls >= 1 for calls in subscribes.values()) and all(calls == 0 for calls in get_records.values())
    # At least one event per shard carried its records; polling read the same shards by GetRecords.
    assert figures["efo_events_sent"] >= BENCH_SHARDS
    assert figures["polling_get_records_calls_per_shard"].keys() == subscribes.keys()
    assert all(calls >= 1 for calls in figures["polling_get_records_calls_per_shard"].values())
    assert figures["efo_records_per_s"] > 0 and figures["polling_records_per_s"] > 0
    assert figures["polling_records_per_s"] == pytest.approx(figures["records"] / figures["in_process_s"], rel=0.05)
