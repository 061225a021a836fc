"""The checkpoint table's ``preflight`` item (``core.stores.preflight``), on the in-memory store
that behaves as the DynamoDB one by construction."""

from __future__ import annotations

from airflow_provider_kinesis_doris.core.stores.memory import memory_store, MemoryTable


def test_the_digest_that_passed_is_kept_per_pipeline_and_replaced_when_settings_change() -> None:
    table = MemoryTable()
    store, other = memory_store("p", table, clock=lambda: 1), memory_store("q", table)
    assert store.preflight.passed_preflight_digest() is None

    store.preflight.record_passed_preflight("a" * 64)
    assert store.preflight.passed_preflight_digest() == "a" * 64 and other.preflight.passed_preflight_digest() is None

    store.preflight.record_passed_preflight("b" * 64)
    assert memory_store("p", table).preflight.passed_preflight_digest() == "b" * 64


def test_each_task_records_over_the_digest_another_task_of_the_pipeline_left() -> None:
    table = MemoryTable()
    first, second = memory_store("p", table), memory_store("p", table)
    first.preflight.record_passed_preflight("a" * 64)
    second.preflight.record_passed_preflight("a" * 64)  # the same settings: nothing to write
    second.preflight.record_passed_preflight("b" * 64)
    first.preflight.record_passed_preflight("c" * 64)
    assert first.preflight.passed_preflight_digest() == "c" * 64
