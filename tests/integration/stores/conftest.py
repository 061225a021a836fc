"""The store's items on both stores, for testing each part of the checkpoint store on its own:
DynamoDB's wire protocol (moto, server mode) and the in-memory table."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from airflow_provider_kinesis_doris.core.stores.dynamodb import DynamoItems
from airflow_provider_kinesis_doris.core.stores.memory import MemoryItems, MemoryTable
from airflow_provider_kinesis_doris.core.stores.primitives import StoreItems

PIPELINE = "orders-to-doris"


@pytest.fixture(params=["dynamodb", "memory"])
def open_items(request: pytest.FixtureRequest) -> Callable[[], StoreItems]:
    """Opens the pipeline's items on one table, again at each call: another run (process) of the
    pipeline."""
    if request.param == "memory":
        table = MemoryTable()
        return lambda: MemoryItems(PIPELINE, table)
    client: Any = request.getfixturevalue("dynamodb_client")
    name = f"parts-{uuid.uuid4().hex[:8]}"
    DynamoItems(client, name, PIPELINE).create_table_if_missing()
    return lambda: DynamoItems(client, name, PIPELINE)
