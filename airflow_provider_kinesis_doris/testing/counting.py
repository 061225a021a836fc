"""A client wrapper that counts the calls made through it, for tests that assert what was read."""

from __future__ import annotations

from collections import Counter
from typing import Any


class CountingClient:
    """Passes every call through to ``client`` and counts it by method name in ``calls``."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        self.calls[name] += 1
        return getattr(self._client, name)
