"""Debian's Chromium, headless, driven over the DevTools protocol (a websocket; ``websockets`` is
one of Airflow 3's own dependencies): set a cookie, open a page, read what it shows, take a
screenshot. Started on loopback with a new profile and stopped by its PID.

The flags keep a machine without network from hanging: no first-run, sync, component update or
background requests, no QUIC.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kinesis_doris_devstack.stack import stop_pid

CHROMIUM = "/usr/bin/chromium"
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--window-size=1400,1800", "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
)  # fmt: skip


class Page:
    """One tab, one websocket: :meth:`call` sends a DevTools command and waits for its answer."""

    def __init__(self, websocket_url: str) -> None:
        from websockets.sync.client import connect

        self._open = contextlib.ExitStack()
        self._socket = self._open.enter_context(connect(websocket_url, max_size=64 * 1024 * 1024, open_timeout=30))
        self._ids = itertools.count(1)

    def call(self, method: str, timeout: float = 30, **params: Any) -> dict[str, Any]:
        request_id = next(self._ids)
        self._socket.send(json.dumps({"id": request_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            message = json.loads(self._socket.recv(timeout=max(deadline - time.monotonic(), 0.1)))
            if message.get("id") == request_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def open(self, url: str, timeout: float = 30) -> None:
        """Navigate and wait until the document has loaded (the page is server-rendered)."""
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        while self.evaluate("document.readyState") != "complete" or self.evaluate("location.href") == "about:blank":
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not load within {timeout:.0f}s")
            time.sleep(0.1)

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        self._open.close()


@contextlib.contextmanager
def chromium() -> Iterator[Page]:
    """A headless Chromium with a fresh profile, and a tab on it; stopped (by PID) after."""
    profile = Path(tempfile.mkdtemp(prefix="kd-chromium-"))
    process = subprocess.Popen(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    page = None
    try:
        page = Page(_page_websocket(profile, process))
        page.call("Page.enable")
        yield page
    finally:
        if page is not None:
            page.close()
        stop_pid(process.pid, timeout=10)
        shutil.rmtree(profile, ignore_errors=True)


def _page_websocket(profile: Path, process: subprocess.Popen[bytes], timeout: float = 30) -> str:
    """The tab's DevTools websocket: the port Chromium chose is in its profile's DevToolsActivePort."""
    deadline = time.monotonic() + timeout
    port_file = profile / "DevToolsActivePort"
    while not port_file.exists() or not port_file.read_text().strip():
        assert process.poll() is None, "chromium exited while starting"
        if time.monotonic() > deadline:
            raise TimeoutError("chromium did not open its DevTools port")
        time.sleep(0.1)
    port = int(port_file.read_text().split()[0])
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as answer:  # noqa: S310 - loopback
            pages = [target for target in json.load(answer) if target["type"] == "page"]
        if pages:
            return pages[0]["webSocketDebuggerUrl"]
        time.sleep(0.1)
    raise TimeoutError("chromium opened no tab")
