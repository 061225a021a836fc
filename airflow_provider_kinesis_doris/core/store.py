"""What the data path needs from durable storage, as Protocols.

``core.checkpoints`` implements them on DynamoDB; ``testing.memory_store`` in memory. Every
write that can race is conditional, and a lost race raises a typed error instead of
overwriting (last writer never silently wins).
"""

from __future__ import annotations

from typing import Protocol

from airflow_provider_kinesis_doris.core.model import Boundary


class BoundaryStore(Protocol):
    """Boundaries are written once; a PENDING one is made concrete once."""

    def get_boundary(self, shard_id: str, instant_ms: int) -> Boundary | None:
        """The stored boundary of ``shard_id`` at ``instant_ms``, or None if never resolved."""

    def put_boundary(self, boundary: Boundary) -> Boundary:
        """Store ``boundary`` unless one exists for its (shard, instant); return the stored one
        (ours, or the one that won)."""

    def resolve_pending(self, proposed: Boundary) -> Boundary:
        """Replace the stored PENDING boundary at (proposed.shard_id, proposed.instant_ms) with
        the concrete ``proposed`` one, only if it is still PENDING; return what is stored after
        the attempt. The caller must follow the returned boundary, not its proposal."""
