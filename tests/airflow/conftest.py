"""Fixtures of the tests that run the loader in a real Airflow (``dag.test()``) on both majors."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def failures(monkeypatch: pytest.MonkeyPatch) -> list[BaseException]:
    """What the operator's ``execute`` raised in this test's runs (dag.test() runs tasks in this
    process on both majors; the exception is re-raised, so Airflow fails the task as usual)."""
    from airflow_provider_kinesis_doris.operators.kinesis_to_doris import KinesisToDorisOperator

    raised: list[BaseException] = []
    execute = KinesisToDorisOperator.execute

    def recording(self: Any, context: Any) -> Any:
        try:
            return execute(self, context)
        except BaseException as exc:
            raised.append(exc)
            raise

    monkeypatch.setattr(KinesisToDorisOperator, "execute", recording)
    return raised
