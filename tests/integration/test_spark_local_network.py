"""A local-mode Spark load listens on loopback only: the JVM's py4j gateway, driver RPC endpoint and
block manager, and Spark's Python daemon and workers. Real Spark, real load (kinesis-mock, moto,
the stand-in)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_kinesis_doris.core.report import RangeReport
from benchmarks.run import children_by_parent
from airflow_provider_kinesis_doris.core.load_job import LoadJob
from airflow_provider_kinesis_doris.core.settings import Credentials
from kinesis_doris_devstack.scenario import event, now_ms, put_events, sealed_end, wait_past

REPO_ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def listening_addresses(pid: int) -> list[str]:
    """The local addresses (hex, as ``/proc/net/tcp{,6}`` write them) that ``pid`` listens on
    (none if it ended meanwhile)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
        tables = [open(f"/proc/{pid}/net/{name}").read() for name in ("tcp", "tcp6")]  # noqa: SIM115
    except OSError:
        return []
    inodes = set()
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed between the listing and the read
        if link.startswith("socket:["):
            inodes.add(link[len("socket:[") : -1])
    return [
        fields[1].split(":")[0]
        for table in tables
        for fields in map(str.split, table.splitlines()[1:])
        if fields[3] == "0A" and fields[9] in inodes  # 0A: LISTEN
    ]


def is_loopback(address: str) -> bool:
    if len(address) == 8:  # IPv4, bytes in host order: 127.x.x.x ends in 7F
        return address.endswith("7F")
    return address == "00000000000000000000000001000000" or (  # ::1, or ::ffff:127.x.x.x
        address.startswith("0000000000000000FFFF0000") and address.endswith("7F")
    )


def descendants(root: int) -> list[int]:
    children = children_by_parent()
    found, pending = [], list(children.get(root, ()))
    while pending:
        pid = pending.pop()
        found.append(pid)
        pending.extend(children.get(pid, ()))
    return found


def listening_in_tree(root: int) -> dict[int, list[str]]:
    return {pid: listening_addresses(pid) for pid in [root, *descendants(root)]}


# Run in a process of its own: the test session's JVM was started with SPARK_LOCAL_IP=127.0.0.1
# (tests/conftest.py), which would hide what the runner's own settings do.
LOAD_AND_LOOK = """
import json, os, sys
from airflow_provider_kinesis_doris.core.load_job import LoadJob
from airflow_provider_kinesis_doris.core.settings import Credentials
from airflow_provider_kinesis_doris.spark.runner import SparkSettings, run_spark_job
from tests.integration.test_spark_local_network import listening_in_tree
job = LoadJob.from_json(open(sys.argv[1]).read())
reports = run_spark_job(job, Credentials.load(sys.argv[2]), SparkSettings(master="local[2]"))
# The session is kept for the next job, so its sockets are still open now.
print(json.dumps({"reports": [r.to_json() for r in reports], "listening": listening_in_tree(os.getpid())}))
"""


def test_a_local_mode_load_opens_no_listening_socket_outside_loopback(
    world: dict[str, Any], kinesis_client: Any, tmp_path: Path
) -> None:  # fmt: skip
    start = now_ms()
    wait_past(start)
    end = sealed_end(kinesis_client, world["stream"], put_events(kinesis_client, world["stream"], [event(i) for i in range(6)]))
    seen: dict[str, Any] = {}

    def in_a_fresh_process(job: LoadJob, credentials: Credentials) -> list[RangeReport]:
        (tmp_path / "job.json").write_text(job.to_json())
        credentials.write(str(tmp_path / "credentials.json"))
        env = {name: value for name, value in os.environ.items() if name != "SPARK_LOCAL_IP"}
        completed = subprocess.run(  # noqa: S603 - our own script
            [sys.executable, "-c", LOAD_AND_LOOK, str(tmp_path / "job.json"), str(tmp_path / "credentials.json")],
            capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=300, check=False,
        )  # fmt: skip
        assert completed.returncode == 0, completed.stderr[-3000:]
        seen.update(json.loads(completed.stdout.strip().splitlines()[-1]))
        return [RangeReport.from_json(text) for text in seen["reports"]]

    result = world["run"](start, end, runner=in_a_fresh_process)

    assert result.summary()["loaded"] == 6
    listening = seen["listening"]
    assert sum(map(len, listening.values())) >= 3, f"the JVM listens (py4j, RPC, block manager): {listening}"
    outside = {pid: [a for a in found if not is_loopback(a)] for pid, found in listening.items()}
    assert not any(outside.values()), f"listening outside loopback: {outside}"
