"""Bugs the proof suite found, each pinned by a test that failed before its fix."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from airflow_provider_kinesis_doris.core.errors import CheckpointNotFound
from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
from airflow_provider_kinesis_doris.core.stores.dynamodb import dynamo_store
from airflow_provider_kinesis_doris.core.model import ChunkLimits
from airflow_provider_kinesis_doris.core.model import Boundary, BoundaryKind, ShardRange
from airflow_provider_kinesis_doris.core.stores.memory import memory_store
from tests.faults.trial import (
    CHECKPOINT_TABLE,
    Stack,
    TrialSpec,
    aws_client,
    create_stream,
    create_tables,
    new_names,
    pipeline_config,
    produce,
    run_with,
    table_ids,
)


def _stored_range(store: CheckpointStore) -> ShardRange:
    start = store.ledger.put_boundary(Boundary("shard-1", 100, BoundaryKind.SHARD_START))
    end = store.ledger.put_boundary(Boundary("shard-1", 200, BoundaryKind.PENDING))
    return store.ranges.create_range(ShardRange(store.pipeline_id, "stream", "shard-1", 100, 200, start, end))


def test_the_first_run_of_a_range_fixes_its_chunk_limits() -> None:
    store = memory_store("pipeline")
    _stored_range(store)

    assert store.ranges.settle_chunk_limits("shard-1", 100, ChunkLimits(5, 1000)) == ChunkLimits(5, 1000)
    assert store.ranges.settle_chunk_limits("shard-1", 100, ChunkLimits(2, 50)) == ChunkLimits(5, 1000)
    with pytest.raises(CheckpointNotFound, match=r"shard-1 for interval start 1970-01-01T00:00:00\.999Z \(999\)"):
        store.ranges.settle_chunk_limits("shard-1", 999, ChunkLimits(5, 1000))


@pytest.mark.integration
def test_concurrent_runs_with_different_chunk_sizes_load_each_record_once(proof_stack: Stack) -> None:
    """Found by the proof suite: two runs of one interval, one with 5 rows per chunk and one with
    2, cut different chunks, hence different labels, and each loaded every record (20 of 20
    duplicated). The range now keeps the limits of its first run."""
    spec = replace(TrialSpec.from_seed(3), kpl=False, reshard=None, events=24)
    stream, table = new_names(spec.seed)
    kinesis = aws_client("kinesis", proof_stack.kinesis_endpoint)
    create_stream(kinesis, stream, 1)
    create_tables(proof_stack.doris, table, "DUPLICATE")
    produced, start, end = produce(kinesis, stream, spec)
    config = pipeline_config(proof_stack, proof_stack.doris, stream, table, chunk_rows=5)
    errors: list[BaseException] = []

    def run(chunk_rows: int) -> None:
        store = dynamo_store(aws_client("dynamodb", proof_stack.dynamodb_endpoint), CHECKPOINT_TABLE,
                                      config.pipeline_id)  # fmt: skip
        try:
            run_with(replace(config, chunk_max_rows=chunk_rows), start, end,
                     aws_client("kinesis", proof_stack.kinesis_endpoint), store)  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - a lost commit race is allowed; the rows decide
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(rows,)) for rows in (5, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert sorted(table_ids(proof_stack.doris, table)) == sorted(produced.good), errors
