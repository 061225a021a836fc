"""Apache Airflow provider that loads Amazon Kinesis into Apache Doris exactly once."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
