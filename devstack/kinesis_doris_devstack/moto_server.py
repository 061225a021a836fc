"""moto's server (DynamoDB) with two changes: each request is applied atomically, and a cancelled
transaction is rolled back item by item.

DynamoDB applies a conditional write atomically: of two updates conditioned on the same old value,
one fails. moto's server answers requests on concurrent threads and checks a condition, then
writes, with no lock between: both such updates can succeed (a race test saw two writers resolve
one PENDING cut to different positions). One lock around each DynamoDB request restores
DynamoDB's guarantee; the requests were CPU-bound under the GIL already.

moto 5 keeps a deep copy of the whole table for every item of a ``TransactWriteItems`` request,
to put back if the transaction is cancelled. The cost of a transaction then grows with the table:
at 256 shards (about 3,500 items) a group of 8 puts copies the table 8 times, and the driver's
batched writes spend most of their time there. A transaction can change only the items it names,
so keeping those items is the same rollback; what a request is answered is moto's own.

Run as ``python -m kinesis_doris_devstack.moto_server`` with moto.server's arguments.
"""

from __future__ import annotations

import copy
import sys
import threading
from types import SimpleNamespace
from typing import Any

from moto.dynamodb import models
from moto.dynamodb.models.table import Table
from moto.dynamodb.responses import DynamoHandler
from moto.server import main

_deepcopy = copy.deepcopy
_transact_write_items = models.DynamoDBBackend.transact_write_items
_call_action = DynamoHandler.call_action
_one_request_at_a_time = threading.Lock()


def call_action(self: DynamoHandler) -> Any:
    with _one_request_at_a_time:
        return _call_action(self)


def _copy_unless_table(value: Any, memo: dict[int, Any] | None = None) -> Any:
    return value if isinstance(value, Table) else _deepcopy(value, memo)


def _named_items(backend: Any, transact_items: list[dict[str, Any]]) -> list[tuple[Table, Any, Any, Any]]:
    """(table, hash key, range key, a copy of the item or None) for each item the request names."""
    saved = []
    for entry in transact_items:
        op = next(iter(entry.values()), None)
        table = backend.tables.get(op.get("TableName")) if isinstance(op, dict) else None
        if table is None:
            continue
        try:
            names = (table.hash_key_attr, table.range_key_attr)
            key = op.get("Key") or {name: op["Item"][name] for name in names if name}
            hash_key, range_key = backend.get_keys_value(table, key)
        except Exception:  # noqa: BLE001 - a malformed request: moto answers it, and writes nothing
            continue
        saved.append((table, hash_key, range_key, _deepcopy(table.get_item(hash_key, range_key))))
    return saved


def _restore(saved: list[tuple[Table, Any, Any, Any]]) -> None:
    for table, hash_key, range_key, item in reversed(saved):
        table.delete_item(hash_key, range_key)
        if item is None:
            continue
        if range_key is None:
            table.items[hash_key] = item
        else:
            table.items.setdefault(hash_key, {})[range_key] = item


def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
    saved = _named_items(self, transact_items)
    try:
        _transact_write_items(self, transact_items)
    except Exception:
        # moto put its "copy" of each table back, which is the table itself: restore the items.
        _restore(saved)
        raise


# Only the transaction's whole-table copies are skipped; every other copy moto makes is kept.
models.copy = SimpleNamespace(deepcopy=_copy_unless_table)  # type: ignore[attr-defined]
models.DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]
DynamoHandler.call_action = call_action  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(main())
