"""Large values in the stack's payload bucket, content-addressed: the rollout records' large
fields (:mod:`rollout_sdk.store.dynamodb_codec`) and the durable worker's large checkpoints
(:mod:`rollout_sdk.aws.checkpoints`) are stored and read back the same way.

An object's key is ``<prefix>/<digest of the rollout id>/<digest of its bytes>``: the same
value is the same object (a losing duplicate can never overwrite the winner's), and what is
read back is checked against the digest its key names.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from rollout_sdk.errors import StoreError
from rollout_sdk.store.dynamodb_errors import s3_translated

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def put_blob(s3: S3Client, bucket: str, prefix: str, rollout_id: str, packed: bytes) -> str:
    """Store ``packed`` (already compressed) for ``rollout_id`` under ``prefix``; its key."""
    key = f"{prefix}/{_digest(rollout_id.encode())[:16]}/{_digest(packed)}"
    with s3_translated(f"S3 put of {key} in {bucket!r}"):
        s3.put_object(Bucket=bucket, Key=key, Body=packed)
    return key


def get_blob(s3: S3Client, bucket: str, key: str) -> bytes:
    """The bytes stored under ``key``; StoreError when they are not what the key names."""
    with s3_translated(f"S3 get of {key} in {bucket!r}"):
        packed = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    if key.rsplit("/", 1)[-1] != _digest(packed):
        raise StoreError(f"S3 object {key} in {bucket!r} does not hold what it was stored as")
    return packed
