"""Plan → read → load → commit with enhanced fan-out on the local stack (kinesis-mock behind the
devstack's SubscribeToShard server, moto, the Doris stand-in): both read modes cut the same ranges
and chunks, so a load in one mode replayed in the other sends nothing new; and a split parent is
read through its subscription to its end."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from airflow_provider_kinesis_doris.core.kinesis.consumer import ensure_consumer
from airflow_provider_kinesis_doris.core.settings import Credentials
from airflow_provider_kinesis_doris.core.load import run_here
from airflow_provider_kinesis_doris.core.pipeline import run_interval
from airflow_provider_kinesis_doris.core.stores.dynamodb import dynamo_store
from kinesis_doris_devstack.scenario import event, now_ms, put_events, sealed_end, wait_past
from tests.conftest import DORIS_PASSWORD
from airflow_provider_kinesis_doris.testing.builders import wait_stream_active

pytestmark = pytest.mark.integration


def efo_config(world: dict[str, Any], kinesis_client: Any, efo_server: Any) -> Any:
    config = world["config"]
    return replace(config, aws=replace(config.aws, kinesis_endpoint_url=efo_server.endpoint),
                   efo_consumer_arn=ensure_consumer(kinesis_client, world["stream"], "pipeline-it"))  # fmt: skip


def labels(result: Any) -> dict[str, list[str]]:
    return {shard: entry["labels"] for shard, entry in result.summary()["shards"].items()}


@pytest.mark.parametrize("first", ["polling", "efo"])
def test_a_load_in_one_mode_replayed_in_the_other_sends_the_same_labels_and_nothing_twice(
    world: dict[str, Any], kinesis_client: Any, dynamodb_client: Any, efo_server: Any, first: str
) -> None:
    start = now_ms()
    wait_past(start)
    end = sealed_end(kinesis_client, world["stream"], put_events(kinesis_client, world["stream"], [event(i) for i in range(30)]))
    modes = {"polling": world["config"], "efo": efo_config(world, kinesis_client, efo_server)}
    second = "efo" if first == "polling" else "polling"

    loaded = world["run"](start, end, modes[first])
    # The replay keeps its checkpoints in another table: it knows nothing of the first load but
    # what Doris's labels say, as after a crash between a load and its record.
    amnesiac = dynamo_store(dynamodb_client, "checkpoints_it_replay", modes[second].pipeline_id)
    amnesiac.items.create_table_if_missing()

    replayed = run_interval(modes[second], start, end, kinesis=kinesis_client, store=amnesiac,
                            credentials=Credentials(doris_password=DORIS_PASSWORD), runner=run_here)  # fmt: skip

    assert [row[0] for row in world["rows"]()] == list(range(30))
    assert labels(replayed) == labels(loaded) and sum(map(len, labels(loaded).values())) >= 4
    assert loaded.summary()["loaded"] == 30 and replayed.summary()["loaded"] == 0
    efo_run = loaded if first == "efo" else replayed
    polling_run = replayed if first == "efo" else loaded
    assert all(r.subscribe_calls >= 1 and r.get_records_calls == 0 for r in efo_run.reports if r.records)
    assert all(r.subscribe_calls == 0 and r.get_records_calls >= 1 for r in polling_run.reports if r.records)


def test_a_split_parent_is_read_to_its_end_through_the_consumer_and_its_children_after_it(
    world: dict[str, Any], kinesis_client: Any, efo_server: Any
) -> None:
    config = efo_config(world, kinesis_client, efo_server)
    start = now_ms()
    wait_past(start)
    before = put_events(kinesis_client, world["stream"], [event(i) for i in range(10)])
    parent = kinesis_client.list_shards(StreamName=world["stream"])["Shards"][0]
    middle = (int(parent["HashKeyRange"]["StartingHashKey"]) + int(parent["HashKeyRange"]["EndingHashKey"])) // 2
    kinesis_client.split_shard(StreamName=world["stream"], ShardToSplit=parent["ShardId"], NewStartingHashKey=str(middle))
    wait_stream_active(kinesis_client, world["stream"])
    after = put_events(kinesis_client, world["stream"], [event(i) for i in range(10, 20)])
    end = sealed_end(kinesis_client, world["stream"], before + after)

    result = world["run"](start, end, config)

    assert [row[0] for row in world["rows"]()] == list(range(20))
    reports = {report.shard_id: report for report in result.reports}
    assert reports[parent["ShardId"]].drained and reports[parent["ShardId"]].subscribe_calls >= 1
    assert all(report.get_records_calls == 0 for report in reports.values() if report.records)
