"""DynamoDB store: the rollout record on AWS, every move a conditional write.

Table layout (one table, string hash key ``pk``; see ``template.yaml``)::

    pk = "rollout#<rollout_id>"   the record: state, attempt, lease, request, response, ...
    pk = "slot#<slot>"            the idempotency slot: which rollout holds it
    pk = "pass#<name>"            a lease item: which re-drive pass runs now

The due index (``DUE_INDEX``, a sparse GSI, keys only): partition ``due_by``, sort ``due_at``.
Only items with a ``due_at`` are in it (see :mod:`rollout_sdk.store.base` for which), so the
re-drive reads O(waiting) items however large the table. ``due_by`` names who recovers the
record: ``redrive#<n>`` (one of ``DUE_SHARDS`` partitions, by the rollout id's hash, so a burst
of parked responses spreads its index writes) or ``server#<owner>`` for a local server's records.
The GSI is eventually consistent: a listing is a hint, and every move stays a conditional write.

The live index (``LIVE_INDEX``, a sparse GSI, keys only): partition ``protocol``, sort
``poll_until``. Only a 0.3.8 rollout in flight has a ``poll_until`` (its final move removes it),
so the index holds exactly those, under the partition ``osmosis03``: the lease check reads the
leases that ran out as a key range, cancel by prefix or all and ``/health``'s count read the
partition, and none of them reads the table. One partition: each poll renews the lease (one
index write), and a partition takes about 1,000 writes a second, some 20,000 rollouts polled
every 20 seconds.

The slot item lives as long as its record can (``slot_expires_at`` at create), and a create
that finds a live slot whose record is gone takes the slot over.

``expires_at`` (Number, epoch seconds) is the table's TTL attribute. DynamoDB deletes expired items
late (up to days), so every read and condition treats ``expires_at <= now`` as absent, and a
create may take over an expired item.

Large values: the request, the init response (the tools) and the final response are stored
zlib-compressed (Binary). A value still over ``inline_limit`` bytes (100 KB) compressed goes to S3
(``bucket``) under a content-addressed key, and the item keeps the key, so the three together never
push an item past DynamoDB's 400 KB; without a bucket such a value is refused, saying so.

How values become attributes is :mod:`rollout_sdk.store.dynamodb_codec`'s. Nothing above this
module sees botocore: every call goes through :mod:`rollout_sdk.store.dynamodb_errors`, the one
translation of ``ClientError`` and ``BotoCoreError`` (StoreError, except at create when DynamoDB
refuses the record for its size or a value needs the bucket that is not configured: that is the
init's content, which a retry cannot change, and it becomes RecordTooLarge, 413, not a
StoreError, 503). The one-off backfill of the due index is a maintenance command of its own,
:mod:`rollout_sdk.store.dynamodb_backfill`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from rollout_sdk.errors import (
    ConditionFailed,
    RecordTooLarge,
    StoreError,
    TransactionCancelled,
    ValueTooLarge,
)
from rollout_sdk.store.base import (
    CreateResult,
    DueCursor,
    DuePage,
    Guard,
    Store,
    T,
    TransitionResult,
    Update,
)
from rollout_sdk.store.dynamodb_codec import ValueCodec, attr
from rollout_sdk.store.dynamodb_errors import translated
from rollout_sdk.store.record import PROTOCOL_OSMOSIS03, RecordState, RolloutRecord

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client


#: The table's TTL attribute: the record's ``expires_at`` field, stored under its own name.
#: template.yaml's ``TimeToLiveSpecification`` must name it (tests/aws/test_table_ttl.py).
TTL_ATTRIBUTE = "expires_at"

ROLLOUT_PREFIX = "rollout#"
SLOT_PREFIX = "slot#"
PASS_PREFIX = "pass#"  # noqa: S105 - a key prefix, not a secret

#: The due index's name, and its key attributes (template.yaml's GlobalSecondaryIndexes;
#: tests/aws/test_table_ttl.py checks they agree).
DUE_INDEX = "due"
DUE_PARTITION = "due_by"
DUE_SORT = "due_at"
#: Partitions of the due index for records no process owns. DynamoDB sustains about 1,000
#: writes a second per partition key value; eight leave room for a whole fleet's callbacks
#: failing at once, and cost a pass eight small queries.
DUE_SHARDS = 8

#: The live index's name, and its key attributes (template.yaml's GlobalSecondaryIndexes).
LIVE_INDEX = "live"
LIVE_PARTITION = "protocol"
LIVE_SORT = "poll_until"

#: A DynamoDB item is at most 400 KB. Three compressed values (request, tools, response) of at
#: most 100 KB each leave room for the other attributes; larger ones go to S3.
DEFAULT_INLINE_LIMIT = 100 * 1024


class DynamoDBStore(Store):
    """The ``Store`` port over one DynamoDB table (and, for large values, one S3 bucket).

    ``client`` and ``s3`` are injected boto3 clients (tests point them at moto's server).
    """

    def __init__(
        self,
        table_name: str,
        *,
        client: DynamoDBClient,
        s3: S3Client | Callable[[], S3Client] | None = None,
        bucket: str | None = None,
        inline_limit: int = DEFAULT_INLINE_LIMIT,
        owner: str | None = None,
    ) -> None:
        self.table_name = table_name
        self.owner = owner
        self._ddb = client
        self._codec = ValueCodec(s3=s3, bucket=bucket, inline_limit=inline_limit)

    @property
    def client(self) -> DynamoDBClient:
        """The boto3 DynamoDB client (the maintenance commands' way to the table)."""
        return self._ddb

    def _calling(self, action: str, **options: Any) -> AbstractContextManager[None]:
        """A DynamoDB call of ``action``, its failures translated (:mod:`.dynamodb_errors`)."""
        return translated(action, self.table_name, **options)

    # ------------------------------------------------------------------ items

    def due_partition(self, rollout_id: str) -> str:
        """The due index partition of ``rollout_id``'s record."""
        if self.owner is not None:
            return f"server#{self.owner}"
        shard = int(hashlib.sha256(rollout_id.encode()).hexdigest()[:8], 16) % DUE_SHARDS
        return f"redrive#{shard}"

    def _partitions(self) -> list[str]:
        if self.owner is not None:
            return [f"server#{self.owner}"]
        return [f"redrive#{shard}" for shard in range(DUE_SHARDS)]

    def _to_item(self, record: RolloutRecord) -> dict[str, Any]:
        return {
            "pk": {"S": ROLLOUT_PREFIX + record.rollout_id},
            DUE_PARTITION: {"S": self.due_partition(record.rollout_id)},
            **self._codec.attributes(record),
        }

    def _from_item(self, item: Mapping[str, Any]) -> RolloutRecord:
        return self._codec.record(item)

    def _live(self, item: Mapping[str, Any] | None, now: float) -> RolloutRecord | None:
        if not item or float(item.get(TTL_ATTRIBUTE, {}).get("N", "0")) <= now:
            return None
        return self._from_item(item)

    # ------------------------------------------------------------------ the port
    # Each primitive does all of its work (encoding, S3 for large values, DynamoDB, decoding) in
    # one worker thread: boto3 is synchronous, and one hop per operation keeps the loop free.

    async def _run(self, work: Callable[[], T], *, urgent: bool = False) -> T:
        return await asyncio.to_thread(work)  # every call is its own write: urgent or not

    async def close(self) -> None:
        """boto3 clients need no closing; the process owns them."""

    # ------------------------------------------------------------------ synchronous bodies

    def _create(self, record: RolloutRecord, now: float, slot_until: int) -> CreateResult:
        """Claim the slot and the rollout id in one transaction."""
        try:
            item = self._to_item(record)  # encoded once: a large value goes to S3 once
        except ValueTooLarge as exc:
            raise RecordTooLarge(str(exc)) from exc
        stale_holder: str | None = None
        while True:
            free = f"attribute_not_exists(pk) OR {TTL_ATTRIBUTE} <= :now"
            values: dict[str, Any] = {":now": attr(now)}
            slot_free, slot_values = free, dict(values)
            if stale_holder is not None:
                # The slot names a rollout whose record is gone: take it over, unless someone
                # else did first (then the condition fails and their rollout holds it).
                slot_free += " OR rollout_id = :stale"
                slot_values[":stale"] = {"S": stale_holder}
            slot_item = {
                "pk": {"S": SLOT_PREFIX + record.slot},
                "rollout_id": {"S": record.rollout_id},
                TTL_ATTRIBUTE: attr(slot_until),
            }
            puts = [
                self._put_if(slot_item, slot_free, slot_values),
                self._put_if(item, free, values),
            ]
            try:
                with self._calling("create", creating=record):
                    self._ddb.transact_write_items(TransactItems=puts)
                return CreateResult(True, record)
            except TransactionCancelled as cancelled:
                reasons = cancelled.reasons
            outcome = self._resolve_conflict(record, reasons, now)
            if isinstance(outcome, CreateResult):
                return outcome
            if stale_holder == outcome:
                raise StoreError(
                    f"DynamoDB create of rollout {record.rollout_id!r}: its idempotency slot "
                    "could not be taken over from a rollout whose record is gone; retry the init"
                )
            stale_holder = outcome

    def _put_if(self, item: dict[str, Any], condition: str, values: dict[str, Any]) -> Any:
        return {
            "Put": {
                "TableName": self.table_name,
                "Item": item,
                "ConditionExpression": condition,
                "ExpressionAttributeValues": values,
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }

    def _resolve_conflict(
        self, record: RolloutRecord, reasons: list[Any], now: float
    ) -> CreateResult | str:
        """Who holds what the create wanted; or the id of a rollout whose record is gone but
        whose slot is still live (the caller takes the slot over)."""
        codes = [r.get("Code") for r in reasons] + [None, None]
        stale: str | None = None
        if codes[0] == "ConditionalCheckFailed":
            old = reasons[0].get("Item") or {}
            holder_id = old.get("rollout_id", {}).get("S")
            holder = self._get(holder_id, now) if holder_id else None
            if holder is not None:
                return CreateResult(False, holder, "slot")
            stale = holder_id
        if codes[1] == "ConditionalCheckFailed":
            holder = self._live(reasons[1].get("Item"), now) or self._get(record.rollout_id, now)
            if holder is not None:
                return CreateResult(False, holder, "rollout_id")
        if "TransactionConflict" in codes:
            # Another create of the same slot is in flight; its outcome decides ours.
            holder = self._get(record.rollout_id, now)
            if holder is not None:
                return CreateResult(False, holder, "slot")
        if stale is not None and codes[1] in (None, "None"):
            return stale
        raise StoreError(
            f"DynamoDB create of rollout {record.rollout_id!r} was cancelled "
            f"({', '.join(str(c) for c in codes if c)}); retry the init"
        )

    def _get(self, rollout_id: str, now: float) -> RolloutRecord | None:
        with self._calling("get"):
            answer = self._ddb.get_item(
                TableName=self.table_name,
                Key={"pk": {"S": ROLLOUT_PREFIX + rollout_id}},
                ConsistentRead=True,
            )
        return self._live(answer.get("Item"), now)

    def _update(
        self, rollout_id: str, guard: Guard, update: Update, now: float
    ) -> TransitionResult:
        names: dict[str, str] = {"#state": "state", "#exp": TTL_ATTRIBUTE}
        values: dict[str, Any] = {":now": attr(now)}
        state_marks = []
        for index, state in enumerate(guard.states):
            values[f":s{index}"] = attr(state)
            state_marks.append(f":s{index}")
        condition = f"#state IN ({', '.join(state_marks)}) AND #exp > :now"
        if guard.attempt is not None:
            names["#attempt"] = "attempt"
            values[":attempt"] = attr(guard.attempt)
            condition += " AND #attempt = :attempt"
        if guard.lease_free_at is not None:
            names["#lease"] = "lease_until"
            values[":lease_free"] = attr(guard.lease_free_at)
            condition += " AND (attribute_not_exists(#lease) OR #lease < :lease_free)"
        if guard.due_by is not None:
            names["#due"] = DUE_SORT
            values[":due_by"] = attr(guard.due_by)
            condition += " AND #due <= :due_by"
        if guard.poll_live_at is not None:
            # (An absent poll_until fails the comparison, as Guard.admits says.)
            names["#poll"] = "poll_until"
            values[":poll_live"] = attr(guard.poll_live_at)
            condition += " AND #poll >= :poll_live"
        sets, removes = [], []
        changes = update.changes()
        for index, (name, value) in enumerate(changes.items()):
            names[f"#f{index}"] = name
            encoded = self._codec.encode(rollout_id, name, value)
            if encoded is None:
                removes.append(f"#f{index}")
            else:
                values[f":v{index}"] = encoded
                sets.append(f"#f{index} = :v{index}")
        if changes.get("due_at") is not None:
            # Records written before the due index have no partition: give them one.
            names["#dueby"] = DUE_PARTITION
            values[":dueby"] = {"S": self.due_partition(rollout_id)}
            sets.append("#dueby = if_not_exists(#dueby, :dueby)")
        expression = ""
        if sets:
            expression += "SET " + ", ".join(sets)
        if removes:
            expression += " REMOVE " + ", ".join(removes)
        try:
            with self._calling("update"):
                answer = self._ddb.update_item(
                    TableName=self.table_name,
                    Key={"pk": {"S": ROLLOUT_PREFIX + rollout_id}},
                    UpdateExpression=expression.strip(),
                    ConditionExpression=condition,
                    ExpressionAttributeNames=names,
                    ExpressionAttributeValues=values,
                    ReturnValues="ALL_NEW",
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
        except ConditionFailed as failed:
            return TransitionResult(False, self._live(failed.item, now))
        return TransitionResult(True, self._from_item(answer["Attributes"]))

    def _release(self, rollout_id: str, slot: str, now: float) -> bool:
        record_delete = {
            "Delete": {
                "TableName": self.table_name,
                "Key": {"pk": {"S": ROLLOUT_PREFIX + rollout_id}},
                "ConditionExpression": (
                    f"#state = :accepted AND slot = :slot AND {TTL_ATTRIBUTE} > :now"
                    " AND (attribute_not_exists(handoffs) OR handoffs = :zero)"
                ),
                "ExpressionAttributeNames": {"#state": "state"},
                "ExpressionAttributeValues": {
                    ":accepted": attr(RecordState.ACCEPTED),
                    ":slot": attr(slot),
                    ":now": attr(now),
                    ":zero": attr(0),
                },
            }
        }
        slot_delete = {
            "Delete": {
                "TableName": self.table_name,
                "Key": {"pk": {"S": SLOT_PREFIX + slot}},
                "ConditionExpression": "rollout_id = :rid",
                "ExpressionAttributeValues": {":rid": {"S": rollout_id}},
            }
        }
        try:
            with self._calling("release"):
                self._ddb.transact_write_items(TransactItems=[record_delete, slot_delete])  # type: ignore[list-item]
        except TransactionCancelled:
            return False
        return True

    def _due_page(self, now: float, until: float, limit: int, after: DueCursor | None) -> DuePage:
        """Queries of the due index, partition by partition: only due items are read."""
        partitions = self._partitions()
        shard, start = (int(after[0]), after[1]) if after is not None else (0, None)
        ids: list[str] = []
        while shard < len(partitions) and len(ids) < limit:
            kwargs: dict[str, Any] = {
                "TableName": self.table_name,
                "IndexName": DUE_INDEX,
                "KeyConditionExpression": "#by = :by",
                "ExpressionAttributeNames": {"#by": DUE_PARTITION},
                "ExpressionAttributeValues": {":by": {"S": partitions[shard]}},
                "Limit": limit - len(ids),
            }
            if math.isfinite(until):
                kwargs["KeyConditionExpression"] += " AND #at <= :until"
                kwargs["ExpressionAttributeNames"]["#at"] = DUE_SORT
                kwargs["ExpressionAttributeValues"][":until"] = attr(until)
            if start is not None:
                kwargs["ExclusiveStartKey"] = start
            with self._calling("query of the due index"):
                page = self._ddb.query(**kwargs)
            ids.extend(
                item["pk"]["S"].removeprefix(ROLLOUT_PREFIX)
                for item in page.get("Items", [])
                if item["pk"]["S"].startswith(ROLLOUT_PREFIX)
            )
            start = page.get("LastEvaluatedKey")
            if start is None:
                shard += 1
        more = shard < len(partitions)
        return DuePage(ids, (shard, start) if more else None)

    def _live_query(self, ended_by: float | None) -> dict[str, Any]:
        query: dict[str, Any] = {
            "TableName": self.table_name,
            "IndexName": LIVE_INDEX,
            "KeyConditionExpression": "#p = :p",
            "ExpressionAttributeNames": {"#p": LIVE_PARTITION},
            "ExpressionAttributeValues": {":p": {"S": PROTOCOL_OSMOSIS03}},
        }
        if ended_by is not None:
            query["KeyConditionExpression"] += " AND #u < :u"
            query["ExpressionAttributeNames"]["#u"] = LIVE_SORT
            query["ExpressionAttributeValues"][":u"] = attr(ended_by)
        return query

    def _polled_page(
        self,
        now: float,
        ended_by: float | None,
        prefix: str,
        limit: int,
        after: DueCursor | None,
    ) -> DuePage:
        """Queries of the live index: only the 0.3.8 rollouts in flight are read."""
        query = self._live_query(ended_by)
        if prefix:
            # Read from the index's keys (the table's own key is projected into it).
            query["FilterExpression"] = "begins_with(pk, :prefix)"
            query["ExpressionAttributeValues"][":prefix"] = {"S": ROLLOUT_PREFIX + prefix}
        start = after[0] if after is not None else None
        ids: list[str] = []
        while len(ids) < limit:
            page_query = {**query, "Limit": limit - len(ids)}
            if start is not None:
                page_query["ExclusiveStartKey"] = start
            with self._calling("query of the live index"):
                page = self._ddb.query(**page_query)
            ids.extend(
                item["pk"]["S"].removeprefix(ROLLOUT_PREFIX) for item in page.get("Items", [])
            )
            start = page.get("LastEvaluatedKey")
            if start is None:
                break
        return DuePage(ids, (start,) if start is not None else None)

    def _count_polled(self, now: float) -> int:
        query = {**self._live_query(None), "Select": "COUNT"}
        count = 0
        while True:
            with self._calling("count of the live index"):
                page = self._ddb.query(**query)
            count += int(page.get("Count", 0))
            start = page.get("LastEvaluatedKey")
            if start is None:
                return count
            query["ExclusiveStartKey"] = start

    def _acquire_pass(self, name: str, holder: str, until: float, now: float) -> bool:
        try:
            with self._calling("lease of the re-drive pass"):
                self._ddb.put_item(
                    TableName=self.table_name,
                    Item={
                        "pk": {"S": PASS_PREFIX + name},
                        "holder": {"S": holder},
                        "until": attr(until),
                        # The table's TTL clears a lease item its holder never released.
                        TTL_ATTRIBUTE: attr(math.ceil(until) + 3600),
                    },
                    ConditionExpression="attribute_not_exists(pk) OR #until < :now OR holder = :me",
                    ExpressionAttributeNames={"#until": "until"},
                    ExpressionAttributeValues={":now": attr(now), ":me": {"S": holder}},
                )
        except ConditionFailed:
            return False
        return True

    def _release_pass(self, name: str, holder: str) -> None:
        with contextlib.suppress(ConditionFailed), self._calling("release of the re-drive pass"):
            self._ddb.delete_item(
                TableName=self.table_name,
                Key={"pk": {"S": PASS_PREFIX + name}},
                ConditionExpression="holder = :me",
                ExpressionAttributeValues={":me": {"S": holder}},
            )
