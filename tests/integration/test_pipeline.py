"""Plan → read → load → commit on the real local stack (kinesis-mock, moto DynamoDB, the Doris
stand-in), without Spark or Airflow: the invariants the pipeline promises, end to end."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import replace

import pytest

from airflow_provider_kinesis_doris.core.aws_clients import _botocore_session, aws_client
from airflow_provider_kinesis_doris.core.load import run_here
from airflow_provider_kinesis_doris.core.plan import ShardDecision
from airflow_provider_kinesis_doris.core.settings import Credentials
from kinesis_doris_devstack.scenario import event, now_ms, put_events, put_records, sealed_end, wait_past

pytestmark = pytest.mark.integration


def _three_intervals(kinesis_client, stream: str) -> tuple[list[int], list[int]]:  # type: ignore[no-untyped-def]
    """Write 3 batches of events in 3 consecutive intervals; return the interval bounds and ids."""
    bounds = [now_ms()]
    ids: list[int] = []
    for batch in range(3):
        wait_past(bounds[-1])
        new = [batch * 100 + i for i in range(25)]
        results = put_events(kinesis_client, stream, [event(i) for i in new])
        ids += new
        bounds.append(sealed_end(kinesis_client, stream, results))
    return bounds, ids


def test_consecutive_intervals_load_every_record_exactly_once(world, kinesis_client) -> None:
    bounds, ids = _three_intervals(kinesis_client, world["stream"])
    results = [world["run"](bounds[i], bounds[i + 1]) for i in range(3)]

    assert [row[0] for row in world["rows"]()] == sorted(ids)
    assert [r.summary()["loaded"] for r in results] == [25, 25, 25]
    shard_ids = sorted({row[1] for row in world["rows"]()})
    assert len(shard_ids) == 2
    for shard_id in shard_ids:
        mark = world["store"].ledger.get_shard(shard_id).high_water_mark
        assert mark is not None and mark.instant_ms == bounds[3]


def test_the_in_process_runner_loads_range_groups_side_by_side_sharing_its_aws_clients(
    world, kinesis_client, caplog
) -> None:  # type: ignore[no-untyped-def]
    """``run_here`` loads the job's groups in lanes (threads); every range is reported once, each
    group is loaded by a thread of its own, and the lanes share one Kinesis and one DynamoDB
    client (each built for ~11 ms of CPU; botocore's clients are thread-safe)."""
    bounds, ids = _three_intervals(kinesis_client, world["stream"])
    built: list[str] = []

    def record_client(class_attributes, base_classes, **kwargs):  # type: ignore[no-untyped-def]
        built.append(kwargs["event_name"].rpartition(".")[2])

    def runner(job, credentials):  # type: ignore[no-untyped-def]
        assert len(job.partition_groups()) == 2  # one group per shard
        return run_here(job, credentials, lanes=2)

    botocore_session = _botocore_session()
    botocore_session.register("creating-client-class", record_client)
    try:
        for i in range(3):
            caplog.clear()
            built.clear()
            with caplog.at_level(logging.INFO, logger="airflow_provider_kinesis_doris.core.load"):
                result = world["run"](bounds[i], bounds[i + 1], runner=runner)
            shard_by_thread = {r.threadName: r.getMessage().split()[1] for r in caplog.records if "rows loaded" in r.getMessage()}
            assert len(result.reports) == 2
            assert sorted(shard_by_thread.values()) == sorted(report.shard_id for report in result.reports)
            assert len(shard_by_thread) == 2, f"both groups were loaded by one thread: {shard_by_thread}"
            assert sorted(built) == ["dynamodb", "kinesis"], built
    finally:
        botocore_session.unregister("creating-client-class", record_client)
    assert [row[0] for row in world["rows"]()] == sorted(ids)


def test_clients_shared_by_more_lanes_than_botocores_pool_keep_a_connection_each(world, dynamodb_endpoint) -> None:  # type: ignore[no-untyped-def]
    """Past botocore's 10 pooled connections urllib3 drops and reopens them: a client shared by
    more threads pools one per thread, and a larger pool the user set stays."""
    aws = world["config"].aws
    shared = aws_client("dynamodb", dynamodb_endpoint, aws, Credentials(), connections=16)
    assert shared.meta.config.max_pool_connections == 16
    assert aws_client("dynamodb", dynamodb_endpoint, aws, Credentials(), connections=4).meta.config.max_pool_connections == 10
    larger = replace(aws, botocore_config={"max_pool_connections": 50})
    assert aws_client("dynamodb", dynamodb_endpoint, larger, Credentials(), connections=16).meta.config.max_pool_connections == 50


def _label_lookups(monkeypatch) -> list[str]:  # type: ignore[no-untyped-def]
    """The labels every Doris client asks about from now on, in order."""
    from airflow_provider_kinesis_doris.core.doris.client import DorisStreamLoadClient

    asked: list[str] = []
    get_load_state = DorisStreamLoadClient.get_load_state

    def recording(self, database, label):  # type: ignore[no-untyped-def]
        asked.append(label)
        return get_load_state(self, database, label)

    monkeypatch.setattr(DorisStreamLoadClient, "get_load_state", recording)
    return asked


def test_the_label_window_canary_is_asked_once_per_run_however_many_lanes_load(
    world, kinesis_client, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """The canary is the driver's, asked before the lanes start: one label lookup per run, not one
    per lane (nor per Spark partition)."""
    bounds, _ = _three_intervals(kinesis_client, world["stream"])
    world["run"](bounds[0], bounds[1])
    [canary] = world["store"].chunks.label_canaries()
    asked = _label_lookups(monkeypatch)

    def two_lanes(job, credentials):  # type: ignore[no-untyped-def]
        assert len(job.partition_groups()) == 2
        return run_here(job, credentials, lanes=2)

    for i in (1, 2):
        world["run"](bounds[i], bounds[i + 1], runner=two_lanes)

    assert asked.count(canary.label) == 2, asked


def test_the_label_window_canary_uses_the_drivers_store_not_the_executors_credentials(
    world, kinesis_client, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """``executor_credentials="default_chain"`` on a Spark cluster: the executors have AWS
    credentials of their own, the Airflow worker may have none. The canary is the driver's, asked
    with the store ``run_interval`` was given before the runner starts; a runner whose executors
    only load their ranges (as Spark's do) needs to ask nothing."""
    from airflow_provider_kinesis_doris.core.load import load_range_group

    bounds, ids = _three_intervals(kinesis_client, world["stream"])
    world["run"](bounds[0], bounds[1])
    [canary] = world["store"].chunks.label_canaries()
    asked = _label_lookups(monkeypatch)
    own_chain = replace(world["config"], aws=replace(world["config"].aws, executor_credentials="default_chain"))
    executors_env = {name: os.environ[name] for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    # The worker's own default chain finds nothing: an AWS client built from it fails its first call.
    for name in executors_env:
        monkeypatch.delenv(name)
    for name in ("AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"):
        monkeypatch.setenv(name, "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")

    def on_the_cluster(job, credentials):  # type: ignore[no-untyped-def]
        assert credentials.aws_access_key_id is None  # default_chain: the driver ships no AWS keys
        with monkeypatch.context() as executor:
            for name, value in executors_env.items():
                executor.setenv(name, value)
            return [report for group in job.groups for report in load_range_group(job, group, credentials)]

    world["run"](bounds[1], bounds[2], cfg=own_chain, runner=on_the_cluster)

    assert asked.count(canary.label) == 1, asked
    assert [row[0] for row in world["rows"]()] == sorted(ids[:50])


def test_auto_loads_in_process_what_the_shards_recent_intervals_say_is_small(world, kinesis_client) -> None:
    """``use_spark="auto"``: shards without a loaded interval count at Kinesis's write limit over
    the interval; later the estimate is the largest count of each shard's recent intervals."""
    from airflow_provider_kinesis_doris.core.runner_choice import AutoRunner

    bounds, ids = _three_intervals(kinesis_client, world["stream"])
    used: list[str] = []

    def recording(name):  # type: ignore[no-untyped-def]
        def runner(job, credentials):  # type: ignore[no-untyped-def]
            used.append(name)
            return run_here(job, credentials)  # both load for real; only the choice is under test

        return runner

    def auto(max_records: int) -> AutoRunner:
        return AutoRunner(world["store"], spark=recording("spark"), in_process=recording("here"), max_records=max_records)

    first_width_s = (bounds[1] - bounds[0]) / 1000
    unknown = auto(max_records=int(2 * first_width_s * 1000) - 1)
    world["run"](bounds[0], bounds[1], runner=unknown)
    assert unknown.choice is not None and unknown.choice.ranges_at_write_limit == 2
    assert unknown.choice.estimated_records == sum(int(first_width_s * 1000) for _ in range(2))
    assert used == ["spark"]

    world["run"](bounds[1], bounds[2], runner=auto(max_records=10**6))
    assert used == ["spark", "here"]
    store = world["store"]
    expected = sum(
        max(counts["records"] for counts in store.ranges.recent_loaded_counts(shard.shard_id, 6).values())
        for shard in store.ledger.list_shard_checkpoints()
    )
    counted = auto(max_records=expected - 1)
    world["run"](bounds[2], bounds[3], runner=counted)
    assert counted.choice is not None and counted.choice.ranges_at_write_limit == 0
    assert counted.choice.estimated_records >= expected > 0 and used == ["spark", "here", "spark"]
    assert [row[0] for row in world["rows"]()] == sorted(ids)


def test_out_of_order_runs_and_replays_tile_the_shards(world, kinesis_client) -> None:
    """Intervals run last-first, then replayed with a different chunk size: no gap, no duplicate."""
    bounds, ids = _three_intervals(kinesis_client, world["stream"])
    for i in (2, 0, 1):
        world["run"](bounds[i], bounds[i + 1])
    rebuilt = replace(world["config"], chunk_max_rows=3)
    replays = [world["run"](bounds[i], bounds[i + 1], rebuilt) for i in range(3)]

    assert [row[0] for row in world["rows"]()] == sorted(ids)
    for replay in replays:
        summary = replay.summary()
        assert summary["loaded"] == 0
        for shard in summary["shards"].values():
            assert shard["chunks_already_loaded"] == shard["chunks"]


def test_bad_records_go_to_the_dead_letter_table_and_nothing_is_dropped(world, kinesis_client) -> None:
    start = now_ms()
    wait_past(start)
    payloads = [("k1", json.dumps(event(1)).encode()), ("k2", b"{not json"), ("k3", b"\xff\xfe binary"),
                ("k4", json.dumps({"user_id": "no-id"}).encode()), ("k5", json.dumps(event(5)).encode())]  # fmt: skip
    end = sealed_end(kinesis_client, world["stream"], put_records(kinesis_client, world["stream"], payloads))

    summary = world["run"](start, end).summary()

    assert [row[0] for row in world["rows"]()] == [1, 5]
    reasons = sorted(row[0] for row in world["dead"]())
    assert len(reasons) == 3 and summary["dead_lettered"] == 3
    assert any("not JSON" in r for r in reasons) and any("UTF-8" in r for r in reasons)
    assert any("missing required fields ['event_id']" in r for r in reasons)
    assert summary["records"] == 5 and summary["already_loaded"] == {"rows": 0, "dead_letters": 0}
    assert summary["dead_letter_reasons"] == {
        "payload is not JSON": 1, "payload is not UTF-8 text": 1, "missing required fields ['event_id']": 1
    }

    replay = world["run"](start, end).summary()

    assert replay["loaded"] == 0 and replay["dead_lettered"] == 0, "a replay sends nothing and says so"
    assert replay["already_loaded"] == {"rows": 2, "dead_letters": 3} and replay["dead_letter_reasons"] == {}
    assert len(world["dead"]()) == 3


def test_intervals_without_records_start_no_runner_and_still_commit(world, kinesis_client) -> None:
    """No Spark for an empty interval (before any data, and after the data). Before any data the
    cuts are not the same (nothing to start from): the ranges are stored and committed. After the
    data every shard stays at its last record: EMPTY, nothing stored but the cut, nothing to
    commit, and the mark waits at the loaded interval's end for the next range."""

    def no_runner(job, credentials):  # type: ignore[no-untyped-def]
        raise AssertionError(f"the runner was started for {len(job.ranges)} empty ranges")

    start = now_ms()
    wait_past(start + 50)
    first = world["run"](start, start + 50, runner=no_runner)
    loaded_start = start + 50
    loaded = put_events(kinesis_client, world["stream"], [event(i) for i in range(10)])
    loaded_end = sealed_end(kinesis_client, world["stream"], loaded)
    wait_past(loaded_end + 50)
    world["run"](loaded_start, loaded_end)
    after = world["run"](loaded_end, loaded_end + 50, runner=no_runner)

    assert [row[0] for row in world["rows"]()] == list(range(10))
    assert first.summary()["records"] == 0 and first.commit is not None
    assert {s.shard_id for s in first.plan.shards if s.range is not None} == set(first.commit.high_water_marks)
    assert after.summary()["records"] == 0 and after.commit is None
    assert {s.decision for s in after.plan.shards} == {ShardDecision.EMPTY}
    for shard in world["store"].ledger.list_shard_checkpoints():
        assert shard.high_water_mark.instant_ms == loaded_end
