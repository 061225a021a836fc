"""The loader's metrics, sent through Airflow's ``Stats`` (statsd, Datadog or OpenTelemetry, as
the deployment's ``[metrics]`` section sets it; nothing is sent when metrics are off).

Each metric is sent twice, as Airflow sends its own task metrics: once under a fixed name with the
pipeline (and, for shard metrics, the shard) as tags, for backends that keep tags, and once with
them in the name, for plain statsd: ``kinesis_doris.rows_loaded`` tagged ``pipeline_id=...`` and
``kinesis_doris.rows_loaded.<pipeline id>``. The names are listed in ``METRICS`` and in docs/usage.md ("Lineage, Assets and metrics").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from airflow.providers.common.compat.sdk import Stats

PREFIX = "kinesis_doris"

METRICS: dict[str, str] = {
    "records_read": "counter: Kinesis records the run read",
    "rows_loaded": "counter: rows the run loaded into the table",
    "rows_filtered": "counter: rows Doris filtered (by where, or refused within max_filter_ratio)",
    "dead_lettered": "counter: records sent to the dead-letter table",
    "chunks_loaded": "counter: Stream Loads the run committed",
    "chunks_already_loaded": "counter: chunks a replay found loaded by an earlier attempt (not sent again)",
    "chunks_retried": "counter: chunks whose Stream Load took more than one attempt",
    "probe_loads": "counter: two-phase probe loads sent to find the rows Doris refused (each a label in Doris's window)",
    "loads_aborted": "counter: transactions the run left aborted, refused chunks and probes (they count towards label_num_threshold)",
    "shard_lag_ms": "gauge, per shard: how far the shard's loaded data is behind, from its high-water mark to the run's commit (or the read's distance from the tip, if larger)",
    "max_lag_ms": "gauge: the largest shard_lag_ms of the run",
    "fields_without_column": "gauge: JSON members of the run's records that no column of the table takes",
    "shards_waiting": "gauge: shards whose range waits for parents' earlier intervals (0 when none)",
    "intervals_recovered": "counter: intervals no DAG run covered that the run loaded before its own",
    "intervals_left_behind": "gauge: intervals no DAG run covers that are still not loaded, left to the next run (0 when none)",
    "label_window_broken": "counter: runs stopped because Doris forgot a label younger than label_keep_seconds (LabelWindowBroken)",
}

_COUNTERS = {
    "records_read": "records",
    "rows_loaded": "loaded",
    "rows_filtered": "filtered",
    "dead_lettered": "dead_lettered",
    "probe_loads": "probe_loads",
    "loads_aborted": "loads_aborted",
}
_NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9_.-]")


def emit_interval_metrics(pipeline_id: str, summary: Mapping[str, Any]) -> None:
    """Send the metrics of a finished run, from its summary (``IntervalResult.summary``); the
    counters include what it loaded of intervals no DAG run covered."""
    skipped: Mapping[str, Any] = summary.get("skipped_intervals", {})
    recovered: list[Mapping[str, Any]] = list(skipped.get("loaded", []))
    for metric, key in _COUNTERS.items():
        _incr(metric, pipeline_id, sum(int(part.get(key) or 0) for part in [summary, *recovered]))
    _incr("intervals_recovered", pipeline_id, len(recovered))
    _gauge("intervals_left_behind", pipeline_id, int(skipped.get("left_for_next_run", {}).get("count", 0)))
    shards: Mapping[str, Mapping[str, Any]] = summary.get("shards", {})
    for metric, key in (
        ("chunks_loaded", "chunks"), ("chunks_already_loaded", "chunks_already_loaded"), ("chunks_retried", "chunks_retried"),
    ):  # fmt: skip
        _incr(metric, pipeline_id, sum(int(shard.get(key) or 0) for shard in shards.values()))
    lags = {shard_id: shard["lag_ms"] for shard_id, shard in shards.items() if shard.get("lag_ms") is not None}
    for shard_id, lag in lags.items():
        _gauge("shard_lag_ms", pipeline_id, lag, shard_id=shard_id)
    if lags:
        _gauge("max_lag_ms", pipeline_id, max(lags.values()))
    unmatched: Mapping[str, Any] = summary.get("unmatched_fields", {})
    _gauge("fields_without_column", pipeline_id, len(unmatched.get("members_without_column", [])))
    # 0 from a run that loaded everything clears the alert an earlier run raised.
    _gauge("shards_waiting", pipeline_id, sum(1 for shard in shards.values() if shard.get("waiting_for")))


def emit_label_window_broken(pipeline_id: str) -> None:
    """Count a run the label-window check stopped (it loaded nothing, so no other metric is sent)."""
    _incr("label_window_broken", pipeline_id, 1)


def _incr(metric: str, pipeline_id: str, count: int) -> None:
    if count:
        for name, tags in _names(metric, pipeline_id):
            Stats.incr(name, count, tags=tags)


def _gauge(metric: str, pipeline_id: str, value: float, *, shard_id: str | None = None) -> None:
    for name, tags in _names(metric, pipeline_id, shard_id):
        Stats.gauge(name, value, tags=tags)


def _names(metric: str, pipeline_id: str, shard_id: str | None = None) -> list[tuple[str, dict[str, str]]]:
    tags = {"pipeline_id": pipeline_id, **({"shard_id": shard_id} if shard_id else {})}
    named = ".".join(_NOT_IN_A_NAME.sub("_", part) for part in (pipeline_id, shard_id) if part)
    return [(f"{PREFIX}.{metric}", tags), (f"{PREFIX}.{metric}.{named}", {})]
