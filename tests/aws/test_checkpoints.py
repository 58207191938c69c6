"""The durable worker's checkpoint serializer (rollout_sdk/aws/checkpoints.py) on moto's S3:
small results inline as JSON, large ones in the payload bucket by reference, read back and
checked; refusals name the variable. The whole path runs in tests/aws/test_durable_worker.py."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from aws_durable_execution_sdk_python.serdes import ExtendedTypeSerDes, SerDesContext

from rollout_sdk.aws.checkpoints import INLINE_LIMIT_BYTES, REFERENCE_KEY, CheckpointSerDes
from rollout_sdk.errors import CheckpointTooLarge, StoreError
from rollout_sdk.local.emulator import local_client

pytestmark = pytest.mark.timeout(60)

CONTEXT = SerDesContext(operation_id="op-1", durable_execution_arn="arn:exec")


@pytest.fixture
def bucket(moto_endpoint: str) -> Iterator[tuple[Any, str]]:
    s3 = local_client("s3", moto_endpoint)
    name = f"checkpoints-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    yield s3, name


def _serdes(s3: Any, bucket: str | None, **kwargs: Any) -> CheckpointSerDes:
    return CheckpointSerDes(rollout_id="r-1", s3=lambda: s3, bucket=bucket, **kwargs)


def test_a_small_result_stays_in_the_checkpoint_as_json(bucket: tuple[Any, str]) -> None:
    s3, name = bucket
    serdes = _serdes(s3, name)
    value = {"kind": "asked", "value": {"choices": [{"message": {"content": "hi"}}]}, "ms": 1.5}
    data = serdes.serialize(value, CONTEXT)
    assert data == '{"kind":"asked","value":{"choices":[{"message":{"content":"hi"}}]},"ms":1.5}'
    assert serdes.deserialize(data, CONTEXT) == value
    assert serdes.stored == 0 and "Contents" not in s3.list_objects_v2(Bucket=name)


def test_a_large_result_goes_to_the_bucket_and_comes_back(bucket: tuple[Any, str]) -> None:
    s3, name = bucket
    value = {"kind": "asked", "value": "x" * (INLINE_LIMIT_BYTES + 1)}
    data = _serdes(s3, name).serialize(value, CONTEXT)
    assert len(data) < 200 and REFERENCE_KEY in data
    (stored,) = s3.list_objects_v2(Bucket=name)["Contents"]
    assert stored["Key"].startswith("checkpoints/")
    # Another instance (a replay in a later invocation) reads it from the bucket.
    replay = _serdes(s3, name)
    assert replay.deserialize(data, CONTEXT) == value
    assert replay.fetched == 1
    # The same result again is the same object (content-addressed): nothing new stored.
    assert _serdes(s3, name).serialize(value, CONTEXT) == data
    assert len(s3.list_objects_v2(Bucket=name)["Contents"]) == 1


def test_an_altered_object_is_refused(bucket: tuple[Any, str]) -> None:
    s3, name = bucket
    data = _serdes(s3, name).serialize({"v": "y" * (INLINE_LIMIT_BYTES + 10)}, CONTEXT)
    (stored,) = s3.list_objects_v2(Bucket=name)["Contents"]
    s3.put_object(Bucket=name, Key=stored["Key"], Body=b"not the checkpoint")
    with pytest.raises(StoreError, match="does not hold what it was stored as"):
        _serdes(s3, name).deserialize(data, CONTEXT)


def test_a_large_result_without_a_bucket_is_refused_naming_the_variable() -> None:
    serdes = _serdes(None, None, inline_limit=10)
    with pytest.raises(CheckpointTooLarge, match="PAYLOAD_BUCKET"):
        serdes.serialize({"value": "more than ten bytes"}, CONTEXT)


def test_a_checkpoint_in_the_sdks_own_envelope_is_still_read() -> None:
    value = {"kind": "asked", "took": 60.0, "value": {"n": 1}}
    old = ExtendedTypeSerDes().serialize(value, CONTEXT)  # type: ignore[no-untyped-call]
    assert old.startswith('{"t":')
    assert _serdes(None, None).deserialize(old, CONTEXT) == value
