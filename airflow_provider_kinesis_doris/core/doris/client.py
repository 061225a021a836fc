"""A Doris Stream Load client on plain ``requests``: redirects handled by hand, idempotent by label.

Runs on Spark executors, so it imports neither Airflow nor PySpark.

Redirect strategy (``docs/doris.md``, "Redirects and credentials").
The FE answers a Stream Load with ``307`` to a BE, putting ``user:password`` into the
``Location`` userinfo. ``requests`` neither waits for ``100 Continue`` nor keeps ``Authorization``
across a host or port change, so this client:

1. *probes* the FE with the load's headers and an empty body (``Content-Length: 0``) and
   redirects disabled; the probe leaves out ``label`` and ``two_phase_commit`` so that an address
   that turns out to be a BE cannot burn the label on an empty load;
2. parses ``Location``, drops its userinfo (never logged, never part of an error), maps the
   advertised ``host:port`` through ``be_address_map`` and checks the target is allowed to receive
   credentials (the FE host, ``allowed_redirect_hosts``, or a mapped address);
3. sends the real body once, to that BE, with ``Authorization`` and every load header.

With ``be_hosts`` configured, loads skip the FE and go round-robin straight to those BEs.

Idempotency. Every load carries a caller-chosen label and ``group_commit: off_mode``: group
commit replaces user labels with server ones, which would silently lose deduplication.
:meth:`DorisStreamLoadClient.load_idempotently` retries with the *same* label and turns
"Label Already Exists" and ambiguous failures (reset or timeout after the body left) into a
definite answer through ``get_load_state`` before anything is sent again.

Two-phase commit. A commit or abort answered with anything but a plain ``Success``, or not
answered at all, is settled by the label's state from ``get_load_state``, never by the reply's
wording: Doris answers a repeated commit by label with "running transaction not found" although
the data is visible, and its texts differ between versions.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import logging
import random
import time
from collections.abc import Callable, Mapping
from urllib.parse import quote, urlencode, urlsplit

import requests

from airflow_provider_kinesis_doris.core.errors import (
    ConfigurationError,
    LoadOutcomeUnknown,
    PermanentStreamLoadError,
    RetryableStreamLoadError,
    StreamLoadError,
    UnrecognisedReply,
)
from airflow_provider_kinesis_doris.core.doris.http import (
    REDIRECT_STATUSES,
    DorisHttp,
    DorisSession,
    address_of,
    default_port,
    describe_error,
    never_connected,
)
from airflow_provider_kinesis_doris.core.doris.labels import is_valid_label
from airflow_provider_kinesis_doris.core.doris.options import Body, PrecommittedPolicy, StreamingBody, StreamLoadOptions
from airflow_provider_kinesis_doris.core.doris.connection import DorisConnectionConfig, RetryPolicy, join_host_port
from airflow_provider_kinesis_doris.core.doris.result import (
    IdempotentLoadResult,
    LabelState,
    LoadDisposition,
    LoadOutcome,
    SqlResult,
    StreamLoadResult,
    TwoPhaseResult,
    parse_sql_reply,
)

log = logging.getLogger(__name__)






# --- client ------------------------------------------------------------------------------------


class DorisStreamLoadClient:
    """Stream Load, label state, two-phase commit and SQL over Doris's HTTP API.

    One client per task (it holds a ``requests.Session``); not thread-safe.

    :param config: FE address, credentials and BE routing.
    :param retry_policy: backoff of :meth:`load_idempotently`.
    :param session: a ``requests.Session`` to use (a new :class:`~.http.DorisSession` by default).
    :param sleep: pauses between retries (tests inject a fake).
    :param clock: monotonic seconds, for bounded waits (tests inject a fake).
    :param unit_random: jitter source returning [0, 1).
    """

    def __init__(
        self,
        config: DorisConnectionConfig,
        *,
        retry_policy: RetryPolicy | None = None,
        session: requests.Session | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        unit_random: Callable[[], float] = random.random,
    ) -> None:
        self._config = config
        self._retry = retry_policy or RetryPolicy()
        self._session = session or DorisSession()
        self._sleep = sleep
        self._clock = clock
        self._unit_random = unit_random
        self._http = DorisHttp(config, self._session)

    def __repr__(self) -> str:
        return f"DorisStreamLoadClient(user={self._config.user!r}, fe={self._config.fe_address!r})"

    def __enter__(self) -> DorisStreamLoadClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def config(self) -> DorisConnectionConfig:
        return self._config

    def close(self) -> None:
        """Close pooled connections."""
        self._session.close()

    # -- loading --------------------------------------------------------------------------------

    def stream_load(
        self,
        database: str,
        table: str,
        body: Body,
        *,
        label: str | None = None,
        options: StreamLoadOptions | None = None,
    ) -> StreamLoadResult:
        """Send one Stream Load, once, and return Doris's reply whatever it says.

        :param database: target database.
        :param table: target table.
        :param body: the rows, as bytes or a :class:`StreamingBody`.
        :param label: the load's label (strongly recommended; Doris invents one otherwise).
        :param options: format and other headers.
        :return: the parsed reply; check ``outcome``.
        :raises LoadOutcomeUnknown: the body left but no reply came; resolve ``label`` before resending.
        :raises RetryableStreamLoadError: nothing reached a BE (FE or BE unreachable).
        :raises PermanentStreamLoadError: the FE redirected to a host not allowed to get credentials.
        """
        options = options or StreamLoadOptions()
        if label is not None and not is_valid_label(label):
            raise ConfigurationError(f"Label {label!r} does not match ^[-_A-Za-z0-9:]{{1,128}}$")
        payload = _encode_body(body, options)
        headers = self._load_headers(label, options)
        path = f"/api/{_segment(database)}/{_segment(table)}/_stream_load"
        target = self._http.load_target(path, headers)
        if isinstance(target, StreamLoadResult):
            return target
        return self._http.send_load(target, headers, payload, label)

    def load_idempotently(
        self,
        database: str,
        table: str,
        label: str,
        body: Body,
        options: StreamLoadOptions | None = None,
        *,
        precommitted_policy: PrecommittedPolicy = PrecommittedPolicy.FAIL,
    ) -> IdempotentLoadResult:
        """Load ``body`` under ``label`` exactly once, retrying with the same label.

        Outcomes: ``Success``/``Publish Timeout`` → LOADED. ``Label Already Exists`` and ambiguous
        failures are resolved with :meth:`get_load_state`: VISIBLE/COMMITTED → ALREADY_LOADED;
        PREPARE → polled (bounded by ``running_wait_seconds``); ABORTED/UNKNOWN → loaded again
        (the label is free); PRECOMMITTED → ``precommitted_policy`` (a two-phase load of our own
        returns ALREADY_LOADED in state PRECOMMITTED for the caller to commit).

        :param database: target database.
        :param table: target table.
        :param label: the chunk's label (see :mod:`core.doris.labels`).
        :param body: the rows, as bytes or a :class:`StreamingBody`.
        :param options: format and other headers.
        :param precommitted_policy: what to do with a PRECOMMITTED label.
        :raises PermanentStreamLoadError: Doris refused the data or request (``error_url`` set for
            data-quality failures), or a PRECOMMITTED label met ``PrecommittedPolicy.FAIL``.
        :raises RetryableStreamLoadError: still failing after ``max_attempts``; safe to retry later.
        """
        options = options or StreamLoadOptions()
        resolve_first = False
        last_error = "no attempt made"
        # Every attempt so far provably left nothing in Doris (never connected, or a definite Fail).
        not_loaded = True
        for attempt in range(1, self._retry.max_attempts + 1):
            if attempt > 1:
                self._sleep(self._retry.backoff_seconds(attempt - 1, self._unit_random()))
            try:
                if resolve_first:
                    settled = self._settle_label(database, label, options, precommitted_policy)
                    resolve_first = False
                    if settled is not None:
                        return dataclasses.replace(settled, attempts=attempt)
                result = self.stream_load(database, table, body, label=label, options=options)
                if result.outcome is LoadOutcome.DUPLICATE_LABEL:
                    resolve_first = True
                    settled = self._settle_label(database, label, options, precommitted_policy)
                    resolve_first = False
                    if settled is not None:
                        return dataclasses.replace(settled, attempts=attempt)
                    last_error = f"label {label} was freed while its earlier load was running"
                    continue
            except LoadOutcomeUnknown as exc:
                log.warning("Stream Load of label %s: outcome unknown (%s); resolving first", label, exc)
                resolve_first = True
                not_loaded = False
                last_error = str(exc)
                continue
            except RetryableStreamLoadError as exc:
                log.warning("Stream Load of label %s failed, will retry: %s", label, exc)
                not_loaded = not_loaded and exc.definitely_not_loaded
                last_error = str(exc)
                continue
            if result.outcome is LoadOutcome.SUCCESS:
                return _loaded(label, result, attempt)
            if result.outcome is LoadOutcome.PERMANENT:
                error = _permanent_load_error(database, table, label, result)
                error.definitely_not_loaded = _is_definite_fail(result)
                raise error
            log.warning("Stream Load of label %s failed, will retry: %s", label, result.describe())
            not_loaded = not_loaded and _is_definite_fail(result)
            last_error = result.describe()
        error = RetryableStreamLoadError(
            f"Stream Load of label {label} into {database}.{table} did not succeed after "
            f"{self._retry.max_attempts} attempts; last error: {last_error}"
        )
        error.definitely_not_loaded = not_loaded
        raise error

    # -- label state and two-phase commit --------------------------------------------------------

    def get_load_state(self, database: str, label: str) -> LabelState:
        """The state of the newest transaction carrying ``label`` in ``database``.

        :param database: the database the label belongs to (labels are unique per database).
        :param label: the label.
        :return: UNKNOWN when Doris never saw the label or has forgotten it.
        :raises RetryableStreamLoadError: the FE could not be reached.
        :raises PermanentStreamLoadError: the FE refused (unknown database, authentication).
        """
        path = f"/api/{_segment(database)}/get_load_state?{urlencode({'label': label})}"
        response = self._http.call_fe("GET", path, headers={})
        result = StreamLoadResult.from_http(response.status_code, response.text)
        if result.outcome is not LoadOutcome.SUCCESS:
            raise _state_error(f"get_load_state of label {label} in {database}", result)
        try:
            return LabelState(str(result.raw.get("data", "")).upper())
        except ValueError:
            raise UnrecognisedReply(
                f"get_load_state of label {label} in {database} returned an unknown state "
                f"{result.raw.get('data')!r}"
            ) from None

    def commit_transaction(
        self, database: str, *, txn_id: int | None = None, label: str | None = None
    ) -> TwoPhaseResult:
        """Commit a PRECOMMITTED two-phase load.

        Sends ``txn_id`` when given, else ``label``. Any reply but a plain ``Success``, and a lost
        reply, are settled by ``label``'s state: VISIBLE or COMMITTED means committed (by this
        call or an earlier one whose reply was lost). Without ``label`` there is nothing to ask,
        and such a reply raises.

        :param database: the load's database.
        :param txn_id: the ``TxnId`` of phase one.
        :param label: the load's label; with ``txn_id``, the label of that transaction.
        :raises PermanentStreamLoadError: the label is ABORTED or UNKNOWN (the data will not be
            committed), or, without a label, Doris refused the commit.
        :raises RetryableStreamLoadError: the label is still PRECOMMITTED or PREPARE, or Doris
            could not be reached; safe to repeat.
        :raises LoadOutcomeUnknown: no reply to a commit by ``txn_id`` alone.
        :raises UnrecognisedReply: a reply of unknown shape to a commit by ``txn_id`` alone.
        """
        return self._two_phase(database, "commit", txn_id, label)

    def abort_transaction(
        self, database: str, *, txn_id: int | None = None, label: str | None = None
    ) -> TwoPhaseResult:
        """Abort a PRECOMMITTED (or running) load; its label becomes free.

        Sends ``txn_id`` when given, else ``label``. Any reply but a plain ``Success``, and a lost
        reply, are settled by ``label``'s state: ABORTED or UNKNOWN means nothing is pending
        under the label. Without ``label`` such a reply raises.

        :param database: the load's database.
        :param txn_id: the transaction id.
        :param label: the load's label; with ``txn_id``, the label of that transaction.
        :raises PermanentStreamLoadError: the label is VISIBLE or COMMITTED (too late to abort),
            or, without a label, Doris refused the abort.
        :raises RetryableStreamLoadError: the label is still PRECOMMITTED or PREPARE, or Doris
            could not be reached; safe to repeat.
        :raises LoadOutcomeUnknown: no reply to an abort by ``txn_id`` alone.
        :raises UnrecognisedReply: a reply of unknown shape to an abort by ``txn_id`` alone.
        """
        return self._two_phase(database, "abort", txn_id, label)

    def error_log(self, error_url: str) -> str:
        """The text of a load's ``ErrorURL`` (rows Doris filtered, with reasons; kept by the BE for
        ``load_error_log_reserve_hours``). Sent without credentials: the BE serves it without.

        :raises RetryableStreamLoadError: the BE could not be reached or did not answer 200.
        """
        target = urlsplit(error_url)
        advertised = join_host_port(target.hostname or "", target.port or default_port(target.scheme))
        # The BE advertises its address inside the cluster; map it as for load redirects.
        url = target._replace(netloc=self._config.be_address_map.get(advertised, advertised)).geturl()
        try:
            response = self._http.get_without_credentials(url)
        except requests.RequestException as exc:
            raise RetryableStreamLoadError(f"Reading the error log {error_url} failed: {describe_error(exc)}") from exc
        if response.status_code != requests.codes.ok:
            raise RetryableStreamLoadError(f"Reading the error log {error_url} answered HTTP {response.status_code}")
        return response.text

    # -- SQL ------------------------------------------------------------------------------------

    def run_sql(self, database: str, statement: str) -> SqlResult:
        """Run one statement through the FE's HTTP SQL endpoint (no MySQL client needed).

        :param database: default database of the statement.
        :param statement: one SQL statement (queries return at most 1000 rows by default).
        :return: columns and rows of a query; empty for DDL/DML.
        :raises DorisSqlError: Doris rejected the statement.
        :raises RetryableStreamLoadError: the FE could not be reached.
        """
        path = f"/api/query/default_cluster/{_segment(database)}"
        response = self._http.call_fe(
            "POST",
            path,
            headers={"Content-Type": "application/json", "X-Doris-Stream": "false"},
            body=json.dumps({"stmt": statement}).encode("utf-8"),
        )
        return parse_sql_reply(database, response.status_code, response.text)

    # -- internals ------------------------------------------------------------------------------

    def _load_headers(self, label: str | None, options: StreamLoadOptions) -> dict[str, str]:
        headers = {"Expect": "100-continue", **options.headers()}
        if label is not None:
            headers["label"] = label
            # Group commit would replace our label by a server one; pin the classic path.
            headers["group_commit"] = "off_mode"
        return headers

    def _two_phase(
        self, database: str, operation: str, txn_id: int | None, label: str | None
    ) -> TwoPhaseResult:
        if txn_id is None and label is None:
            raise ConfigurationError(f"2PC {operation} needs a txn_id or a label")
        # Doris acts on txn_id when both are sent; the label is then only for settling the outcome.
        headers = {"txn_operation": operation}
        headers.update({"txn_id": str(txn_id)} if txn_id is not None else {"label": str(label)})
        subject = f"txn {txn_id}" if txn_id is not None else f"label {label}"
        what = f"2PC {operation} of {subject} in {database}"
        try:
            reply = self._two_phase_reply(f"/api/{_segment(database)}/_stream_load_2pc", headers, what)
        except UnrecognisedReply as exc:
            if label is None:
                raise
            reply, answered = None, str(exc)
        else:
            answered = reply.describe() if reply is not None else "no reply"
        if reply is not None and reply.outcome is LoadOutcome.SUCCESS:
            log.info("%s: %s", what, answered)
            return TwoPhaseResult(operation, reply, None)
        if label is None:
            if reply is None:
                raise LoadOutcomeUnknown(f"{what}: no reply; pass the label to settle it by get_load_state")
            raise _state_error(what, reply)
        state = self.get_load_state(database, label)
        log.info("%s answered %s; label %s is %s", what, answered, label, state.value)
        settled = state.is_loaded if operation == "commit" else state.is_free
        if settled:
            return TwoPhaseResult(operation, reply, state)
        detail = f"{what} did not take effect: label {label} is {state.value} (Doris answered: {answered})"
        if state in (LabelState.PRECOMMITTED, LabelState.PREPARE):
            raise RetryableStreamLoadError(detail)
        raise PermanentStreamLoadError(detail)

    def _two_phase_reply(
        self, path: str, headers: Mapping[str, str], what: str
    ) -> StreamLoadResult | None:
        """The reply to a 2PC request, or ``None`` when the request reached a BE but its reply was
        lost (the operation may have taken effect)."""
        if self._config.be_hosts:
            url = self._http.next_be_url(path)
        else:
            # The FE only redirects; a failure here changed nothing.
            response = self._http.call("PUT", self._config.fe_url + path, headers, b"", target="FE")
            if response.status_code not in REDIRECT_STATUSES:
                return StreamLoadResult.from_http(response.status_code, response.text)
            url = self._http.redirect_url(response)
        try:
            response = self._http.put(url, headers, b"")
        except requests.RequestException as exc:
            if never_connected(exc):
                unreachable = f"BE {address_of(url)} unreachable: {describe_error(exc)}"
                raise RetryableStreamLoadError(unreachable) from exc
            log.warning("%s: no reply from BE %s (%s)", what, address_of(url), describe_error(exc))
            return None
        return StreamLoadResult.from_http(response.status_code, response.text)

    def _settle_label(
        self, database: str, label: str, options: StreamLoadOptions, policy: PrecommittedPolicy
    ) -> IdempotentLoadResult | None:
        """A definite answer for a label held by an earlier or ambiguous load; ``None`` = label free."""
        state = self._wait_while_running(database, label)
        log.info("Label %s in %s resolved to %s", label, database, state.value)
        if state.is_loaded:
            return IdempotentLoadResult(label, LoadDisposition.ALREADY_LOADED, state, None, 0)
        if state.is_free:
            return None
        if options.two_phase_commit:
            return IdempotentLoadResult(label, LoadDisposition.ALREADY_LOADED, state, None, 0)
        return self._apply_precommitted_policy(database, label, policy)

    def _wait_while_running(self, database: str, label: str) -> LabelState:
        deadline = self._clock() + self._retry.running_wait_seconds
        state = self.get_load_state(database, label)
        while state is LabelState.PREPARE:
            if self._clock() >= deadline:
                raise RetryableStreamLoadError(
                    f"Label {label} in {database} is still running after "
                    f"{self._retry.running_wait_seconds:.0f} s"
                )
            self._sleep(self._retry.running_poll_seconds)
            state = self.get_load_state(database, label)
        return state

    def _apply_precommitted_policy(
        self, database: str, label: str, policy: PrecommittedPolicy
    ) -> IdempotentLoadResult | None:
        if policy is PrecommittedPolicy.COMMIT:
            self.commit_transaction(database, label=label)
            return IdempotentLoadResult(
                label, LoadDisposition.ALREADY_LOADED, self.get_load_state(database, label), None, 0
            )
        if policy is PrecommittedPolicy.ABORT_AND_RELOAD:
            self.abort_transaction(database, label=label)
            return None
        raise PermanentStreamLoadError(
            f"Label {label} in {database} is PRECOMMITTED by an earlier two-phase load; commit or abort it, "
            "or pass precommitted_policy=COMMIT / ABORT_AND_RELOAD"
        )

# --- helpers -----------------------------------------------------------------------------------



def _encode_body(body: Body, options: StreamLoadOptions) -> Body:
    if not options.gzip:
        return body
    if isinstance(body, StreamingBody):
        raise ConfigurationError("gzip needs a bytes body (a streamed body's compressed length is unknown)")
    return gzip.compress(body, compresslevel=6)


def _loaded(label: str, result: StreamLoadResult, attempts: int) -> IdempotentLoadResult:
    if result.two_phase_commit:
        state = LabelState.PRECOMMITTED
    elif result.is_publish_timeout:
        state = LabelState.COMMITTED
    else:
        state = LabelState.VISIBLE
    return IdempotentLoadResult(label, LoadDisposition.LOADED, state, result, attempts)


def _permanent_load_error(
    database: str, table: str, label: str, result: StreamLoadResult
) -> PermanentStreamLoadError:
    return PermanentStreamLoadError(
        f"Stream Load of label {label} into {database}.{table} failed permanently: {result.describe()}",
        error_url=result.error_url,
        result=result,
    )


def _state_error(what: str, result: StreamLoadResult) -> StreamLoadError:
    if result.outcome is LoadOutcome.RETRYABLE:
        return RetryableStreamLoadError(f"{what} failed: {result.describe()}")
    return PermanentStreamLoadError(f"{what} failed: {result.describe()}")


def _is_definite_fail(result: StreamLoadResult) -> bool:
    """Doris answered the load itself with ``Fail``: its transaction is aborted, the label free."""
    return result.status == "Fail" and "TxnId" in result.raw


def _segment(name: str) -> str:
    if not name:
        raise ConfigurationError("Database and table names must not be empty")
    return quote(name, safe="")
