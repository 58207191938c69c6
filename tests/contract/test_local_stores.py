"""What only the stores of the local server promise: a scan deletes expired records for good.

Not part of the contract, so not run on DynamoDB: there the table's TTL deletes expired items
(up to two days late) and the store never deletes them itself; every read hides them instead,
which the contract checks on every store (``test_scan_skips_expired_records``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rollout_sdk.engine.record import RecordState
from rollout_sdk.store.base import TransactionalStore
from rollout_sdk.store.memory import MemoryStore
from rollout_sdk.store.sqlite import SQLiteStore

from .records import NOW, TTL, make_record


@pytest.fixture(params=["memory", "sqlite"])
async def local_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[TransactionalStore]:
    store: TransactionalStore = (
        MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "rollouts.sqlite3")
    )
    try:
        yield store
    finally:
        await store.close()


async def test_a_scan_drops_expired_records_for_good(local_store: TransactionalStore) -> None:
    await local_store.create(make_record(), now=NOW)
    assert await local_store.scan((RecordState.ACCEPTED,), now=NOW + TTL + 1) == []
    # Gone, not only hidden: a later reader with an earlier clock does not see it either.
    assert await local_store.get("r-1", now=NOW) is None
