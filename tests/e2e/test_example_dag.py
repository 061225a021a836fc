"""The example DAG, run by Airflow itself (``dag.test()``) on the local stack: three consecutive
intervals, then the same three again, load every record exactly once — on Airflow 3.x and 2.11."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from airflow_provider_kinesis_doris.core.checkpoints import DynamoCheckpointStore
from airflow_provider_kinesis_doris.testing.scenario import event, put_events, wait_past
from tests.e2e.conftest import CHECKPOINT_TABLE, DB, aligned_grid, load_example_dag, run_dag_test

pytestmark = [pytest.mark.airflow, pytest.mark.e2e, pytest.mark.spark]


def test_three_intervals_then_replays_load_exactly_once(example, kinesis_client, dynamodb_client, doris_server) -> None:
    bounds = aligned_grid(3)
    produced: list[int] = []
    for i in range(3):
        wait_past(bounds[i])
        ids = list(range(i * 1000, i * 1000 + 30))
        put_events(kinesis_client, example["stream"], [event(e) for e in ids])
        produced += ids
    wait_past(bounds[3])
    dag = load_example_dag()

    for _ in range(2):  # the second pass replays every interval
        for end in bounds[1:]:
            dag_run = run_dag_test(dag, datetime.fromtimestamp(end / 1000, tz=timezone.utc))
            assert str(dag_run.state) in ("success", "DagRunState.SUCCESS"), dag_run.state

    rows = doris_server.execute_sql(DB, f"SELECT event_id FROM {example['table']} ORDER BY event_id")
    assert [row[0] for row in rows] == sorted(produced)
    store = DynamoCheckpointStore(dynamodb_client, CHECKPOINT_TABLE, example["pipeline_id"])
    shards = store.list_shard_checkpoints()
    assert len(shards) == 2
    assert {shard.high_water_mark.instant_ms for shard in shards} == {bounds[3]}
