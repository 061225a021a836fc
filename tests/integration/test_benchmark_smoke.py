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
    completed = subprocess.run(  # noqa: S603 - our own script, fixed arguments
        [sys.executable, str(SCRIPT), "--records", str(RECORDS), "--state-dir", str(folder / "stack"), "--json-out", str(out)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    last_line = completed.stdout.strip().splitlines()[-1]
    assert json.loads(last_line) == json.loads(out.read_text())
    return json.loads(last_line)


@pytest.mark.timeout(700)
def test_the_json_line_has_every_figure(figures: dict) -> None:
    from benchmarks.run import RESULT_KEYS

    assert sorted(figures) == sorted(RESULT_KEYS)
    assert figures["records"] == RECORDS and figures["small"]["records"] == RECORDS // 10


@pytest.mark.timeout(700)
def test_the_figures_are_sane(figures: dict) -> None:
    for key in ("e2e_s", "raw_read_s", "raw_load_s", "empty_interval_s", "ratio_e2e_to_floor", "speedup_local2_over_local1"):
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
