"""What a Spark task runs: load its range groups (read from Kinesis, Stream Load into Doris) and
return one report per range, either as an RDD partition (``load_partition``, a classic session's
job) or as a PySpark Python Data Source that *is* the load (Spark Connect, which has no RDDs).

Why a fused reader instead of reader → writer: moving rows from a Python reader to a Python
writer through the JVM costs 2–4 µs per row and cancels the second core on a small machine,
while all the work in one Python worker matched a plain loop (measured in
``docs/benchmarks.md``). Exactly-once comes from labels and the DynamoDB intent log,
not from Spark's commit protocol, so a writer's ``commit()`` would add nothing.

Runs on executors: imports ``core`` only, never Airflow.
"""

from __future__ import annotations

from collections.abc import Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

SOURCE_NAME = "kinesis_to_doris"
REPORT_SCHEMA = "range_id STRING, report STRING"
PARTITIONS_OPTION = "partitions"
"""The source's option that deals the job's range groups into at most that many Spark partitions
(``LoadJob.binned``); without it, each group is a partition of its own."""


def _credentials(job: object) -> object:
    """The job's credentials file: at its path in local mode, or, named without a folder, shipped
    to the executor by ``spark-submit --files`` (``spark.runner.prepare_submission``)."""
    import os

    from airflow_provider_kinesis_doris.core.settings import Credentials

    path = job.credentials_file  # type: ignore[attr-defined]
    if path and not os.path.isabs(path):
        from pyspark import SparkFiles

        path = SparkFiles.get(path)
    return Credentials.load(path)


class RangeGroup(InputPartition):
    """One Spark partition: range groups (lists of range indices, each in order, parents before
    children), loaded side by side in lanes."""

    def __init__(self, groups: list[list[int]]) -> None:
        super().__init__(groups)


class KinesisToDorisSource(DataSource):
    """``spark.read.format("kinesis_to_doris").option("job", <LoadJob JSON>).load()``.

    The job carries the planned ranges and connection settings but no secret: executors take
    credentials from their environment (see ``core.load_job``).
    """

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return REPORT_SCHEMA

    def reader(self, schema: object) -> DataSourceReader:
        partitions = self.options.get(PARTITIONS_OPTION)
        return _RangeLoadReader(self.options["job"], int(partitions) if partitions else None)


class _RangeLoadReader(DataSourceReader):
    def __init__(self, job_json: str, partitions: int | None) -> None:
        self.job_json, self.partitions_at_most = job_json, partitions

    def partitions(self) -> list[InputPartition]:
        from airflow_provider_kinesis_doris.core.load_job import LoadJob

        job = LoadJob.from_json(self.job_json)
        if self.partitions_at_most is None:
            return [RangeGroup([group]) for group in job.partition_groups()]
        return [RangeGroup(groups) for groups in job.binned(self.partitions_at_most)]

    def read(self, partition: InputPartition) -> Iterator[tuple[str, str]]:
        yield from load_partition(self.job_json, partition.value or [])  # a job without ranges: one of None


def load_partition(job_json: str, groups: list[list[int]]) -> Iterator[tuple[str, str]]:
    """Load one Spark partition's range groups of the job (``LoadJob`` JSON) in this executor's
    Python worker: ``(range_id, report JSON)`` per range."""
    # Imported here: this runs in an executor's Python worker.
    import os

    from airflow_provider_kinesis_doris.core.load_job import LoadJob

    job = LoadJob.from_json(job_json)
    profile_dir = os.environ.get(PROFILE_DIR_ENV)
    reports = _profiled(job, groups, profile_dir) if profile_dir else _load(job, groups)
    for report in reports:
        yield report.range_id, report.to_json()


PROFILE_DIR_ENV = "KINESIS_DORIS_PROFILE_DIR"
"""Set on the driver (executors inherit it in local mode): every partition then writes a cProfile
file ``partition-<pid>-<first range>.prof`` into that folder."""


def _load(job: object, groups: list[list[int]]) -> list[object]:
    from airflow_provider_kinesis_doris.core.concurrency import DEFAULT_DRIVER_CONCURRENCY
    from airflow_provider_kinesis_doris.core.load import SPARK_EXECUTOR, load_share_here

    # In lanes, as InProcessRunner's by default: a partition of many small ranges waits on Kinesis,
    # Doris and DynamoDB for each, and a lane holds at most two chunks in memory.
    lanes = DEFAULT_DRIVER_CONCURRENCY
    return load_share_here(job, groups, _credentials(job), lanes, SPARK_EXECUTOR)  # type: ignore[arg-type,return-value]


def _profiled(job: object, groups: list[list[int]], folder: str) -> list[object]:
    """``_load`` under the standard library's profiler (py-spy cannot attach to Spark's workers)."""
    import cProfile
    import os

    profiler = cProfile.Profile()
    reports = profiler.runcall(_load, job, groups)
    first = groups[0][0] if groups and groups[0] else "none"
    profiler.dump_stats(os.path.join(folder, f"partition-{os.getpid()}-{first}.prof"))
    return reports
