"""The load job: JSON round trip without secrets."""

from __future__ import annotations

import json
import os

import pytest

from airflow_provider_kinesis_doris.testing.builders import pipeline_config
from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.core.load_job import LoadJob, pipeline_from_dict, pipeline_to_dict
from airflow_provider_kinesis_doris.core.settings import AwsSettings, Credentials, PipelineConfig
from airflow_provider_kinesis_doris.core.model import Boundary, BoundaryKind, Position, ShardRange, ShardState
from airflow_provider_kinesis_doris.core.plan import Plan, ShardDecision, ShardPlan
from airflow_provider_kinesis_doris.core.doris.options import StreamLoadOptions
from airflow_provider_kinesis_doris.core.doris.connection import DorisConnectionConfig, RetryPolicy
from airflow_provider_kinesis_doris.core.mapping import RecordMapping
from airflow_provider_kinesis_doris.spark.runner import local_cores


def shard_range(shard_id: str, start: Boundary | None = None) -> ShardRange:
    return ShardRange(
        "p", "s", shard_id, 1000, 2000,
        start or Boundary(shard_id, 1000, BoundaryKind.AT, Position(12345678901234567890123456789, 3)),
        Boundary(shard_id, 2000, BoundaryKind.PENDING),
    )  # fmt: skip


def config(**overrides) -> PipelineConfig:  # type: ignore[no-untyped-def]
    values = dict(
        doris_table="events", dead_letter_table="events_dead_letter",
        doris=DorisConnectionConfig(host="fe", be_hosts=("be1:8040",), be_address_map={"10.0.0.1:8040": "be1:8040"}),
        aws=AwsSettings("eu-west-1", "http://127.0.0.1:1", None),
        load_options=StreamLoadOptions.json_lines(columns=("a", "b"), max_filter_ratio=0.1),
        mapping=RecordMapping(metadata_columns=("_kinesis_shard",), required_fields=("id",)),
        chunk_max_rows=10, chunk_max_bytes=1000,
        retry_policy=RetryPolicy(max_attempts=2, initial_backoff_seconds=0.1),
        initial_position="TRIM_HORIZON", relaxed_order=True, parallelism=2,
    )  # fmt: skip
    values.update(overrides)
    return pipeline_config(**values)


def job(**overrides) -> LoadJob:  # type: ignore[no-untyped-def]
    values = dict(
        pipeline=config(),
        ranges=(shard_range("a"), shard_range("b", Boundary("b", 0, BoundaryKind.SHARD_START))),
        groups=((1,), (0,)),
    )  # fmt: skip
    values.update(overrides)
    return LoadJob(**values)


def test_json_round_trip_is_exact() -> None:
    original = job()
    assert LoadJob.from_json(original.to_json()) == original


def test_the_fresh_ranges_survive_the_trip_to_the_executors() -> None:
    # A Spark partition reads ``fresh`` from the job's JSON: a lost index would make its loader
    # read the chunk log it could skip, a wrong one skip a log it must read.
    original = job(fresh=frozenset({1}))
    copy = LoadJob.from_json(original.to_json())
    assert copy.fresh == frozenset({1}) and copy == original


def test_job_refuses_a_password_and_credentials_stay_out_of_json(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigurationError, match="password"):
        job(pipeline=config(doris=DorisConnectionConfig(host="fe", password="pw")))
    secrets = Credentials(doris_password="doris-pw", aws_secret_access_key="aws-secret")
    path = tmp_path / "credentials.json"
    secrets.write(str(path))
    assert path.stat().st_mode & 0o777 == 0o600
    assert Credentials.load(str(path)) == secrets
    assert "doris-pw" not in repr(secrets) and "aws-secret" not in repr(secrets)
    assert "doris-pw" not in job(credentials_file=str(path)).to_json()


def test_groups_must_cover_every_range_once() -> None:
    with pytest.raises(ConfigurationError, match="exactly once"):
        job(groups=((0,),))


def test_the_transform_is_imported_where_the_config_is_made_and_again_from_json() -> None:
    from kinesis_doris_devstack.scenario import prefix_user

    made = config(transform_path="kinesis_doris_devstack.scenario:prefix_user")
    assert made.mapping.transform is prefix_user  # the in-task runner maps with it too
    assert pipeline_from_dict(json.loads(json.dumps(pipeline_to_dict(made)))).mapping.transform is prefix_user


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("no_such_module:f", "Cannot import transform 'no_such_module:f': ModuleNotFoundError: No module named 'no_such_module'"),
        ("json:no_such_function", "Cannot import transform 'json:no_such_function': AttributeError: module 'json' has no attribute 'no_such_function'"),
        ("json:__name__", "transform 'json:__name__' is a str, not a function"),
        ("json.loads", "transform must be 'package.module:function', got 'json.loads'"),
    ],
)
def test_a_transform_that_does_not_import_fails_the_config_naming_it(path: str, message: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        config(transform_path=path)
    assert str(raised.value) == message


@pytest.mark.parametrize(
    ("parallelism", "assignment", "read"),
    [(None, None, False), (3, None, False), (2, None, True), (None, {"a": 0, "b": 0, "c": 1}, True)],
)
def test_traffic_weights_are_read_only_when_ranges_share_partitions(
    parallelism: int | None, assignment: dict[str, int] | None, read: bool
) -> None:
    plan = Plan("p", "s", 1000, 2000, tuple(
        ShardPlan(shard_id, (), ShardState.OPEN, 0, ShardDecision.NEW, shard_range(shard_id)) for shard_id in "abc"
    ))  # fmt: skip
    reads: list[str] = []

    def weights() -> dict[str, float]:
        reads.append("read")
        return {"a": 5.0, "b": 1.0, "c": 1.0}

    built = LoadJob.of(config(parallelism=parallelism), plan, weights, assignment)

    assert bool(reads) is read
    assert sorted(i for group in built.groups for i in group) == [0, 1, 2]
    if parallelism == 2:
        # The heavy shard gets a partition of its own.
        assert sorted(built.groups, key=len) == [(0,), (1, 2)]


@pytest.mark.parametrize("partitions", [1, 2, 3, 5, 9])
def test_a_binned_job_keeps_each_group_whole_and_in_order(partitions: int) -> None:
    ranges = tuple(shard_range(f"s{i}") for i in range(9))
    groups = ((0, 1, 2), (3,), (4, 5), (6,), (7,), (8,))  # (0, 1, 2): a parent and its children, in order
    bins = job(ranges=ranges, groups=groups).binned(partitions)

    assert len(bins) == min(partitions, len(groups))
    # Every group is in one bin, whole and in its order; no group is split or joined to another.
    assert sorted(tuple(group) for held in bins for group in held) == sorted(groups)
    sizes = [sum(map(len, held)) for held in bins]
    assert max(sizes) - min(sizes) <= len(groups[0])


@pytest.mark.parametrize(
    ("master", "cores"), [("local", 1), ("local[3]", 3), ("local[4,2]", 4), ("local[*]", os.cpu_count() or 1)]
)
def test_a_local_masters_task_slots(master: str, cores: int) -> None:
    assert local_cores(master) == cores
