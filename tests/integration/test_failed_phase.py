"""``run_interval`` names the phase a failure came from (planning, loading, committing) on the
exception itself, keeping its class, so a caller says whether rows may be in Doris without
wrapping the runner or the store (kinesis-mock, moto DynamoDB, the Doris stand-in)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from airflow_provider_kinesis_doris.core.stores.range_book import RangeBook
from airflow_provider_kinesis_doris.core.errors import CheckpointConflict, Phase, failed_phase

from kinesis_doris_devstack.scenario import event, now_ms, put_events, sealed_end, wait_past

pytestmark = pytest.mark.integration


class RunnerBroke(RuntimeError):
    pass


def _interval_with_records(world: dict[str, Any], kinesis_client: Any) -> tuple[int, int]:
    start = now_ms()
    wait_past(start)
    return start, sealed_end(kinesis_client, world["stream"], put_events(kinesis_client, world["stream"], [event(1)]))


def test_a_failed_plan_is_the_planning_phase(world: dict[str, Any]) -> None:
    start = now_ms()
    with pytest.raises(Exception) as raised:
        world["run"](start, start + 1_000, cfg=replace(world["config"], stream_name="no-such-stream"))
    assert failed_phase(raised.value) is Phase.PLANNING


def test_a_failed_runner_is_the_loading_phase_and_keeps_its_class(world: dict[str, Any], kinesis_client: Any) -> None:
    def broken(job: Any, credentials: Any) -> Any:
        raise RunnerBroke("the executors are gone")

    with pytest.raises(RunnerBroke) as raised:
        world["run"](*_interval_with_records(world, kinesis_client), runner=broken)
    assert failed_phase(raised.value) is Phase.LOADING


def test_a_failed_commit_is_the_committing_phase(
    world: dict[str, Any], kinesis_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise CheckpointConflict("another run moved the shard")

    monkeypatch.setattr(RangeBook, "mark_ranges_loaded", broken)
    with pytest.raises(CheckpointConflict) as raised:
        world["run"](*_interval_with_records(world, kinesis_client))
    assert failed_phase(raised.value) is Phase.COMMITTING
    assert len(world["rows"]()) == 1  # loaded, not committed: what a rerun commits
