"""Labels are pure, valid for Doris, and distinct for distinct ranges (invariant I3)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.core.doris.labels import chunk_label, dead_letter_label, is_valid_label
from airflow_provider_kinesis_doris.core.model import Position

DORIS_LABEL = re.compile(r"^[-_A-Za-z0-9:]{1,128}$")
HASH_PART = re.compile(r"^[0-9a-f]{32,}$")

names = st.text(min_size=1, max_size=300)
# Kinesis sequence numbers are up to 56 decimal digits (~2**186); sub-sequences are small ints.
positions = st.builds(Position, st.integers(0, 10**56), st.integers(0, 2**31))
label_functions = st.sampled_from([chunk_label, dead_letter_label])


def ordered(a: Position, b: Position) -> tuple[Position, Position]:
    return (a, b) if a <= b else (b, a)


@settings(max_examples=300)
@given(label_functions, names, names, names, positions, positions)
def test_label_is_valid_for_doris_for_any_unicode_input(make, pipeline, stream, shard, a, b) -> None:
    first, last = ordered(a, b)
    label = make(pipeline, stream, shard, first, last)
    assert DORIS_LABEL.fullmatch(label), label
    assert is_valid_label(label)


@given(label_functions, names, names, names, positions, positions)
def test_label_is_deterministic(make, pipeline, stream, shard, a, b) -> None:
    first, last = ordered(a, b)
    # Fresh copies of the inputs: equality of values, not identity, decides the label.
    again = make(
        "".join(pipeline),
        "".join(stream),
        "".join(shard),
        Position(first.sequence, first.sub_sequence),
        Position(last.sequence, last.sub_sequence),
    )
    assert make(pipeline, stream, shard, first, last) == again


@given(names, names, names, positions, positions)
def test_label_hash_part_carries_at_least_128_bits(pipeline, stream, shard, a, b) -> None:
    first, last = ordered(a, b)
    hash_part = chunk_label(pipeline, stream, shard, first, last).rsplit(":", 1)[1]
    assert HASH_PART.fullmatch(hash_part)
    assert len(hash_part) * 4 >= 128


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (("pipe", "events.v1", "shardId-000000000001"), ("pipe", "events_v1", "shardId-000000000001")),
        (("pipe.a", "s", "shardId-000000000001"), ("pipe_a", "s", "shardId-000000000001")),
        (("pipe", "s", "shardId-00000000000é"), ("pipe", "s", "shardId-00000000000_")),
        (("pipe", "s", "a-shard"), ("pipe", "s", "b-shard")),
        # The readable prefix is truncated: a difference after the cut must still count.
        (("p" * 40 + "x", "s", "shardId-1"), ("p" * 40 + "y", "s", "shardId-1")),
        # Field boundaries are unambiguous: moving text from one name to the next changes the label.
        (("ab", "c", "shardId-1"), ("a", "bc", "shardId-1")),
    ],
)
def test_names_that_sanitize_alike_get_distinct_labels(left, right) -> None:
    first, last = Position(100, 0), Position(200, 0)
    left_label = chunk_label(*left, first, last)
    right_label = chunk_label(*right, first, last)
    assert left_label != right_label


@pytest.mark.parametrize(
    ("first", "last", "other_first", "other_last"),
    [
        (Position(100, 0), Position(200, 3), Position(100, 0), Position(200, 4)),
        (Position(100, 1), Position(200, 0), Position(100, 0), Position(200, 0)),
        (Position(100, 0), Position(200, 0), Position(100, 0), Position(201, 0)),
        # Sequence and sub-sequence must not run together: 1|23 vs 12|3.
        (Position(1, 23), Position(1, 23), Position(12, 3), Position(12, 3)),
    ],
)
def test_positions_differing_only_slightly_get_distinct_labels(first, last, other_first, other_last) -> None:
    label = chunk_label("p", "s", "shardId-1", first, last)
    assert label != chunk_label("p", "s", "shardId-1", other_first, other_last)


@settings(max_examples=300)
@given(
    st.tuples(names, names, names, positions, positions),
    st.tuples(names, names, names, positions, positions),
)
def test_distinct_inputs_never_share_a_label(left, right) -> None:
    left_args = (*left[:3], *ordered(left[3], left[4]))
    right_args = (*right[:3], *ordered(right[3], right[4]))
    if left_args != right_args:
        assert chunk_label(*left_args) != chunk_label(*right_args)


@given(names, names, names, positions, positions)
def test_dead_letter_labels_live_in_their_own_namespace(pipeline, stream, shard, a, b) -> None:
    first, last = ordered(a, b)
    data = chunk_label(pipeline, stream, shard, first, last)
    dead = dead_letter_label(pipeline, stream, shard, first, last)
    assert data != dead
    assert data.rsplit(":", 1)[1] != dead.rsplit(":", 1)[1]
    assert data.startswith("kd:") and dead.startswith("kdx:")


def test_label_shows_the_pipeline_and_shard_for_humans() -> None:
    label = chunk_label("orders-pipeline", "orders", "shardId-000000000007", Position(5), Position(9))
    assert label.startswith("kd:orders-pipeline:000000000007:")


def test_events_v1_and_events_v1_share_the_readable_prefix_but_not_the_label() -> None:
    dotted = chunk_label("events.v1", "s", "shardId-1", Position(1), Position(2))
    underscored = chunk_label("events_v1", "s", "shardId-1", Position(1), Position(2))
    assert dotted.rsplit(":", 1)[0] == underscored.rsplit(":", 1)[0] == "kd:events_v1:1"
    assert dotted != underscored


@pytest.mark.parametrize(
    ("pipeline", "stream", "shard", "first", "last", "message"),
    [
        ("", "s", "shardId-1", Position(1), Position(2), "pipeline_id"),
        ("p", "", "shardId-1", Position(1), Position(2), "stream_name"),
        ("p", "s", "", Position(1), Position(2), "shard_id"),
        ("p", "s", "shardId-1", Position(5), Position(4), "ends before it starts"),
        ("p", "s", "shardId-1", Position(5, 2), Position(5, 1), "ends before it starts"),
    ],
)
def test_bad_inputs_are_rejected_with_the_bad_name(pipeline, stream, shard, first, last, message) -> None:
    with pytest.raises(ConfigurationError, match=message):
        chunk_label(pipeline, stream, shard, first, last)
