"""A typed error on a Spark executor reaches the driver as its own class, with the failed shard:
the job returns ``{type, shard, label, message}`` per failed range and the driver raises it, so
the operator maps types instead of searching Spark's text. Real Spark (local mode), real
DynamoDB (moto) and Kinesis (kinesis-mock)."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import pytest

from airflow_provider_kinesis_doris.core.errors import CheckpointNotFound, KinesisDorisError, RangeFailure
from airflow_provider_kinesis_doris.core.load import SPARK_EXECUTOR, load_share_here
from airflow_provider_kinesis_doris.core.report import raise_first_failure
from airflow_provider_kinesis_doris.core.load_job import LoadJob
from airflow_provider_kinesis_doris.core.settings import Credentials
from airflow_provider_kinesis_doris.core.model import Boundary, BoundaryKind, ShardRange
from airflow_provider_kinesis_doris.spark import runner as spark_runner
from airflow_provider_kinesis_doris.spark.runner import SparkSettings, run_spark_job
from tests.conftest import DORIS_PASSWORD

pytestmark = pytest.mark.integration


def _job_whose_second_range_is_broken(world: dict[str, Any], groups: tuple[tuple[int, ...], ...] = ((0, 1),)) -> LoadJob:
    config = world["config"]
    # A recent interval: a sweep whose end lies behind the trim horizon fails DataTrimmed first.
    start_ms = int(time.time() * 1000) - 60_000

    def shard_range(shard_id: str) -> ShardRange:
        return ShardRange(
            config.pipeline_id, config.stream_name, shard_id, start_ms, start_ms + 1_000,
            Boundary(shard_id, 0, BoundaryKind.SHARD_START), Boundary(shard_id, start_ms + 1_000, BoundaryKind.PENDING),
        )  # fmt: skip

    # Both ranges are valid, but only the first was planned (stored): the loader refuses the
    # second with CheckpointNotFound, a typed error, after loading the first.
    ranges = (shard_range("shardId-000000000000"), shard_range("shardId-000000000001"))
    world["store"].ledger.put_boundary(ranges[0].start)
    world["store"].ledger.put_boundary(ranges[0].end)
    world["store"].ranges.create_range(ranges[0])
    return LoadJob(config, ranges, groups)


def _loaded(world: dict[str, Any], job: LoadJob, index: int) -> bool:
    """Whether range ``index`` of ``job`` was loaded: its PENDING end is settled in the store."""
    shard_range = job.ranges[index]
    end = world["store"].ledger.read_boundaries([shard_range.shard_id], shard_range.end.instant_ms)[shard_range.shard_id]
    return end.kind is not BoundaryKind.PENDING


def test_a_failed_range_ends_its_group_with_a_typed_failure_report(world: dict[str, Any]) -> None:
    job = _job_whose_second_range_is_broken(world)

    reports = load_share_here(job, [[0, 1]], Credentials(doris_password=DORIS_PASSWORD), 1, SPARK_EXECUTOR)

    assert [r.shard_id for r in reports] == ["shardId-000000000000", "shardId-000000000001"]
    assert reports[0].failure is None
    failure = RangeFailure(**reports[1].failure)  # type: ignore[arg-type]
    assert (failure.type, failure.shard) == ("CheckpointNotFound", "shardId-000000000001")
    assert "No range of shard shardId-000000000001" in failure.message
    with pytest.raises(CheckpointNotFound, match=r"No range of shard .*\(shard shardId-000000000001, on a Spark"):
        raise_first_failure(reports)


@pytest.mark.spark
def test_a_typed_error_on_an_executor_is_raised_as_its_class_on_the_driver(world: dict[str, Any]) -> None:
    job = _job_whose_second_range_is_broken(world)

    with pytest.raises(CheckpointNotFound) as raised:
        run_spark_job(job, Credentials(doris_password=DORIS_PASSWORD), SparkSettings(master="local[1]"))

    assert "shardId-000000000001" in str(raised.value)
    assert "Py4J" not in str(raised.value) and "Traceback" not in str(raised.value)


@pytest.mark.spark
def test_a_failed_group_of_a_spark_partition_ends_only_itself(world: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """A local master deals the groups into a few partitions, each loading its groups in lanes: the
    broken group, first in the only partition, does not keep the other group from loading."""
    monkeypatch.setattr(spark_runner, "TASKS_PER_LOCAL_CORE", 1)
    job = _job_whose_second_range_is_broken(world, groups=((1,), (0,)))

    with pytest.raises(CheckpointNotFound, match="shardId-000000000001"):
        run_spark_job(job, Credentials(doris_password=DORIS_PASSWORD), SparkSettings(master="local[1]"))

    assert _loaded(world, job, 0)


@pytest.mark.parametrize("error_class", [c for c in vars(__import__(
    "airflow_provider_kinesis_doris.core.errors", fromlist=["x"])).values()
    if isinstance(c, type) and issubclass(c, KinesisDorisError)], ids=lambda c: c.__name__)  # fmt: skip
def test_every_error_class_survives_the_round_trip(error_class: type[KinesisDorisError]) -> None:
    error = error_class.__new__(error_class)
    Exception.__init__(error, "the message")
    failure = RangeFailure.of(error, "shard-7", SPARK_EXECUTOR)
    rebuilt = RangeFailure(**replace(failure).__dict__).to_error()
    assert type(rebuilt) is error_class
    assert str(rebuilt) == "the message (shard shard-7, on a Spark executor)"


def test_an_unknown_type_comes_back_as_the_base_class() -> None:
    rebuilt = RangeFailure("SomethingNew", "s", "m", SPARK_EXECUTOR).to_error()
    assert type(rebuilt) is KinesisDorisError
