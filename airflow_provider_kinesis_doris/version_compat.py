"""Airflow version flags for the few places where 2.11 and 3.x differ beyond common-compat.

Imported only by the Airflow-facing layers (hooks, operators, sensors, triggers), never by
``core/`` or ``spark/``.
"""

from __future__ import annotations

from packaging.version import Version

from airflow import __version__ as _airflow_version

AIRFLOW_VERSION = Version(Version(_airflow_version).base_version)
AIRFLOW_V_3_0_PLUS = AIRFLOW_VERSION >= Version("3.0.0")

# AirflowRescheduleException lives in the Task SDK on 3.x and is re-exported here on both.
from airflow.exceptions import AirflowRescheduleException  # noqa: E402

try:
    from airflow.providers.standard.triggers.temporal import DateTimeTrigger
except ImportError:  # Airflow 2.11 without the standard provider
    from airflow.triggers.temporal import DateTimeTrigger  # type: ignore[no-redef]

__all__ = ["AIRFLOW_V_3_0_PLUS", "AIRFLOW_VERSION", "AirflowRescheduleException", "DateTimeTrigger"]
