"""The local stack launcher: services come up on loopback only and are gone after stop."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from airflow_provider_kinesis_doris.testing.builders import wait_stream_active
from kinesis_doris_devstack.stack import LocalStack

pytestmark = pytest.mark.integration

EMULATORS = ["kinesis_mock", "kinesalite", "dynamodb"]


def _listening_addresses(pid: int) -> set[str]:
    """Local addresses of the TCP sockets ``pid`` listens on, read from /proc (no ss needed)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = os.readlink(fd)
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    addresses = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # 0A = LISTEN
                addresses.add(local.split(":")[0])
    return addresses


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]


def test_emulators_listen_on_loopback_only_and_stop_by_pid(tmp_path: Path) -> None:
    with LocalStack(tmp_path, services=EMULATORS) as stack:
        pids = {name: service.pid for name, service in stack.running.items()}
        recorded = json.loads(stack.endpoints_file.read_text())
        assert {name: entry["pid"] for name, entry in recorded.items()} == pids
        for name, pid in pids.items():
            addresses = _listening_addresses(pid)
            # 0100007F is 127.0.0.1 in /proc's little-endian hex; anything else is a leak.
            assert addresses == {"0100007F"}, f"{name} listens on {addresses}"
        kinesis = boto3.client("kinesis", endpoint_url=recorded["kinesis_mock"]["endpoint"])
        kinesis.create_stream(StreamName="stack-smoke", ShardCount=1)
        wait_stream_active(kinesis, "stack-smoke")
        assert kinesis.describe_stream_summary(StreamName="stack-smoke")["StreamDescriptionSummary"]["OpenShardCount"] == 1
    assert not any(_pid_alive(pid) for pid in pids.values())
    assert not stack.endpoints_file.exists()


def test_stack_stops_what_it_started_when_a_later_service_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KINESIS_DORIS_NODE_MODULES", str(tmp_path / "missing"))
    stack = LocalStack(tmp_path, services=["dynamodb", "kinesalite"])
    with pytest.raises(FileNotFoundError):
        stack.start()
    assert stack.running == {}


def test_cli_up_then_down(tmp_path: Path) -> None:
    state = tmp_path / "state"
    command = [sys.executable, "-m", "kinesis_doris_devstack.stack"]
    up = subprocess.run([*command, "up", "--state-dir", str(state), "--services", "dynamodb", "doris"],
                        capture_output=True, text=True, timeout=120)  # fmt: skip
    assert up.returncode == 0, up.stderr
    pids = [service["pid"] for service in json.loads(up.stdout).values()]
    assert all(_pid_alive(pid) for pid in pids)
    env_file = state / "airflow-connections.env"
    # only what runs: no Kinesis, so no aws_default; the stand-in's password only in a 0600 file
    assert env_file.read_text().startswith("export AIRFLOW_CONN_DORIS_DEFAULT='{\"conn_type\": \"doris\"")
    assert env_file.stat().st_mode & 0o777 == 0o600
    assert f"source {env_file}" in up.stderr and "local-stack-password" not in up.stderr
    down = subprocess.run([*command, "down", "--state-dir", str(state)], capture_output=True, text=True, timeout=60)
    assert json.loads(down.stdout) == {"stopped": ["dynamodb", "doris"]}
    assert not any(_pid_alive(pid) for pid in pids)
    assert not env_file.exists()


def test_a_cancelled_transaction_leaves_every_item_it_named_as_it_was(dynamodb_client) -> None:  # type: ignore[no-untyped-def]
    """The devstack's moto rolls a cancelled transaction back item by item (moto_server.py): the
    put, update and delete it applied before the failed condition are undone, other items kept."""
    table = "rollback-check"
    dynamodb_client.create_table(
        TableName=table,
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        BillingMode="PAY_PER_REQUEST",
    )
    for sk, value in (("updated", "before"), ("deleted", "kept"), ("untouched", "same")):
        dynamodb_client.put_item(TableName=table, Item={"pk": {"S": "p"}, "sk": {"S": sk}, "v": {"S": value}})

    def key(sk: str) -> dict[str, dict[str, str]]:
        return {"pk": {"S": "p"}, "sk": {"S": sk}}

    with pytest.raises(dynamodb_client.exceptions.TransactionCanceledException):
        dynamodb_client.transact_write_items(TransactItems=[
            {"Put": {"TableName": table, "Item": {**key("new"), "v": {"S": "x"}}}},
            {"Update": {"TableName": table, "Key": key("updated"), "UpdateExpression": "SET v = :v",
                        "ExpressionAttributeValues": {":v": {"S": "after"}}}},
            {"Delete": {"TableName": table, "Key": key("deleted")}},
            {"Put": {"TableName": table, "Item": {**key("untouched"), "v": {"S": "y"}},
                     "ConditionExpression": "attribute_not_exists(sk)"}},
        ])  # fmt: skip
    items = dynamodb_client.query(
        TableName=table, KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": {"S": "p"}}
    )["Items"]
    assert {item["sk"]["S"]: item["v"]["S"] for item in items} == {"updated": "before", "deleted": "kept", "untouched": "same"}
    dynamodb_client.transact_write_items(TransactItems=[
        {"Put": {"TableName": table, "Item": {**key("new"), "v": {"S": "x"}}}},
        {"Delete": {"TableName": table, "Key": key("deleted")}},
    ])  # fmt: skip
    items = dynamodb_client.query(
        TableName=table, KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": {"S": "p"}}
    )["Items"]
    assert sorted(item["sk"]["S"] for item in items) == ["new", "untouched", "updated"]
