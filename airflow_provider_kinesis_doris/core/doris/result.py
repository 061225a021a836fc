"""What a Stream Load reply means, decided from its JSON keys (never from the HTTP status).

Doris answers HTTP 200 for almost every failure. Four body shapes reach a client (see
``docs/doris.md``, "Outcomes and retries"):

1. the BE load result, capitalised keys: ``{"TxnId": .., "Label": .., "Status": .., "Message": ..}``;
2. the FE legacy ``RestBaseResult``: ``{"status": "FAILED", "msg": ..}``;
3. the FE envelope: ``{"msg": .., "code": <int>, "data": .., "count": 0}``;
4. the BE two-phase-commit reply: ``{"status": "Success" | "<STATUS_CODE>", "msg": ..}``.

Only a reply with no JSON body at all (a proxy's 502, the BE's optional raw 401), or a non-200 one
whose JSON object has none of these shapes, falls back to the HTTP status; a 200 with an unknown
JSON object raises :class:`~airflow_provider_kinesis_doris.core.errors.UnrecognisedReply`.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_kinesis_doris.core.errors import DorisSqlError, UnrecognisedReply


class LoadOutcome(str, enum.Enum):
    """What the caller should do with a reply."""

    SUCCESS = "SUCCESS"
    """``Success`` or ``Publish Timeout`` (committed; visible soon): done."""
    DUPLICATE_LABEL = "DUPLICATE_LABEL"
    """``Label Already Exists``: resolve the label's state with ``get_load_state``."""
    RETRYABLE = "RETRYABLE"
    """Transient (5xx, -235, running-transaction limit, no backend, timeout): retry, same label."""
    PERMANENT = "PERMANENT"
    """Data quality, unknown database or table, authentication, bad header or label: do not retry."""


class LabelState(str, enum.Enum):
    """``get_load_state``: the state of the newest transaction carrying a label (FE ``TransactionStatus``)."""

    UNKNOWN = "UNKNOWN"
    """Never used, or forgotten after the label retention window: the label is free."""
    PREPARE = "PREPARE"
    PRECOMMITTED = "PRECOMMITTED"
    COMMITTED = "COMMITTED"
    VISIBLE = "VISIBLE"
    ABORTED = "ABORTED"

    @property
    def is_loaded(self) -> bool:
        """The data is visible, or committed and about to become visible."""
        return self in (LabelState.VISIBLE, LabelState.COMMITTED)

    @property
    def is_free(self) -> bool:
        """A new load under this label will be accepted."""
        return self in (LabelState.UNKNOWN, LabelState.ABORTED)


STATUS_SUCCESS = "Success"
STATUS_PUBLISH_TIMEOUT = "Publish Timeout"
STATUS_LABEL_EXISTS = "Label Already Exists"

# Fragments that mark a failure as the request's own fault even when a retryable word (say
# "timeout" in "Invalid timeout format") appears too. Matched case-insensitively.
_PERMANENT_FRAGMENTS = (
    "data_quality_error",
    "too many filtered rows",
    "not_authorized",
    "access denied",
    "invalid_argument",
    "invalid ",
    "label format error",
    "unknown database",
    "table not found",
)
# Fragments of Doris messages whose cause passes: the failed transaction was aborted,
# so the same label may be sent again. Matched case-insensitively.
_RETRYABLE_FRAGMENTS = (
    "-235",
    "too_many_version",
    "too many versions",
    "larger than limit",  # current running txns on db ... larger than limit
    "no backend",  # "No backend load available." / "No backend available for load, ..."
    "blocked on schema change",
    "lock timeout",
    "timeout",
    "timed out",
    "cancelled",
    "network_error",
    "service_unavailable",
    "mem_limit_exceeded",
    "internal server error",
)
_ENVELOPE_RETRYABLE_CODES = frozenset({500})
_ENVELOPE_OK = 0
_HTTP_OK = 200
_LOWERCASE_SUCCESS = frozenset({"success", "ok"})


@dataclass(frozen=True)
class StreamLoadResult:
    """One parsed reply of a Stream Load, a 2PC operation or a pre-redirect FE check.

    Counts are 0 when the reply shape does not carry them.
    """

    outcome: LoadOutcome
    status: str
    """The reply's own status: ``Status`` (BE), ``status`` (FE/2PC) or ``msg`` (envelope)."""
    message: str
    label: str | None = None
    txn_id: int | None = None
    existing_job_status: str | None = None
    """Only with ``Label Already Exists``: ``RUNNING``, ``PRECOMMITTED`` or ``FINISHED``."""
    two_phase_commit: bool = False
    number_total_rows: int = 0
    number_loaded_rows: int = 0
    number_filtered_rows: int = 0
    number_unselected_rows: int = 0
    load_bytes: int = 0
    load_time_ms: int = 0
    error_url: str | None = None
    first_error_msg: str | None = None
    http_status: int | None = field(default=None, compare=False)
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def is_data_quality_failure(self) -> bool:
        """Doris refused rows and so the whole load (``[DATA_QUALITY_ERROR]too many filtered rows``)."""
        return self.status == "Fail" and "too many filtered rows" in (self.message or "").lower()

    @property
    def is_publish_timeout(self) -> bool:
        """Committed but not yet published: the data becomes visible without further action."""
        return self.status == STATUS_PUBLISH_TIMEOUT

    @property
    def is_precommitted(self) -> bool:
        """Phase one of a two-phase commit succeeded: invisible until committed."""
        return self.outcome is LoadOutcome.SUCCESS and self.two_phase_commit

    def describe(self) -> str:
        """One line for logs and error messages (no credentials are ever part of a reply)."""
        parts = [f"status={self.status!r}", f"message={self.message!r}"]
        if self.label:
            parts.append(f"label={self.label}")
        if self.txn_id is not None and self.txn_id >= 0:
            parts.append(f"txn_id={self.txn_id}")
        if self.existing_job_status:
            parts.append(f"existing_job_status={self.existing_job_status}")
        if self.error_url:
            parts.append(f"error_url={self.error_url}")
        return ", ".join(parts)

    @classmethod
    def from_http(cls, http_status: int, body: str) -> StreamLoadResult:
        """Parse a reply body; fall back on ``http_status`` only when the body is not a JSON object.

        :param http_status: the HTTP status code of the reply.
        :param body: the decoded reply body.
        :raises UnrecognisedReply: HTTP 200 with a JSON object of none of the known shapes.
        """
        try:
            decoded = json.loads(body) if body.strip() else None
        except ValueError:
            decoded = None
        if not isinstance(decoded, dict):
            return _from_non_json(http_status, body)
        try:
            result = cls.from_json(decoded)
        except UnrecognisedReply:
            if http_status == _HTTP_OK:
                raise
            # An error page of a proxy or gateway that happens to be JSON: its status says more.
            return _from_non_json(http_status, body)
        return _with_http_status(result, http_status)

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> StreamLoadResult:
        """Parse one of the four reply shapes.

        :param body: the decoded JSON object.
        :raises UnrecognisedReply: the object matches none of the shapes.
        """
        if "Status" in body:
            return _from_be_result(body)
        if "code" in body and "msg" in body:
            return _from_envelope(body)
        if "status" in body:
            return _from_lowercase(body)
        raise UnrecognisedReply(f"Unrecognised Doris reply with keys {sorted(body)}")


def classify_failure_message(message: str) -> LoadOutcome:
    """RETRYABLE when the message names a transient cause, else PERMANENT.

    Unknown failures are permanent on purpose: a task that fails loudly is retried by Airflow
    with the same labels, while a client that loops on an unknown error hides it.

    :param message: a ``Message``/``msg``/``data`` text of a failed reply.
    """
    lowered = message.lower()
    if any(fragment in lowered for fragment in _PERMANENT_FRAGMENTS):
        return LoadOutcome.PERMANENT
    if any(fragment in lowered for fragment in _RETRYABLE_FRAGMENTS):
        return LoadOutcome.RETRYABLE
    return LoadOutcome.PERMANENT


def _from_be_result(body: Mapping[str, Any]) -> StreamLoadResult:
    status = str(body.get("Status", ""))
    message = str(body.get("Message", ""))
    return StreamLoadResult(
        outcome=_be_outcome(status, message),
        status=status,
        message=message,
        label=_optional_str(body.get("Label")),
        txn_id=_optional_int(body.get("TxnId")),
        existing_job_status=_optional_str(body.get("ExistingJobStatus")),
        # A string "true"/"false" on the wire; tolerate a JSON bool from third-party servers.
        two_phase_commit=str(body.get("TwoPhaseCommit", "false")).lower() == "true",
        number_total_rows=_int(body.get("NumberTotalRows")),
        number_loaded_rows=_int(body.get("NumberLoadedRows")),
        number_filtered_rows=_int(body.get("NumberFilteredRows")),
        number_unselected_rows=_int(body.get("NumberUnselectedRows")),
        load_bytes=_int(body.get("LoadBytes")),
        load_time_ms=_int(body.get("LoadTimeMs")),
        error_url=_optional_str(body.get("ErrorURL")),
        first_error_msg=_optional_str(body.get("FirstErrorMsg")),
        raw=dict(body),
    )


def _be_outcome(status: str, message: str) -> LoadOutcome:
    if status in (STATUS_SUCCESS, STATUS_PUBLISH_TIMEOUT):
        return LoadOutcome.SUCCESS
    if status == STATUS_LABEL_EXISTS:
        return LoadOutcome.DUPLICATE_LABEL
    return classify_failure_message(message)


def _from_envelope(body: Mapping[str, Any]) -> StreamLoadResult:
    code = _int(body.get("code"), default=-1)
    data = body.get("data")
    detail = data if isinstance(data, str) else json.dumps(data)
    if code == _ENVELOPE_OK:
        outcome = LoadOutcome.SUCCESS
    elif code in _ENVELOPE_RETRYABLE_CODES:
        outcome = LoadOutcome.RETRYABLE
    elif code == 1:
        outcome = classify_failure_message(detail)
    else:
        # 401 unauthorized, 403 bad request, 404 not found
        outcome = LoadOutcome.PERMANENT
    return StreamLoadResult(outcome=outcome, status=str(body.get("msg", "")), message=detail, raw=dict(body))


def _from_lowercase(body: Mapping[str, Any]) -> StreamLoadResult:
    status = str(body.get("status", ""))
    message = str(body.get("msg", ""))
    succeeded = status.lower() in _LOWERCASE_SUCCESS
    outcome = LoadOutcome.SUCCESS if succeeded else classify_failure_message(message)
    return StreamLoadResult(outcome=outcome, status=status, message=message, raw=dict(body))


def _from_non_json(http_status: int, body: str) -> StreamLoadResult:
    outcome = LoadOutcome.RETRYABLE if http_status >= 500 else LoadOutcome.PERMANENT
    # Non-JSON bodies come from proxies and error pages; keep the start for diagnostics only.
    snippet = " ".join(body.split())[:200]
    return StreamLoadResult(
        outcome=outcome,
        status=f"HTTP {http_status}",
        message=snippet or "(empty body)",
        http_status=http_status,
    )


def _with_http_status(result: StreamLoadResult, http_status: int) -> StreamLoadResult:
    return dataclasses.replace(result, http_status=http_status)


def _optional_str(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def _optional_int(value: Any) -> int | None:
    if value is None or value == "":
        return None
    return _int(value)


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


# --- results of the client ---------------------------------------------------------------------


class LoadDisposition(str, enum.Enum):
    LOADED = "LOADED"
    """This call's load went through."""
    ALREADY_LOADED = "ALREADY_LOADED"
    """Doris already held the label's data (an earlier attempt, or an ambiguous one that succeeded)."""


@dataclass(frozen=True)
class IdempotentLoadResult:
    """The definite outcome of :meth:`DorisStreamLoadClient.load_idempotently`.

    ``state`` is VISIBLE or COMMITTED (becomes visible), or PRECOMMITTED for a two-phase load;
    ``result`` is the reply of the load that went through, ``None`` when nothing was loaded now.
    """

    label: str
    disposition: LoadDisposition
    state: LabelState
    result: StreamLoadResult | None
    attempts: int


@dataclass(frozen=True)
class TwoPhaseResult:
    """The definite outcome of :meth:`DorisStreamLoadClient.commit_transaction` or
    :meth:`DorisStreamLoadClient.abort_transaction`.

    ``reply`` is Doris's answer (``None`` when it was lost or unreadable). ``state`` is ``None`` when Doris
    answered ``Success``; otherwise the label's state that settled the operation (VISIBLE or
    COMMITTED after a commit, ABORTED or UNKNOWN after an abort).
    """

    operation: str
    reply: StreamLoadResult | None
    state: LabelState | None


@dataclass(frozen=True)
class SqlResult:
    """Rows of a query (empty for a statement) from the HTTP SQL endpoint."""

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]



def parse_sql_reply(database: str, http_status: int, body: str) -> SqlResult:
    """The rows of the FE's HTTP SQL endpoint's reply.

    :raises DorisSqlError: the reply has no envelope, or the statement failed.
    """
    try:
        envelope = json.loads(body)
    except ValueError:
        envelope = None
    if not isinstance(envelope, dict) or "code" not in envelope:
        snippet = " ".join(body.split())[:200] or "(empty body)"
        raise DorisSqlError(f"SQL endpoint of {database} replied without an envelope: HTTP {http_status}: {snippet}")
    if envelope.get("code") != 0:
        raise DorisSqlError(f"SQL in {database} failed: {envelope.get('msg')!r}: {envelope.get('data')!r}")
    data = envelope.get("data") or {}
    if not isinstance(data, dict) or data.get("type") != "result_set":
        return SqlResult(columns=(), rows=())
    columns = tuple(str(column.get("name", "")) for column in data.get("meta") or ())
    rows = tuple(tuple(row) for row in data.get("data") or ())
    return SqlResult(columns=columns, rows=rows)
