"""A statsd server for the metrics tests: a UDP socket on 127.0.0.1 that keeps every line."""

from __future__ import annotations

import socket
import threading
import time


class StatsdListener:
    """A UDP socket on 127.0.0.1 keeping every statsd line it receives."""

    def __init__(self) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.bind(("127.0.0.1", 0))
        self.socket.settimeout(0.2)
        self.port = self.socket.getsockname()[1]
        self.lines: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True)

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.socket.recv(65536)
            except TimeoutError:
                continue
            self.lines += data.decode().splitlines()

    def values(self, name: str, kind: str) -> list[float]:
        """Values sent for ``name`` with type ``kind`` (``c`` counter, ``g`` gauge)."""
        found = []
        for line in self.lines:
            stat, _, rest = line.partition(":")
            value, _, metric_type = rest.partition("|")
            if stat == name and metric_type.split("|")[0] == kind:
                found.append(float(value))
        return found

    def wait_for(self, name: str, *, count: int = 1, timeout: float = 10.0) -> bool:
        """Whether ``count`` lines for ``name`` arrived within ``timeout`` seconds (UDP is not
        awaited by its sender)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if sum(line.partition(":")[0] == name for line in self.lines) >= count:
                return True
            time.sleep(0.05)
        return False

    def __enter__(self) -> StatsdListener:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.socket.close()
