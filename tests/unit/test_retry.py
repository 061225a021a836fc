"""The backoff curve and the retry-on-conflict loop every fenced step of the data path uses."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_kinesis_doris.core.errors import CheckpointConflict
from airflow_provider_kinesis_doris.core.retry import backoff_seconds, retry_on_conflict


@given(
    failures=st.integers(1, 40),
    initial=st.floats(0.01, 5),
    cap=st.floats(0.01, 60),
    unit_random=st.floats(0, 1, exclude_max=True),
)
def test_a_pause_lies_in_the_jittered_band_under_the_capped_curve(
    failures: int, initial: float, cap: float, unit_random: float
) -> None:
    ceiling = min(cap, initial * 2 ** (failures - 1))
    pause = backoff_seconds(failures, initial=initial, cap=cap, unit_random=unit_random)
    assert ceiling * 0.5 <= pause <= ceiling + 1e-12


def test_pauses_double_until_the_cap_and_jitter_spreads_writers_apart() -> None:
    ceilings = [backoff_seconds(n, initial=0.1, cap=1.0, jitter=0.0, unit_random=0.0) for n in range(1, 7)]
    assert ceilings == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    assert backoff_seconds(3, initial=0.1, cap=1.0, unit_random=0.0) < backoff_seconds(3, initial=0.1, cap=1.0, unit_random=0.9)


def test_a_step_that_conflicts_is_attempted_again_on_fresh_state_until_it_succeeds() -> None:
    state = {"reads": 0}

    def step() -> int:
        state["reads"] += 1  # each attempt re-reads what it fences on
        if state["reads"] < 3:
            raise CheckpointConflict("shard moved")
        return state["reads"]

    assert retry_on_conflict(step, "shard shardId-0001") == 3


def test_the_last_conflict_reaches_the_caller_after_the_attempts() -> None:
    calls: list[int] = []

    def step() -> None:
        calls.append(len(calls))
        raise CheckpointConflict(f"conflict {len(calls)}")

    with pytest.raises(CheckpointConflict, match="conflict 4"):
        retry_on_conflict(step, "shard shardId-0001", attempts=4)
    assert len(calls) == 4


def test_other_errors_are_not_retried() -> None:
    calls: list[int] = []

    def step() -> None:
        calls.append(1)
        raise ValueError("not a conflict")

    with pytest.raises(ValueError):
        retry_on_conflict(step, "shard shardId-0001")
    assert calls == [1]
