"""Airflow version flags for the few places where 2.11 and 3.x differ beyond common-compat.

Imported only by the Airflow-facing layers (hooks, operators, sensors, triggers), never by
``core/`` or ``spark/``.
"""

from __future__ import annotations

from packaging.version import Version

from airflow import __version__ as _airflow_version

AIRFLOW_VERSION = Version(Version(_airflow_version).base_version)
AIRFLOW_V_3_0_PLUS = AIRFLOW_VERSION >= Version("3.0.0")
