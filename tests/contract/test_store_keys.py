"""Keys at their byte limits on every store, and DynamoDB's own refusals (over moto's server): a
refusal caused by the record's content is RecordTooLarge (413), anything else stays StoreError."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from rollout_sdk.aws.clients import AwsClients
from rollout_sdk.errors import RecordTooLarge, StoreError
from rollout_sdk.protocol import IDEMPOTENCY_KEY_MAX_BYTES, ROLLOUT_ID_MAX_BYTES
from rollout_sdk.store.base import Store
from rollout_sdk.store.dynamodb import DynamoDBStore

from .conftest import dynamodb_store
from .records import NOW, make_record

FOUR = "\U0001f600"
KEY_AT_LIMIT = FOUR * 509 + "abc"  # 2,039 bytes
ID_AT_LIMIT = FOUR * 256  # 1,024 bytes


async def test_keys_at_their_byte_limits_are_stored_and_found(store: Store) -> None:
    assert len(KEY_AT_LIMIT.encode()) == IDEMPOTENCY_KEY_MAX_BYTES
    assert len(ID_AT_LIMIT.encode()) == ROLLOUT_ID_MAX_BYTES
    keyed = make_record(ID_AT_LIMIT, key=KEY_AT_LIMIT)
    assert (await store.create(keyed, now=NOW)).created
    assert await store.get(ID_AT_LIMIT, now=NOW) == keyed
    again = await store.create(keyed, now=NOW)  # found through its slot
    assert (again.created, again.conflict_on, again.record) == (False, "slot", keyed)
    # Without a key the slot is "rid:" + the id: the same arithmetic, the other prefix.
    keyless = make_record(FOUR * 255 + "\U0001f601")
    assert (await store.create(keyless, now=NOW)).created
    assert (await store.create(keyless, now=NOW)).conflict_on == "slot"


async def _dynamodb(
    request: pytest.FixtureRequest, tmp_path: Path, **options: object
) -> DynamoDBStore:
    store = await dynamodb_store(request, tmp_path)
    assert isinstance(store, DynamoDBStore)
    if options:
        return DynamoDBStore(store.table_name, client=store._ddb, **options)  # type: ignore[arg-type]
    return store


async def test_a_slot_key_one_byte_over_is_refused_by_dynamodb_as_too_large(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    # Past the model's limit (so built around it): DynamoDB itself refuses "slot#key:" + 2,040.
    store = await _dynamodb(request, tmp_path)
    record = make_record("r-1").evolve(slot="key:" + KEY_AT_LIMIT + "d")
    with pytest.raises(RecordTooLarge, match="hashkey"):
        await store.create(record, now=NOW)
    assert await store.get("r-1", now=NOW) is None
    at_limit = make_record("r-1").evolve(slot="key:" + KEY_AT_LIMIT)
    assert (await store.create(at_limit, now=NOW)).created


async def test_a_record_id_over_the_key_limit_is_too_large(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    store = await _dynamodb(request, tmp_path)
    long_id = "i" * 2041  # "rollout#" + 2,041 bytes
    record = make_record("r-1").evolve(rollout_id=long_id, slot="rid:r-1")
    with pytest.raises(RecordTooLarge):
        await store.create(record, now=NOW)


async def test_an_item_over_400_kb_is_too_large_not_a_store_error(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    # With an inline limit above DynamoDB's item limit, nothing goes to S3: DynamoDB refuses.
    store = await _dynamodb(request, tmp_path, inline_limit=4 * 1024 * 1024)
    noise = base64.b64encode(os.urandom(450 * 1024)).decode()  # compresses to over 400 KB
    record = make_record("r-1")
    record = record.evolve(
        request={**record.request, "messages": [{"role": "user", "content": noise}]}
    )
    with pytest.raises(RecordTooLarge, match="Item size"):
        await store.create(record, now=NOW)
    assert await store.get("r-1", now=NOW) is None


async def test_a_value_needing_the_bucket_none_is_configured_for_is_too_large(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    store = await _dynamodb(request, tmp_path, inline_limit=1024)
    noise = base64.b64encode(os.urandom(8 * 1024)).decode()
    record = make_record("r-1")
    record = record.evolve(
        request={**record.request, "messages": [{"role": "user", "content": noise}]}
    )
    with pytest.raises(RecordTooLarge, match="PAYLOAD_BUCKET"):
        await store.create(record, now=NOW)


async def test_a_table_that_is_not_the_kits_is_still_a_store_error(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    endpoint: str = request.getfixturevalue("moto_endpoint")
    clients = AwsClients(endpoint_url=endpoint)
    clients.dynamodb.create_table(
        TableName="other-shape",
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    for table in ("other-shape", "no-such-table"):
        store = DynamoDBStore(table, client=clients.dynamodb)
        with pytest.raises(StoreError) as caught:
            await store.create(make_record("r-1"), now=NOW)
        assert not isinstance(caught.value, RecordTooLarge)
