"""The HTTP transport of the Doris client: FE redirects followed by hand, credentials sent only
where they may go, and failures told apart by whether a body can have reached Doris.

See :mod:`~airflow_provider_kinesis_doris.core.doris.client` for why redirects are not left to
``requests``.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

import requests
from requests.auth import HTTPBasicAuth
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError

from airflow_provider_kinesis_doris.core.doris.connection import DorisConnectionConfig, join_host_port
from airflow_provider_kinesis_doris.core.doris.options import Body, StreamingBody
from airflow_provider_kinesis_doris.core.doris.result import LoadOutcome, StreamLoadResult
from airflow_provider_kinesis_doris.core.errors import (
    ConfigurationError,
    LoadOutcomeUnknown,
    PermanentStreamLoadError,
    RetryableStreamLoadError,
)

log = logging.getLogger(__name__)

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})


class DorisHttp:
    """Requests to one Doris cluster with its credentials; one per client (not thread-safe).

    :param config: FE address, credentials and BE routing.
    :param session: the ``requests.Session`` the client owns.
    """

    def __init__(self, config: DorisConnectionConfig, session: requests.Session) -> None:
        self._config = config
        self._session = session
        self._auth = HTTPBasicAuth(config.user, config.password)
        self._be_cursor = itertools.count()

    def load_target(self, path: str, headers: Mapping[str, str]) -> str | StreamLoadResult:
        """The BE URL to send the body to, or the FE's own (failure) reply."""
        if self._config.be_hosts:
            return self.next_be_url(path)
        # The probe must not carry what a BE would act on: see the module docstring.
        probe_headers = {k: v for k, v in headers.items() if k not in ("label", "two_phase_commit")}
        response = self.call("PUT", self._config.fe_url + path, probe_headers, b"", target="FE")
        if response.status_code in REDIRECT_STATUSES:
            return self.redirect_url(response)
        result = StreamLoadResult.from_http(response.status_code, response.text)
        if "TxnId" in result.raw:
            raise PermanentStreamLoadError(
                f"{self._config.fe_address} ran the load itself instead of redirecting: it is a BE, "
                "not an FE; "
                "point the connection at the FE or list the BE in be_hosts"
            )
        if result.outcome is LoadOutcome.SUCCESS:
            # The probe carried no body and no label: a success can only be a proxy or another
            # server answering, never the load's result (fail closed).
            raise PermanentStreamLoadError(
                f"{self._config.fe_address} answered the Stream Load probe with a success instead of a "
                f"redirect to a BE ({result.describe()}): it is not a Doris FE; check the connection's host and port"
            )
        return result

    def send_load(
        self, url: str, headers: Mapping[str, str], payload: Body, label: str | None
    ) -> StreamLoadResult:
        target = address_of(url)
        try:
            response = self._session.put(
                url, headers=dict(headers), data=request_data(payload), auth=self._auth,
                allow_redirects=False, timeout=self._timeouts(),
            )
        except requests.RequestException as exc:
            if never_connected(exc):
                unreachable = RetryableStreamLoadError(f"BE {target} unreachable for label {label}: {describe_error(exc)}")
                unreachable.definitely_not_loaded = True
                raise unreachable from exc
            raise LoadOutcomeUnknown(
                f"Stream Load of label {label} to BE {target}: no reply after sending ({describe_error(exc)})"
            ) from exc
        if response.status_code in REDIRECT_STATUSES:
            raise PermanentStreamLoadError(f"BE {target} answered the load with a redirect, not a result")
        result = StreamLoadResult.from_http(response.status_code, response.text)
        log.info("Stream Load of label %s via %s: %s", label, target, result.describe())
        return result

    def put(self, url: str, headers: Mapping[str, str], data: bytes) -> requests.Response:
        """A PUT with credentials to ``url`` (a BE the FE redirected to); ``requests``' errors pass."""
        return self._session.put(
            url, headers=dict(headers), data=data, auth=self._auth, allow_redirects=False, timeout=self._timeouts()
        )

    def get_without_credentials(self, url: str) -> requests.Response:
        """A GET of a URL Doris serves without credentials (an error log); ``requests``' errors pass."""
        return self._session.get(url, timeout=self._timeouts())

    def call_fe(
        self, method: str, path_and_query: str, *, headers: Mapping[str, str], body: bytes | None = None
    ) -> requests.Response:
        """A request to the FE, following one redirect (to the master FE or a BE) by hand."""
        response = self.call(method, self._config.fe_url + path_and_query, headers, body, target="FE")
        if response.status_code in REDIRECT_STATUSES:
            target_url = self.redirect_url(response)
            response = self.call(method, target_url, headers, body, target="redirect target")
        return response

    def call(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None, *, target: str
    ) -> requests.Response:
        """A request whose failure cannot have changed anything (no load body involved)."""
        try:
            return self._session.request(
                method, url, headers=dict(headers), data=body, auth=self._auth,
                allow_redirects=False, timeout=self._timeouts(),
            )
        except requests.RequestException as exc:
            unreachable = RetryableStreamLoadError(f"{target} {address_of(url)} unreachable: {describe_error(exc)}")
            # These requests carry no load body: whatever broke, no row reached Doris through them.
            unreachable.definitely_not_loaded = True
            raise unreachable from exc

    def redirect_url(self, response: requests.Response) -> str:
        """The redirect target without userinfo, mapped and checked against the allowed hosts."""
        location = urlsplit(response.headers.get("Location", ""))
        # Never put `location` or its netloc into a message: the userinfo holds the password.
        if not location.hostname:
            raise PermanentStreamLoadError(
                f"{address_of(response.url)} sent a redirect without a usable Location"
            )
        port = location.port or default_port(location.scheme)
        target = self._config.redirect_address(location.hostname, port)
        if target is None:
            raise PermanentStreamLoadError(
                f"{address_of(response.url)} redirected to {join_host_port(location.hostname, port)}, which is "
                "not allowed to receive credentials; add its host to allowed_redirect_hosts or map it with "
                "be_address_map"
            )
        query = f"?{location.query}" if location.query else ""
        return f"{location.scheme or 'http'}://{target}{location.path}{query}"

    def next_be_url(self, path: str) -> str:
        hosts = self._config.be_hosts
        return f"http://{hosts[next(self._be_cursor) % len(hosts)]}{path}"

    def _timeouts(self) -> tuple[float, float]:
        return (self._config.connect_timeout_seconds, self._config.read_timeout_seconds)




class DorisSession(requests.Session):
    """A ``requests.Session`` that reads the environment's proxy and CA-bundle settings once per
    origin (scheme and host): ``requests`` reads them for every request, and scanning the
    environment for proxies was half of a Stream Load's CPU in ``requests`` at many small chunks
    (docs/benchmarks.md). A client, and its session, lives for one run's loads."""

    __attrs__ = [*requests.Session.__attrs__, "_environment"]  # what a pickled session keeps

    def __init__(self) -> None:
        super().__init__()
        self._environment: dict[tuple[str, str], dict[str, Any]] = {}

    def merge_environment_settings(
        self, url: str | bytes | None, proxies: Mapping[str, str] | None, stream: bool | None, verify: Any, cert: Any
    ) -> dict[str, Any]:
        if proxies or stream is not None or verify is not None or cert is not None or not isinstance(url, str):
            return super().merge_environment_settings(url, proxies, stream, verify, cert)  # a request's own settings
        parts = urlsplit(url)
        origin = (parts.scheme, parts.netloc)
        if origin not in self._environment:
            self._environment[origin] = super().merge_environment_settings(url, {}, None, None, None)
        settings = self._environment[origin]
        return {**settings, "proxies": dict(settings["proxies"])}  # requests may add to the proxies it gets


class _SizedChunks:
    """An iterable with ``__len__``: ``requests`` then sends ``Content-Length`` instead of chunking."""

    def __init__(self, body: StreamingBody) -> None:
        self._body = body

    def __len__(self) -> int:
        return self._body.length

    def __iter__(self) -> Iterator[bytes]:
        sent = 0
        for piece in self._body.chunks():
            sent += len(piece)
            if sent > self._body.length:
                raise ConfigurationError(
                    f"StreamingBody yielded more than its declared {self._body.length} bytes"
                )
            yield piece
        if sent != self._body.length:
            raise ConfigurationError(f"StreamingBody yielded {sent} bytes, declared {self._body.length}")


def request_data(payload: Body) -> bytes | _SizedChunks:
    return _SizedChunks(payload) if isinstance(payload, StreamingBody) else payload


def never_connected(exc: requests.RequestException) -> bool:
    """Whether the request failed before a connection existed (so no byte of the body left)."""
    if isinstance(exc, requests.ConnectTimeout):
        return True
    reason = getattr(exc.args[0], "reason", None) if exc.args else None
    return isinstance(reason, (NewConnectionError, ConnectTimeoutError))


def describe_error(exc: BaseException) -> str:
    # URLs in requests' messages are ours and carry no userinfo; still, keep it short.
    return f"{type(exc).__name__}: {exc}"[:300]


def address_of(url: str) -> str:
    parts = urlsplit(url)
    return join_host_port(parts.hostname or "?", parts.port or default_port(parts.scheme))


def default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80
