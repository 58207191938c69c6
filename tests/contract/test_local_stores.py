"""What only the stores of the local server promise: a due listing deletes expired records for
good.

Not part of the contract, so not run on DynamoDB: there the table's TTL deletes expired items
(up to two days late) and the store never deletes them itself; every read hides them instead,
which the contract checks on every store (the store contract's expiry tests).
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rollout_sdk.store.memory import MemoryStore
from rollout_sdk.store.sqlite import SQLiteStore
from rollout_sdk.store.transactional import TransactionalStore

from .records import NOW, TTL, make_record


@pytest.fixture(params=["memory", "sqlite"])
async def local_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[TransactionalStore]:
    store: TransactionalStore = (
        # With an owner, as a local server runs them: every record in flight is in the index.
        MemoryStore(owner="server-1")
        if request.param == "memory"
        else SQLiteStore(tmp_path / "rollouts.sqlite3")
    )
    try:
        yield store
    finally:
        await store.close()


async def test_a_due_listing_drops_expired_records_for_good(
    local_store: TransactionalStore,
) -> None:
    await local_store.create(make_record(), now=NOW)
    page = await local_store.due(now=NOW + TTL + 1, until=math.inf)
    assert page.rollout_ids == []
    # Gone, not only hidden: a later reader with an earlier clock does not see it either.
    assert await local_store.get("r-1", now=NOW) is None
