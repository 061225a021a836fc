"""The benchmarks' parts that cost little: the CPU split of ``benchmarks/run.py`` and
``make bench-shards`` at two tiny shard counts, so that they cannot rot. ``run.py``'s own figures
are checked by ``make bench`` (``benchmarks/test_run_figures.py``): it starts Spark several times."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration]

REPO_ROOT = Path(__file__).resolve().parents[2]


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
        capture_output=True, text=True, timeout=280, check=False, cwd=REPO_ROOT,
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
        # The quiet interval reads each shard forward from just after its last record (well within
        # retention): one iterator and the empty page that proves the tip, nothing read twice.
        assert (quiet["GetShardIterator"], quiet["GetRecords"]) == (1, 1) and "GetRecords (with records)" not in quiet
        # The steady interval starts at a stored cut and ends at a record: per shard one probe
        # (its end) and one read, and no empty page at the tip.
        steady = line["calls_per_shard_steady"]
        assert line["steady_s"] > 0 and steady["GetShardIterator"] == 2 and "GetRecords" not in steady
        # The same interval with no record after its end: per shard the probe and the reader each
        # meet an empty page at the tip, and the reader settles the PENDING end.
        tip = line["calls_per_shard_tip"]
        assert line["tip_s"] > 0 and tip["GetShardIterator"] == 2 and tip["GetRecords"] == 2 and tip["UpdateItem"] >= 1
        # CPU seconds of each part of the stack during each measured run; the loader always works,
        # and its process tree holds the driver (read a moment after it at each end of the run: a
        # clock tick of /proc apart at each, which a quiet interval's 0.1 s shows).
        tick = 1 / os.sysconf("SC_CLK_TCK")
        for phase in ("loaded", "quiet", "steady", "tip"):
            cpu = line[f"cpu_s_{phase}"]
            assert set(cpu) == {"loader", "driver", "kinesis_mock", "dynamodb", "doris"}
            assert 0 < cpu["driver"] <= cpu["loader"] + 2 * tick, (phase, cpu)
            # Where the run's seconds went: the plan, the loads, the commit and the rest add up to them.
            phases = line[f"phase_s_{phase}"]
            assert sum(phases.values()) == pytest.approx(line[f"{phase}_s"], abs=0.05) and phases["plan"] > 0, phase
        assert line["phase_s_quiet"]["load"] == 0  # nothing to load: no load started
    assert set(final) == {"targets", "figures", "met"}
    assert final["met"]["quiet_s_max"] is None and final["met"]["tip_to_steady_s_max"] is None  # 256 shards were not run
