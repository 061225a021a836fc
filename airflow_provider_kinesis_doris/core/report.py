"""What loading one range reports (one row of the Spark job's output), the driver's reading
of those reports back into the typed error of the first failed range, and the task's XCom: an
interval's result shaped for it (:func:`xcom_summary`).

Apart from the loader so that what only reads reports (the commit, the runner choice, the Spark
driver) does not import the loader with its clients, sessions and Stream Load machinery.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_provider_kinesis_doris.core.errors import RangeFailure

if TYPE_CHECKING:
    from airflow_provider_kinesis_doris.core.pipeline import IntervalResult

log = logging.getLogger(__name__)

XCOM_ATTENTION_MAX = 100
"""Shards listed by name in the task's XCom at most (those that need attention)."""


@dataclass
class RangeReport:
    """What loading one range did; one row of the Spark job's output."""

    shard_id: str
    interval_start_ms: int
    records: int = 0
    rows_loaded: int = 0
    rows_filtered: int = 0
    rows_unselected: int = 0
    dead_lettered: int = 0
    rows_already_loaded: int = 0
    """Rows of chunks an earlier attempt had loaded (a replay): not sent again."""
    dead_letters_already_loaded: int = 0
    records_skipped: int = 0
    """Records that make no row by design and are neither loaded nor dead letters (a CloudWatch
    Logs control message with ``decoder="gzip+json"``, a decoder function returning no row)."""
    dead_letter_reasons: dict[str, int] = field(default_factory=dict)
    """Dead letters this run sent, by the kind of their reason (see :func:`~airflow_provider_kinesis_doris.core.chunk_load.reason_kind`)."""
    chunks: int = 0
    chunks_already_loaded: int = 0
    chunks_retried: int = 0
    """Stream Loads of this run that needed more than one attempt (throttled, dropped, 5xx)."""
    probe_loads: int = 0
    """Two-phase probe loads sent to find the rows Doris refused in a chunk (``core.doris.rejections``)."""
    loads_aborted: int = 0
    """Transactions of this run that ended aborted: chunks Doris failed for refused rows, and the
    probes, each aborted once answered. Like loads, they count towards ``label_num_threshold``."""
    labels: list[str] = field(default_factory=list)
    fields: list[str] = field(default_factory=list)
    """JSON member names of the range's first rows (``core.fields``)."""
    end: dict[str, Any] | None = None
    drained: bool = False
    last_position: str | None = None
    millis_behind_latest: int | None = None
    get_records_calls: int = 0
    subscribe_calls: int = 0
    seconds: float = 0.0
    failure: dict[str, Any] | None = None
    """The range's typed error (:class:`RangeFailure` as a dict) when it could not be loaded."""

    @property
    def range_id(self) -> str:
        """``<shard id>#<interval start>``: names the range in Spark rows and logs."""
        return f"{self.shard_id}#{self.interval_start_ms}"

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RangeReport:
        return cls(**json.loads(text))


def raise_first_failure(reports: Sequence[RangeReport]) -> None:
    """Raise the typed error of the first failed range, after logging every failed range.

    :raises KinesisDorisError: (the failed range's own class) if any range failed.
    """
    failures = [RangeFailure(**report.failure) for report in reports if report.failure]
    for failure in failures:
        log.error("range of shard %s failed: %s: %s", failure.shard, failure.type, failure.message)
    if failures:
        raise failures[0].to_error()


def xcom_summary(result: IntervalResult) -> dict[str, Any]:
    """What the task returns to XCom: the totals of ``result.summary()``, how many shards took each
    decision, and only the shards that need attention (waiting for parents, dead letters, rows
    Doris refused), without their labels, at most ``XCOM_ATTENTION_MAX`` of them. Its size does
    not grow with the shard count; the task log has every shard's line. The pipeline page reads
    this shape (``ui``)."""
    full = result.summary()
    shards: dict[str, dict[str, Any]] = full.pop("shards")
    attention = {shard_id: entry for shard_id, entry in shards.items() if _needs_attention(entry)}
    listed = sorted(attention)[:XCOM_ATTENTION_MAX]
    lags = [entry["lag_ms"] for entry in shards.values() if entry.get("lag_ms") is not None]
    return {
        **full,
        "shard_count": len(shards),
        "decisions": dict(sorted(Counter(entry["decision"] for entry in shards.values()).items())),
        "chunks": sum(entry.get("chunks", 0) for entry in shards.values()),
        "max_lag_ms": max(lags, default=None),
        "attention": {shard_id: _without_labels(attention[shard_id]) for shard_id in listed},
        "attention_not_listed": len(attention) - len(listed),
    }


def _needs_attention(entry: Mapping[str, Any]) -> bool:
    return bool(entry.get("waiting_for") or entry.get("dead_lettered") or entry.get("filtered"))


def _without_labels(entry: Mapping[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in entry.items() if name != "labels"}
