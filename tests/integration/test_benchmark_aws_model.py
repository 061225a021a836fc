"""The shard benchmark's AWS model (``benchmarks/aws_model.py``) on the emulators: AWS's call limits
reach the caller with AWS's error codes, the modelled latency is what its clock counts instead of
the emulator's time, and ``--aws-model`` runs the benchmark at a tiny size, its loads in loader
processes that run the model too, and judges the targets."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from benchmarks.aws_model import LATENCY_S, AwsModel, LatencyTail, PartitionLimits, VirtualClock
from kinesis_doris_devstack.scenario import create_stream

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]


def _kinesis(endpoint: str, attempts: int) -> Any:
    return boto3.client(
        "kinesis", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="local",
        aws_secret_access_key="local", config=Config(retries={"total_max_attempts": attempts, "mode": "standard"}),
    )  # fmt: skip


def _shard(kinesis: Any) -> tuple[str, str]:
    stream = f"aws-model-{uuid.uuid4().hex[:8]}"
    return stream, create_stream(kinesis, stream, 1)[0]


def test_a_sixth_get_shard_iterator_in_a_second_is_refused_as_aws_refuses_it(kinesis_mock_endpoint: str) -> None:
    kinesis = _kinesis(kinesis_mock_endpoint, attempts=1)
    stream, shard = _shard(kinesis)
    model = AwsModel()
    with model.active():
        started = model.clock.now()
        for _ in range(5):
            kinesis.get_shard_iterator(StreamName=stream, ShardId=shard, ShardIteratorType="TRIM_HORIZON")
        with pytest.raises(ClientError) as refused:
            kinesis.get_shard_iterator(StreamName=stream, ShardId=shard, ShardIteratorType="TRIM_HORIZON")
        modelled = model.clock.now() - started
    assert refused.value.response["Error"]["Code"] == "ProvisionedThroughputExceededException"
    assert model.throttled == {"GetShardIterator": 1}
    # Six round trips of the modelled latency, and not the emulator's time on top: the driver's own
    # time between the calls is counted (a few ms alone, up to ~0.1 s when other work shares the
    # cores: make test's workers, so the bound leaves room for that and not for the emulator's).
    paused = model.clock.paused_seconds()
    assert 6 * LATENCY_S["GetShardIterator"] <= modelled < 6 * LATENCY_S["GetShardIterator"] + 0.25
    assert paused > 0, "the emulator's time was taken out of the modelled clock"


def test_get_records_is_limited_per_shard_through_the_iterators_it_returns(kinesis_mock_endpoint: str) -> None:
    """GetRecords names only its iterator: the model follows each NextShardIterator to its shard, and
    botocore's back-off gets the sixth call of a second through, as on AWS."""
    kinesis = _kinesis(kinesis_mock_endpoint, attempts=5)
    stream, shard = _shard(kinesis)
    model = AwsModel()
    with model.active():
        iterator = kinesis.get_shard_iterator(StreamName=stream, ShardId=shard, ShardIteratorType="TRIM_HORIZON")
        iterator = iterator["ShardIterator"]
        started, real_started = model.clock.now(), time.perf_counter()
        for _ in range(6):
            iterator = kinesis.get_records(ShardIterator=iterator)["NextShardIterator"]
        modelled, real = model.clock.now() - started, time.perf_counter() - real_started
    assert model.throttled["GetRecords"] >= 1
    # The back-off pause is on the model's clock too, so the throttle costs modelled time.
    assert modelled > 6 * LATENCY_S["GetRecords"] + 0.05 and real >= modelled


def _dynamodb(endpoint: str, attempts: int) -> Any:
    return boto3.client(
        "dynamodb", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="local",
        aws_secret_access_key="local", config=Config(retries={"total_max_attempts": attempts, "mode": "standard"}),
    )  # fmt: skip


def _table(dynamodb: Any) -> str:
    table = f"aws-model-{uuid.uuid4().hex[:8]}"
    dynamodb.create_table(
        TableName=table, BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
    )  # fmt: skip
    return table


def _put(dynamodb: Any, table: str, pk: str, n: int) -> None:
    dynamodb.put_item(TableName=table, Item={"pk": {"S": pk}, "sk": {"S": f"item#{n}"}})


def _query_of(table: str, pk: str) -> dict[str, Any]:
    return {"TableName": table, "KeyConditionExpression": "pk = :pk", "ConsistentRead": True,
            "ExpressionAttributeValues": {":pk": {"S": pk}}}  # fmt: skip


# Five write units a second for each key, no burst saved: the sixth one-unit write within a second
# of the first is over its key's capacity.
FIVE_A_SECOND = PartitionLimits(read_units_per_s=15, write_units_per_s=5, burst_s=1)


def test_writes_over_one_keys_capacity_are_refused_as_aws_refuses_them_and_another_key_has_its_own(
    dynamodb_endpoint: str,
) -> None:
    dynamodb = _dynamodb(dynamodb_endpoint, attempts=1)
    table = _table(dynamodb)
    model = AwsModel(partitions=FIVE_A_SECOND)
    with model.active():
        for n in range(5):
            _put(dynamodb, table, "pipeline-a", n)
        with pytest.raises(ClientError) as refused:
            _put(dynamodb, table, "pipeline-a", 5)
        for n in range(5):  # another partition-key value: a partition of its own
            _put(dynamodb, table, "pipeline-b", n)
    assert refused.value.response["Error"]["Code"] == "ProvisionedThroughputExceededException"
    assert model.throttled == {"PutItem": 1}
    assert model.partitions.units == {f"{table}/pipeline-a": 5, f"{table}/pipeline-b": 5}


def test_botocores_retries_get_writes_through_at_the_keys_rate(dynamodb_endpoint: str) -> None:
    dynamodb = _dynamodb(dynamodb_endpoint, attempts=10)
    table = _table(dynamodb)
    model = AwsModel(partitions=FIVE_A_SECOND)
    with model.active():
        started = model.clock.now()
        for n in range(10):
            _put(dynamodb, table, "pipeline-a", n)
        modelled = model.clock.now() - started
    # Ten one-unit writes at five a second, a second's worth there at the start: about a second
    # of botocore's back-off on the model's clock.
    assert model.throttled["PutItem"] >= 1 and modelled >= 0.9
    assert model.partitions.units == {f"{table}/pipeline-a": 10}


def test_a_read_pays_for_what_it_returned_and_the_next_one_waits_for_the_keys_capacity(dynamodb_endpoint: str) -> None:
    dynamodb = _dynamodb(dynamodb_endpoint, attempts=1)
    table = _table(dynamodb)
    # Two read units a second: a consistent read of 15 KB (4 units) spends two seconds' worth.
    model = AwsModel(partitions=PartitionLimits(read_units_per_s=2, write_units_per_s=1000, burst_s=1))
    with model.active():
        for n in range(3):  # 5 KB each: 5 write units
            dynamodb.put_item(TableName=table, Item={"pk": {"S": "pipeline-a"}, "sk": {"S": f"item#{n}"}, "body": {"S": "x" * 5000}})
        assert len(dynamodb.query(**_query_of(table, "pipeline-a"))["Items"]) == 3
        with pytest.raises(ClientError) as refused:  # the key's capacity is spent: refused before it reads
            dynamodb.query(**_query_of(table, "pipeline-a"))
        model.clock.sleep(1.5)  # a second later it is not spent any more
        assert len(dynamodb.query(**_query_of(table, "pipeline-a"))["Items"]) == 3
    assert refused.value.response["Error"]["Code"] == "ProvisionedThroughputExceededException"
    assert model.throttled == {"Query": 1}
    assert model.partitions.units == {f"{table}/pipeline-a": 3 * 5 + 2 * 4}


@pytest.mark.timeout(600)
def test_the_benchmark_with_the_aws_model_reports_modelled_seconds_and_judges_the_targets(tmp_path: Path) -> None:
    """Two shards, one lane a process: each shard's range loads in a loader process of its own, and
    its end is found in one before the plan."""
    out = tmp_path / "result.json"
    completed = subprocess.run(  # noqa: S603 - our own script, fixed arguments
        [sys.executable, "-m", "benchmarks.shards", "--aws-model", "--shards", "2", "--records-per-shard", "2",
         "--interval-s", "3", "--history-intervals", "0", "--processes", "2", "--driver-concurrency", "1",
         "--state-dir", str(tmp_path / "stack"), "--json-out", str(out)],
        capture_output=True, text=True, timeout=540, check=False, cwd=ROOT,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    line = json.loads(out.read_text().splitlines()[0])
    assert line["loader_processes"] == 2
    for shape in ("loaded", "quiet", "steady", "tip"):
        assert 0 < line[f"{shape}_aws_s"], shape
        # By operation: what AWS's limits refused, what a transaction in flight refused, the slow calls.
        assert all(isinstance(line[f"{kind}_{shape}"], dict) for kind in ("throttled", "conflicts", "slow")), line
    for shape in ("loaded", "steady", "tip"):
        # The loads' time is the slowest loader process's on its own clock, a part of the interval's.
        assert 0 < line[f"loads_{shape}_aws_s"] < line[f"{shape}_aws_s"], shape
        # The loader processes' calls are counted, and went through their own models: every page
        # read (the driver's end probe, the loaders' reads) passed a model, retries counted there too.
        assert line[f"driver_control_calls_per_shard_{shape}"] < line[f"control_calls_per_shard_{shape}"], shape
        calls = line[f"calls_per_shard_{shape}"]
        pages = round((calls["GetRecords (with records)"] + calls.get("GetRecords", 0)) * line["shards"])
        assert line[f"sent_{shape}"]["GetRecords"] >= pages >= 2 * line["shards"], shape
        # Where the interval's time went, on the model's clock: the loads hold the processes' time.
        phases = line[f"phase_s_{shape}"]
        assert sum(phases.values()) == pytest.approx(line[f"{shape}_aws_s"], abs=0.05), shape
        assert phases["plan"] > 0 and phases["load"] >= line[f"loads_{shape}_aws_s"], shape
    assert line["loads_quiet_aws_s"] == 0  # a quiet interval loads nothing: no process loads
    # The loader processes find the plan's cuts first (the first interval's starts and ends, then
    # the ends from the stored starts): their time is the plan's, on their own clocks.
    for shape in ("loaded", "quiet", "steady", "tip"):
        assert 0 < line[f"cuts_{shape}_aws_s"] < line[f"phase_s_{shape}"]["plan"], shape
    verdicts = [text for text in completed.stdout.splitlines() if text.startswith(("PASS ", "FAIL "))]
    assert any("quiet interval" in text for text in verdicts), completed.stdout[-2000:]


def test_the_clock_leaves_out_an_emulator_call_but_keeps_the_cpu_this_process_used_meanwhile() -> None:
    clock = VirtualClock()
    started = clock.now()
    with clock.paused():
        cpu_until = time.process_time() + 0.2
        while time.process_time() < cpu_until:  # the driver's other threads at work during the call
            pass
        time.sleep(0.3)  # the emulator serving the call
    assert 0.2 <= clock.now() - started < 0.3


def test_a_call_waiting_for_another_process_at_the_emulator_is_paused_too(tmp_path: Path) -> None:
    """On AWS the loader processes' calls do not wait for one another's: the wait for the
    emulator lock, which another process holds, is off the clock."""
    lock = tmp_path / "emulator.lock"
    holder = subprocess.Popen(  # noqa: S603 - a fixed program: hold the lock half a second
        [sys.executable, "-c", "import fcntl, os, sys, time\n"
         "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\nfcntl.flock(fd, fcntl.LOCK_EX)\n"
         "print('held', flush=True)\ntime.sleep(0.5)", str(lock)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        clock = VirtualClock(lock)
        started, real = clock.now(), time.perf_counter()
        with clock.paused():
            waited = time.perf_counter() - real
        assert waited >= 0.3  # the other process held it
        assert clock.now() - started < 0.1
    finally:
        holder.wait(timeout=10)


def _update(table: str, n: int) -> dict[str, Any]:
    return {"TableName": table, "Key": {"pk": {"S": "pipeline-a"}, "sk": {"S": f"item#{n}"}},
            "UpdateExpression": "SET v = :v", "ExpressionAttributeValues": {":v": {"N": "1"}}}  # fmt: skip


def test_a_write_of_an_item_a_transaction_holds_is_refused_and_another_transaction_on_it_cancelled(
    dynamodb_endpoint: str,
) -> None:
    """AWS's transaction conflicts: while a TransactWriteItems is in flight its items are held;
    another item, and the same item once the transaction ended, are written."""
    dynamodb = _dynamodb(dynamodb_endpoint, attempts=1)
    table = _table(dynamodb)
    for n in range(3):
        _put(dynamodb, table, "pipeline-a", n)
    model = AwsModel(latency={**LATENCY_S, "TransactWriteItems": 1.0}, tail=LatencyTail(share=0))
    with model.active():
        holding = threading.Thread(
            target=dynamodb.transact_write_items, kwargs={"TransactItems": [{"Update": _update(table, 0)}, {"Update": _update(table, 1)}]}
        )  # fmt: skip
        holding.start()
        model.clock.sleep(0.3)  # the transaction is in flight
        with pytest.raises(ClientError) as written:
            dynamodb.update_item(**_update(table, 1))
        with pytest.raises(ClientError) as cancelled:
            dynamodb.transact_write_items(TransactItems=[{"Update": _update(table, 2)}, {"Update": _update(table, 0)}])
        dynamodb.update_item(**_update(table, 2))  # no transaction holds it
        holding.join()
        dynamodb.update_item(**_update(table, 1))  # the transaction ended
    assert written.value.response["Error"]["Code"] == "TransactionConflictException"
    assert cancelled.value.response["Error"]["Code"] == "TransactionCanceledException"
    assert [reason["Code"] for reason in cancelled.value.response["CancellationReasons"]] == ["None", "TransactionConflict"]
    assert model.items_in_flight.conflicts == {"UpdateItem": 1, "TransactWriteItems": 1}


def test_a_share_of_the_calls_takes_the_tails_latency(dynamodb_endpoint: str) -> None:
    dynamodb = _dynamodb(dynamodb_endpoint, attempts=1)
    table = _table(dynamodb)
    _put(dynamodb, table, "pipeline-a", 0)
    model = AwsModel(tail=LatencyTail(share=0.3, factor=20.0, seed=1))
    key = {"pk": {"S": "pipeline-a"}, "sk": {"S": "item#0"}}
    with model.active():
        started = model.clock.now()
        for _ in range(30):
            dynamodb.get_item(TableName=table, Key=key)
        modelled = model.clock.now() - started
    slow = model.slow["GetItem"]
    assert 0 < slow < 30
    # Each slow call waits 20 typical ones: the slow ones alone are most of the modelled time.
    assert modelled >= (30 - slow + 20 * slow) * LATENCY_S["GetItem"]


@pytest.mark.timeout(600)
def test_the_benchmarks_spark_runner_models_its_python_workers_and_judges_a_fresh_tasks_intervals(tmp_path: Path) -> None:
    """``--runner spark``: the ranges load in Spark's Python workers, which make their calls under
    models of their own (the driver's hook does not reach them), and the master's two cores find
    each plan's cuts ahead, as the operator's SparkRunner on ``local[2]`` has them do."""
    out = tmp_path / "result.json"
    completed = subprocess.run(  # noqa: S603 - our own script, fixed arguments
        [sys.executable, "-m", "benchmarks.shards", "--aws-model", "--runner", "spark", "--spark-master", "local[2]",
         "--shards", "2", "--records-per-shard", "2", "--interval-s", "3", "--history-intervals", "0",
         "--shapes", "steady", "--driver-concurrency", "1", "--state-dir", str(tmp_path / "stack"), "--json-out", str(out)],
        capture_output=True, text=True, timeout=540, check=False, cwd=ROOT,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    line = json.loads(out.read_text().splitlines()[0])
    assert line["runner"] == "spark local[2]" and line["loader_processes"] == 2
    # Spark ran each interval with records once, and nothing for the quiet one.
    assert [line[f"spark_jobs_{shape}"] for shape in ("loaded", "quiet", "steady")] == [1, 0, 1]
    for shape in ("loaded", "steady"):
        # Every page the workers read went through a model: the driver read none of them.
        calls, driver = line[f"calls_per_shard_{shape}"], line[f"driver_control_calls_per_shard_{shape}"]
        assert calls["GetRecords (with records)"] >= 1 and line[f"sent_{shape}"]["GetRecords"] >= 2 * line["shards"], shape
        assert driver < line[f"control_calls_per_shard_{shape}"], shape
        # The workers' time in the ranges is on their clocks, a part of the load's.
        assert 0 < line[f"loads_{shape}_aws_s"] <= line[f"phase_s_{shape}"]["load"], shape
        assert 0 < line[f"cuts_{shape}_aws_s"] < line[f"phase_s_{shape}"]["plan"], shape
    # A fresh task's start, measured in a process of its own before each interval with a job, and
    # this process's session's; none before the quiet interval.
    assert line["spark_cold_start_s_loaded"] > 0 and line["spark_cold_start_s_steady"] > 0
    assert "spark_cold_start_s_quiet" not in line and line["spark_session_start_s"] > 0
    verdicts = [text for text in completed.stdout.splitlines() if "(spark" in text]
    # A fresh task pays Spark's start in each interval that ran a job, the one measured before it.
    for shape, name in (("loaded", "first interval"), ("steady", "recurring interval, records after")):
        verdict = next(text for text in verdicts if text.split(" ", 1)[1].startswith(name))
        assert f"{round(line[f'{shape}_aws_s'] + line[f'spark_cold_start_s_{shape}'], 2)} s" in verdict, verdict
    assert any(text.startswith("PASS quiet interval (spark)") for text in verdicts), verdicts
