"""How the durable worker's steps are checkpointed: JSON, with a result too large for a
checkpoint kept in the payload bucket and a reference to it in the checkpoint.

Lambda takes at most 256 KB per checkpoint (a step's result), and since the durable execution
SDK 3.0 a larger result fails the whole execution. A chat answer with log-probabilities, or a
tool result, passes that easily. So a result whose JSON is over :data:`INLINE_LIMIT_BYTES` is
compressed and stored in the stack's payload bucket (the one the rollout records already use
for large values, under ``checkpoints/``), content-addressed, and the checkpoint holds only a
small reference; a replay reads the object back, checks its digest, and returns the value
(:mod:`rollout_sdk.store.blobs`, as the records' large values). The
bucket's lifecycle rule (31 days) outlives every durable execution (at most a day and an hour,
and its history one day more), so nothing a replay needs has gone.

This is the SDK's own extension point for it (``StepConfig(serdes=...)``, a
:class:`~aws_durable_execution_sdk_python.serdes.SerDes`); its ``filesystem_serdes`` does the
same through a mounted file system, which a Lambda function of this stack does not have.
Results in the checkpoint are plain JSON (the SDK's default wraps every value in a type
envelope, about 3.6 times the bytes); a checkpoint in that envelope, written before this
serializer, is still read.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aws_durable_execution_sdk_python.serdes import ExtendedTypeSerDes, SerDes, SerDesContext

from rollout_sdk.errors import CheckpointTooLarge
from rollout_sdk.store.blobs import get_blob, put_blob

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

#: Lambda's limit on one checkpoint (a step's result), in bytes.
CHECKPOINT_LIMIT_BYTES = 256 * 1024
#: Results up to this many bytes of JSON stay in the checkpoint; larger ones go to the bucket.
#: Below the limit by 16 KiB: the SDK adds its own fields to the checkpoint's payload.
INLINE_LIMIT_BYTES = CHECKPOINT_LIMIT_BYTES - 16 * 1024
#: The reference's one key: no result of the kit's steps is an object with this key.
REFERENCE_KEY = "rollout_sdk_checkpoint"
#: Where the objects go in the bucket.
PREFIX = "checkpoints"


class CheckpointSerDes(SerDes[Any]):
    """JSON checkpoints of one rollout's steps, results over ``inline_limit`` bytes in
    ``bucket`` through ``s3`` (a callable that builds the client on first use: most rollouts
    never need it)."""

    def __init__(
        self,
        *,
        rollout_id: str,
        s3: Callable[[], S3Client],
        bucket: str | None,
        inline_limit: int = INLINE_LIMIT_BYTES,
    ) -> None:
        self.rollout_id = rollout_id
        self._s3_source = s3
        self._s3: S3Client | None = None
        self.bucket = bucket
        self.inline_limit = inline_limit
        #: Results stored in the bucket, and read back from it (by this instance).
        self.stored = 0
        self.fetched = 0
        #: The bytes each step's checkpoint holds, by operation id: written now or read back
        #: in a replay, so that every invocation knows the whole execution's (its data
        #: written, a cost: rollout_sdk/aws/durable.py).
        self.checkpoint_bytes: dict[str, int] = {}
        # The SDK reads a result back right after checkpointing it: the one just stored is
        # answered from here, not fetched again.
        self._last: tuple[str, bytes] | None = None

    def _client(self) -> S3Client:
        if self._s3 is None:
            self._s3 = self._s3_source()
        return self._s3

    def serialize(self, value: Any, serdes_context: SerDesContext) -> str:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        raw = text.encode()
        if len(raw) <= self.inline_limit:
            self.checkpoint_bytes[serdes_context.operation_id] = len(raw)
            return text
        if not self.bucket:
            raise CheckpointTooLarge(
                f"a step result of rollout {self.rollout_id!r} is {len(raw)} bytes, over the "
                f"{self.inline_limit}-byte checkpoint limit, and no payload bucket is "
                "configured (PAYLOAD_BUCKET; template.yaml sets it)"
            )
        key = put_blob(self._client(), self.bucket, PREFIX, self.rollout_id, zlib.compress(raw, 6))
        self.stored += 1
        self._last = (key, raw)
        reference = json.dumps({REFERENCE_KEY: {"key": key, "bytes": len(raw)}})
        self.checkpoint_bytes[serdes_context.operation_id] = len(reference.encode())
        return reference

    def deserialize(self, data: str, serdes_context: SerDesContext) -> Any:
        self.checkpoint_bytes.setdefault(serdes_context.operation_id, len(data.encode()))
        value = json.loads(data)
        if isinstance(value, dict) and set(value) == {"t", "v"}:
            # The SDK's own typed envelope: a checkpoint an earlier kit wrote (its steps' results
            # are the journal's outcome objects, never of this shape), read as the SDK reads it.
            return ExtendedTypeSerDes().deserialize(data, serdes_context)  # type: ignore[no-untyped-call]
        if not (isinstance(value, dict) and set(value) == {REFERENCE_KEY}):
            return value
        key = str(value[REFERENCE_KEY]["key"])
        if self._last is not None and self._last[0] == key:
            return json.loads(self._last[1])
        if not self.bucket:
            raise CheckpointTooLarge(
                f"a checkpoint of rollout {self.rollout_id!r} refers to S3 object {key}, and no "
                "payload bucket is configured (PAYLOAD_BUCKET)"
            )
        packed = get_blob(self._client(), self.bucket, key)
        self.fetched += 1
        return json.loads(zlib.decompress(packed))
