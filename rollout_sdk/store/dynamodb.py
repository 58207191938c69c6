"""DynamoDB store: the rollout record on AWS, every move a conditional write.

Table layout (one table, string hash key ``pk``; see ``template.yaml``)::

    pk = "rollout#<rollout_id>"   the record: state, attempt, lease, request, response, ...
    pk = "slot#<slot>"            the idempotency slot: which rollout holds it

``expires_at`` (Number, epoch seconds) is the table's TTL attribute. DynamoDB deletes expired items
late (up to days), so every read and condition treats ``expires_at <= now`` as absent, and a
create may take over an expired item.

Large values: the request, the init response (the tools) and the final response are stored
zlib-compressed (Binary). A value still over ``inline_limit`` bytes (100 KB) compressed goes to S3
(``bucket``) under a content-addressed key, and the item keeps the key, so the three together never
push an item past DynamoDB's 400 KB; without a bucket such a value is refused with a StoreError
that says so.

Nothing above this module sees botocore: ``ClientError`` and ``BotoCoreError`` become StoreError.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import json
import zlib
from collections.abc import Callable, Collection, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any, cast, get_type_hints

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import BotoCoreError, ClientError

from rollout_sdk.engine.record import RecordState, RolloutRecord
from rollout_sdk.errors import StoreError
from rollout_sdk.store.base import CreateResult, Guard, Store, TransitionResult, Update

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client


#: The table's TTL attribute: the record's ``expires_at`` field, stored under its own name.
#: template.yaml's ``TimeToLiveSpecification`` must name it (tests/aws/test_table_ttl.py).
TTL_ATTRIBUTE = "expires_at"

ROLLOUT_PREFIX = "rollout#"
SLOT_PREFIX = "slot#"

#: A DynamoDB item is at most 400 KB. Three compressed values (request, tools, response) of at
#: most 100 KB each leave room for the other attributes; larger ones go to S3.
DEFAULT_INLINE_LIMIT = 100 * 1024

# The attribute codec follows the record's fields: each is stored under its own name, as
# boto3's TypeSerializer types its value (S, N, BOOL), except for these two kinds.
#: Compressed (Binary), or in S3 when too large.
_BLOBS = frozenset({"request", "response", "init_response"})
#: A JSON string, as tables written so far hold it (a native map would read back differently).
_JSON_TEXT = frozenset({"extra"})
#: Numbers that read back as int (TypeDeserializer gives Decimal); the others read back as float.
_INTEGRAL = frozenset(name for name, hint in get_type_hints(RolloutRecord).items() if hint is int)

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()


def _attr(value: str | float | bool) -> dict[str, Any]:
    """A scalar as a DynamoDB attribute value. Floats go through their shortest repr, so they
    read back exactly (TypeSerializer refuses floats)."""
    scalar: Any = value.value if isinstance(value, enum.Enum) else value
    if isinstance(scalar, float):
        scalar = Decimal(repr(scalar))
    return dict(_serializer.serialize(scalar))


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
    ) -> None:
        self.table_name = table_name
        self._ddb = client
        # A callable builds the S3 client on first use: most rollouts never need it, and a
        # client costs tens of milliseconds of a cold start.
        self._s3_source = s3
        self._s3_client: S3Client | None = None
        self._bucket = bucket
        self._inline_limit = inline_limit

    # ------------------------------------------------------------------ plumbing

    def _fail(self, action: str, exc: Exception) -> StoreError:
        if isinstance(exc, ClientError):
            error = exc.response.get("Error", {})
            detail = f"{error.get('Code', 'ClientError')}: {error.get('Message', '')}"
        else:
            detail = f"{type(exc).__name__}: {exc}"
        return StoreError(f"DynamoDB {action} on table {self.table_name!r} failed: {detail}")

    @property
    def _s3(self) -> S3Client | None:
        if self._s3_client is None and self._s3_source is not None:
            source = self._s3_source
            self._s3_client = source() if callable(source) else source
        return self._s3_client

    # ------------------------------------------------------------------ codec

    def _pack_blob(self, rollout_id: str, name: str, value: Mapping[str, Any]) -> dict[str, Any]:
        raw = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
        packed = zlib.compress(raw, 6)
        if len(packed) <= self._inline_limit:
            return {"B": packed}
        if self._s3 is None or not self._bucket:
            raise StoreError(
                f"the {name} of rollout {rollout_id!r} is {len(packed)} bytes compressed, over the "
                f"{self._inline_limit}-byte inline limit of a DynamoDB item, and no S3 bucket is "
                "configured for large values (PAYLOAD_BUCKET)"
            )
        # Content-addressed, so a losing create (a 409) can never overwrite the winner's object.
        key = f"{name}/{hashlib.sha256(rollout_id.encode()).hexdigest()[:16]}/{hashlib.sha256(packed).hexdigest()}"
        try:
            self._s3.put_object(Bucket=self._bucket, Key=key, Body=packed)
        except (ClientError, BotoCoreError) as exc:
            raise StoreError(f"S3 put of {key} in {self._bucket!r} failed: {exc}") from exc
        return {"M": {"s3_key": {"S": key}}}

    def _unpack_blob(self, attr: Mapping[str, Any]) -> dict[str, Any]:
        if "B" in attr:
            packed = bytes(attr["B"])
        else:
            key = attr["M"]["s3_key"]["S"]
            if self._s3 is None or not self._bucket:
                raise StoreError(f"record points at S3 object {key} but no bucket is configured")
            try:
                packed = self._s3.get_object(Bucket=self._bucket, Key=key)["Body"].read()
            except (ClientError, BotoCoreError) as exc:
                raise StoreError(f"S3 get of {key} in {self._bucket!r} failed: {exc}") from exc
        value: dict[str, Any] = json.loads(zlib.decompress(packed))
        return value

    def _encode(self, rollout_id: str, name: str, value: Any) -> dict[str, Any] | None:
        """One record field as an attribute value; None means REMOVE (absent reads as None)."""
        if value is None:
            return None
        if name in _BLOBS:
            return self._pack_blob(rollout_id, name, value)
        if name in _JSON_TEXT:
            return _attr(json.dumps(value, separators=(",", ":")))
        return _attr(value)

    def _decode(self, name: str, attr: Mapping[str, Any]) -> Any:
        if name in _BLOBS:
            return self._unpack_blob(attr)
        value = _deserializer.deserialize(attr)  # type: ignore[arg-type]
        if name in _JSON_TEXT:
            return json.loads(value)
        if isinstance(value, Decimal):
            return int(value) if name in _INTEGRAL else float(value)
        return value

    def _to_item(self, record: RolloutRecord) -> dict[str, Any]:
        item: dict[str, Any] = {"pk": {"S": ROLLOUT_PREFIX + record.rollout_id}}
        for name, value in record.to_dict().items():
            encoded = self._encode(record.rollout_id, name, value)
            if encoded is not None:
                item[name] = encoded
        return item

    def _from_item(self, item: Mapping[str, Any]) -> RolloutRecord:
        fields = RolloutRecord.__dataclass_fields__
        data = {name: self._decode(name, attr) for name, attr in item.items() if name in fields}
        return RolloutRecord.from_dict(data)

    def _live(self, item: Mapping[str, Any] | None, now: float) -> RolloutRecord | None:
        if not item or float(item.get(TTL_ATTRIBUTE, {}).get("N", "0")) <= now:
            return None
        return self._from_item(item)

    # ------------------------------------------------------------------ the port
    # Each method does all of its work (encoding, S3 for large values, DynamoDB, decoding) in
    # one worker thread: boto3 is synchronous, and one hop per operation keeps the loop free.

    async def create(self, record: RolloutRecord, *, now: float) -> CreateResult:
        """Claim the slot and the rollout id in one transaction."""
        return await asyncio.to_thread(self._create, record, now)

    async def get(self, rollout_id: str, *, now: float) -> RolloutRecord | None:
        return await asyncio.to_thread(self._get, rollout_id, now)

    async def _apply(
        self, rollout_id: str, guard: Guard, update: Update, *, now: float
    ) -> TransitionResult:
        return await asyncio.to_thread(self._update, rollout_id, guard, update, now)

    async def release(self, rollout_id: str, *, slot: str, now: float) -> bool:
        return await asyncio.to_thread(self._release, rollout_id, slot, now)

    async def scan(
        self, states: Collection[RecordState], *, now: float, limit: int = 100
    ) -> list[RolloutRecord]:
        """Live records in ``states``. A full-table Scan: meant for sweeps and re-drive, which
        run rarely; it reads every item, so its cost grows with the table."""
        return await asyncio.to_thread(self._scan, tuple(states), now, limit)

    async def close(self) -> None:
        """boto3 clients need no closing; the process owns them."""

    # ------------------------------------------------------------------ synchronous bodies

    def _create(self, record: RolloutRecord, now: float) -> CreateResult:
        free = f"attribute_not_exists(pk) OR {TTL_ATTRIBUTE} <= :now"
        values = {":now": _attr(now)}
        slot_item = {
            "pk": {"S": SLOT_PREFIX + record.slot},
            "rollout_id": {"S": record.rollout_id},
            TTL_ATTRIBUTE: _attr(record.expires_at),
        }
        puts = [
            {
                "Put": {
                    "TableName": self.table_name,
                    "Item": item,
                    "ConditionExpression": free,
                    "ExpressionAttributeValues": values,
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            }
            for item in (slot_item, self._to_item(record))
        ]
        try:
            self._ddb.transact_write_items(TransactItems=puts)  # type: ignore[arg-type]
            return CreateResult(True, record)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "TransactionCanceledException":
                raise self._fail("create", exc) from exc
            reasons = cast("list[Any]", exc.response.get("CancellationReasons") or [])
        except BotoCoreError as exc:
            raise self._fail("create", exc) from exc
        return self._resolve_conflict(record, reasons, now)

    def _resolve_conflict(
        self, record: RolloutRecord, reasons: list[Any], now: float
    ) -> CreateResult:
        codes = [r.get("Code") for r in reasons] + [None, None]
        if codes[0] == "ConditionalCheckFailed":
            old = reasons[0].get("Item") or {}
            holder_id = old.get("rollout_id", {}).get("S")
            holder = self._get(holder_id, now) if holder_id else None
            if holder is not None:
                return CreateResult(False, holder, "slot")
        if codes[1] == "ConditionalCheckFailed":
            holder = self._live(reasons[1].get("Item"), now) or self._get(record.rollout_id, now)
            if holder is not None:
                return CreateResult(False, holder, "rollout_id")
        if "TransactionConflict" in codes:
            # Another create of the same slot is in flight; its outcome decides ours.
            holder = self._get(record.rollout_id, now)
            if holder is not None:
                return CreateResult(False, holder, "slot")
        raise StoreError(
            f"DynamoDB create of rollout {record.rollout_id!r} was cancelled "
            f"({', '.join(str(c) for c in codes if c)}); retry the init"
        )

    def _get(self, rollout_id: str, now: float) -> RolloutRecord | None:
        try:
            answer = self._ddb.get_item(
                TableName=self.table_name,
                Key={"pk": {"S": ROLLOUT_PREFIX + rollout_id}},
                ConsistentRead=True,
            )
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("get", exc) from exc
        return self._live(answer.get("Item"), now)

    def _update(
        self, rollout_id: str, guard: Guard, update: Update, now: float
    ) -> TransitionResult:
        names: dict[str, str] = {"#state": "state", "#exp": TTL_ATTRIBUTE}
        values: dict[str, Any] = {":now": _attr(now)}
        state_marks = []
        for index, state in enumerate(guard.states):
            values[f":s{index}"] = _attr(state)
            state_marks.append(f":s{index}")
        condition = f"#state IN ({', '.join(state_marks)}) AND #exp > :now"
        if guard.attempt is not None:
            names["#attempt"] = "attempt"
            values[":attempt"] = _attr(guard.attempt)
            condition += " AND #attempt = :attempt"
        if guard.lease_free_at is not None:
            names["#lease"] = "lease_until"
            values[":lease_free"] = _attr(guard.lease_free_at)
            condition += " AND (attribute_not_exists(#lease) OR #lease < :lease_free)"
        sets, removes = [], []
        for index, (name, value) in enumerate(update.changes().items()):
            names[f"#f{index}"] = name
            encoded = self._encode(rollout_id, name, value)
            if encoded is None:
                removes.append(f"#f{index}")
            else:
                values[f":v{index}"] = encoded
                sets.append(f"#f{index} = :v{index}")
        expression = ""
        if sets:
            expression += "SET " + ", ".join(sets)
        if removes:
            expression += " REMOVE " + ", ".join(removes)
        try:
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
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                old = cast("Mapping[str, Any] | None", exc.response.get("Item"))
                return TransitionResult(False, self._live(old, now))
            raise self._fail("update", exc) from exc
        except BotoCoreError as exc:
            raise self._fail("update", exc) from exc
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
                    ":accepted": _attr(RecordState.ACCEPTED),
                    ":slot": _attr(slot),
                    ":now": _attr(now),
                    ":zero": _attr(0),
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
            self._ddb.transact_write_items(TransactItems=[record_delete, slot_delete])  # type: ignore[list-item]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "TransactionCanceledException":
                return False
            raise self._fail("release", exc) from exc
        except BotoCoreError as exc:
            raise self._fail("release", exc) from exc
        return True

    def _scan(self, states: tuple[RecordState, ...], now: float, limit: int) -> list[RolloutRecord]:
        values: dict[str, Any] = {":now": _attr(now), ":prefix": {"S": ROLLOUT_PREFIX}}
        marks = []
        for index, state in enumerate(states):
            values[f":s{index}"] = _attr(state)
            marks.append(f":s{index}")
        kwargs: dict[str, Any] = {
            "TableName": self.table_name,
            "FilterExpression": (
                f"begins_with(pk, :prefix) AND #state IN ({', '.join(marks)}) AND {TTL_ATTRIBUTE} > :now"
            ),
            "ExpressionAttributeNames": {"#state": "state"},
            "ExpressionAttributeValues": values,
            "ConsistentRead": True,
        }
        items: list[dict[str, Any]] = []
        try:
            while True:
                page = self._ddb.scan(**kwargs)
                items.extend(page.get("Items", []))
                last = page.get("LastEvaluatedKey")
                if not last:
                    break
                kwargs["ExclusiveStartKey"] = last
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("scan", exc) from exc
        records = [self._from_item(item) for item in items]
        records.sort(key=lambda r: r.updated_at)
        return records[:limit]
