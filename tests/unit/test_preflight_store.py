"""The checkpoint table's ``preflight`` item (``core.stores.preflight``), on the in-memory store
that behaves as the DynamoDB one by construction."""

from __future__ import annotations

from airflow_provider_kinesis_doris.core.stores.memory import MemoryCheckpointStore, MemoryTable


def test_the_digest_that_passed_is_kept_per_pipeline_and_replaced_when_settings_change() -> None:
    table = MemoryTable()
    store, other = MemoryCheckpointStore("p", table, clock=lambda: 1), MemoryCheckpointStore("q", table)
    assert store.passed_preflight_digest() is None

    store.record_passed_preflight("a" * 64)
    assert store.passed_preflight_digest() == "a" * 64 and other.passed_preflight_digest() is None

    store.record_passed_preflight("b" * 64)
    assert MemoryCheckpointStore("p", table).passed_preflight_digest() == "b" * 64


def test_each_task_records_over_the_digest_another_task_of_the_pipeline_left() -> None:
    table = MemoryTable()
    first, second = MemoryCheckpointStore("p", table), MemoryCheckpointStore("p", table)
    first.record_passed_preflight("a" * 64)
    second.record_passed_preflight("a" * 64)  # the same settings: nothing to write
    second.record_passed_preflight("b" * 64)
    first.record_passed_preflight("c" * 64)
    assert first.passed_preflight_digest() == "c" * 64
