"""Apache Airflow provider that loads Amazon Kinesis into Apache Doris exactly once.

The operator's grouped settings (``config``) are exported here, imported on first use: Spark
executors import ``core`` through this package and need none of them.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_CONFIG_NAMES = (
    "InProcessRunner",
    "LoadConfig",
    "MappingConfig",
    "ReadConfig",
    "SparkOrInProcess",
    "SparkRunner",
    "StateConfig",
)

__all__ = ["__version__", *_CONFIG_NAMES]


def __getattr__(name: str) -> Any:
    if name in _CONFIG_NAMES:
        from airflow_provider_kinesis_doris import config

        return getattr(config, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
