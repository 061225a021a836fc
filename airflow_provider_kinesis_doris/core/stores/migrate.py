"""Move a pipeline's checkpoint items from the old layout (every item under ``pk`` = the pipeline
id) to its buckets (``core.stores.dynamodb``), once, with none of the pipeline's runs active::

    python -m airflow_provider_kinesis_doris.core.stores.migrate --table T --pipeline-id P

It copies every old item to its new key (a put that never overwrites; a chunk kept from before
chunks were keyed by their range, ``chunk#<label>``, goes under its range as chunks are now, so
the store reads one layout of chunks), reads every copy back and
compares it with the original, and only then writes the pipeline's layout item, from which on
the store reads the new keys; the old items are deleted last. A run killed anywhere is finished
by running the command again: before the layout item, the copies are put again where missing and
checked again (no run can have changed them: the store refuses the pipeline meanwhile); after it,
only the deletes are left.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from airflow_provider_kinesis_doris.core.errors import aws_error_code
from airflow_provider_kinesis_doris.core.model import ShardState
from airflow_provider_kinesis_doris.core.stores.buckets import (
    LAYOUT_KEY,
    PIPELINE_BUCKET,
    BucketLayout,
    bucket_count_for,
    partition_key,
)
from airflow_provider_kinesis_doris.core.stores.dynamodb import send_until_processed
from airflow_provider_kinesis_doris.core.stores.items import CHUNK_PREFIX, SHARD_PREFIX, chunk_sk

_BATCH_GET_MAX, _BATCH_WRITE_MAX = 100, 25


@dataclass(frozen=True)
class Migrated:
    """What one migration did: items copied (0 when an earlier run had verified them), deleted."""

    copied: int
    deleted: int
    buckets: int


def migrate_pipeline(client: Any, table_name: str, pipeline_id: str) -> Migrated:
    """Move ``pipeline_id``'s items of the old layout to its buckets (see the module's docstring).

    :raises RuntimeError: a copy differs from its original; nothing was deleted, the layout item
        is not written, and the pipeline stays refused.
    """
    old = _old_items(client, table_name, pipeline_id)
    layout_key = {"pk": {"S": partition_key(pipeline_id, PIPELINE_BUCKET)}, "sk": {"S": LAYOUT_KEY}}
    layout = client.get_item(TableName=table_name, Key=layout_key, ConsistentRead=True).get("Item")
    copied = 0
    if layout is None:
        buckets = BucketLayout(bucket_count_for(_open_shards(old)))
        copies = [_copy_in(buckets, pipeline_id, item) for item in old]
        for copy in copies:
            _put_if_absent(client, table_name, copy)
        _verify(client, table_name, pipeline_id, copies)
        layout = {**layout_key, "buckets": {"N": str(buckets.buckets)}}
        _put_if_absent(client, table_name, layout)
        copied = len(copies)
    _delete(client, table_name, pipeline_id, [{"pk": item["pk"], "sk": item["sk"]} for item in old])
    return Migrated(copied=copied, deleted=len(old), buckets=int(layout["buckets"]["N"]))


def _open_shards(items: Sequence[dict[str, Any]]) -> int:
    """The pipeline's shards not yet closed: its layout is sized for them, as a new pipeline's is
    for its stream's open shards."""
    return sum(1 for item in items if item["sk"]["S"].startswith(SHARD_PREFIX) and item["state"]["S"] == ShardState.OPEN.value)


def _copy_in(buckets: BucketLayout, pipeline_id: str, item: dict[str, Any]) -> dict[str, Any]:
    """``item`` of the old layout as the buckets keep it (a chunk of the oldest layout under its range)."""
    sk = item["sk"]["S"]
    if "label" in item and sk == f"{CHUNK_PREFIX}{item['label']['S']}":
        sk = chunk_sk(item["shard_id"]["S"], int(item["interval_start_ms"]["N"]), item["label"]["S"])
    return {**item, "pk": {"S": partition_key(pipeline_id, buckets.bucket_of(sk))}, "sk": {"S": sk}}


def _old_items(client: Any, table_name: str, pipeline_id: str) -> list[dict[str, Any]]:
    request: dict[str, Any] = {
        "TableName": table_name, "KeyConditionExpression": "pk = :pk", "ConsistentRead": True,
        "ExpressionAttributeValues": {":pk": {"S": pipeline_id}},
    }  # fmt: skip
    items: list[dict[str, Any]] = []
    while True:
        response = client.query(**request)
        items.extend(response.get("Items", []))
        if "LastEvaluatedKey" not in response:
            return items
        request["ExclusiveStartKey"] = response["LastEvaluatedKey"]


def _put_if_absent(client: Any, table_name: str, item: dict[str, Any]) -> None:
    try:
        client.put_item(TableName=table_name, Item=item, ConditionExpression="attribute_not_exists(sk)")
    except ClientError as error:
        if aws_error_code(error) != "ConditionalCheckFailedException":
            raise


def _verify(client: Any, table_name: str, pipeline_id: str, copies: Sequence[dict[str, Any]]) -> None:
    """Every copy reads back as it was written (an earlier run's copy, which the put left alone, too)."""
    stored: dict[str, dict[str, Any]] = {}

    def send(keys: list[Any]) -> list[Any]:
        response = client.batch_get_item(RequestItems={table_name: {"Keys": keys, "ConsistentRead": True}})
        stored.update((item["sk"]["S"], item) for item in response.get("Responses", {}).get(table_name, []))
        return response.get("UnprocessedKeys", {}).get(table_name, {}).get("Keys", [])

    keys = [{"pk": copy["pk"], "sk": copy["sk"]} for copy in copies]
    for first in range(0, len(keys), _BATCH_GET_MAX):
        send_until_processed(send, keys[first : first + _BATCH_GET_MAX], "DynamoDB left {left} copies unread")
    differing = [copy["sk"]["S"] for copy in copies if stored.get(copy["sk"]["S"]) != copy]
    if differing:
        raise RuntimeError(
            f"{len(differing)} copies of pipeline {pipeline_id}'s items in table {table_name} differ from their "
            f"originals (first: {differing[0]!r}); the old items are kept and the pipeline stays refused. Check that "
            "no other migration or run of the pipeline is active, delete the copies and run the migration again."
        )


def _delete(client: Any, table_name: str, pipeline_id: str, keys: Sequence[dict[str, Any]]) -> None:
    def send(requests: list[Any]) -> list[Any]:
        response = client.batch_write_item(RequestItems={table_name: requests})
        return response.get("UnprocessedItems", {}).get(table_name, [])

    failure = f"DynamoDB left {{left}} deletes of pipeline {pipeline_id}'s old items unprocessed; run the migration again"
    for first in range(0, len(keys), _BATCH_WRITE_MAX):
        requests = [{"DeleteRequest": {"Key": key}} for key in keys[first : first + _BATCH_WRITE_MAX]]
        send_until_processed(send, requests, failure)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", required=True, help="the checkpoint table")
    parser.add_argument("--pipeline-id", required=True, help="the pipeline to migrate")
    parser.add_argument("--region", default=None, help="AWS region (default: the environment's)")
    parser.add_argument("--endpoint-url", default=None, help="a DynamoDB endpoint other than AWS's")
    args = parser.parse_args(argv)
    import boto3

    client = boto3.client("dynamodb", region_name=args.region, endpoint_url=args.endpoint_url)
    migrated = migrate_pipeline(client, args.table, args.pipeline_id)
    print(
        f"pipeline {args.pipeline_id}: {migrated.copied} items copied to {migrated.buckets} buckets, "
        f"{migrated.deleted} old items deleted"
    )


if __name__ == "__main__":
    main()
