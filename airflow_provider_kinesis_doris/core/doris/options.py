"""Settings of one Stream Load: which headers a load sends, and its body.

Plain values (frozen dataclasses) with no I/O, validated on construction; where Doris is and how
to retry are in :mod:`~airflow_provider_kinesis_doris.core.doris.connection`, the client in
:mod:`~airflow_provider_kinesis_doris.core.doris.client`.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_kinesis_doris.core.errors import ConfigurationError

_MERGE_TYPES = frozenset({"APPEND", "DELETE", "MERGE"})
_FORMATS = frozenset({"csv", "csv_with_names", "csv_with_names_and_types", "json", "parquet", "orc", "arrow"})
# Headers the client owns: set through typed options or arguments, never through extra_headers.
_RESERVED_HEADERS = frozenset(
    {"authorization", "label", "group_commit", "two_phase_commit", "expect", "content-length",
     "transfer-encoding", "compress_type", "txn_id", "txn_operation"}
)


@dataclass(frozen=True)
class StreamLoadOptions:
    """Stream Load headers of one table; the label is per chunk and passed separately.

    ``None`` leaves a header out (the server default applies). See ``docs/doris.md``.

    :param format: ``json`` (default), ``csv``, ``csv_with_names``, ...
    :param read_json_by_line: one JSON object per line; sent explicitly because the server default
        changed between releases (false before 2.1, true on master).
    :param columns: source columns in order, with ``target = expr`` derived columns.
    :param where: filter applied after mapping; removed rows count as unselected.
    :param max_filter_ratio: tolerated share of data-quality rejects (server default 0).
    :param strict_mode: filter rows whose values fail type conversion.
    :param timeout_seconds: server-side load timeout; a running load is aborted after it.
    :param jsonpaths: JSONPath per column, in column order.
    :param json_root: JSONPath of the object holding the rows.
    :param strip_outer_array: the body is one JSON array of rows.
    :param column_separator: CSV field separator (server default ``\\t``).
    :param line_delimiter: CSV line delimiter (server default ``\\n``).
    :param merge_type: ``APPEND``, ``DELETE`` or ``MERGE`` (MERGE needs ``delete``).
    :param delete: delete condition of a MERGE.
    :param sequence_col: source column feeding the UNIQUE KEY sequence column
        (``function_column.sequence_col``): the newest value wins in any load order.
    :param partial_columns: partial-column update of a merge-on-write UNIQUE table.
    :param two_phase_commit: load as PRECOMMITTED; commit or abort later.
    :param gzip: gzip a bytes body and send ``compress_type: gz`` (CSV on every release; JSON only
        on releases that decompress JSON).
    :param extra_headers: further headers, e.g. ``{"timezone": "UTC"}``; may not override the
        headers above, ``label`` or ``group_commit``.
    """

    format: str = "json"
    read_json_by_line: bool | None = None
    columns: tuple[str, ...] | None = None
    where: str | None = None
    max_filter_ratio: float | None = None
    strict_mode: bool | None = None
    timeout_seconds: int | None = None
    jsonpaths: tuple[str, ...] | None = None
    json_root: str | None = None
    strip_outer_array: bool | None = None
    column_separator: str | None = None
    line_delimiter: str | None = None
    merge_type: str | None = None
    delete: str | None = None
    sequence_col: str | None = None
    partial_columns: bool | None = None
    two_phase_commit: bool = False
    gzip: bool = False
    extra_headers: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.format not in _FORMATS:
            raise ConfigurationError(
                f"Unknown Stream Load format {self.format!r}; expected one of {sorted(_FORMATS)}"
            )
        if self.merge_type is not None and self.merge_type.upper() not in _MERGE_TYPES:
            raise ConfigurationError(
                f"merge_type must be one of {sorted(_MERGE_TYPES)}, got {self.merge_type!r}"
            )
        if (self.merge_type or "").upper() == "MERGE" and not self.delete:
            raise ConfigurationError("merge_type MERGE needs a delete condition")
        if self.max_filter_ratio is not None and not 0 <= self.max_filter_ratio <= 1:
            raise ConfigurationError(f"max_filter_ratio must be within 0..1, got {self.max_filter_ratio}")
        if self.timeout_seconds is not None and self.timeout_seconds <= 0:
            raise ConfigurationError(f"timeout_seconds must be positive, got {self.timeout_seconds}")
        clashing = sorted(name for name in self.extra_headers if name.lower() in self._typed_header_names())
        if clashing:
            raise ConfigurationError(
                f"extra_headers may not set {clashing}: use the typed options or arguments"
            )

    @classmethod
    def json_lines(cls, **overrides: Any) -> StreamLoadOptions:
        """Options for a body of one JSON object per line.

        :param overrides: further fields of :class:`StreamLoadOptions`.
        """
        return cls(format="json", read_json_by_line=True, **overrides)

    @classmethod
    def csv(cls, column_separator: str = ",", **overrides: Any) -> StreamLoadOptions:
        """Options for a CSV body.

        :param column_separator: field separator.
        :param overrides: further fields of :class:`StreamLoadOptions`.
        """
        return cls(format="csv", column_separator=column_separator, **overrides)

    def headers(self) -> dict[str, str]:
        """The Stream Load headers these options stand for (label and group commit excluded)."""
        typed = {
            "format": self.format,
            "read_json_by_line": _bool_header(self.read_json_by_line),
            "columns": ",".join(self.columns) if self.columns is not None else None,
            "where": self.where,
            "max_filter_ratio": _number_header(self.max_filter_ratio),
            "strict_mode": _bool_header(self.strict_mode),
            "timeout": _number_header(self.timeout_seconds),
            "jsonpaths": json.dumps(list(self.jsonpaths)) if self.jsonpaths is not None else None,
            "json_root": self.json_root,
            "strip_outer_array": _bool_header(self.strip_outer_array),
            "column_separator": self.column_separator,
            "line_delimiter": self.line_delimiter,
            "merge_type": self.merge_type.upper() if self.merge_type else None,
            "delete": self.delete,
            "function_column.sequence_col": self.sequence_col,
            "partial_columns": _bool_header(self.partial_columns),
            # Doris compares with the exact string "true".
            "two_phase_commit": "true" if self.two_phase_commit else None,
            "compress_type": "gz" if self.gzip else None,
        }
        headers = {name: value for name, value in typed.items() if value is not None}
        headers.update(self.extra_headers)
        return headers

    @staticmethod
    def _typed_header_names() -> frozenset[str]:
        return _RESERVED_HEADERS | frozenset(
            {"format", "read_json_by_line", "columns", "where", "max_filter_ratio", "strict_mode", "timeout",
             "jsonpaths", "json_root", "strip_outer_array", "column_separator", "line_delimiter",
             "merge_type",
             "delete", "function_column.sequence_col", "partial_columns"}
        )


@dataclass(frozen=True)
class StreamingBody:
    """A body streamed in pieces, of known length (sent as ``Content-Length``, never chunked:
    chunked requests can lose their label on newer BEs).

    ``chunks`` is called once per attempt, so a retry re-reads the data instead of replaying a
    spent iterator.

    :param length: exact number of bytes ``chunks()`` yields.
    :param chunks: returns a fresh iterable of byte pieces on every call.
    """

    length: int
    chunks: Callable[[], Iterable[bytes]]

    def __post_init__(self) -> None:
        if self.length < 0:
            raise ConfigurationError(f"StreamingBody length must not be negative, got {self.length}")


Body = bytes | StreamingBody


class PrecommittedPolicy(str, enum.Enum):
    """What :meth:`DorisStreamLoadClient.load_idempotently` does with a label that an earlier
    two-phase load left PRECOMMITTED (its data is invisible until committed)."""

    COMMIT = "commit"
    """Commit it: the earlier attempt loaded the very same range."""
    ABORT_AND_RELOAD = "abort_and_reload"
    """Abort it (the label becomes free) and load again."""
    FAIL = "fail"
    """Raise: someone else must decide. The default."""


# --- helpers -----------------------------------------------------------------------------------


def _bool_header(value: bool | None) -> str | None:
    return None if value is None else ("true" if value else "false")


def _number_header(value: float | int | None) -> str | None:
    return None if value is None else str(value)
