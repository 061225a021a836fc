"""The shard benchmark's AWS model (``benchmarks/aws_model.py``) on the emulators: AWS's call limits
reach the caller with AWS's error codes, the modelled latency is what its clock counts instead of
the emulator's time, and ``--aws-model`` runs the benchmark at a tiny size and judges the targets."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from benchmarks.aws_model import LATENCY_S, AwsModel, VirtualClock
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


@pytest.mark.timeout(600)
def test_the_benchmark_with_the_aws_model_reports_modelled_seconds_and_judges_the_targets(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    completed = subprocess.run(  # noqa: S603 - our own script, fixed arguments
        [sys.executable, "-m", "benchmarks.shards", "--aws-model", "--shards", "2", "--records-per-shard", "2",
         "--interval-s", "3", "--history-intervals", "0", "--state-dir", str(tmp_path / "stack"), "--json-out", str(out)],
        capture_output=True, text=True, timeout=540, check=False, cwd=ROOT,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    line = json.loads(out.read_text().splitlines()[0])
    for key in ("loaded_aws_s", "quiet_aws_s", "steady_aws_s", "tip_aws_s"):
        assert 0 < line[key], key
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
