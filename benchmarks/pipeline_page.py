"""How long the pipeline page (``airflow_provider_kinesis_doris.ui``) takes for a 1,000-shard
pipeline: the checkpoint table's reads (``ui.status.read_store_status``: the ledger's list of
shards, one paginated Query, and the preflight item), the interval grid built from the runs'
summaries (``ui.view``: counts and catch-ups, as the loader's XCom gives them) and the HTML, on
moto's DynamoDB on loopback, timed twice: on the wall clock (moto serves one request at a time and
scans, so this is an emulator's figure) and through ``benchmarks.aws_model`` (DynamoDB's latency
per call and its per-partition-key throughput, the emulator's own time left out: the figure for
AWS). Every DynamoDB call of a load is counted. The metadata DB's one read of the runs and one of
their XCom do not grow with the shard count and are left out (the summaries are made up here).

``make bench-page``; ``--shards`` and ``--intervals`` change the pipeline, ``--repeat`` the
number of timed loads (the median is reported). Not a test: a figure for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from benchmarks.aws_model import AwsModel
from airflow_provider_kinesis_doris.core.model import Boundary, BoundaryKind, Position, ShardInfo, ShardRange
from airflow_provider_kinesis_doris.ui import html
from airflow_provider_kinesis_doris.ui.pipelines import LoaderRun
from airflow_provider_kinesis_doris.ui.status import StoreStatus, read_store_status
from airflow_provider_kinesis_doris.ui.view import caught_up_intervals, grid_cell, interval_counts
from kinesis_doris_devstack.stack import LocalStack

INTERVAL_MS = 60_000
HASH_SPACE = 2**128


def _store(client: Any, table: str, pipeline_id: str) -> Any:
    """The store on DynamoDB, whichever way this checkout builds it."""
    try:
        from airflow_provider_kinesis_doris.core.stores.dynamodb import dynamo_store
    except ImportError:  # before the store became the set of its parts on DynamoItems
        from airflow_provider_kinesis_doris.core.stores.dynamodb import DynamoCheckpointStore

        store = DynamoCheckpointStore(client, table, pipeline_id)
        store.create_table_if_missing()
        return store
    store = dynamo_store(client, table, pipeline_id)
    store.items.create_table_if_missing()
    return store


def lineage(shards: int) -> list[ShardInfo]:
    """A stream resharded once: a quarter of the shards split in two (half of the shards are their
    children, all open), the rest never split."""
    parents = shards // 4
    width = HASH_SPACE // (shards - parents)
    infos: list[ShardInfo] = []
    for n in range(shards - 2 * parents):
        infos.append(ShardInfo(f"shardId-{n:012d}", (), n * width, (n + 1) * width - 1, n, is_open=n >= parents))
    for p in range(parents):
        low, high = infos[p].starting_hash_key, infos[p].ending_hash_key
        middle = (low + high) // 2
        for half, (start, end) in enumerate(((low, middle), (middle + 1, high))):
            n = shards - 2 * parents + 2 * p + half
            infos.append(ShardInfo(f"shardId-{n:012d}", (infos[p].shard_id,), start, end, n, is_open=True))
    return infos


def fill(store: Any, infos: list[ShardInfo], intervals: int, first_ms: int) -> None:
    """Every shard registered, each with ``intervals`` loaded ranges (their cuts stored first)."""
    for info in infos:
        store.ledger.register_shard(info)
        cuts = [
            Boundary(info.shard_id, first_ms + i * INTERVAL_MS, BoundaryKind.SHARD_START if i == 0 else BoundaryKind.AT,
                     None if i == 0 else Position(1000 * i))
            for i in range(intervals + 1)
        ]  # fmt: skip
        for cut in cuts:
            store.ledger.put_boundary(cut)
        for i in range(intervals):
            start = first_ms + i * INTERVAL_MS
            store.ranges.create_range(
                ShardRange("bench", "bench-stream", info.shard_id, start, start + INTERVAL_MS, cuts[i], cuts[i + 1])
            )
            counts = {"records": 10, "rows_loaded": 9, "rows_filtered": 0, "dead_lettered": 1}
            store.ranges.mark_range_loaded(info.shard_id, start, counts)


def run_summaries(shards: int, intervals: int, first_ms: int) -> dict[str, dict[str, Any]]:
    """Run id → the loader's XCom summary of each interval's run, with the counts ``fill`` stored."""
    return {
        f"run-{i}": {"pipeline_id": "bench", "interval": [first_ms + i * INTERVAL_MS, first_ms + (i + 1) * INTERVAL_MS],
                     "records": 10 * shards, "loaded": 9 * shards, "dead_lettered": shards,
                     "skipped_intervals": {"recovered": [], "loaded": []}}
        for i in range(intervals)
    }  # fmt: skip


def page_data(status: StoreStatus, summaries: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What ``ui.view.build_page`` hands the HTML, its grid built from ``summaries`` as the page
    builds it (the metadata DB's reads are not measured here)."""
    runs = [LoaderRun(run_id, *summary["interval"], "success", "success", 1) for run_id, summary in summaries.items()]
    counts, caught_up = interval_counts(summaries.values()), caught_up_intervals(runs, summaries)
    return {
        "pipeline": {"pipeline_id": "bench", "dag_id": "bench_dag", "task_id": "load", "stream_name": "bench-stream",
                     "doris_table": "db.t", "checkpoint_table": "bench", "state": "healthy", "lag_ms": status.max_lag_ms},
        "hours": 6.0, "store_error": None, "store": status.as_dict(),
        "rows_loaded": sum(interval.rows_loaded for interval in counts.values()),
        "intervals": [grid_cell(run, counts.get(run.start_ms), caught_up) for run in runs],
        "waiting": [], "doris": {"table": "db.t", "rows": 0, "error": None, "dead_letter_table": "db.t_dead_letter",
                                 "dead_letters_by_reason": {}, "dead_letters_error": None},
        "preflight": {"verdict": "passed", "digest": "x" * 16, "warnings": []}, "audit": None,
    }  # fmt: skip


def _timed_load(store: Any, intervals: int, first_ms: int, model: AwsModel | None) -> float:
    """One page's store reads, grid and HTML: seconds on the wall clock, or on the AWS model's clock."""
    with model.active() if model else contextlib.nullcontext():
        began = model.clock.now() if model else time.monotonic()
        status = read_store_status(store)
        data = page_data(status, run_summaries(len(status.shards), intervals, first_ms))
        page = html.pipeline_page(data, "/kinesis-doris")
        took = (model.clock.now() if model else time.monotonic()) - began
    assert data["rows_loaded"] == 9 * len(status.shards) * intervals and page.count("data-shard=") == len(status.shards)
    return took


def counted_calls(client: Any) -> Counter[str]:
    """DynamoDB calls of ``client`` by operation, counted from now on (botocore's event per call,
    a retry included as botocore makes it one call)."""
    calls: Counter[str] = Counter()
    client.meta.events.register("before-call.dynamodb.*", lambda model, **_: calls.update([model.name]))
    return calls


def _in_memory(args: argparse.Namespace) -> int:
    """The page's own work for the pipeline (lineage, counts, HTML) on a store in memory: what is
    left of a load when DynamoDB answers at once."""
    from airflow_provider_kinesis_doris.core.stores.memory import memory_store

    store = memory_store("bench")
    first_ms = (int(time.time() * 1000) // INTERVAL_MS - args.intervals - 1) * INTERVAL_MS
    fill(store, lineage(args.shards), args.intervals, first_ms)
    timings = [_timed_load(store, args.intervals, first_ms, None) for _ in range(args.repeat)]
    print(f"page for {args.shards} shards ({args.intervals} intervals), store in memory: median "
          f"{statistics.median(timings):.3f} s, min {min(timings):.3f} s, max {max(timings):.3f} s over {args.repeat} loads")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--shards", type=int, default=1000)
    parser.add_argument("--intervals", type=int, default=3, help="loaded ranges a shard, shown in the grid")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--aws-model-only", action="store_true", help="time the loads under the AWS model only")
    parser.add_argument("--memory", action="store_true",
                        help="the store in memory: the page's own CPU (no DynamoDB, no emulator), in seconds")
    args = parser.parse_args(argv)
    if args.memory:
        return _in_memory(args)
    with tempfile.TemporaryDirectory(prefix="kd-bench-page-") as state, LocalStack(Path(state), ["dynamodb"]) as local:
        client = boto3.client("dynamodb", endpoint_url=local.running["dynamodb"].endpoint, region_name="us-east-1",
                              aws_access_key_id="testing", aws_secret_access_key="testing",
                              config=Config(max_pool_connections=32))  # fmt: skip
        store = _store(client, "bench_page", "bench")
        first_ms = (int(time.time() * 1000) // INTERVAL_MS - args.intervals - 1) * INTERVAL_MS
        began = time.monotonic()
        infos = lineage(args.shards)
        fill(store, infos, args.intervals, first_ms)
        print(f"filled {args.shards} shards x {args.intervals} loaded ranges in {time.monotonic() - began:.0f} s")
        calls = counted_calls(client)
        # moto answers one request at a time and scans the pipeline's items for each Query: at 1,000
        # shards a load takes minutes on the wall clock, which says nothing of AWS (--aws-model-only).
        loads = [] if args.aws_model_only else [_timed_load(store, args.intervals, first_ms, None) for _ in range(args.repeat)]
        model = AwsModel()
        modelled = [_timed_load(store, args.intervals, first_ms, model) for _ in range(args.repeat)]
    for name, timings in (("moto on loopback (wall clock)", loads), ("AWS model", modelled)):
        if not timings:
            continue
        print(f"page for {args.shards} shards ({args.intervals} intervals), {name}: median {statistics.median(timings):.2f} s, "
              f"min {min(timings):.2f} s, max {max(timings):.2f} s over {args.repeat} loads")  # fmt: skip
    loads_done = len(loads) + len(modelled)
    print("DynamoDB calls per load: " + ", ".join(f"{name} {count / loads_done:g}" for name, count in sorted(calls.items())))
    print(f"DynamoDB calls throttled under the AWS model: {dict(model.throttled) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
