"""``InProcessRunner(processes=N)`` on the real local stack: the range groups loaded by child
processes of the task, every record once, a range's typed error raised as its own class, and a
child killed mid-load reported by name and resumed by the next attempt under the same labels."""

from __future__ import annotations

import logging
import os
import signal
from dataclasses import replace
from functools import partial
from typing import Any

import botocore.client
import pytest

from airflow_provider_kinesis_doris.core.errors import KinesisDorisError
from airflow_provider_kinesis_doris.core.load import run_here
from airflow_provider_kinesis_doris.core.kinesis.boundaries import find_cut
from airflow_provider_kinesis_doris.core import loader_processes
from airflow_provider_kinesis_doris.core.kinesis.topology import list_shards
from airflow_provider_kinesis_doris.core.loader_processes import LoaderProcessFailed, find_cuts_in_processes, run_in_processes
from airflow_provider_kinesis_doris.core.plan import ShardDecision
from airflow_provider_kinesis_doris.core.settings import Credentials
from kinesis_doris_devstack.scenario import DIE_AT_EVENT_ENV, event, now_ms, put_events, sealed_end, wait_past
from tests.integration.conftest import DB

pytestmark = pytest.mark.integration

IN_TWO_PROCESSES = partial(run_in_processes, processes=2, lanes=1)


def _interval(kinesis_client, stream: str, ids: list[int]) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    start = now_ms()
    wait_past(start)
    results = put_events(kinesis_client, stream, [event(i) for i in ids])
    return start, sealed_end(kinesis_client, stream, results)


def test_each_process_loads_its_groups_and_every_record_lands_once(world, kinesis_client, caplog) -> None:  # type: ignore[no-untyped-def]
    """Two shards, two processes of one lane: each shard's range is loaded in a child of its own
    (its log lines reach this process's log with the child's pid), and two intervals load every
    record once."""
    ids = list(range(40))
    first = _interval(kinesis_client, world["stream"], ids[:20])
    second = (first[1], _interval(kinesis_client, world["stream"], ids[20:])[1])
    for start, end in (first, second):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="airflow_provider_kinesis_doris.core.load"):
            result = world["run"](start, end, runner=IN_TWO_PROCESSES)
        loaded_by = {r.getMessage().split()[1]: r.process for r in caplog.records if "rows loaded" in r.getMessage()}
        assert sorted(loaded_by) == sorted(report.shard_id for report in result.reports)
        assert len(set(loaded_by.values())) == 2 and os.getpid() not in loaded_by.values(), loaded_by
    assert [row[0] for row in world["rows"]()] == ids


def test_a_ranges_typed_error_is_raised_as_its_own_class_naming_the_process(world, kinesis_client) -> None:  # type: ignore[no-untyped-def]
    """A password Doris refuses fails each range in its process; the task raises the class the
    in-process lanes raise, with the shard and the process in its message, and loads nothing."""
    start, end = _interval(kinesis_client, world["stream"], list(range(10)))
    refused = Credentials(doris_password="not-the-password")
    with pytest.raises(KinesisDorisError) as in_this_process:
        world["run"](start, end, runner=lambda job, credentials: run_here(job, refused, lanes=2))
    with pytest.raises(KinesisDorisError) as in_children:
        world["run"](start, end, runner=lambda job, credentials: IN_TWO_PROCESSES(job, refused))

    assert type(in_children.value) is type(in_this_process.value)
    assert type(in_children.value) is not KinesisDorisError
    assert "in loader process" in str(in_children.value) and "(shard shardId-" in str(in_children.value)
    assert world["rows"]() == []


def test_a_killed_process_is_named_and_the_retry_loads_the_rest_once(world, kinesis_client, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A loader killed outright part-way through its range (SIGKILL, as the out-of-memory killer
    does) fails the run with the process's name, its signal and its shards; the other process's
    range loads. The next attempt loads what is left, every record once: its children take the
    task's environment as it is now (the variable gone), not the fork server's of the first run."""
    ids = list(range(30))
    start, end = _interval(kinesis_client, world["stream"], ids)
    dying = replace(world["config"], transform_path="kinesis_doris_devstack.scenario:dies_at_event")
    monkeypatch.setenv(DIE_AT_EVENT_ENV, "17")
    with pytest.raises(LoaderProcessFailed) as killed:
        world["run"](start, end, cfg=dying, runner=IN_TWO_PROCESSES)
    message = str(killed.value)
    assert "kinesis-doris-loader-" in message and "was killed by SIGKILL" in message and "shardId-" in message
    loaded_before = [row[0] for row in world["rows"]()]
    assert 17 not in loaded_before and len(loaded_before) < len(ids)

    monkeypatch.delenv(DIE_AT_EVENT_ENV)
    world["run"](start, end, cfg=dying, runner=IN_TWO_PROCESSES)
    assert [row[0] for row in world["rows"]()] == ids


def test_a_transform_on_a_path_the_task_added_after_the_first_run_is_found(
    world, kinesis_client, doris_server, tmp_path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """The loader processes fork from a server started at the first run of this process; a folder
    the task put on its import path later (Airflow adds a DAG bundle's) still holds the transform
    the next run's children import."""
    first = _interval(kinesis_client, world["stream"], list(range(10)))
    world["run"](*first, runner=IN_TWO_PROCESSES)
    (tmp_path / "kd_late_transform.py").write_text(
        "def shout(row):\n    return {**row, 'user_id': row['user_id'].upper()}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    late = replace(world["config"], transform_path="kd_late_transform:shout")
    second = (first[1], _interval(kinesis_client, world["stream"], list(range(10, 20)))[1])
    world["run"](*second, cfg=late, runner=IN_TWO_PROCESSES)

    users = doris_server.execute_sql(DB, f"SELECT event_id, user_id FROM {world['table']} ORDER BY event_id")
    assert [event_id for event_id, _ in users] == list(range(20))
    assert all(user == user.upper() for event_id, user in users if event_id >= 10), users
    assert all(user != user.upper() for event_id, user in users if event_id < 10), users


def test_the_loader_processes_find_the_plans_cuts_and_the_plan_reads_no_shard_itself(  # type: ignore[no-untyped-def]
    world, kinesis_client, monkeypatch, caplog
) -> None:
    """Two intervals with records in both shards and a quiet one, their plans given the loader
    processes' cut finder: for the first, two processes find each new range's start and then its
    end from it; for the others, the end from the stored start. The task's process opens no
    iterator (loads in the processes too), each stored cut is the one found from the cut before
    it, the second plan's two ranges and the quiet plan's two end cuts are each stored in one
    transaction, and every record lands once."""
    ids = list(range(20))
    first = _interval(kinesis_client, world["stream"], ids[:10])
    second = (first[1], _interval(kinesis_client, world["stream"], ids[10:])[1])
    quiet = (second[1], sealed_end(kinesis_client, world["stream"], []))
    sent: list[tuple[str, dict[str, Any]]] = []
    original = botocore.client.BaseClient._make_api_call

    def counted(client: Any, operation: str, params: dict[str, Any]) -> Any:
        sent.append((operation, params))
        return original(client, operation, params)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", counted)
    finder = partial(find_cuts_in_processes, processes=2, lanes=1)
    runs = []
    with caplog.at_level(logging.INFO, logger="airflow_provider_kinesis_doris.core.loader_processes"):
        for interval in (first, second, quiet):
            sent.clear()
            runs.append((world["run"](*interval, runner=IN_TWO_PROCESSES, find_cuts=finder), list(sent)))
    results = [result for result, _ in runs[:2]]

    assert caplog.text.count("finding the cuts of 2 new ranges in 2 processes of 1 lanes") == 3
    assert [operation for _, calls in runs for operation, _ in calls if operation == "GetShardIterator"] == []
    stored_kinds = [sorted(item["Put"]["Item"]["kind"]["S"] for item in params["TransactItems"] if "Put" in item)
                    for operation, params in runs[1][1] if operation == "TransactWriteItems"]  # fmt: skip
    assert [kinds for kinds in stored_kinds if "range" in kinds] == [["boundary", "boundary", "range", "range"]]
    # The quiet interval's two end cuts were stored together: the one write after the listing
    # (before it, the interval's put in the pipeline's grid).
    quiet_plan, quiet_calls = runs[2][0].plan, [operation for operation, _ in runs[2][1]]
    assert [shard.decision for shard in quiet_plan.shards] == [ShardDecision.EMPTY] * 2
    writes = [operation for operation in quiet_calls[quiet_calls.index("ListShards"):] if operation in ("PutItem", "UpdateItem", "TransactWriteItems")]
    assert writes == ["TransactWriteItems"], " ".join(quiet_calls)
    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", original)
    listed = {info.shard_id: info for info in list_shards(kinesis_client, world["stream"])}
    for result in results:
        assert len(result.plan.new_ranges) == 2
        for shard_range in result.plan.ranges:
            shard, (start_ms, end_ms) = listed[shard_range.shard_id], (shard_range.interval_start_ms, shard_range.interval_end_ms)
            earlier = shard_range.start if result is results[1] else None
            if earlier is None:
                earlier = find_cut(kinesis_client, world["stream"], shard, start_ms, earlier=None, trim_horizon_ms=None)
                assert shard_range.start == earlier
            assert shard_range.end == find_cut(kinesis_client, world["stream"], shard, end_ms, earlier=earlier, trim_horizon_ms=None)
    assert [row[0] for row in world["rows"]()] == ids


def _killed_outright(*args: Any) -> list[str]:
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


def test_a_process_killed_while_finding_the_plans_cuts_leaves_the_plan_to_read_them(  # type: ignore[no-untyped-def]
    world, kinesis_client, monkeypatch, caplog
) -> None:
    """Finding the cuts ahead only saves the plan reads: a process killed at it is named in a
    warning, the plan reads the ends itself, and every record lands once."""
    ids = list(range(20))
    first = _interval(kinesis_client, world["stream"], ids[:10])
    world["run"](*first)
    second = (first[1], _interval(kinesis_client, world["stream"], ids[10:])[1])
    monkeypatch.setattr(loader_processes, "_find_cuts_here", _killed_outright)
    with caplog.at_level(logging.WARNING, logger="airflow_provider_kinesis_doris.core.loader_processes"):
        result = world["run"](*second, find_cuts=partial(find_cuts_in_processes, processes=2, lanes=1))

    assert "was killed by SIGKILL before it reported, while finding the cuts of 1 new ranges for the plan" in caplog.text
    assert "the plan reads the cuts of the new ranges itself" in caplog.text
    assert len(result.plan.new_ranges) == 2
    assert [row[0] for row in world["rows"]()] == ids
