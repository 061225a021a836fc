"""Unmatched fields: JSON members no column of the table takes, and columns no row fills.

Doris's Stream Load of JSON lines matches members to columns by name and drops the members that
name no column, without a word: a field renamed upstream (``ts`` for ``event_time``) loads every
row with the column NULL, and the run is green. The loader samples the member names of each
range's first rows (:func:`sample_members`), and the driver compares them with the table's columns
(:func:`compare`): the run reports both sides, and with ``MappingConfig(unmatched_fields="fail")``
the loader refuses to send a chunk whose rows hold a member no column takes
(:class:`~airflow_provider_kinesis_doris.core.errors.UnmatchedFields`), before anything loads.

Not checked where Doris does not match by name: ``load.options`` with ``columns`` or ``jsonpaths``,
and ``decoder="csv"`` (its fields are the columns).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from airflow_provider_kinesis_doris.core.errors import UnmatchedFields

SAMPLED_ROWS = 100
"""Rows of a range's first chunk whose members are read: a renamed field is in every row."""

UNMATCHED_FIELDS_CHOICES = ("report", "fail")


@dataclass(frozen=True)
class FieldMismatch:
    """What the sampled rows and the table's columns do not share (names as each side spells them)."""

    members_without_column: tuple[str, ...] = ()
    """JSON members Doris drops: no column of the table has their name."""
    columns_without_member: tuple[str, ...] = ()
    """Columns no sampled row fills (NULL or their default)."""

    def summary(self) -> dict[str, list[str]]:
        return {
            "members_without_column": list(self.members_without_column),
            "columns_without_member": list(self.columns_without_member),
        }

    def describe(self) -> str:
        return (
            f"JSON members no column of the table takes (Doris drops them): {list(self.members_without_column)}; "
            f"columns no record filled: {list(self.columns_without_member)}"
        )


def sample_members(body: bytes, rows: int = SAMPLED_ROWS) -> set[str]:
    """The member names of the first ``rows`` JSON lines of a chunk's body."""
    members: set[str] = set()
    for line in body.split(b"\n", rows)[:rows]:
        if line.strip():
            members.update(json.loads(line))
    return members


def compare(members: Iterable[str], columns: Sequence[str]) -> FieldMismatch:
    """``members`` against the table's ``columns``; Doris's column names ignore case."""
    seen = {member.lower(): member for member in members}
    named = {column.lower(): column for column in columns}
    return FieldMismatch(
        tuple(sorted(seen[name] for name in seen.keys() - named.keys())),
        tuple(sorted(named[name] for name in named.keys() - seen.keys())),
    )


def refuse_unmatched(members: Iterable[str], columns: Sequence[str], shard_id: str) -> None:
    """:raises UnmatchedFields: a member no column takes (``unmatched_fields="fail"``)."""
    mismatch = compare(members, columns)
    if mismatch.members_without_column:
        raise UnmatchedFields(
            f"Shard {shard_id}: the records hold {mismatch.describe()}. Nothing of the chunk was sent "
            "(MappingConfig(unmatched_fields='fail')). Rename the column or the field (a transform can), or add "
            "the column; unmatched_fields='report' loads and reports instead."
        )
