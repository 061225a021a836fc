"""The loader's metrics go out through Airflow's ``Stats`` to statsd: sent from a child process
whose Airflow has ``[metrics] statsd_on``, received by a listener on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.airflow

SEND = """
import json, sys
from airflow_provider_kinesis_doris.metrics import emit_interval_metrics

emit_interval_metrics("clicks.sales.orders", json.loads(sys.argv[1]))
"""

SUMMARY = {
    "records": 30, "loaded": 27, "filtered": 1, "dead_lettered": 2, "probe_loads": 3, "loads_aborted": 4,
    "shards": {
        "shardId-000000000000": {"chunks": 2, "chunks_already_loaded": 1, "chunks_retried": 1, "lag_ms": 1500},
        "shardId-000000000001": {"chunks": 1, "chunks_already_loaded": 0, "chunks_retried": 0, "lag_ms": 0},
        "shardId-000000000002": {"state": "OPEN", "decision": "WAITING", "waiting_for": ["shardId-000000000000"]},
    },
}


def test_a_runs_counts_lags_and_waiting_shards_reach_statsd_through_airflows_stats(statsd) -> None:
    env = {**os.environ, "AIRFLOW__METRICS__STATSD_ON": "True", "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
           "AIRFLOW__METRICS__STATSD_PORT": str(statsd.port), "AIRFLOW__METRICS__STATSD_PREFIX": "af"}  # fmt: skip
    subprocess.run([sys.executable, "-c", SEND, json.dumps(SUMMARY)], env=env, check=True, timeout=120)

    def sent(metric: str, kind: str, shard: str = "") -> list[float]:
        return statsd.values(f"af.kinesis_doris.{metric}.clicks.sales.orders{shard}", kind)

    assert statsd.wait_for("af.kinesis_doris.shards_waiting.clicks.sales.orders")
    assert [sent(m, "c") for m in ("records_read", "rows_loaded", "rows_filtered", "dead_lettered")] == [[30], [27], [1], [2]]
    assert [sent(m, "c") for m in ("chunks_loaded", "chunks_already_loaded", "chunks_retried")] == [[3], [1], [1]]
    assert [sent(m, "c") for m in ("probe_loads", "loads_aborted")] == [[3], [4]]
    assert sent("shard_lag_ms", "g", ".shardId-000000000000") == [1500]
    assert sent("shard_lag_ms", "g", ".shardId-000000000001") == [0]
    assert sent("max_lag_ms", "g") == [1500]
    assert sent("shards_waiting", "g") == [1]
    # Tagged names too, for backends that keep tags (plain statsd drops the tags).
    assert statsd.values("af.kinesis_doris.rows_loaded", "c") == [27]


def test_the_usage_docs_list_every_metric_and_no_other() -> None:
    import re
    from pathlib import Path

    from airflow_provider_kinesis_doris.metrics import METRICS

    usage = (Path(__file__).resolve().parents[2] / "docs" / "usage.md").read_text()
    start = usage.index("**Metrics**")
    section = usage[start:usage.index("\n## ", start)]
    listed = re.findall(r"^\| `([a-z_]+)` \|", section, flags=re.MULTILINE)

    assert sorted(listed) == sorted(METRICS)
