"""What only the SQLite store promises: records survive a restart, expired rows can be purged."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from rollout_sdk.engine.record import RecordState
from rollout_sdk.errors import StoreError
from rollout_sdk.store.sqlite import SQLiteStore

from .records import NOW, TTL, claim, make_record


async def test_records_survive_closing_and_reopening(tmp_path: Path) -> None:
    path = tmp_path / "state" / "rollouts.sqlite3"
    store = SQLiteStore(path)
    await store.create(make_record("r-1", key="k"), now=NOW)
    await store.create(make_record("r-2"), now=NOW)
    running = await claim(store, "r-2")
    await store.close()

    reopened = SQLiteStore(path)
    try:
        assert await reopened.get("r-1", now=NOW + 2) == make_record("r-1", key="k")
        assert await reopened.get("r-2", now=NOW + 2) == running
        # The idempotency slots survive too: a duplicate after the restart is still a duplicate.
        again = await reopened.create(make_record("r-3", key="k"), now=NOW + 2)
        assert (again.created, again.conflict_on) == (False, "slot")
        scanned = await reopened.scan((RecordState.RUNNING,), now=NOW + 2)
        assert scanned == [running]
    finally:
        await reopened.close()


async def test_a_second_store_on_the_same_file_sees_committed_records(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite3"
    writer, reader = SQLiteStore(path), SQLiteStore(path)
    try:
        record = make_record()
        await writer.create(record, now=NOW)
        assert await reader.get("r-1", now=NOW) == record
        assert not (await reader.create(record, now=NOW)).created
    finally:
        await writer.close()
        await reader.close()


async def test_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "wal.sqlite3"
    store = SQLiteStore(path)
    await store.close()
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_purge_expired(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "purge.sqlite3")
    try:
        await store.create(make_record("short-1", ttl=60), now=NOW)
        await store.create(make_record("short-2", ttl=120), now=NOW)
        await store.create(make_record("long", ttl=TTL), now=NOW)
        assert store.purge_expired(NOW + 30) == 0
        assert store.purge_expired(NOW + 120) == 2  # expires_at <= now is expired
        assert store.purge_expired(NOW + 120) == 0
        assert await store.get("long", now=NOW + 120) == make_record("long", ttl=TTL)
        # Purged rows are gone even for a reader that would not filter by time.
        assert await store.get("short-1", now=NOW) is None
        assert [r.rollout_id for r in await store.scan((RecordState.ACCEPTED,), now=NOW)] == [
            "long"
        ]
    finally:
        await store.close()


async def test_unopenable_path_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="cannot open the SQLite store"):
        SQLiteStore(tmp_path)  # a directory, not a database file
