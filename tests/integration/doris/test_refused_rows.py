"""Rows Doris refuses (data quality) become dead letters with Doris's reason instead of failing
the interval for ever, exactly once across a kill and a replay; a chunk refused in bulk still
fails loudly (issue 21). On the real local stack with the Doris stand-in."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from typing import Any

import pytest


from airflow_provider_kinesis_doris.core.stores.chunk_log import ChunkLog
from airflow_provider_kinesis_doris.core.errors import PermanentStreamLoadError
from airflow_provider_kinesis_doris.core.chunk_load import FEW_REFUSED_ROWS
from airflow_provider_kinesis_doris.testing.faults import InjectedCrash
from kinesis_doris_devstack.scenario import event, now_ms, put_records, sealed_end, wait_past

pytestmark = pytest.mark.integration

GOOD = [event(1), event(2), event(4), event(6)]
POISON = {
    3: {"event_id": "three", "user_id": "u", "amount": 1},  # not a number in the NOT NULL key
    5: {"event_id": 5, "user_id": "u", "amount": "many"},  # not a number in an INT column
    7: {"event_id": 7, "user_id": "u" * 40, "amount": 1},  # longer than VARCHAR(32)
}


def _produce(world: dict[str, Any], kinesis_client: Any, payloads: list[dict[str, Any]]) -> tuple[int, int]:
    """The payloads in one shard (one partition key), in order; the interval around them."""
    start = now_ms()
    wait_past(start)
    results = put_records(kinesis_client, world["stream"], [("one-shard", json.dumps(p).encode()) for p in payloads])
    return start, sealed_end(kinesis_client, world["stream"], results)


def _strict(world: dict[str, Any], **changes: Any) -> Any:
    config = world["config"]
    return replace(config, load_options=replace(config.load_options, strict_mode=True), **changes)


def _dead(world: dict[str, Any]) -> dict[Any, str]:
    return {json.loads(base64.b64decode(payload))["event_id"]: reason for reason, payload in world["dead"]()}


def test_rows_doris_refuses_are_dead_letters_with_its_reason_and_the_rest_loads(world, kinesis_client) -> None:
    start, end = _produce(world, kinesis_client, [GOOD[0], GOOD[1], POISON[3], GOOD[2], POISON[5], GOOD[3], POISON[7]])

    summary = world["run"](start, end, _strict(world)).summary()

    assert [row[0] for row in world["rows"]()] == [1, 2, 4, 6]
    assert _dead(world) == {
        "three": "column(event_id) value is incorrect while strict mode is true, src value is three",
        5: "column(amount) value is incorrect while strict mode is true, src value is many",
        7: "column_name[user_id], the length of input is too long than schema. first 32 bytes of input str: "
        "[uuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuu] schema length: 32; actual length: 40; ",
    }
    assert summary["loaded"] == 4 and summary["dead_lettered"] == 3 and summary["records"] == 7
    assert summary["dead_letter_reasons"] == {
        "column(event_id) value is incorrect while strict mode is true": 1,
        "column(amount) value is incorrect while strict mode is true": 1,
        "column_name[user_id], the length of input is too long than schema": 1,
    }

    replay = world["run"](start, end, _strict(world)).summary()

    assert replay["loaded"] == 0 and replay["dead_lettered"] == 0
    assert replay["already_loaded"] == {"rows": 4, "dead_letters": 3}
    assert [row[0] for row in world["rows"]()] == [1, 2, 4, 6] and len(world["dead"]()) == 3


def test_a_run_killed_after_settling_the_refused_rows_is_replayed_exactly_once(
    world, kinesis_client, monkeypatch: pytest.MonkeyPatch
) -> None:
    start, end = _produce(world, kinesis_client, [GOOD[0], POISON[5], GOOD[1]])
    amend = ChunkLog.amend_chunk_content

    def amend_then_die(self: ChunkLog, *args: Any) -> str:
        amend(self, *args)
        raise InjectedCrash("killed after the refused rows were settled, before the chunk was sent again")

    monkeypatch.setattr(ChunkLog, "amend_chunk_content", amend_then_die)
    with pytest.raises(InjectedCrash):
        world["run"](start, end, _strict(world))
    assert world["rows"]() == [] and world["dead"]() == []
    monkeypatch.setattr(ChunkLog, "amend_chunk_content", amend)

    world["run"](start, end, _strict(world))
    world["run"](start, end, _strict(world))

    assert [row[0] for row in world["rows"]()] == [1, 2]
    assert list(_dead(world)) == [5]


def test_a_chunk_mostly_refused_fails_loudly_and_loads_nothing(world, kinesis_client) -> None:
    wrong_types = [{**event(i), "amount": "not a number"} for i in range(10, 10 + FEW_REFUSED_ROWS)]
    start, end = _produce(world, kinesis_client, [GOOD[0], *wrong_types])

    with pytest.raises(PermanentStreamLoadError) as failed:
        world["run"](start, end, _strict(world, chunk_max_rows=100))

    message = str(failed.value)
    assert f"Doris refused {FEW_REFUSED_ROWS} of {FEW_REFUSED_ROWS + 1} rows of chunk" in message
    assert "more than max_bad_record_ratio (0.5)" in message and "probably do not match" in message
    assert world["rows"]() == [] and world["dead"]() == []


def test_without_strict_mode_doris_turns_a_bad_number_into_null_silently(world, kinesis_client) -> None:
    """Why the operator turns strict_mode on: Doris's default keeps the row with NULL."""
    start, end = _produce(world, kinesis_client, [GOOD[0], POISON[5]])

    world["run"](start, end)

    assert [row[0] for row in world["rows"]()] == [1, 5] and world["dead"]() == []
