"""A field renamed upstream (``amt`` where the table has ``amount``): Doris drops the JSON member
and loads the column NULL, and the run was green with nothing said (issue: "a renamed column
drops data silently"). Now the run reports both sides (``core.fields``), or with
``unmatched_fields="fail"`` sends nothing. On the local stack: the stand-in's Stream Load, the
Kinesis and DynamoDB emulators."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from airflow_provider_kinesis_doris.core.errors import UnmatchedFields
from airflow_provider_kinesis_doris.core.fields import compare, sample_members
from kinesis_doris_devstack.scenario import now_ms, put_records, sealed_end, wait_past
from tests.integration.conftest import DB

pytestmark = pytest.mark.integration


def _renamed(world: dict[str, Any], kinesis_client: Any, doris_server: Any, **changes: Any) -> tuple[Any, int, int]:
    columns = tuple(str(row[0]) for row in doris_server.execute_sql(DB, f"DESC {world['table']}"))
    config = replace(world["config"], table_columns=columns, **changes)
    start = now_ms()
    wait_past(start)
    records = [(f"k{i}", json.dumps({"event_id": i, "user_id": f"u{i}", "amt": 5}).encode()) for i in range(6)]
    end = sealed_end(kinesis_client, world["stream"], put_records(kinesis_client, world["stream"], records))
    return config, start, end


def test_a_renamed_field_is_reported_with_the_column_it_left_empty(world: dict[str, Any], kinesis_client: Any, doris_server: Any) -> None:
    config, start, end = _renamed(world, kinesis_client, doris_server)

    result = world["run"](start, end, config)

    assert result.summary()["unmatched_fields"] == {
        "members_without_column": ["amt"], "columns_without_member": ["_kinesis_arrival", "amount"],  # the config adds no arrival
    }
    assert doris_server.execute_sql(DB, f"SELECT COUNT(*), COUNT(amount) FROM {world['table']}") == [(6, 0)]


def test_with_unmatched_fields_fail_nothing_is_sent(world: dict[str, Any], kinesis_client: Any, doris_server: Any) -> None:
    config, start, end = _renamed(world, kinesis_client, doris_server, unmatched_fields="fail")

    with pytest.raises(UnmatchedFields, match=r"no column of the table takes .*\['amt'\].*unmatched_fields='fail'"):
        world["run"](start, end, config)
    assert doris_server.execute_sql(DB, f"SELECT COUNT(*) FROM {world['table']}") == [(0,)]


def test_members_match_columns_whatever_their_case() -> None:
    members = sample_members(b'{"Event_ID":1,"user_id":"u"}\n{"event_id":2,"note":"x"}\n')

    assert compare(members, ("event_id", "user_id", "amount")).summary() == {
        "members_without_column": ["note"], "columns_without_member": ["amount"],
    }
