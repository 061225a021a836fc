"""Where Doris is and how to retry: the connection settings of the Stream Load client.

Plain values (frozen dataclasses) with no I/O, validated on construction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.core.retry import backoff_seconds

DEFAULT_FE_HTTP_PORT = 8030
# The FE's MySQL protocol port (``query_port``): SQL clients and common.sql operators use it; the
# Stream Load client does not.
DEFAULT_QUERY_PORT = 9030
DEFAULT_LABEL_KEEP_SECONDS = 43200


@dataclass(frozen=True)
class DorisConnectionConfig:
    """Where the FE is and how to reach the BEs it redirects to.

    The ``repr`` shows the user and the FE address only.

    :param host: FE host name or address.
    :param port: FE HTTP port (``http_port``, default 8030).
    :param user: Doris user.
    :param password: the user's password; never logged nor shown.
    :param https: talk to the FE over HTTPS (BEs always speak plain HTTP).
    :param be_hosts: ``host:port`` of BEs to load into directly, skipping the FE redirect.
    :param allowed_redirect_hosts: hosts (or ``host:port``) besides the FE host that may receive
        credentials after a redirect.
    :param be_address_map: advertised BE ``host:port`` → reachable ``host:port`` (NAT, Docker, K8s).
    :param label_keep_seconds: the FE's ``streaming_label_keep_max_second``: how long a label
        deduplicates (at most; ``label_num_threshold`` can shorten it).
    :param connect_timeout_seconds: TCP connect timeout of every request.
    :param read_timeout_seconds: time to wait for a reply once the request is sent.
    """

    host: str
    port: int = DEFAULT_FE_HTTP_PORT
    user: str = "root"
    password: str = field(default="", repr=False)
    https: bool = False
    be_hosts: tuple[str, ...] = ()
    allowed_redirect_hosts: tuple[str, ...] = ()
    be_address_map: Mapping[str, str] = field(default_factory=dict)
    label_keep_seconds: int = DEFAULT_LABEL_KEEP_SECONDS
    connect_timeout_seconds: float = 10.0
    read_timeout_seconds: float = 600.0

    def __post_init__(self) -> None:
        if not self.host:
            raise ConfigurationError("Doris FE host must not be empty")
        if not 0 < self.port < 65536:
            raise ConfigurationError(f"Doris FE port must be within 1..65535, got {self.port}")
        for address in (*self.be_hosts, *self.be_address_map, *self.be_address_map.values()):
            split_host_port(address)
        if self.label_keep_seconds <= 0:
            raise ConfigurationError(f"label_keep_seconds must be positive, got {self.label_keep_seconds}")

    def __repr__(self) -> str:
        return f"DorisConnectionConfig(user={self.user!r}, fe={self.fe_address!r})"

    @property
    def fe_address(self) -> str:
        return join_host_port(self.host, self.port)

    @property
    def fe_url(self) -> str:
        return f"{'https' if self.https else 'http'}://{self.fe_address}"

    def redirect_address(self, host: str, port: int) -> str | None:
        """Where a redirect to ``host:port`` is followed with the credentials: its
        ``be_address_map`` entry, itself when the FE host or ``allowed_redirect_hosts`` names its
        host or ``host:port``, or None: it may not receive them."""
        advertised = join_host_port(host, port)
        mapped = self.be_address_map.get(advertised)
        if mapped is not None:
            return mapped
        allowed = {entry.lower() for entry in (self.host, *self.allowed_redirect_hosts)}
        return advertised if host.lower() in allowed or advertised.lower() in allowed else None


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter for retries that keep the label.

    :param max_attempts: loads sent at most (the first included).
    :param initial_backoff_seconds: pause after the first failure.
    :param max_backoff_seconds: cap of the pause (-235 needs compaction time: keep it ≥ 60 s in production).
    :param multiplier: growth of the pause per failure.
    :param jitter: share of the pause drawn at random, 0..1, so parallel writers spread out.
    :param running_wait_seconds: how long to poll a label that is still ``PREPARE`` (a load in flight).
    :param running_poll_seconds: pause between those polls.
    """

    max_attempts: int = 6
    initial_backoff_seconds: float = 2.0
    max_backoff_seconds: float = 90.0
    multiplier: float = 2.0
    jitter: float = 0.5
    running_wait_seconds: float = 600.0
    running_poll_seconds: float = 2.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigurationError(f"max_attempts must be at least 1, got {self.max_attempts}")
        if not 0 <= self.jitter <= 1:
            raise ConfigurationError(f"jitter must be within 0..1, got {self.jitter}")

    def backoff_seconds(self, failures: int, unit_random: float) -> float:
        """The pause after ``failures`` consecutive failures.

        :param failures: failures so far, from 1.
        :param unit_random: a random number in [0, 1).
        """
        return backoff_seconds(
            failures, initial=self.initial_backoff_seconds, cap=self.max_backoff_seconds,
            multiplier=self.multiplier, jitter=self.jitter, unit_random=unit_random,
        )  # fmt: skip


def split_host_port(address: str) -> tuple[str, int]:
    """``host`` (IPv6 without brackets) and ``port`` of ``address``; ConfigurationError if it is not one."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigurationError(f"Expected host:port, got {address!r}")
    return host.strip("[]"), int(port)


def join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
