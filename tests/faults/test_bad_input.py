"""Bad input on the real stack: every record ends in the table, in the dead letter, or in a
counted and reported Doris filter, or the run fails with an error naming it; nothing is dropped
silently and a failed chunk never moves a checkpoint."""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import pytest
from aws_kinesis_agg.aggregator import RecordAggregator

from airflow_provider_kinesis_doris.core.stores.dynamodb import dynamo_store
from airflow_provider_kinesis_doris.core.errors import PermanentStreamLoadError
from airflow_provider_kinesis_doris.core.doris.labels import is_valid_label
from airflow_provider_kinesis_doris.core.chunk_load import FEW_REFUSED_ROWS
from airflow_provider_kinesis_doris.core.model import RangeState
from airflow_provider_kinesis_doris.core.pipeline import IntervalResult, PipelineConfig
from kinesis_doris_devstack.scenario import create_stream, now_ms, put_records, sealed_end, wait_past
from tests.faults.trial import (
    CHECKPOINT_TABLE,
    DB,
    Stack,
    aws_client,
    create_tables,
    new_names,
    pipeline_config,
    run_with,
)

pytestmark = pytest.mark.integration


class World:
    """One stream (1 shard), its tables and pipeline on the proof stack."""

    def __init__(self, stack: Stack, *, stream: str | None = None, table: str | None = None,
                 pipeline_id: str | None = None) -> None:  # fmt: skip
        default_stream, default_table = new_names(random.randrange(10**6))
        self.stack, self.doris = stack, stack.doris
        self.kinesis = aws_client("kinesis", stack.kinesis_endpoint)
        self.stream, self.table = stream or default_stream, table or default_table
        create_stream(self.kinesis, self.stream, 1)
        create_tables(self.doris, self.table, "DUPLICATE")
        # Doris's default (not strict), to show what it does with values that do not convert.
        config = pipeline_config(stack, self.doris, self.stream, self.table, chunk_rows=4, strict_mode=None)
        self.config = replace(config, pipeline_id=pipeline_id) if pipeline_id else config
        self.store = dynamo_store(aws_client("dynamodb", stack.dynamodb_endpoint), CHECKPOINT_TABLE,
                                           self.config.pipeline_id)  # fmt: skip

    def put(self, payloads: Iterable[tuple[str, bytes]]) -> tuple[int, int]:
        """Put ``payloads`` inside a fresh interval; return it, sealed."""
        start = now_ms()
        wait_past(start)
        results = put_records(self.kinesis, self.stream, payloads)
        return start, sealed_end(self.kinesis, self.stream, results)

    def run(self, start: int, end: int, config: PipelineConfig | None = None) -> IntervalResult:
        return run_with(config or self.config, start, end, self.kinesis, self.store)

    def rows(self) -> list[tuple[Any, ...]]:
        return self.doris.execute_sql(DB, f"SELECT event_id, user_id, amount FROM `{self.table}` ORDER BY event_id")

    def dead(self) -> list[tuple[str, bytes]]:
        rows = self.doris.execute_sql(DB, f"SELECT reason, payload_base64 FROM `{self.table}_dead_letter`")
        return sorted((reason, base64.b64decode(payload)) for reason, payload in rows)

    def ranges_loaded(self) -> list[bool]:
        return [r.state is RangeState.LOADED for s in self.store.ledger.list_shard_checkpoints()
                for r in self.store.ranges.ranges_for_shard(s.shard_id)]  # fmt: skip


def _json(event: dict[str, Any]) -> bytes:
    return json.dumps(event, ensure_ascii=False).encode()


def _aggregate(user_records: list[bytes]) -> bytes:
    aggregator = RecordAggregator()
    for data in user_records:
        aggregator.add_user_record("pk", data)
    return aggregator.clear_and_get().get_contents()[2]


def test_undecodable_records_go_to_the_dead_letter_with_their_reason(proof_stack: Stack) -> None:
    world = World(proof_stack)
    bad = [b"{not json", b"\xff\xfe\x00\x81", b"[1, 2]", b'{"amount": NaN, "event_id": 9}', b'{"user_id": "x"}']
    # An empty user record can only travel inside a KPL aggregate (Kinesis refuses empty data).
    aggregate = _aggregate([_json({"event_id": 2, "user_id": "a", "amount": 1}), b"", b"\x00"])
    start, end = world.put([("k", _json({"event_id": 1, "user_id": "a", "amount": 1})), ("k", aggregate)]
                           + [("k", payload) for payload in bad])  # fmt: skip

    summary = world.run(start, end).summary()

    assert [row[0] for row in world.rows()] == [1, 2]
    dead = world.dead()
    assert sorted(payload for _, payload in dead) == sorted([*bad, b"", b"\x00"])
    reasons = " | ".join(reason for reason, _ in dead)
    for expected in ("not JSON", "not UTF-8", "expected an object", "NaN is not valid JSON", "missing required fields",
                     "payload is empty"):
        assert expected in reasons
    assert summary["records"] == 9 and summary["loaded"] == 2 and summary["dead_lettered"] == 7


def test_unicode_and_a_record_near_the_kinesis_size_limit_load_intact(proof_stack: Stack) -> None:
    world = World(proof_stack)
    world.config = replace(world.config, chunk_max_rows=100, chunk_max_bytes=64 * 1024)
    unicode_users = ["ユーザー", "émile", "😀-x", "Ωmega\u200b", "a\\\"b"]
    events = [{"event_id": i, "user_id": user, "amount": i} for i, user in enumerate(unicode_users)]
    oversized = {"event_id": 99, "user_id": "big", "amount": 7, "blob": "x" * (1000 * 1000 - 100)}
    start, end = world.put([("k", _json(e)) for e in events] + [("k", _json(oversized))])

    summary = world.run(start, end).summary()

    assert world.rows() == [(e["event_id"], e["user_id"], e["amount"]) for e in events] + [(99, "big", 7)]
    assert summary["loaded"] == 6 and summary["dead_lettered"] == 0
    # The oversized record formed a chunk of its own: the byte limit cut around it.
    assert summary["shards"][next(iter(summary["shards"]))]["chunks"] == 2


def test_values_that_do_not_fit_the_columns_are_dead_letters_with_dorises_reason(proof_stack: Stack) -> None:
    world = World(proof_stack)
    payloads = [_json({"event_id": 1, "user_id": "ok", "amount": 1}),
                _json({"event_id": 2, "user_id": "much-too-long-for-a-varchar-of-32-chars", "amount": 2}),
                _json({"event_id": "not-a-number", "user_id": "x", "amount": 3})]  # fmt: skip
    start, end = world.put(("k", p) for p in payloads)

    summary = world.run(start, end).summary()

    assert [row[0] for row in world.rows()] == [1] and world.ranges_loaded() == [True]
    reasons = sorted(reason for reason, _ in world.dead())
    assert reasons == [
        "column(event_id) values is null while columns is not nullable",
        "column_name[user_id], the length of input is too long than schema. first 32 bytes of input str: "
        "[much-too-long-for-a-varchar-of-3] schema length: 32; actual length: 39; ",
    ]
    assert summary["loaded"] == 1 and summary["dead_lettered"] == 2
    # Probes of the 3 rows: all (2 refused), row 0 (none), rows 1-2 (2), then rows 1 and 2 alone
    # for their reasons; each aborted once answered, and the chunk Doris failed is aborted too.
    assert (summary["probe_loads"], summary["loads_aborted"]) == (5, 6)
    world.run(start, end)  # the replay loads nothing twice
    assert len(world.rows()) == 1 and len(world.dead()) == 2


def test_a_chunk_doris_refuses_in_bulk_fails_loudly_and_moves_no_checkpoint(proof_stack: Stack) -> None:
    world = World(proof_stack)
    payloads = [_json({"event_id": i, "user_id": "x" * 40, "amount": 1}) for i in range(FEW_REFUSED_ROWS)]
    start, end = world.put(("k", p) for p in payloads)

    in_one_chunk = replace(world.config, chunk_max_rows=FEW_REFUSED_ROWS)
    with pytest.raises(PermanentStreamLoadError, match="more than max_bad_record_ratio") as failure:
        world.run(start, end, in_one_chunk)

    assert failure.value.error_url
    assert world.rows() == [] and world.dead() == [] and world.ranges_loaded() == [False]
    assert all(s.high_water_mark is None for s in world.store.ledger.list_shard_checkpoints())
    with pytest.raises(PermanentStreamLoadError):  # the replay fails the same way
        world.run(start, end, in_one_chunk)
    assert world.rows() == []


def test_rows_doris_filters_under_a_filter_ratio_are_counted_and_reported(proof_stack: Stack) -> None:
    world = World(proof_stack)
    tolerant = replace(world.config, load_options=replace(world.config.load_options, max_filter_ratio=1.0))
    payloads = [_json({"event_id": 1, "user_id": "ok", "amount": "not-an-int"}),
                _json({"event_id": 2, "user_id": "x" * 40, "amount": 2}),
                _json({"event_id": 3, "user_id": "ok", "amount": 3})]  # fmt: skip
    start, end = world.put(("k", p) for p in payloads)

    summary = world.run(start, end, tolerant).summary()

    # Not strict: a value that does not convert becomes NULL; a string too long is filtered.
    assert world.rows() == [(1, "ok", None), (3, "ok", 3)]
    assert summary["loaded"] == 2 and summary["filtered"] == 1 and summary["records"] == 3
    (shard_id,) = summary["shards"]
    assert world.store.ranges.range_counts(shard_id, start)["rows_filtered"] == 1


def test_names_with_characters_not_valid_in_labels_or_urls(proof_stack: Stack) -> None:
    pipeline_id = "ops/team #1: événements?x=1&y=%2F"
    world = World(proof_stack, table=f"evt-{random.randrange(10**6)}", pipeline_id=pipeline_id)
    start, end = world.put([("k", _json({"event_id": 1, "user_id": "a", "amount": 1})), ("k", b"junk")])

    summary = world.run(start, end).summary()

    assert world.rows() == [(1, "a", 1)] and len(world.dead()) == 1
    labels = [label for shard in summary["shards"].values() for label in shard["labels"]]
    assert labels and all(is_valid_label(label) for label in labels)
    assert summary["pipeline_id"] == pipeline_id


def test_an_unknown_table_fails_with_an_error_naming_it(proof_stack: Stack) -> None:
    world = World(proof_stack)
    missing = replace(world.config, doris_table="no_such_table")
    start, end = world.put([("k", _json({"event_id": 1, "user_id": "a", "amount": 1}))])

    with pytest.raises(PermanentStreamLoadError, match="no_such_table"):
        world.run(start, end, missing)
    assert world.ranges_loaded() == [False]
