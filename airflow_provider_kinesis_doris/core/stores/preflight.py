"""The ``preflight`` item: which settings of the pipeline last passed the preflight
(``core.doris.preflight``, ``core.aws_preflight``), so that a task checks the deployment again only when they change."""

from __future__ import annotations

from airflow_provider_kinesis_doris.core.stores.primitives import StoreItems

PREFLIGHT_KEY = "preflight"


class PreflightRecord:
    """The ``preflight`` item on the store's items.

    :param items: the pipeline's items.
    """

    def __init__(self, items: StoreItems) -> None:
        self._items = items

    def passed_preflight_digest(self) -> str | None:
        """The digest (``core.aws_preflight.preflight_digest``) of the settings that last passed."""
        item = self._items.get(PREFLIGHT_KEY)
        return str(item["digest"]) if item else None

    def record_passed_preflight(self, digest: str) -> None:
        """Remember that the settings of ``digest`` passed. A task that raced this one to it
        passed a preflight too, so losing the race is as good as winning it."""
        stored = self.passed_preflight_digest()
        if stored is None:
            self._items.put_new({"sk": PREFLIGHT_KEY, "kind": "preflight", "digest": digest, "updated_ms": self._items.clock()})
        elif stored != digest:
            self._items.update(PREFLIGHT_KEY, {"digest": digest, "updated_ms": self._items.clock()}, {"digest": stored})
