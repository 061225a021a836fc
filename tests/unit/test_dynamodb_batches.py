"""Batched reads and deletes of the DynamoDB store when DynamoDB leaves part of a batch
unprocessed (throttling, which no emulator here produces): botocore's Stubber."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from airflow_provider_kinesis_doris.core.stores import dynamodb
from airflow_provider_kinesis_doris.core.stores.buckets import LAYOUT_KEY, MAX_BUCKETS, BucketLayout, partition_key
from airflow_provider_kinesis_doris.core.stores.dynamodb import DynamoItems

TABLE = "checkpoints"


def _key(sk: str) -> dict[str, Any]:
    return {"pk": {"S": _partition(sk)}, "sk": {"S": sk}}


def _partition(sk: str) -> str:
    return partition_key("p", BucketLayout(MAX_BUCKETS).bucket_of(sk))


@pytest.fixture
def stubbed(monkeypatch: pytest.MonkeyPatch) -> tuple[DynamoItems, Stubber]:
    """The items of pipeline ``p``, whose layout item (the first read) says the default bucket count."""
    monkeypatch.setattr(dynamodb.time, "sleep", lambda seconds: None)
    client = boto3.client("dynamodb", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stubber = Stubber(client)
    layout = {**_key(LAYOUT_KEY), "buckets": {"N": str(MAX_BUCKETS)}}
    stubber.add_response("get_item", {"Item": layout})
    return DynamoItems(client, TABLE, "p"), stubber


def test_keys_left_unprocessed_are_read_again(stubbed: tuple[DynamoItems, Stubber]) -> None:
    store, stubber = stubbed
    item_a = {**_key("a"), "v": {"N": "1"}}
    item_b = {**_key("b"), "v": {"N": "2"}}
    stubber.add_response(
        "batch_get_item",
        {"Responses": {TABLE: [item_a]}, "UnprocessedKeys": {TABLE: {"Keys": [_key("b")], "ConsistentRead": True}}},
        {"RequestItems": {TABLE: {"Keys": [_key("a"), _key("b"), _key("c")], "ConsistentRead": True}}},
    )
    stubber.add_response(
        "batch_get_item",
        {"Responses": {TABLE: [item_b]}},
        {"RequestItems": {TABLE: {"Keys": [_key("b")], "ConsistentRead": True}}},
    )
    with stubber:
        found = store.get_many(["a", "b", "c", "a"])
    stubber.assert_no_pending_responses()
    assert found == {"a": {"pk": "p#0", "sk": "a", "v": 1}, "b": {"pk": "p#0", "sk": "b", "v": 2}}


def test_deletes_never_processed_raise_naming_how_many(stubbed: tuple[DynamoItems, Stubber]) -> None:
    store, stubber = stubbed
    request = {"DeleteRequest": {"Key": _key("a")}}
    for _ in range(dynamodb._UNPROCESSED_RETRIES):
        stubber.add_response(
            "batch_write_item", {"UnprocessedItems": {TABLE: [request]}}, {"RequestItems": {TABLE: [request]}}
        )
    with stubber, pytest.raises(RuntimeError, match=r"left 1 deletes of pipeline p unprocessed after 8 attempts"):
        store.delete(["a"])


def test_a_write_rejected_while_a_transaction_holds_its_item_is_sent_again(
    stubbed: tuple[DynamoItems, Stubber],
) -> None:
    """Another run's grouped writes (a transaction) hold the shard item: DynamoDB rejects the
    single-item write, unapplied, and botocore does not retry that error."""
    store, stubber = stubbed
    for _ in range(2):
        stubber.add_client_error("update_item", "TransactionConflictException", http_status_code=400)
    stubber.add_response("update_item", {"Attributes": {**_key("shard#s"), "state": {"S": "DRAINED"}}})
    with stubber:
        assert store.update("shard#s", {"state": "DRAINED"}, {}) == {"pk": _partition("shard#s"), "sk": "shard#s", "state": "DRAINED"}
    stubber.assert_no_pending_responses()
    for _ in range(dynamodb._UNPROCESSED_RETRIES):
        stubber.add_client_error("put_item", "TransactionConflictException", http_status_code=400)
    with stubber, pytest.raises(store._client.exceptions.ClientError, match="TransactionConflictException"):
        store.put_new({"sk": "x"})
