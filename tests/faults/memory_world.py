"""What the regression tests over the in-memory fakes share: the shard, the clock's origin and
the interval length (the pipeline and its runner come from ``testing.builders``)."""

from __future__ import annotations

from airflow_provider_kinesis_doris.testing.builders import STREAM

__all__ = ["IV", "SHARD", "STREAM", "T0"]

SHARD = "shardId-000000000000"
T0 = 1_700_000_000_000
IV = 60_000
