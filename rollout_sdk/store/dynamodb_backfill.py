"""A maintenance command: put the parked responses of a table written before the due index into it.

Once, after upgrading a stack deployed before the due index (docs/aws.md, "The due index"): the
re-drive function runs it when invoked with ``{"backfill_due_index": true}``. It is the only Scan
the kit makes, and template.yaml grants the Scan only with BackfillDueIndex=true; without the
grant it raises ScanDenied.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from rollout_sdk.errors import ConditionFailed
from rollout_sdk.store.dynamodb import DUE_PARTITION, DUE_SORT, ROLLOUT_PREFIX
from rollout_sdk.store.dynamodb_codec import attr
from rollout_sdk.store.dynamodb_errors import translated
from rollout_sdk.store.record import RecordState

if TYPE_CHECKING:
    from rollout_sdk.store.dynamodb import DynamoDBStore

_ACTION = "backfill of the due index"


async def backfill_due_index(store: DynamoDBStore) -> int:
    """Put every parked response of ``store``'s table that has no ``due_at`` into the due index,
    due at its next try. Returns how many; ScanDenied when the role may not scan."""
    return await asyncio.to_thread(_backfill, store)


def _backfill(store: DynamoDBStore) -> int:
    kwargs: dict[str, Any] = {
        "TableName": store.table_name,
        "FilterExpression": (
            "begins_with(pk, :prefix) AND #state = :finished"
            " AND attribute_exists(next_attempt_at) AND attribute_not_exists(#at)"
        ),
        "ExpressionAttributeNames": {"#state": "state", "#at": DUE_SORT},
        "ExpressionAttributeValues": {
            ":prefix": {"S": ROLLOUT_PREFIX},
            ":finished": attr(RecordState.FINISHED),
        },
        "ProjectionExpression": "pk, next_attempt_at",
    }
    moved = 0
    while True:
        with translated(_ACTION, store.table_name, scanning=True):
            page = store.client.scan(**kwargs)
        for item in page.get("Items", []):
            moved += _index(store, item)
        last = page.get("LastEvaluatedKey")
        if not last:
            return moved
        kwargs["ExclusiveStartKey"] = last


def _index(store: DynamoDBStore, item: dict[str, Any]) -> int:
    """Put one scanned record in the due index: 1, or 0 when it changed since the Scan."""
    rollout_id = item["pk"]["S"].removeprefix(ROLLOUT_PREFIX)
    try:
        with translated(_ACTION, store.table_name):
            store.client.update_item(
                TableName=store.table_name,
                Key={"pk": item["pk"]},
                UpdateExpression="SET #at = :due, #by = if_not_exists(#by, :by)",
                ConditionExpression="attribute_not_exists(#at) AND #state = :finished",
                ExpressionAttributeNames={"#at": DUE_SORT, "#by": DUE_PARTITION, "#state": "state"},
                ExpressionAttributeValues={
                    ":due": item["next_attempt_at"],
                    ":by": {"S": store.due_partition(rollout_id)},
                    ":finished": attr(RecordState.FINISHED),
                },
            )
    except ConditionFailed:
        return 0
    return 1
