"""The benchmark (``benchmarks/run.py``) at a tiny size, so that it cannot rot. Not a benchmark
itself: it checks the script runs the whole local stack and reports every figure, sanely."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.spark]

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "run.py"
RECORDS = 2000
SHARDS = 4


@pytest.fixture(scope="module")
def figures(tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("bench")
    out = folder / "result.json"
    # About 100 s alone; 556 s beside make test's four workers on two cores (a fresh clone's run).
    completed = subprocess.run(  # noqa: S603 - our own script, fixed arguments
        [sys.executable, str(SCRIPT), "--records", str(RECORDS), "--auto-records", "400",
         "--state-dir", str(folder / "stack"), "--json-out", str(out)],
        capture_output=True, text=True, timeout=1000, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    last_line = completed.stdout.strip().splitlines()[-1]
    assert json.loads(last_line) == json.loads(out.read_text())
    return json.loads(last_line)


@pytest.mark.timeout(1100)
def test_the_json_line_has_every_figure(figures: dict) -> None:
    from benchmarks.run import RESULT_KEYS

    assert sorted(figures) == sorted(RESULT_KEYS)
    assert figures["records"] == RECORDS and figures["small"]["records"] == RECORDS // 10


@pytest.mark.timeout(1100)
def test_the_figures_are_sane(figures: dict) -> None:
    for key in ("e2e_s", "in_process_s", "raw_read_s", "raw_load_s", "empty_interval_s", "ratio_e2e_to_floor"):
        assert figures[key] > 0, key
    # e2e includes starting Spark: it cannot beat the bare floor at this size.
    assert figures["e2e_s"] > max(figures["raw_read_s"], figures["raw_load_s"])
    assert figures["empty_interval_started_spark"] is False
    assert 0 < figures["peak_rss_loader_mb"] <= figures["peak_rss_mb"]
    assert 0 < figures["peak_rss_loader_small_mb"] <= figures["peak_rss_small_mb"]
    calls, minimum = figures["get_records_calls_per_shard"], figures["get_records_min_per_shard"]
    assert len(calls) == SHARDS and calls.keys() == minimum.keys()
    assert all(1 <= calls[shard] <= minimum[shard] for shard in calls)
    assert figures["get_records_ratio"] == pytest.approx(max(calls[s] / minimum[s] for s in calls), abs=1e-3)


@pytest.mark.timeout(1100)
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
    assert figures["auto_small"]["runner"] == "in_process" and figures["auto_small"]["records"] == 400
    assert 0 < figures["auto_small"]["s_after_planning"] < figures["e2e_s"]
    split = figures["cpu_split_in_process"]
    if split:  # py-spy is installed by `make bench`, not by `make test`
        assert sum(split.values()) == pytest.approx(1, abs=0.01) and split["read"] > 0
    assert set(figures["targets"]["cpu_ratio_to_bare_met"]) == {"local[2]", "in_process"}


@pytest.mark.timeout(1100)
def test_enhanced_fan_out_loads_the_same_rows_through_subscriptions_only(figures: dict) -> None:
    assert figures["efo_rows_match"] is True
    subscribes, get_records = figures["efo_subscribe_calls_per_shard"], figures["efo_get_records_calls_per_shard"]
    assert len(subscribes) == SHARDS and subscribes.keys() == get_records.keys()
    assert all(calls >= 1 for calls in subscribes.values()) and all(calls == 0 for calls in get_records.values())
    # At least one event per shard carried its records; polling read the same shards by GetRecords.
    assert figures["efo_events_sent"] >= SHARDS
    assert figures["polling_get_records_calls_per_shard"].keys() == subscribes.keys()
    assert all(calls >= 1 for calls in figures["polling_get_records_calls_per_shard"].values())
    assert figures["efo_records_per_s"] > 0 and figures["polling_records_per_s"] > 0
    assert figures["polling_records_per_s"] == pytest.approx(RECORDS / figures["in_process_s"], rel=0.05)


def test_the_split_puts_each_sample_in_the_part_of_its_innermost_frame_of_ours() -> None:
    from benchmarks.run import split_samples

    ours = "airflow_provider_kinesis_doris"
    raw = "\n".join([
        f"run (threading.py:1);load_range (/x/{ours}/core/load.py:9);next_page (/x/{ours}/core/kinesis/shard_pages.py:3);parse (botocore/parsers.py:5) 6",
        f"_map (/x/{ours}/core/mapping.py:4);decode (json/decoder.py:3) 3",
        f"_load_chunk (/x/{ours}/core/load.py:1);send (/x/{ours}/core/doris/http.py:2);put (requests/api.py:1) 2",
        f"_load_chunk (/x/{ours}/core/load.py:1);_write (/x/{ours}/core/stores/dynamodb.py:1) 1",
        "_run (/x/benchmarks/run.py:170);sample (/x/benchmarks/run.py:180) 50",
    ])  # fmt: skip
    assert split_samples(raw) == {"read": 0.5, "decode_map": 0.25, "load": 0.167, "bookkeeping": 0.083}


SHARDS_SCRIPT_ARGS = [
    "--shards", "2,3", "--records-per-shard", "2", "--interval-s", "3", "--history-intervals", "3", "--history-keep", "1",
]  # fmt: skip


@pytest.mark.timeout(300)
def test_the_scaling_benchmark_counts_each_intervals_aws_calls(tmp_path: Path) -> None:
    """``make bench-shards`` at two tiny shard counts: one sane line per count, then the targets."""
    out = tmp_path / "shards.jsonl"
    completed = subprocess.run(  # noqa: S603 - our own module, fixed arguments
        [sys.executable, "-m", "benchmarks.shards", *SHARDS_SCRIPT_ARGS, "--state-dir", str(tmp_path / "stack"),
         "--json-out", str(out)],
        capture_output=True, text=True, timeout=280, check=False, cwd=SCRIPT.parents[1],
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    *lines, history, final = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["shards"] for line in lines] == [2, 3]
    before, after = history["items_per_shard_before_pruning"], history["items_per_shard_after_pruning"]
    assert len(before) == len(after) == 3
    # The last pruning deleted the first intervals' items: fewer than the table held before it.
    assert after[-1] < before[-1]
    assert history["pruning_calls_per_shard"]["Query"] > 0 and "items_per_shard_flat" in final["met"]
    for line in lines:
        assert line["records"] == 2 * line["shards"]
        assert line["loaded_s"] > 0 and line["quiet_s"] > 0
        loaded, quiet = line["calls_per_shard_loaded"], line["calls_per_shard_quiet"]
        # Every shard's records were read, and the planner listed the stream once per interval.
        assert loaded["GetRecords (with records)"] >= 1
        assert round(loaded["ListShards"] * line["shards"]) >= 1 and round(quiet["ListShards"] * line["shards"]) >= 1
        assert line["control_calls_per_shard_loaded"] == pytest.approx(
            sum(v for k, v in loaded.items() if k != "GetRecords (with records)"), abs=0.05
        )
        assert line["dynamodb_items_written"] > 0 and line["checkpoint_items_per_shard"] > 0
        # The steady interval starts at a stored cut and ends at a record: per shard one probe
        # (its end) and one read, and no empty page at the tip.
        steady = line["calls_per_shard_steady"]
        assert line["steady_s"] > 0 and steady["GetShardIterator"] == 2 and "GetRecords" not in steady
        # The same interval with no record after its end: per shard the probe and the reader each
        # meet an empty page at the tip, and the reader settles the PENDING end.
        tip = line["calls_per_shard_tip"]
        assert line["tip_s"] > 0 and tip["GetShardIterator"] == 2 and tip["GetRecords"] == 2 and tip["UpdateItem"] >= 1
        # CPU seconds of each part of the stack during each measured run; the loader always works.
        for phase in ("loaded", "quiet", "steady", "tip"):
            cpu = line[f"cpu_s_{phase}"]
            assert set(cpu) == {"loader", "kinesis_mock", "dynamodb", "doris"} and cpu["loader"] > 0
    assert set(final) == {"targets", "figures", "met"}
    assert final["met"]["quiet_s_max"] is None and final["met"]["tip_to_steady_s_max"] is None  # 256 shards were not run
