"""KinesisReshardSensor, KinesisReshardTrigger and KinesisShardRebalanceOperator against
kinesis-mock (Kinesis) and moto (DynamoDB), through the ``aws_default`` connection.

Runs under Airflow 3.x (``.venv``) and 2.11 (``.venv-af2``).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_kinesis_doris.core.stores.dynamodb import dynamo_store
from airflow_provider_kinesis_doris.core.kinesis.topology import list_shards
from kinesis_doris_devstack.scenario import merge, split
from airflow_provider_kinesis_doris.testing.builders import wait_stream_active

pytestmark = [pytest.mark.airflow, pytest.mark.integration]

TABLE = "checkpoints_reshard_sensor"
DAGS = Path(__file__).resolve().parents[2] / "dags"


@pytest.fixture
def aws_connection(monkeypatch: pytest.MonkeyPatch, kinesis_mock_endpoint: str, dynamodb_endpoint: str) -> None:
    extra = {"region_name": "us-east-1", "endpoint_url": kinesis_mock_endpoint,
             "service_config": {"dynamodb": {"endpoint_url": dynamodb_endpoint}}}  # fmt: skip
    connection = {"conn_type": "aws", "login": "testing", "password": "testing", "extra": extra}
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps(connection))


@pytest.fixture
def stream(kinesis_client: Any, dynamodb_client: Any, aws_connection: None) -> str:
    """A 2-shard stream on kinesis-mock, and the checkpoint table on moto."""
    dynamo_store(dynamodb_client, TABLE, "setup").items.create_table_if_missing()
    name = f"watch-{uuid.uuid4().hex[:10]}"
    kinesis_client.create_stream(StreamName=name, ShardCount=2)
    wait_stream_active(kinesis_client, name)
    return name


def split_first_shard(client: Any, stream: str) -> tuple[str, list[str]]:
    """Split the lowest shard; its id and its children's ids."""
    parent = min(list_shards(client, stream), key=lambda shard: shard.starting_hash_key).shard_id
    return parent, sorted(split(client, stream, parent))


def sensor(stream: str, table: str = TABLE, **kwargs: Any):  # type: ignore[no-untyped-def]
    from airflow_provider_kinesis_doris.sensors.kinesis_reshard import KinesisReshardSensor

    return KinesisReshardSensor(
        task_id=f"watch_{uuid.uuid4().hex[:6]}", stream_name=stream, checkpoint_table=table,
        pipeline_id=f"{stream}.pipe", poke_interval=0.2, **kwargs,
    )  # fmt: skip


def rebalance_operator(stream: str):  # type: ignore[no-untyped-def]
    from airflow_provider_kinesis_doris.operators.rebalance import KinesisShardRebalanceOperator

    return KinesisShardRebalanceOperator(
        task_id=f"rebalance_{uuid.uuid4().hex[:6]}", stream_name=stream, checkpoint_table=TABLE,
        pipeline_id=f"{stream}.pipe", partitions=2,
    )  # fmt: skip


def test_the_sensor_fires_once_per_split_or_merge(stream: str, kinesis_client: Any, dynamodb_client: Any) -> None:
    watch = sensor(stream, deferrable=False)
    assert watch.mode == "reschedule"

    assert watch.poke({}).is_done is False  # first look stores the topology
    stored = dynamo_store(dynamodb_client, TABLE, f"{stream}.pipe").ledger.get_topology()
    assert stored is not None and len(stored.shard_ids) == 2 and stored.version == 1
    assert watch.poke({}).is_done is False  # unchanged

    parent, children = split_first_shard(kinesis_client, stream)
    fired = watch.poke({})
    assert fired.is_done is True
    change = fired.xcom_value
    assert change["closed"] == [parent] and change["stored_version"] == 1
    assert [(c["shard_id"], c["parent_ids"]) for c in change["appeared"]] == [(c, [parent]) for c in children]
    low, high = change["appeared"]
    assert int(low["ending_hash_key"]) + 1 == int(high["starting_hash_key"])

    summary = rebalance_operator(stream).execute({})
    assert summary["version"] == 2 and summary["closed"] == [parent]
    assert summary["registered"] == sorted([*children, *stored.shard_ids])  # the loader never ran
    assert set(summary["assignment"]) == {*children, *stored.shard_ids}
    assert watch.poke({}).is_done is False  # the change was applied: it does not fire again

    merge(kinesis_client, stream, *children)
    again = watch.poke({})
    assert again.is_done is True and again.xcom_value["closed"] == sorted(children)


async def first_event(trigger: Any, seconds: float) -> dict[str, Any] | None:
    """The trigger's first event's payload, or None if it fires none within ``seconds``."""
    events = trigger.run()
    try:
        return (await asyncio.wait_for(events.__anext__(), seconds)).payload
    except asyncio.TimeoutError:
        return None
    finally:
        await events.aclose()


def restarted(trigger: Any) -> Any:
    """The trigger as a new triggerer rebuilds it: from its serialized class path and JSON kwargs."""
    classpath, kwargs = trigger.serialize()
    module, _, name = classpath.rpartition(".")
    return getattr(importlib.import_module(module), name)(**json.loads(json.dumps(kwargs)))


def test_the_trigger_serializes_resumes_after_a_restart_and_fires_on_a_split(
    stream: str, kinesis_client: Any
) -> None:
    from airflow_provider_kinesis_doris.triggers.kinesis_reshard import KinesisReshardTrigger

    trigger = KinesisReshardTrigger(stream, TABLE, f"{stream}.pipe", poll_interval=0.2)
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_provider_kinesis_doris.triggers.kinesis_reshard.KinesisReshardTrigger"
    assert json.loads(json.dumps(kwargs)) == kwargs == {
        "stream_name": stream, "checkpoint_table": TABLE, "pipeline_id": f"{stream}.pipe",
        "aws_conn_id": "aws_default", "poll_interval": 0.2,
        "region_name": None, "verify": None, "botocore_config": None,
    }  # fmt: skip

    assert asyncio.run(first_event(trigger, 1.5)) is None  # stores the topology, then keeps polling

    async def split_while_polling() -> dict[str, Any] | None:
        waiting = asyncio.ensure_future(first_event(restarted(trigger), 15))
        await asyncio.sleep(0.5)
        assert not waiting.done(), "fired on an unchanged topology"
        await asyncio.to_thread(split_first_shard, kinesis_client, stream)
        return await waiting

    event = asyncio.run(split_while_polling())
    assert event is not None and event["status"] == "success"
    assert len(event["change"]["appeared"]) == 2 and len(event["change"]["closed"]) == 1

    broken = KinesisReshardTrigger(f"{stream}-missing", TABLE, f"{stream}.pipe", poll_interval=0.2)
    error = asyncio.run(first_event(broken, 10))
    assert error is not None and error["status"] == "error"
    assert error["message"].startswith("ConfigurationError: Kinesis stream") and "does not exist" in error["message"]


def task_deferred() -> type[Exception]:
    """The exception a task raises to defer, on either Airflow major."""
    try:
        from airflow.sdk.exceptions import TaskDeferred
    except ImportError:  # Airflow 2.11
        from airflow.exceptions import TaskDeferred  # type: ignore[no-redef]
    return TaskDeferred


def test_the_deferrable_sensor_defers_to_the_trigger_and_returns_its_change(stream: str) -> None:
    from airflow.providers.common.compat.sdk import AirflowException

    watch = sensor(stream, deferrable=True, timeout=600)
    with pytest.raises(task_deferred()) as deferred:
        watch.execute({})
    assert deferred.value.method_name == "execute_complete"
    assert deferred.value.timeout == timedelta(seconds=600)
    assert deferred.value.trigger.serialize()[1]["pipeline_id"] == f"{stream}.pipe"

    change = {"stored_version": 1, "closed": ["a"], "appeared": [], "expired": []}
    assert watch.execute_complete({}, {"status": "success", "change": change}) == change
    with pytest.raises(AirflowException, match="ResourceNotFound: stream gone"):
        watch.execute_complete({}, {"status": "error", "message": "ResourceNotFound: stream gone"})


OTHER_REGION = "eu-west-2"


def test_a_deferred_sensor_keeps_the_region_and_client_settings_it_was_given(
    kinesis_mock_endpoint: str, dynamodb_endpoint: str, aws_connection: None
) -> None:
    """The connection says us-east-1; the stream and the table live in another region, which only
    the sensor is told. The trigger, rebuilt from its JSON as a new triggerer does, must look there."""
    import boto3

    kinesis = boto3.client("kinesis", endpoint_url=kinesis_mock_endpoint, region_name=OTHER_REGION)
    dynamodb = boto3.client("dynamodb", endpoint_url=dynamodb_endpoint, region_name=OTHER_REGION)
    dynamo_store(dynamodb, TABLE, "setup").items.create_table_if_missing()
    stream = f"regional-{uuid.uuid4().hex[:10]}"
    kinesis.create_stream(StreamName=stream, ShardCount=2)
    wait_stream_active(kinesis, stream)
    client_settings = {"region_name": OTHER_REGION, "verify": False, "botocore_config": {"user_agent_extra": "kd-test"}}

    watch = sensor(stream, deferrable=True, **client_settings)
    with pytest.raises(task_deferred()) as deferred:
        watch.execute({})  # the first look, in the sensor's region, stores the topology there
    trigger = restarted(deferred.value.trigger)
    assert {key: trigger.serialize()[1][key] for key in client_settings} == client_settings

    async def split_while_polling() -> dict[str, Any] | None:
        waiting = asyncio.ensure_future(first_event(trigger, 15))
        await asyncio.sleep(0.5)
        assert not waiting.done(), f"fired on an unchanged topology: {waiting.result()}"
        await asyncio.to_thread(split_first_shard, kinesis, stream)
        return await waiting

    event = asyncio.run(split_while_polling())
    assert event is not None and event["status"] == "success", event
    assert len(event["change"]["closed"]) == 1 and len(event["change"]["appeared"]) == 2


def _dagbag(path: Path):  # type: ignore[no-untyped-def]
    try:
        from airflow.dag_processing.dagbag import DagBag

        return DagBag(dag_folder=str(path))
    except ImportError:  # Airflow 2.11
        from airflow.models.dagbag import DagBag  # type: ignore[no-redef]

        return DagBag(dag_folder=str(path), include_examples=False)


@pytest.mark.parametrize("dag_id", ["kinesis_reshard_watch_example", "kinesis_to_doris_example"])
def test_the_example_dags_import_cleanly(dag_id: str) -> None:
    bag = _dagbag(DAGS / f"{dag_id}.py")
    assert bag.import_errors == {}
    assert dag_id in bag.dags


def test_the_watch_dag_runs_sensor_and_rebalance(
    stream: str, kinesis_client: Any, dynamodb_client: Any, airflow_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.utils.state import DagRunState

    from airflow_provider_kinesis_doris.core.rebalance import observe_topology
    from airflow_provider_kinesis_doris.version_compat import AIRFLOW_V_3_0_PLUS

    table = "demo.events"
    store = dynamo_store(dynamodb_client, TABLE, f"{stream}.{table}")
    assert observe_topology(kinesis_client, store.ledger, stream) is None
    parent, children = split_first_shard(kinesis_client, stream)
    monkeypatch.setenv("KD_EXAMPLE_STREAM", stream)
    monkeypatch.setenv("KD_EXAMPLE_TABLE", table)
    monkeypatch.setenv("KD_EXAMPLE_CHECKPOINT_TABLE", TABLE)
    monkeypatch.setenv("KD_RESHARD_POKE_SECONDS", "1")
    dag = _dagbag(DAGS / "kinesis_reshard_watch_example.py").dags["kinesis_reshard_watch_example"]

    when = datetime(2026, 2, 1, tzinfo=timezone.utc)
    # The loader DAG is not in this metadata DB: the signal task is marked success, not run.
    date_argument = {"logical_date": when} if AIRFLOW_V_3_0_PLUS else {"execution_date": when}
    run = dag.test(mark_success_pattern="signal_loader", **date_argument)

    assert run.state == DagRunState.SUCCESS
    topology = store.ledger.get_topology()
    assert topology.version == 2 and set(children) <= set(topology.assignment)
    assert store.ledger.get_shard(parent) is not None and {store.ledger.get_shard(c).parent_ids for c in children} == {(parent,)}


def test_a_missing_stream_or_checkpoint_table_is_named(stream: str) -> None:
    from airflow_provider_kinesis_doris.core.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="checkpoint table 'no_such_table' does not exist.*run the loader once"):
        sensor(stream, "no_such_table", deferrable=False).poke({})
    with pytest.raises(ConfigurationError, match="Kinesis stream 'no-such-stream' does not exist"):
        sensor("no-such-stream", deferrable=False).poke({})


@pytest.mark.parametrize("poke_interval", [0, timedelta(0)])
def test_a_deferrable_sensor_that_would_look_without_pause_is_refused_when_the_dag_is_parsed(poke_interval: Any) -> None:
    """Airflow allows poke_interval=0; deferred, the triggerer would fail on it at run time."""
    from airflow_provider_kinesis_doris.core.errors import ConfigurationError
    from airflow_provider_kinesis_doris.sensors.kinesis_reshard import KinesisReshardSensor

    arguments = {"stream_name": "s", "checkpoint_table": TABLE, "pipeline_id": "p", "poke_interval": poke_interval}
    with pytest.raises(ConfigurationError, match=r"poke_interval must be more than 0 seconds.*got 0(\.0)?: give poke_interval=60"):
        KinesisReshardSensor(task_id="watch", deferrable=True, **arguments)
    assert KinesisReshardSensor(task_id="watch", deferrable=False, **arguments).poke_interval == 0
