"""The Doris client's HTTP transport (``core.doris.http``) on its own, against the Doris stand-in:
where a load goes (the FE's redirect, mapped, or the BEs named), what a redirect keeps of its
Location, and a failure before any connection told apart from one after the body left."""

from __future__ import annotations

import http.server as http_server
import socket
import threading
from collections.abc import Iterator

import pytest
import requests

from airflow_provider_kinesis_doris.core.doris.connection import DorisConnectionConfig
from airflow_provider_kinesis_doris.core.doris.http import DorisHttp, DorisSession, request_data
from airflow_provider_kinesis_doris.core.doris.options import StreamingBody, StreamLoadOptions
from airflow_provider_kinesis_doris.core.doris.result import LoadOutcome
from airflow_provider_kinesis_doris.core.errors import (
    ConfigurationError,
    PermanentStreamLoadError,
    RetryableStreamLoadError,
)
from kinesis_doris_devstack.doris_server import DorisServer

pytestmark = pytest.mark.integration

USER = "root"
PASSWORD = "pw-Hx27-never-shown"
DB = "kd_http"
TABLE = "events"
LOAD_PATH = f"/api/{DB}/{TABLE}/_stream_load"
LOAD_HEADERS = {"Expect": "100-continue", **StreamLoadOptions.json_lines().headers()}
"""What the client sends with a JSON-lines load (Doris refuses a load without ``Expect``)."""


@pytest.fixture(scope="module")
def server() -> Iterator[DorisServer]:
    with DorisServer(host="127.0.0.1", fe_port=0, be_port=0, user=USER, password=PASSWORD) as srv:
        srv.execute_sql("", f"CREATE DATABASE IF NOT EXISTS {DB}")
        srv.execute_sql(DB, f"CREATE TABLE {TABLE} (id INT NOT NULL) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 1")
        yield srv


def http_to(fe_port: int, **settings: object) -> DorisHttp:
    config = DorisConnectionConfig(host="127.0.0.1", port=fe_port, user=USER, password=PASSWORD, **settings)  # type: ignore[arg-type]
    return DorisHttp(config, requests.Session())


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def redirect(location: str, from_url: str = "http://127.0.0.1:8030/api/db/t/_stream_load") -> requests.Response:
    """An FE's 307 reply as ``requests`` hands it over."""
    response = requests.Response()
    response.status_code, response.url = 307, from_url
    response.headers["Location"] = location
    return response


def test_the_load_goes_to_the_be_the_fe_redirects_to_and_lands(server: DorisServer) -> None:
    http = http_to(server.fe_port)
    target = http.load_target(LOAD_PATH, {**LOAD_HEADERS, "label": "http-1"})
    assert target == f"http://127.0.0.1:{server.be_port}{LOAD_PATH}"
    result = http.send_load(target, {**LOAD_HEADERS, "label": "http-1"}, b'{"id": 1}\n', "http-1")
    assert result.outcome is LoadOutcome.SUCCESS
    assert server.execute_sql(DB, f"SELECT id FROM {TABLE}") == [(1,)]


def test_the_fe_redirect_is_mapped_to_the_reachable_address(server: DorisServer) -> None:
    http = http_to(server.fe_port, be_address_map={f"127.0.0.1:{server.be_port}": "10.0.0.7:18040"})
    assert http.load_target(LOAD_PATH, LOAD_HEADERS) == f"http://10.0.0.7:18040{LOAD_PATH}"


def test_named_bes_take_turns_and_the_fe_is_not_asked() -> None:
    http = http_to(closed_port(), be_hosts=("be-a:8040", "be-b:8040"))
    targets = [http.load_target(LOAD_PATH, LOAD_HEADERS) for _ in range(3)]
    assert targets == [f"http://be-a:8040{LOAD_PATH}", f"http://be-b:8040{LOAD_PATH}", f"http://be-a:8040{LOAD_PATH}"]


def test_a_be_that_never_answered_the_connection_is_definitely_not_loaded() -> None:
    url = f"http://127.0.0.1:{closed_port()}{LOAD_PATH}"
    with pytest.raises(RetryableStreamLoadError, match="unreachable for label http-2") as raised:
        http_to(closed_port()).send_load(url, LOAD_HEADERS, b'{"id": 2}\n', "http-2")
    assert raised.value.definitely_not_loaded


def test_a_redirect_keeps_path_and_query_but_never_the_userinfo() -> None:
    http = http_to(8030)
    assert http.redirect_url(redirect(f"http://{USER}:{PASSWORD}@127.0.0.1:8040/api/db/t/_stream_load?x=1")) == (
        "http://127.0.0.1:8040/api/db/t/_stream_load?x=1"
    )
    assert http.redirect_url(redirect("http://127.0.0.1/p")) == "http://127.0.0.1:80/p"


def test_a_redirect_to_a_host_not_allowed_is_refused_without_showing_the_location() -> None:
    with pytest.raises(PermanentStreamLoadError, match="redirected to be.elsewhere:8040, which is not allowed") as raised:
        http_to(8030).redirect_url(redirect(f"http://{USER}:{PASSWORD}@be.elsewhere:8040/api"))
    assert PASSWORD not in str(raised.value)


def test_a_streaming_body_is_sent_at_its_declared_length_and_refused_past_it() -> None:
    pieces = lambda: [b"ab", b"cd"]  # noqa: E731
    exact = request_data(StreamingBody(4, pieces))
    assert (len(exact), b"".join(exact)) == (4, b"abcd")
    with pytest.raises(ConfigurationError, match="more than its declared 3 bytes"):
        list(request_data(StreamingBody(3, pieces)))
    with pytest.raises(ConfigurationError, match="yielded 4 bytes, declared 5"):
        list(request_data(StreamingBody(5, pieces)))


def test_the_environment_is_read_once_per_origin_and_its_proxy_still_taken(
    server: DorisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``requests`` scans the environment for proxies on every request; a ``DorisSession`` once
    per scheme and host, so each load's FE probe and BE body read it once between them, and a
    proxy the environment names is still the one requests go through."""
    reads: list[str] = []
    environ_proxies = requests.sessions.get_environ_proxies

    def counted(url: str, no_proxy: str | None = None) -> dict[str, str]:
        reads.append(url)
        return environ_proxies(url, no_proxy=no_proxy)

    monkeypatch.setattr(requests.sessions, "get_environ_proxies", counted)
    config = DorisConnectionConfig(host="127.0.0.1", port=server.fe_port, user=USER, password=PASSWORD)
    http = DorisHttp(config, DorisSession())
    server.execute_sql(DB, "CREATE TABLE env_once (id INT NOT NULL) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 1")
    path = f"/api/{DB}/env_once/_stream_load"
    for n in range(3):
        label = f"env-once-{n}"
        target = http.load_target(path, LOAD_HEADERS)
        assert isinstance(target, str)
        assert http.send_load(target, {**LOAD_HEADERS, "label": label}, f'{{"id": {n}}}'.encode(), label).outcome is LoadOutcome.SUCCESS
    assert server.execute_sql(DB, "SELECT id FROM env_once ORDER BY id") == [(0,), (1,), (2,)]
    assert sorted(reads) == sorted(f"http://127.0.0.1:{port}{path}" for port in (server.fe_port, server.be_port))

    proxied: list[str] = []

    class Proxy(http_server.BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            proxied.append(self.path)
            self.send_response(502)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    with http_server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy) as proxy:
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.server_port}")
        monkeypatch.setenv("NO_PROXY", "")
        try:
            response = DorisHttp(config, DorisSession()).call("PUT", config.fe_url + LOAD_PATH, LOAD_HEADERS, b"", target="FE")
        finally:
            proxy.shutdown()
    assert response.status_code == 502 and proxied == [f"http://127.0.0.1:{server.fe_port}{LOAD_PATH}"]
