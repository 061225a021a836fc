"""The single-setting checks (``core.value_checks``): each passes a good value through unchanged
and refuses a bad one with a ``ConfigurationError`` naming the setting, what it must be and what
it got."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

import airflow_provider_kinesis_doris.core.value_checks as checks
from airflow_provider_kinesis_doris.core.errors import ConfigurationError

Check = Callable[[str, Any], Any]

CHECKS: dict[str, Check] = {
    "whole number >= 1": lambda name, value: checks.check_whole_number(name, value, 1),
    "optional whole number >= 0": lambda name, value: checks.check_optional_whole_number(name, value, 0),
    "ratio": checks.check_ratio,
    "choice": lambda name, value: checks.check_choice(name, value, ("polling", "efo")),
    "flag choice": lambda name, value: checks.check_choice(name, value, (True, False)),
    "duration": checks.check_duration,
    "flag": checks.check_flag,
    "text": checks.check_text,
    "optional text": checks.check_optional_text,
    "texts": checks.check_texts,
    "verify": checks.check_verify,
}

ACCEPTED: list[tuple[str, Any]] = [
    ("whole number >= 1", 1),
    ("optional whole number >= 0", None),
    ("optional whole number >= 0", 0),
    ("ratio", 0),
    ("ratio", 0.5),
    ("ratio", 1),
    ("choice", "efo"),
    ("flag choice", False),
    ("duration", timedelta(0)),
    ("flag", True),
    ("text", "x"),
    ("optional text", None),
    ("texts", ("a", "b")),
    ("texts", []),
    ("verify", None),
    ("verify", False),
    ("verify", "/etc/ssl/ca.pem"),
]

REFUSED: list[tuple[str, Any, str]] = [
    ("whole number >= 1", 0, "a whole number of at least 1"),
    ("whole number >= 1", 2.0, "a whole number of at least 1"),
    ("whole number >= 1", True, "a whole number of at least 1"),
    ("optional whole number >= 0", -1, "None or a whole number of at least 0"),
    ("ratio", 1.5, "a number from 0 to 1"),
    ("ratio", False, "a number from 0 to 1"),
    ("ratio", "0.1", "a number from 0 to 1"),
    ("choice", "EFO", "one of 'polling', 'efo'"),
    ("flag choice", 0, "one of True, False"),
    ("duration", 5, "a datetime.timedelta of zero or more"),
    ("duration", timedelta(seconds=-1), "a datetime.timedelta of zero or more"),
    ("flag", "true", "True or False"),
    ("text", "", "a non-empty string"),
    ("optional text", 3, "None or a non-empty string"),
    ("texts", "ab", "a list or tuple of strings"),
    ("texts", ["a", 1], "a list or tuple of strings"),
    ("verify", 1, "None, True, False or a CA bundle's path"),
]


@pytest.mark.parametrize(("check", "value"), ACCEPTED)
def test_a_good_value_passes_through_unchanged(check: str, value: Any) -> None:
    assert CHECKS[check]("setting", value) is value


@pytest.mark.parametrize(("check", "value", "expected"), REFUSED)
def test_a_bad_value_is_refused_naming_the_setting_the_rule_and_the_value(
    check: str, value: Any, expected: str
) -> None:
    with pytest.raises(ConfigurationError) as refused:
        CHECKS[check]("load.max_bad_record_ratio", value)
    assert str(refused.value) == f"load.max_bad_record_ratio must be {expected}, got {value!r}"


@pytest.mark.parametrize("value", [None, {}, {"a": 1}])
def test_a_mapping_with_string_keys_passes(value: Any) -> None:
    checks.check_optional_mapping("conf", value)


@pytest.mark.parametrize(
    ("value", "text_values", "expected"),
    [
        ([("a", "b")], False, "None or a dict with string keys"),
        ({1: "b"}, False, "None or a dict with string keys"),
        ({"a": 1}, True, "None or a dict of strings to strings"),
    ],
)
def test_a_mapping_of_other_keys_or_values_is_refused(value: Any, text_values: bool, expected: str) -> None:
    with pytest.raises(ConfigurationError, match=f"^conf must be {expected}, got "):
        checks.check_optional_mapping("conf", value, text_values=text_values)
