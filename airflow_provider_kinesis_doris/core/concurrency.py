"""Bounded parallel I/O on the driver: per-shard control-plane calls run side by side.

Planning, empty-range checks and commits make a few DynamoDB and Kinesis calls per shard, each a
network round trip; one shard after the other, a stream of hundreds of shards spends minutes per
interval waiting. Shards are independent within one step (a child waits only on decisions made in
an earlier generation, ``core.kinesis.topology.parent_generations``), so a step maps its per-shard
work over a small thread pool. boto3 clients are thread-safe; throttling
(``ProvisionedThroughputExceeded``, ``LimitExceeded``) is retried with backoff by botocore's retry
handler, which the connection's ``config_kwargs`` can tune.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from typing import TypeVar


DEFAULT_DRIVER_CONCURRENCY = 8
"""Per-shard calls in flight at once on the driver. DynamoDB on-demand tables and Kinesis take far
more; the bound keeps a run from starving other pipelines that share the account's limits, and
stays under botocore's pool of 10 connections per client (above it, set ``max_pool_connections``
in the AWS connection's ``config_kwargs``, or urllib3 drops and reopens connections)."""

Item = TypeVar("Item")
Result = TypeVar("Result")


def map_bounded(function: Callable[[Item], Result], items: Sequence[Item], concurrency: int) -> list[Result]:
    """``[function(item) for item in items]``, at most ``concurrency`` calls at a time.

    Like a failing step run one item after the other, the first failure stops the work: items not
    started yet are not started, calls already in flight finish (their writes are fenced or put-once,
    so a half-done step is what a crashed task leaves too), and then the failure is raised.

    :return: the results in the order of ``items``.
    """
    if concurrency == 1 or len(items) <= 1:
        return [function(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(concurrency, len(items)), thread_name_prefix="kinesis-doris") as pool:
        futures = [pool.submit(function, item) for item in items]
        done, pending = wait(futures, return_when=FIRST_EXCEPTION)
        failed = _first_failed(futures, done)
        if failed is not None:
            for future in pending:
                future.cancel()
            wait(pending)
            raise failed.exception()  # type: ignore[misc]
    return [future.result() for future in futures]


def _first_failed(futures: Sequence[Future[Result]], done: set[Future[Result]]) -> Future[Result] | None:
    """The earliest item (in input order) among the finished calls that raised."""
    return next((f for f in futures if f in done and not f.cancelled() and f.exception() is not None), None)
