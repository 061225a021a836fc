"""Type and range checks of single settings, each raising :class:`ConfigurationError` that names
the setting, what it must be and what it got.

Shared by the operators (at DAG parse time, and after rendering for templated values) and the
core's own settings, so one rule gives one message wherever it is checked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from airflow_provider_kinesis_doris.core.errors import ConfigurationError

Value = TypeVar("Value")


def refuse(name: str, expected: str, value: object) -> ConfigurationError:
    """The error for ``name`` holding ``value`` instead of ``expected``."""
    return ConfigurationError(f"{name} must be {expected}, got {value!r}")


def _is_number(value: object) -> bool:
    # bool is an int to Python, never a count or a share to a user.
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_whole(value: object) -> bool:
    return _is_number(value) and isinstance(value, int)


def check_whole_number(name: str, value: int, minimum: int) -> int:
    """``value`` if it is an int (not a bool) of at least ``minimum``."""
    if not _is_whole(value) or value < minimum:
        raise refuse(name, f"a whole number of at least {minimum}", value)
    return value


def check_optional_whole_number(name: str, value: int | None, minimum: int) -> int | None:
    """``value`` if it is None or a whole number of at least ``minimum``."""
    if value is not None and (not _is_whole(value) or value < minimum):
        raise refuse(name, f"None or a whole number of at least {minimum}", value)
    return value


def check_ratio(name: str, value: float) -> float:
    """``value`` if it is a number from 0 to 1."""
    if not _is_number(value) or not 0 <= value <= 1:
        raise refuse(name, "a number from 0 to 1", value)
    return value


def check_choice(name: str, value: Value, choices: Sequence[Value]) -> Value:
    """``value`` if it is one of ``choices``, of the choice's type (``1`` is not ``True``)."""
    if not any(isinstance(value, type(choice)) and value == choice for choice in choices):
        raise refuse(name, f"one of {', '.join(map(repr, choices))}", value)
    return value


def check_duration(name: str, value: timedelta) -> timedelta:
    """``value`` if it is a ``datetime.timedelta`` of zero or more."""
    if not isinstance(value, timedelta) or value < timedelta(0):
        raise refuse(name, "a datetime.timedelta of zero or more", value)
    return value


def check_flag(name: str, value: bool) -> bool:
    """``value`` if it is True or False."""
    if not isinstance(value, bool):
        raise refuse(name, "True or False", value)
    return value


def check_text(name: str, value: str) -> str:
    """``value`` if it is a non-empty string."""
    if not isinstance(value, str) or not value:
        raise refuse(name, "a non-empty string", value)
    return value


def check_local_master(name: str, value: str) -> str:
    """``value`` if it is a local Spark master (``local``, ``local[N]``, ``local[*]``): Spark in the
    task's process runs in local mode only; a cluster is reached through a connection."""
    if not check_text(name, value).startswith("local"):
        raise ConfigurationError(
            f"{name} {value!r}: Spark in the task's process runs in local mode only (local[*], local[N]); for a "
            "cluster, submit through a spark connection (spark_conn_id) or use Spark Connect (spark_connect_conn_id)"
        )
    return value


def check_optional_text(name: str, value: str | None) -> str | None:
    """``value`` if it is None or a non-empty string."""
    if value is not None and (not isinstance(value, str) or not value):
        raise refuse(name, "None or a non-empty string", value)
    return value


def check_texts(name: str, value: Sequence[str]) -> Sequence[str]:
    """``value`` if it is a list or tuple of strings (a string alone is a sequence of letters)."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
        raise refuse(name, "a list or tuple of strings", value)
    return value


def check_optional_mapping(name: str, value: Mapping[str, Any] | None, *, text_values: bool = False) -> None:
    """Refuse a ``value`` that is neither None nor a mapping with string keys (and, with
    ``text_values``, string values)."""
    expected = "None or a dict of strings to strings" if text_values else "None or a dict with string keys"
    if value is None:
        return
    if not isinstance(value, Mapping) or not all(isinstance(key, str) for key in value):
        raise refuse(name, expected, value)
    if text_values and not all(isinstance(item, str) for item in value.values()):
        raise refuse(name, expected, value)


def check_verify(name: str, value: bool | str | None) -> bool | str | None:
    """``value`` if it is None, a bool, or a CA bundle's path (as botocore's ``verify``)."""
    if value is not None and not isinstance(value, (bool, str)):
        raise refuse(name, "None, True, False or a CA bundle's path", value)
    return value
