"""Doris database and table names: checked against Doris's own rules, and quoted wherever SQL is
built.

The names reach SQL text (``CREATE TABLE`` of the dead-letter table, ``DESC`` of the target) and
Stream Load URLs, and they are templated: a DAG run's conf can set them. So every name is checked
before anything is planned or sent (:func:`check_name`), and
SQL quotes it anyway (:func:`quote_identifier`), so that a legal but unusual name such as
``t--c`` (Doris allows ``-``) is never read as a comment.

The rule chosen, and why: Doris's FE (``FeNameFormat``) accepts a table name matching
``^[a-zA-Z][a-zA-Z0-9-_]*$`` up to ``table_name_length_limit`` characters (64 by default) and a
database name matching ``^[a-zA-Z][a-zA-Z0-9-_]{0,63}$``; with ``enable_unicode_name_support``
(Doris 2.x and later) letters of any script are accepted where ASCII letters are. This module
accepts exactly that union: a letter first, then letters, ASCII digits, ``_`` and ``-``, at most
64 characters. A name Doris would refuse without ``enable_unicode_name_support`` then fails in
Doris with Doris's own message, which is harmless; a name outside the union (whitespace,
backticks, quotes, ``;``, ``/``, ``*``, ``.``, control characters ...) can never be a Doris table,
so refusing it here loses nothing and keeps hostile text out of every statement. A
``table_name_length_limit`` raised above 64 on the FE is not honoured here: give such tables a
shorter name or ask for the limit to become an argument.
"""

from __future__ import annotations

import string

from airflow_provider_kinesis_doris.core.errors import ConfigurationError

MAX_NAME_LENGTH = 64
"""Characters of a database or table name at most (Doris's default ``table_name_length_limit``
and its database-name limit)."""

_ASCII_DIGITS_AND_MARKS = frozenset(string.digits + "_-")


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot be a Doris database or table name, or None if it can."""
    if not isinstance(name, str):
        return f"it is a {type(name).__name__}, not a string"
    if not name:
        return "it is empty"
    if len(name) > MAX_NAME_LENGTH:
        return f"it has {len(name)} characters, more than Doris's {MAX_NAME_LENGTH}"
    if not name[0].isalpha():
        return f"it starts with {name[0]!r}; Doris names start with a letter"
    bad = sorted({char for char in name if not (char.isalpha() or char in _ASCII_DIGITS_AND_MARKS)})
    if bad:
        return (
            f"it contains {', '.join(repr(char) for char in bad)}; Doris names hold only letters, digits, "
            "'_' and '-'"
        )
    return None


def check_name(name: object, what: str) -> str:
    """``name``, if it is a valid Doris database or table name.

    :param what: how the user gave it, for the message (``"doris_table 'a.b' (table)"``).
    :raises ConfigurationError: naming ``what``, the name and what is wrong with it.
    """
    problem = name_problem(name)
    if problem is not None:
        raise ConfigurationError(
            f"{what}: {name!r} is not a valid Doris name ({problem}); nothing was run against Doris"
        )
    return name  # type: ignore[return-value]


def quote_identifier(name: str) -> str:
    """``name`` as a backticked SQL identifier, backticks inside it doubled (MySQL/Doris quoting)."""
    return "`" + name.replace("`", "``") + "`"


def qualified_name(database: str, table: str) -> str:
    """```database`.`table``` with both parts quoted by :func:`quote_identifier`."""
    return f"{quote_identifier(database)}.{quote_identifier(table)}"


def split_table_name(name: str) -> tuple[str, str]:
    """``(database, table)`` of ``doris_table``, which always names its database: the Doris
    connection's schema is the default database of SQL only, never of the loaded table.

    :raises ConfigurationError: ``name`` is not ``database.table``.
    """
    database, _, table = name.partition(".")
    if not database or not table or "." in table:
        raise ConfigurationError(
            f"doris_table must name the database and the table, as 'database.table' (e.g. 'analytics.orders'), got "
            f"{name!r}. The Doris connection's schema is only the default database of SQL run through DorisHook "
            "and the SQL operators; the loader takes its database from doris_table."
        )
    return database, table
