"""Doris names (issue 19, item 6): hostile names are refused naming the setting; every name is
backtick-quoted where SQL is built, checked with the Doris stand-in's own SQL tokenizer."""

from __future__ import annotations


import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_kinesis_doris.core.doris.identifiers import check_name, name_problem, quote_identifier
from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.core.mapping import dead_letter_ddl
from kinesis_doris_devstack.doris_tokens import tokenize

HOSTILE = ["a`b", "t; DROP TABLE x", "t -- c", "t/*x*/", "t.u", "1t", "_t", "", "t\n", "t'", 't"', "x" * 65]
UNUSUAL_BUT_LEGAL = ["t--c", "Events-2026", "Zürich_ereignisse", "事件", "a" * 64, "T_1-x"]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_names_are_refused_naming_the_setting(name: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        check_name(name, "dead_letter_table")

    assert str(refused.value).startswith(f"dead_letter_table: {name!r} is not a valid Doris name (")


@pytest.mark.parametrize("name", UNUSUAL_BUT_LEGAL)
def test_names_doris_allows_pass(name: str) -> None:
    assert check_name(name, "doris_table") == name


def _quoted_names(ddl: str) -> list[str]:
    return [token.value for token in tokenize(ddl) if token.kind == "quoted"]


@pytest.mark.parametrize("table", UNUSUAL_BUT_LEGAL)
def test_the_dead_letter_ddl_quotes_legal_but_unusual_names(table: str) -> None:
    ddl = dead_letter_ddl("db-1", table, {"replication_num": "1"})

    assert ddl.startswith(f"CREATE TABLE IF NOT EXISTS `db-1`.`{table}` (")
    assert _quoted_names(ddl) == ["db-1", table]  # "t--c" is a name, not a comment


@settings(max_examples=300, deadline=None)
@given(database=st.text(min_size=1, max_size=40), table=st.text(min_size=1, max_size=40))
def test_any_name_stays_one_quoted_identifier_in_the_ddl(database: str, table: str) -> None:
    """Even names the validator refuses (backticks, comments, semicolons, newlines) cannot leave
    their quotes: the stand-in's tokenizer reads them back as exactly two identifiers."""
    ddl = dead_letter_ddl(database, table)

    assert _quoted_names(ddl) == [database, table]
    tokens = tokenize(ddl)
    assert [t.value for t in tokens[:8]] == ["CREATE", "TABLE", "IF", "NOT", "EXISTS", database, ".", table]


@settings(max_examples=300, deadline=None)
@given(name=st.text(max_size=70))
def test_the_validator_accepts_only_what_doris_rules_allow(name: str) -> None:
    allowed = (
        0 < len(name) <= 64
        and name[0].isalpha()
        and all(char.isalpha() or char in "0123456789_-" for char in name)
    )
    assert (name_problem(name) is None) == allowed
    if allowed:
        assert not {"`", ";", " ", "/", "*", "'", '"', ".", "\n"} & set(name)
        assert quote_identifier(name) == f"`{name}`"
