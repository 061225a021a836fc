"""The shard → Spark partition assignment and the topology diff (pure functions, no servers)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.core.model import ShardInfo
from airflow_provider_kinesis_doris.core.partitions import (
    ShardLoad,
    assign_partitions,
    lineage_units,
    shard_weights,
)
from airflow_provider_kinesis_doris.core.kinesis.topology import TopologyChange, diff_topology

HASH_SPACE = 2**128


def even_shards(count: int, carried: list[int] | None = None) -> list[ShardLoad]:
    width = HASH_SPACE // count
    return [ShardLoad(f"s{i:02d}", (), width, (carried or [0] * count)[i]) for i in range(count)]


def spread(loads: list[float]) -> float:
    return max(loads) - min(loads)


@given(
    widths=st.lists(st.integers(1, 2**124), min_size=8, max_size=8),
    carried=st.lists(st.integers(0, 10_000), min_size=8, max_size=8),
)
@settings(max_examples=60, deadline=None)
def test_eight_shards_over_three_partitions_are_balanced_within_one_shards_weight(widths, carried) -> None:
    loads = [ShardLoad(f"s{i}", (), widths[i], carried[i]) for i in range(8)]
    assignment = assign_partitions(loads, 3)

    assert sorted(assignment.partition_of) == sorted(load.shard_id for load in loads)
    assert set(assignment.partition_of.values()) <= {0, 1, 2}
    assert spread(assignment.partition_weights()) <= max(assignment.weights.values()) + 1e-9


def test_weights_blend_hash_width_and_recent_traffic_and_average_one() -> None:
    loads = [ShardLoad("a", (), 100, 0), ShardLoad("b", (), 100, 90), ShardLoad("c", (), 200, 10)]
    weights = shard_weights(loads)
    # width shares 1/4, 1/4, 1/2; traffic shares 0, 0.9, 0.1; weight = 3 * mean of the two
    assert weights == pytest.approx({"a": 3 * 0.125, "b": 3 * 0.575, "c": 3 * 0.3})
    assert sum(weights.values()) == pytest.approx(3.0)
    assert shard_weights([ShardLoad("x"), ShardLoad("y")]) == {"x": 1.0, "y": 1.0}


def test_a_hot_shard_gets_a_partition_of_its_own() -> None:
    loads = even_shards(4, carried=[1000, 10, 10, 10])
    assignment = assign_partitions(loads, 2)
    hot = assignment.partition_of["s00"]
    assert [shard for shard, part in assignment.partition_of.items() if part == hot] == ["s00"]


def test_unchanged_input_gives_the_identical_assignment() -> None:
    loads = even_shards(8, carried=[5, 80, 13, 40, 2, 60, 33, 7])
    first = assign_partitions(loads, 3)
    again = assign_partitions(loads, 3, previous=first.partition_of)
    assert again.partition_of == first.partition_of and again.groups == first.groups
    assert assign_partitions(list(reversed(loads)), 3).partition_of == first.partition_of


def test_a_small_traffic_change_moves_no_shard() -> None:
    before = assign_partitions(even_shards(8, carried=[5, 80, 13, 40, 2, 60, 33, 7]), 3)
    loads = even_shards(8, carried=[6, 78, 14, 41, 2, 61, 30, 8])
    after = assign_partitions(loads, 3, previous=before.partition_of)
    assert after.partition_of == before.partition_of


def test_after_a_split_the_children_join_their_parent_on_the_lightest_partition() -> None:
    before_loads = even_shards(6, carried=[50, 10, 30, 20, 40, 25])
    before = assign_partitions(before_loads, 3)
    parent = "s00"
    width = before_loads[0].hash_width
    after_loads = [
        ShardLoad(parent, (), 0, 50),  # closed: takes no new writes
        *before_loads[1:],
        ShardLoad("c1", (parent,), width // 2, 0),
        ShardLoad("c2", (parent,), width - width // 2, 0),
    ]
    after = assign_partitions(after_loads, 3, previous=before.partition_of)

    home = after.partition_of[parent]
    assert after.partition_of["c1"] == home == after.partition_of["c2"]
    group = after.groups[home]
    assert group.index(parent) < group.index("c1") and group.index(parent) < group.index("c2")
    unit_weight = sum(after.weights[s] for s in (parent, "c1", "c2"))
    others = [w - (unit_weight if i == home else 0) for i, w in enumerate(after.partition_weights())]
    assert others[home] == min(others), "the split's lineage landed on a partition that was not the lightest"
    assert spread(after.partition_weights()) <= unit_weight + 1e-9
    # Shards untouched by the split stay where they were.
    untouched = [load.shard_id for load in before_loads[1:]]
    assert {s: after.partition_of[s] for s in untouched} == {s: before.partition_of[s] for s in untouched}


def test_a_merge_child_comes_after_both_parents_in_one_partition() -> None:
    loads = [ShardLoad("m", ("p1", "p2"), 10, 0), ShardLoad("p2", (), 0, 3), ShardLoad("p1", (), 0, 4),
             ShardLoad("z", (), 10, 1)]  # fmt: skip
    assert lineage_units({load.shard_id: load.parent_ids for load in loads}) == [("p1", "p2", "m"), ("z",)]
    assignment = assign_partitions(loads, 4)
    assert assignment.groups[assignment.partition_of["m"]] == ("p1", "p2", "m")


def test_partitions_must_be_positive() -> None:
    with pytest.raises(ConfigurationError, match="partitions must be at least 1, got 0"):
        assign_partitions(even_shards(2), 0)


def _info(
    shard_id: str, parents: tuple[str, ...] = (), start: int = 0, end: int = 9, is_open: bool = True
) -> ShardInfo:
    return ShardInfo(shard_id, parents, start, end, 1, is_open)


def test_diff_names_closed_parents_new_children_and_expired_shards() -> None:
    live = [_info("a", is_open=False), _info("a1", ("a",), 0, 4), _info("a2", ("a",), 5, 9), _info("b"),
            _info("m", ("a2", "b"))]  # fmt: skip
    change = diff_topology(["a", "b", "gone"], 3, live)

    assert change.is_reshard
    assert change.closed == ("a", "a2", "b")
    assert [s.shard_id for s in change.appeared] == ["a1", "a2", "m"]
    assert change.expired == ("gone",)
    assert TopologyChange.from_dict(change.to_dict()) == change
    assert change.to_dict()["appeared"][0] == {
        "shard_id": "a1", "parent_ids": ["a"], "starting_hash_key": "0", "ending_hash_key": "4",
        "starting_sequence": "1", "is_open": True,
    }  # fmt: skip


def test_an_unchanged_or_only_expired_listing_is_not_a_reshard() -> None:
    assert not diff_topology(["a", "b"], 1, [_info("a"), _info("b")]).is_reshard
    only_expired = diff_topology(["a", "b"], 1, [_info("b")])
    assert not only_expired.is_reshard and only_expired.expired == ("a",)
