"""``runner=SparkOrInProcess()``: load in this process when the planned work is small, start Spark otherwise.

Spark's start costs about 15 s and 20 CPU-seconds on the local stack (JVM, Python workers), while
this process loads about 60,000 records a CPU-second (``docs/benchmarks.md``, hot path): below a
few hundred thousand records the start-up is most of the run.

The estimate costs no call when even full shards would be small: Kinesis's write limit (1,000
records a second per shard) over each range's interval is at most the threshold. Otherwise each
range counts what its shard carried in its latest loaded intervals (the counts the commit stores
with each range; one Query per range, ``driver_concurrency`` at a time, stopping once the sum is
over the threshold), the largest of them; a shard with no loaded interval yet (a new pipeline, a
child of a reshard) counts at the write limit, so a first backfill of a busy stream goes to Spark.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import KW_ONLY, asdict, dataclass, field
from typing import Any

from airflow_provider_kinesis_doris.core.concurrency import DEFAULT_DRIVER_CONCURRENCY, map_bounded
from airflow_provider_kinesis_doris.core.report import RangeReport
from airflow_provider_kinesis_doris.core.load_job import LoadJob
from airflow_provider_kinesis_doris.core.settings import Credentials
from airflow_provider_kinesis_doris.core.model import ShardRange
from airflow_provider_kinesis_doris.core.rebalance import RECENT_INTERVALS
from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
from airflow_provider_kinesis_doris.core.value_checks import check_whole_number

log = logging.getLogger(__name__)

DEFAULT_IN_PROCESS_MAX_RECORDS = 500_000
"""Estimated records of a run at most that ``SparkOrInProcess`` loads without Spark."""
SHARD_WRITE_LIMIT_RECORDS_PER_S = 1_000
"""Kinesis's write limit per shard: what a shard without history may have carried."""

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
    else those whose shard has no loaded interval."""
    in_process_max_records: int

    def summary(self) -> dict[str, Any]:
        return asdict(self)


def estimate_records(
    store: CheckpointStore, ranges: Sequence[ShardRange], max_records: int, *, concurrency: int = DEFAULT_DRIVER_CONCURRENCY
) -> tuple[int, int]:
    """The records ``ranges`` will hold at most, as far as the store knows (or a sum already over
    ``max_records``), and how many ranges were counted at the write limit."""
    bound = sum(_at_write_limit(shard_range) for shard_range in ranges)
    if bound <= max_records:
        return bound, len(ranges)

    def one(shard_range: ShardRange) -> tuple[int, bool]:
        counts = store.recent_loaded_counts(shard_range.shard_id, RECENT_INTERVALS)
        carried = [interval.get("records", 0) for interval in counts.values()]
        return (max(carried), False) if carried else (_at_write_limit(shard_range), True)

    records = at_limit = 0
    for first in range(0, len(ranges), concurrency):
        for estimate, unknown in map_bounded(one, ranges[first : first + concurrency], concurrency):
            records, at_limit = records + estimate, at_limit + unknown
        if records > max_records:
            break  # Spark either way: the rest need not be read
    return records, at_limit


def _at_write_limit(shard_range: ShardRange) -> int:
    seconds = max(shard_range.interval_end_ms - shard_range.interval_start_ms, 0) / 1000
    return int(seconds * SHARD_WRITE_LIMIT_RECORDS_PER_S)


@dataclass
class AutoRunner:
    """A runner (``core.pipeline.Runner``) that loads a job in this process when its estimated
    records are at most ``max_records``, with Spark otherwise; ``choice`` tells what it chose.

    :param store: the pipeline's checkpoint store (the shards' recent counts).
    :param spark: the Spark runner.
    :param in_process: the in-process runner (``core.pipeline.run_here``).
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

    def __post_init__(self) -> None:
        check_whole_number("in_process_max_records", self.max_records, 0)

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
