"""``runner=SparkOrInProcess()``: load in this process when the planned work is small, start Spark otherwise.

Spark's start costs about 15 s and 20 CPU-seconds on the local stack (JVM, Python workers), while
this process loads about 60,000 records a CPU-second (``docs/benchmarks.md``, hot path): below a
few hundred thousand records the start-up is most of the run.

The estimate reads no Kinesis record: it is what each range may hold as the checkpoint table knows it.

* No call when even full shards would be small: Kinesis's write limit (1,000 records a second per
  shard) over each range's interval is at most the threshold.
* Otherwise a range counts what its shard carried in its latest loaded intervals (the counts the
  commit stores with each range; one Query per range, ``driver_concurrency`` at a time, stopping
  once the sum is over the threshold): the largest of the counts, each first extrapolated to this
  range's length when the range is longer, at the rate of records over the time from that interval's start
  to the shard's next range. That time is the interval's length or more (a quiet interval stores
  no range), so the rate is never overstated; a count is never scaled down.
* A shard with no loaded interval yet (a new pipeline, a child of a reshard) counts at the write
  limit over the range's interval, so a first run of a busy stream goes to Spark.
* A TRIM_HORIZON pipeline's first range of a shard (the sweep, from the shard's start) holds all
  the stream retains, not one interval: it counts at the write limit over Kinesis's longest
  retention (365 days), without a call, so the first run goes to Spark.

Its error (``tests/integration/test_runner_choice_error.py`` measures each case on kinesis-mock):

* exact when a shard's records per second are steady across its recent intervals and this one,
  and the range is no shorter than those intervals;
* low by the factor a shard's rate grew past the busiest of its recent intervals: the estimate
  sees only the past;
* high by up to the ratio of lengths when the range is shorter than the shard's recent intervals
  (their whole count), or longer than intervals whose records came in one burst (their rate);
* the write-limit counts are upper bounds in Kinesis records. A KPL aggregate is one Kinesis
  record holding many user records, so a shard without counts may hold its write-limit count times
  the user records per aggregate; the loaded counts are user records, so the estimate from them is
  not affected.

Before the extrapolation, a run of a longer interval than the shard's recent ones (a schedule made
longer) was estimated at their count: "about 76 records" for a run of 304, after intervals of a
quarter its length. Before sweeps counted the retention, a TRIM_HORIZON pipeline's first run on two
shards with a 38 ms floor interval was estimated at 76 records and loaded 297 in process.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, asdict, dataclass, field
from typing import Any

from airflow_provider_kinesis_doris.core.concurrency import DEFAULT_DRIVER_CONCURRENCY, map_bounded
from airflow_provider_kinesis_doris.core.report import RangeReport
from airflow_provider_kinesis_doris.core.load_job import LoadJob
from airflow_provider_kinesis_doris.core.settings import Credentials
from airflow_provider_kinesis_doris.core.model import SHARD_START_INSTANT_MS, BoundaryKind, ShardRange
from airflow_provider_kinesis_doris.core.rebalance import RECENT_INTERVALS
from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore

log = logging.getLogger(__name__)

DEFAULT_IN_PROCESS_MAX_RECORDS = 500_000
"""Estimated records of a run at most that ``SparkOrInProcess`` loads without Spark."""
SHARD_WRITE_LIMIT_RECORDS_PER_S = 1_000
"""Kinesis's write limit per shard: what a shard without history may have carried."""
MAX_RETENTION_MS = 8_760 * 3_600_000
"""Kinesis's longest retention period (365 days): how far back a sweep from a shard's start reaches."""

IN_PROCESS = "in_process"
SPARK = "spark"


@dataclass(frozen=True)
class RunnerChoice:
    """Where a run loads and the inputs of that decision (logged, and in the task's XCom)."""

    runner: str
    estimated_records: int
    ranges: int
    ranges_at_write_limit: int
    """Ranges counted at Kinesis's write limit: all when that bound alone was small enough,
    else those whose shard has no loaded interval and the sweeps from a shard's start."""
    max_records: int
    """``SparkOrInProcess.max_records``: the largest estimate loaded in process."""

    def summary(self) -> dict[str, Any]:
        return asdict(self)


def estimate_records(
    store: CheckpointStore, ranges: Sequence[ShardRange], max_records: int, *, concurrency: int = DEFAULT_DRIVER_CONCURRENCY
) -> tuple[int, int]:
    """The records ``ranges`` will hold, as far as the store knows (or a sum already over
    ``max_records``), and how many ranges were counted at the write limit."""
    bound = sum(_at_write_limit(shard_range) for shard_range in ranges)
    if bound <= max_records:
        return bound, len(ranges)

    def one(shard_range: ShardRange) -> tuple[int, bool]:
        if _sweeps_the_shard(shard_range):
            return _at_write_limit(shard_range), True  # its shard's counts are of single intervals
        counts = store.ranges.recent_loaded_counts(shard_range.shard_id, RECENT_INTERVALS)
        return (_from_recent_intervals(shard_range, counts), False) if counts else (_at_write_limit(shard_range), True)

    records = at_limit = 0
    for first in range(0, len(ranges), concurrency):
        for estimate, unknown in map_bounded(one, ranges[first : first + concurrency], concurrency):
            records, at_limit = records + estimate, at_limit + unknown
        if records > max_records:
            break  # Spark either way: the rest need not be read
    return records, at_limit


def _from_recent_intervals(shard_range: ShardRange, counts: Mapping[int, Mapping[str, int]]) -> int:
    """The largest of the shard's recent counts (interval start → counts), each scaled up to the
    range's length at the rate it shows over the time from its interval's start to the shard's
    next range. That time is the interval's length or more (a quiet interval stores no range, a
    range not loaded yet is not among ``counts``), so the rate is never overstated; the range's
    own start is the next range of the latest interval before it."""
    starts = sorted({*counts, shard_range.interval_start_ms})
    next_start = dict(zip(starts, starts[1:]))
    length_ms = _length_ms(shard_range)
    return max(
        _scaled_up(interval.get("records", 0), length_ms, next_start.get(start, start) - start)
        for start, interval in counts.items()
    )


def _scaled_up(records: int, length_ms: int, spacing_ms: int) -> int:
    """``records`` seen over ``spacing_ms`` (0: unknown), at that rate over ``length_ms`` when that
    is more: a shorter range still counts them all, as the spacing may be mostly quiet time."""
    if spacing_ms <= 0 or length_ms <= spacing_ms:
        return records
    return math.ceil(records * length_ms / spacing_ms)


def _sweeps_the_shard(shard_range: ShardRange) -> bool:
    """A TRIM_HORIZON pipeline's first range of a shard: from the shard's start, whatever its
    interval (``core.plan``), so it holds all that retention kept."""
    return shard_range.start.kind is BoundaryKind.SHARD_START and shard_range.start.instant_ms == SHARD_START_INSTANT_MS


def _at_write_limit(shard_range: ShardRange) -> int:
    """Kinesis records the range can hold at most: the write limit over the time its records
    arrived in (for a sweep, the longest retention Kinesis offers)."""
    span_ms = MAX_RETENTION_MS if _sweeps_the_shard(shard_range) else _length_ms(shard_range)
    return int(span_ms / 1000 * SHARD_WRITE_LIMIT_RECORDS_PER_S)


def _length_ms(shard_range: ShardRange) -> int:
    return max(shard_range.interval_end_ms - shard_range.interval_start_ms, 0)


@dataclass
class AutoRunner:
    """A runner (``core.pipeline.Runner``) that loads a job in this process when its estimated
    records are at most ``max_records``, with Spark otherwise; ``choice`` tells what it chose.

    :param store: the pipeline's checkpoint store (the shards' recent counts).
    :param spark: the Spark runner.
    :param in_process: the in-process runner (``core.load.run_here``).
    :param max_records: the largest estimate loaded in process.
    :param concurrency: the store's reads at the same time (one Query per range).
    """

    store: CheckpointStore
    _: KW_ONLY
    spark: Any
    in_process: Any
    max_records: int = DEFAULT_IN_PROCESS_MAX_RECORDS
    concurrency: int = DEFAULT_DRIVER_CONCURRENCY
    choice: RunnerChoice | None = field(default=None, init=False)

    def __call__(self, job: LoadJob, credentials: Credentials) -> Sequence[RangeReport]:
        ranges = job.ranges
        records, unknown = estimate_records(self.store, ranges, self.max_records, concurrency=self.concurrency)
        runner = IN_PROCESS if records <= self.max_records else SPARK
        self.choice = RunnerChoice(runner, records, len(ranges), unknown, self.max_records)
        log.info(
            "SparkOrInProcess: loading %d ranges %s: about %d records (%d ranges counted at Kinesis's write "
            "limit of %d records/s), in process up to %d",
            len(ranges), "in this process" if runner == IN_PROCESS else "with Spark", records, unknown,
            SHARD_WRITE_LIMIT_RECORDS_PER_S, self.max_records,
        )  # fmt: skip
        return (self.in_process if runner == IN_PROCESS else self.spark)(job, credentials)
