"""Arguments the loader checks when the DAG file is parsed, before any run."""

from __future__ import annotations

import pytest

from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.operators.kinesis_to_doris import KinesisToDorisOperator


def _loader(**arguments: object) -> KinesisToDorisOperator:
    return KinesisToDorisOperator(task_id="load", stream_name="s", doris_table="d.t", checkpoint_table="c", **arguments)


def test_driver_concurrency_defaults_to_the_bounded_pool_and_takes_a_larger_one() -> None:
    assert _loader().driver_concurrency == 8
    assert _loader(driver_concurrency=32).driver_concurrency == 32


@pytest.mark.parametrize("bad", [0, -1, 2.5, "8"])
def test_a_driver_concurrency_that_is_not_a_positive_whole_number_fails_the_parse_naming_it(bad: object) -> None:
    with pytest.raises(ConfigurationError, match=rf"driver_concurrency must be a whole number of at least 1, got {bad!r}"):
        _loader(driver_concurrency=bad)
