"""The DynamoDB store's value codec: how a record's fields become attribute values, and back.

The codec follows the record's fields: each is stored under its own name, as boto3's
TypeSerializer types its value (S, N, BOOL), except for two kinds. The request, the init
response (the tools) and the final response are stored zlib-compressed (Binary); a value still
over the inline limit compressed goes to S3 under a content-addressed key, and the item keeps the
key. ``extra`` is a JSON string, as tables written so far hold it. Floats go through their
shortest repr, so they read back exactly.
"""

from __future__ import annotations

import enum
import json
import zlib
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any, get_type_hints

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

from rollout_sdk.errors import StoreError, ValueTooLarge
from rollout_sdk.store.blobs import get_blob, put_blob
from rollout_sdk.store.record import RolloutRecord

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

#: Compressed (Binary), or in S3 when too large.
_BLOBS = frozenset({"request", "response", "init_response"})
#: A JSON string, as tables written so far hold it (a native map would read back differently).
_JSON_TEXT = frozenset({"extra"})
#: Numbers that read back as int (TypeDeserializer gives Decimal); the others read back as float.
_INTEGRAL = frozenset(name for name, hint in get_type_hints(RolloutRecord).items() if hint is int)

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()


def attr(value: str | float | bool) -> dict[str, Any]:
    """A scalar as a DynamoDB attribute value. Floats go through their shortest repr, so they
    read back exactly (TypeSerializer refuses floats)."""
    scalar: Any = value.value if isinstance(value, enum.Enum) else value
    if isinstance(scalar, float):
        scalar = Decimal(repr(scalar))
    return dict(_serializer.serialize(scalar))


class ValueCodec:
    """Record fields as attribute values, large values in ``bucket`` through ``s3`` (a client,
    or a callable that builds one on first use: most rollouts never need it, and a client costs
    tens of milliseconds of a cold start)."""

    def __init__(
        self,
        *,
        s3: S3Client | Callable[[], S3Client] | None,
        bucket: str | None,
        inline_limit: int,
    ) -> None:
        self._s3_source = s3
        self._s3_client: S3Client | None = None
        self._bucket = bucket
        self._inline_limit = inline_limit

    @property
    def _s3(self) -> S3Client | None:
        if self._s3_client is None and self._s3_source is not None:
            source = self._s3_source
            self._s3_client = source() if callable(source) else source
        return self._s3_client

    def _pack_blob(self, rollout_id: str, name: str, value: Mapping[str, Any]) -> dict[str, Any]:
        raw = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
        packed = zlib.compress(raw, 6)
        if len(packed) <= self._inline_limit:
            return {"B": packed}
        if self._s3 is None or not self._bucket:
            raise ValueTooLarge(
                f"the {name} of rollout {rollout_id!r} is {len(packed)} bytes compressed, over the "
                f"{self._inline_limit}-byte inline limit of a DynamoDB item, and no S3 bucket is "
                "configured for large values (PAYLOAD_BUCKET)"
            )
        # Content-addressed, so a losing create (a 409) can never overwrite the winner's object.
        key = put_blob(self._s3, self._bucket, name, rollout_id, packed)
        return {"M": {"s3_key": {"S": key}}}

    def _unpack_blob(self, attr: Mapping[str, Any]) -> dict[str, Any]:
        if "B" in attr:
            packed = bytes(attr["B"])
        else:
            key = attr["M"]["s3_key"]["S"]
            if self._s3 is None or not self._bucket:
                raise StoreError(f"record points at S3 object {key} but no bucket is configured")
            packed = get_blob(self._s3, self._bucket, key)
        value: dict[str, Any] = json.loads(zlib.decompress(packed))
        return value

    def encode(self, rollout_id: str, name: str, value: Any) -> dict[str, Any] | None:
        """One record field as an attribute value; None means REMOVE (absent reads as None)."""
        if value is None:
            return None
        if name in _BLOBS:
            return self._pack_blob(rollout_id, name, value)
        if name in _JSON_TEXT:
            return attr(json.dumps(value, separators=(",", ":")))
        return attr(value)

    def decode(self, name: str, attr: Mapping[str, Any]) -> Any:
        """One record field from its attribute value."""
        if name in _BLOBS:
            return self._unpack_blob(attr)
        value = _deserializer.deserialize(attr)  # type: ignore[arg-type]
        if name in _JSON_TEXT:
            return json.loads(value)
        if isinstance(value, Decimal):
            return int(value) if name in _INTEGRAL else float(value)
        return value

    def attributes(self, record: RolloutRecord) -> dict[str, Any]:
        """The record's fields as attributes (an absent one is a field that is None)."""
        encoded = (
            (name, self.encode(record.rollout_id, name, value))
            for name, value in record.to_dict().items()
        )
        return {name: value for name, value in encoded if value is not None}

    def record(self, item: Mapping[str, Any]) -> RolloutRecord:
        """The record an item holds (attributes that are no field, the keys, are left out)."""
        fields = RolloutRecord.__dataclass_fields__
        data = {name: self.decode(name, value) for name, value in item.items() if name in fields}
        return RolloutRecord.from_dict(data)
