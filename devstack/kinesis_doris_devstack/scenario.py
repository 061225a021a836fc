"""Building blocks for tests, the demo and the benchmark: streams, events and tables on the
local stack."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
from collections.abc import Iterable, Sequence
from typing import Any

from airflow_provider_kinesis_doris.core.kinesis.shard_pages import arrival_ms
from airflow_provider_kinesis_doris.testing.builders import wait_stream_active

EVENTS_DDL = """CREATE TABLE IF NOT EXISTS `{table}` (
    event_id BIGINT NOT NULL,
    user_id VARCHAR(32) NULL,
    amount INT NULL,
    _kinesis_shard VARCHAR(64) NULL,
    _kinesis_sequence VARCHAR(80) NULL,
    _kinesis_arrival BIGINT NULL
) {model} KEY(event_id)
DISTRIBUTED BY HASH(event_id) BUCKETS 1
PROPERTIES ("replication_num" = "1"{properties})"""


def events_table_ddl(table: str, model: str = "DUPLICATE") -> str:
    """``event_id, user_id, amount`` plus the Kinesis metadata columns; UNIQUE tables get a
    sequence column fed by ``_kinesis_arrival`` so the newest value wins in any load order."""
    properties = ', "function_column.sequence_type" = "BIGINT"' if model == "UNIQUE" else ""
    return EVENTS_DDL.format(table=table, model=model, properties=properties)


def create_stream(kinesis: Any, name: str, shards: int) -> list[str]:
    """Create ``name`` with ``shards`` shards, wait until it is active; return the shard ids."""
    kinesis.create_stream(StreamName=name, ShardCount=shards)
    kinesis.get_waiter("stream_exists").wait(StreamName=name, WaiterConfig={"Delay": 0.2, "MaxAttempts": 150})
    return [shard["ShardId"] for shard in kinesis.list_shards(StreamName=name)["Shards"]]


def event(event_id: int, user_id: str | None = None, amount: int = 1) -> dict[str, Any]:
    return {"event_id": event_id, "user_id": user_id or f"user-{event_id % 17}", "amount": amount}


def prefix_user(row: dict[str, Any]) -> dict[str, Any] | None:
    """A user transform as DAGs name it (``...scenario:prefix_user``): prefixes ``user_id``,
    rejects events whose amount is negative."""
    if row.get("amount", 0) < 0:
        return None
    return {**row, "user_id": f"tx-{row['user_id']}"}


DIE_AT_EVENT_ENV = "KINESIS_DORIS_DIE_AT_EVENT"


def dies_at_event(row: dict[str, Any]) -> dict[str, Any]:
    """A transform that kills the loader process it runs in (SIGKILL, as the kernel's out-of-memory
    killer does) at the event whose id ``KINESIS_DORIS_DIE_AT_EVENT`` names, in a child process
    only (a loader process, never the test's own); every other row passes unchanged."""
    if str(row.get("event_id")) == os.environ.get(DIE_AT_EVENT_ENV) and multiprocessing.parent_process() is not None:
        os.kill(os.getpid(), signal.SIGKILL)
    return row


def put_records(kinesis: Any, stream: str, payloads: Iterable[tuple[str, bytes]]) -> list[dict[str, Any]]:
    """PutRecords in batches of 500, retrying what the service refused; returns every result
    entry (ShardId, SequenceNumber) in input order."""
    batch: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for partition_key, data in payloads:
        batch.append({"PartitionKey": partition_key, "Data": data})
        if len(batch) == 500:
            results.extend(_put_batch(kinesis, stream, batch))
            batch = []
    if batch:
        results.extend(_put_batch(kinesis, stream, batch))
    return results


def put_events(kinesis: Any, stream: str, events: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Put JSON events, partitioned by ``user_id``."""
    return put_records(kinesis, stream, ((str(e["user_id"]), json.dumps(e).encode()) for e in events))


def _put_batch(kinesis: Any, stream: str, batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    results: list[dict[str, Any] | None] = [None] * len(batch)
    pending = list(range(len(batch)))
    for attempt in range(10):
        response = kinesis.put_records(StreamName=stream, Records=[batch[i] for i in pending])
        retry = []
        for index, entry in zip(pending, response["Records"]):
            if "ErrorCode" in entry:
                retry.append(index)
            else:
                results[index] = entry
        if not retry:
            return results  # type: ignore[return-value]
        pending = retry
        time.sleep(0.1 * 2**attempt)
    raise RuntimeError(f"PutRecords kept failing for {len(pending)} records of stream {stream}")


def split(kinesis: Any, stream: str, shard_id: str) -> tuple[str, str]:
    """Split ``shard_id`` in the middle of its hash range; return its (lower, upper) children."""
    before = _shards(kinesis, stream)
    low, high = (int(before[shard_id]["HashKeyRange"][key]) for key in ("StartingHashKey", "EndingHashKey"))
    kinesis.split_shard(StreamName=stream, ShardToSplit=shard_id, NewStartingHashKey=str((low + high) // 2))
    wait_stream_active(kinesis, stream)
    children = sorted(
        (shard for shard in _shards(kinesis, stream).values() if shard["ShardId"] not in before),
        key=lambda shard: int(shard["HashKeyRange"]["StartingHashKey"]),
    )
    if [child.get("ParentShardId") for child in children] != [shard_id, shard_id]:
        raise RuntimeError(f"splitting {shard_id} of {stream} gave {children}")
    return children[0]["ShardId"], children[1]["ShardId"]


def merge(kinesis: Any, stream: str, shard_id: str, adjacent_id: str) -> str:
    """Merge two adjacent shards; return the child."""
    before = _shards(kinesis, stream)
    kinesis.merge_shards(StreamName=stream, ShardToMerge=shard_id, AdjacentShardToMerge=adjacent_id)
    wait_stream_active(kinesis, stream)
    (child,) = set(_shards(kinesis, stream)) - set(before)
    return child


def _shards(kinesis: Any, stream: str) -> dict[str, dict[str, Any]]:
    return {shard["ShardId"]: shard for shard in kinesis.list_shards(StreamName=stream)["Shards"]}


def now_ms() -> int:
    return int(time.time() * 1000)


def wait_past(instant_ms: int, margin_ms: int = 5) -> None:
    """Sleep until the wall clock (and so the emulator's arrival stamps) is past ``instant_ms``."""
    remaining = instant_ms + margin_ms - now_ms()
    if remaining > 0:
        time.sleep(remaining / 1000)


def sealed_end(kinesis: Any, stream: str, results: Iterable[dict[str, Any]]) -> int:
    """An interval end after every record that ``results`` (put result entries) names, waited past.

    The end is taken from the arrival stamps the service gave the records, not only from the host
    clock: on a loaded CI machine kinesis-mock has stamped a record later than the host clock read
    right after the put returned, and an end from that clock then left the record outside the
    interval.
    """
    last_of_shard: dict[str, int] = {}
    for entry in results:
        shard, sequence = entry["ShardId"], int(entry["SequenceNumber"])
        last_of_shard[shard] = max(sequence, last_of_shard.get(shard, sequence))
    end = now_ms()
    for shard, sequence in last_of_shard.items():
        iterator = kinesis.get_shard_iterator(
            StreamName=stream, ShardId=shard, ShardIteratorType="AT_SEQUENCE_NUMBER",
            StartingSequenceNumber=str(sequence),
        )["ShardIterator"]  # fmt: skip
        (record,) = kinesis.get_records(ShardIterator=iterator, Limit=1)["Records"]
        end = max(end, arrival_ms(record["ApproximateArrivalTimestamp"]))
    wait_past(end + 1)
    return end + 1


def sealed_interval(kinesis: Any, stream: str, events: Sequence[dict[str, Any]]) -> tuple[int, int, list[dict[str, Any]]]:
    """An interval holding ``events`` and nothing else of this writer: its start, its end (waited
    past, :func:`sealed_end`) and the put result entries."""
    start = now_ms()
    wait_past(start)
    results = put_events(kinesis, stream, events)
    return start, sealed_end(kinesis, stream, results), results
