"""The pipeline state on a DynamoDB table."""

from __future__ import annotations

import logging
import shlex
import time

from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

from airflow_provider_kinesis_doris.core.concurrency import DEFAULT_DRIVER_CONCURRENCY, map_bounded
from airflow_provider_kinesis_doris.core.errors import ConfigurationError, aws_error_code
from airflow_provider_kinesis_doris.core.stores.buckets import (
    LAYOUT_KEY,
    PIPELINE_BUCKET,
    RecordedLayout,
    partition_key,
)
from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
from airflow_provider_kinesis_doris.core.stores.grouped import GroupedWrites
from airflow_provider_kinesis_doris.core.stores.items import (
    ABSENT,
    DEFAULT_PAGE_SIZE,
    wall_clock_ms,
)
from airflow_provider_kinesis_doris.core.stores.primitives import StoreItems

log = logging.getLogger(__name__)


def _to_python(value: Any) -> Any:
    """DynamoDB's Decimals back to ints (we store only integral numbers)."""
    if isinstance(value, Decimal):
        return int(value)
    if isinstance(value, list):
        return [_to_python(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_python(v) for k, v in value.items()}
    return value


_BATCH_WRITE_MAX = 25
"""Requests per BatchWriteItem call (the API's limit)."""
_BATCH_GET_MAX = 100
"""Keys per BatchGetItem call (the API's limit)."""
_TRANSACTION_MAX = 100
"""Items per TransactWriteItems call (the API's limit)."""
_TRANSACTIONS_IN_FLIGHT = 2
"""Grouped writes' transactions on their way at once: one after another, a thousand shards' marks
would wait for hundreds of round trips; the driver's pool (8 threads by default) still fills each."""
_UNPROCESSED_RETRIES = 8

MIGRATE_COMMAND = "python -m airflow_provider_kinesis_doris.core.stores.migrate"


def send_until_processed(send: Callable[[list[Any]], list[Any]], requests: list[Any], failure: str) -> None:
    """``send(requests)`` until DynamoDB has processed them all: it returns those left
    unprocessed (throttling), sent again after a growing pause.

    :raises RuntimeError: some are still unprocessed after ``_UNPROCESSED_RETRIES`` attempts;
        ``failure`` (formatted with ``left``, how many) says which.
    """
    for attempt in range(_UNPROCESSED_RETRIES):
        requests = send(requests)
        if not requests:
            return
        time.sleep(min(0.05 * 2**attempt, 2.0))
    raise RuntimeError(failure.format(left=len(requests)))


def _is_condition_failure(error: ClientError) -> bool:
    return aws_error_code(error) == "ConditionalCheckFailedException"


def _written_key(write: tuple[str, dict[str, Any]]) -> str:
    """The sort key a grouped write names (a transaction may name an item once)."""
    _, request = write
    return str((request.get("Key") or request["Item"])["sk"]["S"])


def old_layout_refusal(table_name: str, pipeline_id: str) -> ConfigurationError:
    return ConfigurationError(
        f"Checkpoint table {table_name!r} holds pipeline {pipeline_id!r} in the old layout (every item under "
        f"pk={pipeline_id!r}, one DynamoDB partition); this version spreads a pipeline's items over partition-key "
        f"values '{partition_key(pipeline_id, 0)}' ... Stop the pipeline's runs and migrate the table once: "
        f"{MIGRATE_COMMAND} --table {shlex.quote(table_name)} --pipeline-id {shlex.quote(pipeline_id)}"
    )


def dynamo_store(
    client: Any, table_name: str, pipeline_id: str, *, page_size: int = DEFAULT_PAGE_SIZE,
    clock: Callable[[], int] = wall_clock_ms,
) -> CheckpointStore[DynamoItems]:
    """A :class:`CheckpointStore` on a DynamoDB table (:class:`DynamoItems`)."""
    return CheckpointStore(DynamoItems(client, table_name, pipeline_id, page_size=page_size, clock=clock))


class DynamoItems(StoreItems):
    """The items of one pipeline on a DynamoDB table (``pk``/``sk`` strings).

    The items spread over the pipeline's buckets, ``pk`` = ``<pipeline_id>#<bucket>``
    (:class:`~.buckets.BucketLayout`): a shard's items share one, reads of one shard go to it, and
    a Query across shards asks every bucket and merges their answers in sort-key order. The bucket
    count is the pipeline's ``layout`` item's (:class:`~.buckets.RecordedLayout`), written by the
    first write of a shard's item; a pipeline still in the old layout (items under ``pk`` = the
    bare pipeline id) is refused (:func:`old_layout_refusal`).

    :param client: a boto3 DynamoDB client.
    :param table_name: the table; see :meth:`create_table_if_missing`.
    :param pipeline_id: the pipeline, whose buckets every item these items touch lies in.
    :param page_size: Query ``Limit``; pages are always followed to the end.
    :param clock: epoch milliseconds for ``updated_ms`` attributes.
    """

    def __init__(
        self,
        client: Any,
        table_name: str,
        pipeline_id: str,
        *,
        page_size: int = DEFAULT_PAGE_SIZE,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        if not pipeline_id:
            raise ValueError("pipeline_id must not be empty")
        self.pipeline_id = pipeline_id
        self.clock = clock
        if page_size < 1:
            raise ValueError(f"page_size must be positive, got {page_size}")
        from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

        self._client = client
        self.table_name = table_name
        self._page_size = page_size
        self._serializer = TypeSerializer()
        self._deserializer = TypeDeserializer()
        self._grouped = GroupedWrites(
            self._write_many, _TRANSACTION_MAX, key=_written_key, in_flight=_TRANSACTIONS_IN_FLIGHT
        )
        self._old_layout_ruled_out = False
        self.layout = RecordedLayout(self._stored_buckets, self._put_buckets)

    def of_pipeline(self, pipeline_id: str) -> DynamoItems:
        return DynamoItems(self._client, self.table_name, pipeline_id, page_size=self._page_size, clock=self.clock)

    def create_table_if_missing(self, *, wait_seconds: int = 120) -> None:
        """Create the table (on-demand billing) unless it exists; wait until it is ACTIVE."""
        try:
            self._client.describe_table(TableName=self.table_name)
        except ClientError as error:
            if aws_error_code(error) != "ResourceNotFoundException":
                raise
            self._create_table()
        waiter = self._client.get_waiter("table_exists")
        waiter.wait(TableName=self.table_name, WaiterConfig={"Delay": 1, "MaxAttempts": wait_seconds})

    def _create_table(self) -> None:
        try:
            self._client.create_table(
                TableName=self.table_name,
                AttributeDefinitions=[
                    {"AttributeName": "pk", "AttributeType": "S"},
                    {"AttributeName": "sk", "AttributeType": "S"},
                ],
                KeySchema=[
                    {"AttributeName": "pk", "KeyType": "HASH"},
                    {"AttributeName": "sk", "KeyType": "RANGE"},
                ],
                BillingMode="PAY_PER_REQUEST",
            )
            log.info("created checkpoint table %s", self.table_name)
        except ClientError as error:
            # Another process created it between our describe and create.
            if aws_error_code(error) != "ResourceInUseException":
                raise

    def _key(self, sk: str, *, writing: bool = False) -> dict[str, Any]:
        bucket = self.layout.bucket_of(sk, writing=writing)
        return {"pk": {"S": partition_key(self.pipeline_id, bucket)}, "sk": {"S": sk}}

    def _layout_key(self) -> dict[str, Any]:
        return {"pk": {"S": partition_key(self.pipeline_id, PIPELINE_BUCKET)}, "sk": {"S": LAYOUT_KEY}}

    def _stored_buckets(self) -> int | None:
        """The count the pipeline's layout item holds; None when it has none (no shard's item
        written yet).

        :raises ConfigurationError: no layout item, and items in the old layout.
        """
        response = self._client.get_item(TableName=self.table_name, Key=self._layout_key(), ConsistentRead=True)
        if "Item" in response:
            return int(response["Item"]["buckets"]["N"])
        # Asked once: no version that writes the old layout runs beside this one.
        if not self._old_layout_ruled_out and self._holds_old_layout():
            raise old_layout_refusal(self.table_name, self.pipeline_id)
        self._old_layout_ruled_out = True
        return None

    def _put_buckets(self, count: int) -> bool:
        layout = {**self._layout_key(), "buckets": {"N": str(count)}}
        put = {"TableName": self.table_name, "Item": layout, "ConditionExpression": "attribute_not_exists(sk)"}
        return self._write_one(("Put", put))

    def _holds_old_layout(self) -> bool:
        response = self._client.query(
            TableName=self.table_name, KeyConditionExpression="pk = :pk", Limit=1,
            ExpressionAttributeValues={":pk": {"S": self.pipeline_id}}, ConsistentRead=True,
        )  # fmt: skip
        return bool(response.get("Items"))

    def _decode(self, item: Mapping[str, Any]) -> dict[str, Any]:
        return {name: _to_python(self._deserializer.deserialize(value)) for name, value in item.items()}

    def get(self, sk: str) -> dict[str, Any] | None:
        response = self._client.get_item(TableName=self.table_name, Key=self._key(sk), ConsistentRead=True)
        item = response.get("Item")
        return self._decode(item) if item else None

    def get_many(self, sks: Sequence[str]) -> dict[str, dict[str, Any]]:
        """BatchGetItem, 100 keys a call (:meth:`_until_processed`)."""
        found: dict[str, dict[str, Any]] = {}

        def send(keys: list[Any]) -> list[Any]:
            request = {self.table_name: {"Keys": keys, "ConsistentRead": True}}
            response = self._client.batch_get_item(RequestItems=request)
            for item in response.get("Responses", {}).get(self.table_name, []):
                decoded = self._decode(item)
                found[decoded["sk"]] = decoded
            return response.get("UnprocessedKeys", {}).get(self.table_name, {}).get("Keys", [])

        unique = list(dict.fromkeys(sks))
        for first in range(0, len(unique), _BATCH_GET_MAX):
            self._until_processed(send, [self._key(sk) for sk in unique[first : first + _BATCH_GET_MAX]], "reads")
        return found

    def _until_processed(self, send: Callable[[list[Any]], list[Any]], requests: list[Any], what: str) -> None:
        failure = (
            f"DynamoDB left {{left}} {what} of pipeline {self.pipeline_id} unprocessed after "
            f"{_UNPROCESSED_RETRIES} attempts (table {self.table_name} throttled)"
        )
        send_until_processed(send, requests, failure)

    def query(
        self, prefix: str, *, low: str | None = None, high: str | None = None, descending: bool = False,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """One Query per bucket that may hold such items (:meth:`BucketLayout.buckets_of_query`),
        each limited as the whole, merged in sort-key order and cut to ``limit``."""
        layout = self.layout.to_read(prefix)

        def ask(bucket: int) -> list[dict[str, Any]]:
            return self._query_bucket(bucket, prefix, low=low, high=high, descending=descending, limit=limit)

        answers = map_bounded(ask, layout.buckets_of_query(prefix), DEFAULT_DRIVER_CONCURRENCY)
        return layout.merge(answers, descending=descending, limit=limit)

    def _query_bucket(
        self, bucket: int, prefix: str, *, low: str | None, high: str | None, descending: bool, limit: int | None,
    ) -> list[dict[str, Any]]:
        values: dict[str, Any] = {":pk": {"S": partition_key(self.pipeline_id, bucket)}, ":prefix": {"S": prefix}}
        condition = "pk = :pk AND begins_with(sk, :prefix)"
        if low is not None or high is not None:
            # Keys of one prefix sort below prefix + U+FFFF (they are ASCII).
            condition = "pk = :pk AND sk BETWEEN :low AND :high"
            values = {":pk": values[":pk"], ":low": {"S": low or prefix}, ":high": {"S": high or prefix + "\uffff"}}
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": condition,
            "ExpressionAttributeValues": values,
            "ConsistentRead": True,
            "ScanIndexForward": not descending,
            "Limit": min(self._page_size, limit) if limit else self._page_size,
        }
        items: list[dict[str, Any]] = []
        while True:
            response = self._client.query(**request)
            items.extend(self._decode(item) for item in response.get("Items", []))
            if "LastEvaluatedKey" not in response or (limit and len(items) >= limit):
                return items[:limit] if limit else items
            request["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    def put_new(self, item: dict[str, Any]) -> bool:
        return self._write_one(("Put", self._put_once(item)))

    def _put_once(self, item: dict[str, Any]) -> dict[str, Any]:
        attributes = {name: self._serializer.serialize(v) for name, v in item.items() if v is not None}
        attributes["pk"] = self._key(item["sk"], writing=True)["pk"]
        return {"TableName": self.table_name, "Item": attributes, "ConditionExpression": "attribute_not_exists(sk)"}

    def put_new_all(self, items: Sequence[dict[str, Any]]) -> bool:
        return all(self._write_many([("Put", self._put_once(item)) for item in items], all_or_nothing=True))

    def put_new_grouped_units(self, units: Sequence[Sequence[dict[str, Any]]]) -> list[list[bool]]:
        return self._grouped.write_units([[("Put", self._put_once(item)) for item in unit] for unit in units])

    def update_grouped_all(self, updates: Sequence[tuple[str, Mapping[str, Any], Mapping[str, Any]]]) -> list[bool]:
        return self._grouped.write_all([("Update", self._update_request(*update)) for update in updates])

    def _write_one(self, write: tuple[str, dict[str, Any]]) -> bool:
        operation, request = write
        send = self._client.put_item if operation == "Put" else self._client.update_item
        try:
            self._outside_transactions(send, request)
        except ClientError as error:
            if _is_condition_failure(error):
                return False
            raise
        return True

    def _outside_transactions(self, send: Callable[..., Any], request: Mapping[str, Any]) -> Any:
        """``send(**request)``, a write of one item, sent again while DynamoDB rejects it because
        a transaction on that item is under way (another run's grouped writes); botocore does not
        retry that rejection, and the write was not applied."""
        for attempt in range(_UNPROCESSED_RETRIES):
            try:
                return send(**request)
            except ClientError as error:
                if aws_error_code(error) != "TransactionConflictException" or attempt == _UNPROCESSED_RETRIES - 1:
                    raise
            time.sleep(min(0.05 * 2**attempt, 2.0))
        raise AssertionError("unreachable")

    def _write_many(self, writes: Sequence[tuple[str, dict[str, Any]]], *, all_or_nothing: bool = False) -> list[bool]:
        """Apply each conditional write whose condition holds: one request for a lone one, else
        TransactWriteItems (all or nothing; a cancelled one names the writes whose condition
        failed, and is sent again without them, unless ``all_or_nothing``: then none is written)."""
        if len(writes) == 1:
            return [self._write_one(writes[0])]
        written = [True] * len(writes)
        pending = list(range(len(writes)))
        for attempt in range(_UNPROCESSED_RETRIES):
            try:
                self._client.transact_write_items(TransactItems=[{writes[i][0]: writes[i][1]} for i in pending])
                return written
            except ClientError as error:
                if aws_error_code(error) != "TransactionCanceledException":
                    raise
                reasons = [reason.get("Code") for reason in error.response.get("CancellationReasons", [])]
            failed = {i for i, code in zip(pending, reasons) if code == "ConditionalCheckFailed"}
            if failed and all_or_nothing:
                return [False] * len(writes)
            for i in failed:
                written[i] = False
            pending = [i for i in pending if i not in failed]
            if not pending:
                return written
            if not failed:
                # Cancelled for another reason (a concurrent transaction on an item, throttling).
                time.sleep(min(0.05 * 2**attempt, 2.0))
        raise RuntimeError(
            f"DynamoDB cancelled the writes of {len(pending)} items of pipeline {self.pipeline_id} "
            f"{_UNPROCESSED_RETRIES} times (table {self.table_name})"
        )

    def _update_request(self, sk: str, changes: Mapping[str, Any], expected: Mapping[str, Any]) -> dict[str, Any]:
        names: dict[str, str] = {}
        values: dict[str, Any] = {}
        sets, removes, conditions = [], [], ["attribute_exists(sk)"]
        for index, (attribute, value) in enumerate(changes.items()):
            names[f"#c{index}"] = attribute
            if value is None:
                removes.append(f"#c{index}")
            else:
                values[f":c{index}"] = self._serializer.serialize(value)
                sets.append(f"#c{index} = :c{index}")
        for index, (attribute, value) in enumerate(expected.items()):
            names[f"#e{index}"] = attribute
            if value is ABSENT:
                conditions.append(f"attribute_not_exists(#e{index})")
            else:
                values[f":e{index}"] = self._serializer.serialize(value)
                conditions.append(f"#e{index} = :e{index}")
        clauses = [f"SET {', '.join(sets)}"] if sets else []
        if removes:
            clauses.append(f"REMOVE {', '.join(removes)}")
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "Key": self._key(sk, writing=True),
            "UpdateExpression": " ".join(clauses),
            "ConditionExpression": " AND ".join(conditions),
            "ExpressionAttributeNames": names,
        }
        if values:
            request["ExpressionAttributeValues"] = values
        return request

    def update(self, sk: str, changes: Mapping[str, Any], expected: Mapping[str, Any]) -> dict[str, Any] | None:
        try:
            request = {**self._update_request(sk, changes, expected), "ReturnValues": "ALL_NEW"}
            response = self._outside_transactions(self._client.update_item, request)
        except ClientError as error:
            if _is_condition_failure(error):
                return None
            raise
        return self._decode(response["Attributes"])

    def delete(self, sks: Sequence[str]) -> None:
        """BatchWriteItem, 25 keys a call (:meth:`_until_processed`)."""

        def send(requests: list[Any]) -> list[Any]:
            response = self._client.batch_write_item(RequestItems={self.table_name: requests})
            return response.get("UnprocessedItems", {}).get(self.table_name, [])

        for first in range(0, len(sks), _BATCH_WRITE_MAX):
            keys = sks[first : first + _BATCH_WRITE_MAX]
            self._until_processed(send, [{"DeleteRequest": {"Key": self._key(sk, writing=True)}} for sk in keys], "deletes")
