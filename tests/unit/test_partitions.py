"""One placement for the rebalance step and the loader (``core.partitions``): a job's ranges keep
a child after its parents in one partition (I5), stay balanced, and follow the stored assignment,
so a rebalance with ``partitions=N`` changes how the next load is partitioned."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_kinesis_doris.core.report import RangeReport
from airflow_provider_kinesis_doris.core.load_job import LoadJob
from airflow_provider_kinesis_doris.core.settings import Credentials, PipelineConfig
from airflow_provider_kinesis_doris.core.mapping import RecordMapping
from airflow_provider_kinesis_doris.core.model import Boundary, BoundaryKind, Position, ShardRange
from airflow_provider_kinesis_doris.core.partitions import group_ranges
from airflow_provider_kinesis_doris.core.pipeline import run_interval
from airflow_provider_kinesis_doris.core.rebalance import rebalance
from airflow_provider_kinesis_doris.core.stores.memory import memory_store
from airflow_provider_kinesis_doris.testing.builders import load_in_thread, pipeline_config
from airflow_provider_kinesis_doris.testing.fake_kinesis import FakeKinesis
from airflow_provider_kinesis_doris.testing.memory_doris import MemoryDoris

STREAM = "events"
T0 = 1_700_000_000_000
IV = 60_000


def shard_range(shard_id: str) -> ShardRange:
    return ShardRange(
        "p", STREAM, shard_id, 1000, 2000,
        Boundary(shard_id, 1000, BoundaryKind.AT, Position(12345678901234567890123456789, 3)),
        Boundary(shard_id, 2000, BoundaryKind.PENDING),
    )  # fmt: skip


def test_children_stay_after_their_parents_in_one_partition() -> None:
    ranges = [shard_range(s) for s in ("p1", "p2", "other1", "other2", "c1", "c2", "merged")]
    parents = {"c1": ("p1",), "c2": ("p1",), "merged": ("c2", "p2")}
    groups = group_ranges(ranges, parents, partitions=3)
    lineage = {0, 1, 4, 5, 6}
    (together,) = [g for g in groups if set(g) & lineage]
    assert set(together) >= lineage
    assert list(together) == sorted(together)


@settings(max_examples=80, deadline=None)
@given(
    weights=st.lists(st.integers(min_value=1, max_value=100), min_size=1, max_size=24),
    parallelism=st.integers(min_value=1, max_value=8),
)
def test_balance_is_within_one_shard_of_even(weights: list[int], parallelism: int) -> None:
    ranges = [shard_range(f"s{i}") for i in range(len(weights))]
    by_shard = {f"s{i}": float(w) for i, w in enumerate(weights)}
    groups = group_ranges(ranges, {}, parallelism, by_shard)
    assert sorted(i for g in groups for i in g) == list(range(len(weights)))
    assert len(groups) == min(parallelism, len(weights))
    loads = [sum(weights[i] for i in g) for g in groups]
    assert max(loads) - min(loads) <= max(weights)
    assert groups == group_ranges(ranges, {}, parallelism, by_shard)


def test_a_stored_assignment_places_each_lineage_where_it_says() -> None:
    ranges = [shard_range(s) for s in ("a", "b", "c", "d")]
    assignment = {"a": 1, "b": 0, "c": 1, "d": 0}
    groups = group_ranges(ranges, {}, 2, assignment=assignment)
    assert sorted(groups) == [(0, 2), (1, 3)]


def _config(parallelism: int | None) -> PipelineConfig:
    return pipeline_config(
        stream_name=STREAM, mapping=RecordMapping(metadata_columns=("_kinesis_sequence",)),
        chunk_max_rows=5, parallelism=parallelism,
    )  # fmt: skip


def test_a_rebalance_with_n_partitions_sets_the_next_loads_partitions() -> None:
    kinesis = FakeKinesis(now_ms=T0)
    kinesis.create_stream(StreamName=STREAM, ShardCount=6)
    store, doris = memory_store("p"), MemoryDoris()
    seen: list[tuple[tuple[int, ...], ...]] = []

    def runner(job: LoadJob, credentials: Credentials) -> list[RangeReport]:
        seen.append(job.partition_groups())
        return load_in_thread(kinesis, store, doris)(job, credentials)

    def run(k: int) -> None:
        for n in range(12):
            kinesis.now_ms = T0 + k * IV + 1_000 + n
            kinesis.put_record(StreamName=STREAM, Data=json.dumps({"n": n}).encode(), PartitionKey=f"key-{n}")
        kinesis.now_ms = T0 + (k + 1) * IV + 10_000
        run_interval(
            _config(parallelism=6), T0 + k * IV, T0 + (k + 1) * IV, kinesis=kinesis, store=store,
            credentials=Credentials(), runner=runner, clock=lambda: kinesis.now_ms, doris=doris,
        )  # fmt: skip

    run(0)
    before = seen[-1]
    result = rebalance(kinesis, store, STREAM, partitions=2)
    run(1)
    after = seen[-1]

    assert len(before) == len({r for g in before for r in g}) > 2  # parallelism=6 spread the ranges
    assert len(after) == 2  # the stored assignment's two partitions won
    job_shards = sorted(store.ledger.get_topology().assignment)  # type: ignore[union-attr]
    assert set(result.assignment.partition_of) == set(job_shards)
