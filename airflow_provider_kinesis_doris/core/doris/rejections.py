"""Which rows of a chunk Doris refuses, found without loading anything.

When Doris fails a chunk for data quality (``[DATA_QUALITY_ERROR]too many filtered rows``), its
transaction is aborted and nothing of the chunk is visible. Its error log cannot name the rows:
errors found in the table sink (a value that does not convert under strict mode, NULL into a NOT
NULL column) are logged with an empty ``src line []``, and the log stops after 50 rows. So the
rows are found by bisection with two-phase probe loads: each probe sends a part of the chunk with
``max_filter_ratio`` 1, reads ``NumberFilteredRows`` from the PRECOMMITTED reply and aborts, so a
probe never becomes visible. A single refused row's reason is the first line of its probe's error
log.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from airflow_provider_kinesis_doris.core.errors import PermanentStreamLoadError
from airflow_provider_kinesis_doris.core.doris.options import StreamLoadOptions
from airflow_provider_kinesis_doris.core.doris.result import StreamLoadResult

log = logging.getLogger(__name__)

UNKNOWN_REASON = "Doris filtered the row (its error log gave no reason)"
_REASON = re.compile(r"^Reason: (.*?)(?:\. src line \[.*)?$", re.S)


def refused_rows(error: BaseException) -> StreamLoadResult | None:
    """The reply of a load Doris failed for data quality with nothing loaded, if ``error`` is one."""
    result = getattr(error, "result", None)
    if (
        isinstance(error, PermanentStreamLoadError)
        and error.definitely_not_loaded
        and isinstance(result, StreamLoadResult)
        and result.is_data_quality_failure
    ):
        return result
    return None


@dataclass(frozen=True)
class RefusedRows:
    """What the probes found, and what they cost Doris: each probe is a transaction with a label
    of its own, and each one aborted stays among the database's finished labels
    (``label_num_threshold``) like a load."""

    reasons: dict[int, str]
    """Refused line index → Doris's reason; empty if the probes find none."""
    probe_loads: int
    probes_aborted: int


def find_refused_rows(
    doris: Any, database: str, table: str, options: StreamLoadOptions, lines: Sequence[bytes]
) -> RefusedRows:
    """The indices of ``lines`` Doris refuses, with its reason for each.

    :param doris: a :class:`~airflow_provider_kinesis_doris.core.doris.client.DorisStreamLoadClient`.
    :param options: the options the chunk was loaded with (probes add 2PC and a filter ratio of 1).
    :param lines: the chunk's JSON lines, without newlines.
    """
    probe = _Prober(doris, database, table, replace(options, two_phase_commit=True, max_filter_ratio=1.0), lines)
    refused: dict[int, str] = {}
    probe.search(0, len(lines), probe.filtered(0, len(lines)), refused)
    log.info("%d of %d rows refused by Doris, found with %d probe loads", len(refused), len(lines), probe.count)
    return RefusedRows(refused, probe.count, probe.aborted)


class _Prober:
    def __init__(self, doris: Any, database: str, table: str, options: StreamLoadOptions, lines: Sequence[bytes]) -> None:
        self.doris, self.database, self.table, self.options, self.lines = doris, database, table, options, lines
        self.count = 0
        self.aborted = 0

    def search(self, low: int, high: int, filtered: int, refused: dict[int, str]) -> None:
        """Find the ``filtered`` refused rows among ``lines[low:high]``."""
        if filtered <= 0:
            return
        if high - low == 1:
            refused[low] = self._reason(low)
            return
        middle = (low + high) // 2
        left = self.filtered(low, middle)
        self.search(low, middle, left, refused)
        # Rows are judged one by one, so the right half holds the rest (a probe saved per level).
        self.search(middle, high, filtered - left, refused)

    def filtered(self, low: int, high: int) -> int:
        """How many of ``lines[low:high]`` Doris refuses."""
        return self._probe(low, high).number_filtered_rows

    def _reason(self, index: int) -> str:
        result = self._probe(index, index + 1)
        if result.number_filtered_rows == 0:
            return UNKNOWN_REASON
        text = self.doris.error_log(result.error_url) if result.error_url else ""
        match = _REASON.match(text.strip().splitlines()[0]) if text.strip() else None
        return match.group(1) if match else UNKNOWN_REASON

    def _probe(self, low: int, high: int) -> StreamLoadResult:
        self.count += 1
        label = f"probe-{uuid.uuid4().hex}"
        body = b"".join(line + b"\n" for line in self.lines[low:high])
        result = self.doris.stream_load(self.database, self.table, body, label=label, options=self.options)
        if result.status == "Success" and result.txn_id is not None:
            self.doris.abort_transaction(self.database, txn_id=result.txn_id, label=label)
            self.aborted += 1
        if result.status != "Success":
            raise PermanentStreamLoadError(
                f"A probe load into {self.database}.{self.table} to find the rows Doris refuses failed: "
                f"{result.describe()}"
            )
        return result
