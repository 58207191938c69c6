"""What only the SQLite store promises: records survive a restart, expired rows can be purged."""

from __future__ import annotations

import json
import math
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from rollout_sdk.errors import StoreError
from rollout_sdk.store.record import PROTOCOL_OSMOSIS03, RecordState
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
        # The file is its server's (the folder lock): a record is due at its expiry, for that
        # server's restart sweep.
        accepted = make_record("r-1", key="k")
        assert await reopened.get("r-1", now=NOW + 2) == accepted.evolve(
            due_at=float(accepted.expires_at)
        )
        assert await reopened.get("r-2", now=NOW + 2) == running
        # The idempotency slots survive too: a duplicate after the restart is still a duplicate.
        again = await reopened.create(make_record("r-3", key="k"), now=NOW + 2)
        assert (again.created, again.conflict_on) == (False, "slot")
        # So does the due index: the owner's sweep still finds what was in flight.
        page = await reopened.due(now=NOW + 2, until=math.inf)
        assert sorted(page.rollout_ids) == ["r-1", "r-2"]
    finally:
        await reopened.close()


async def test_a_second_store_on_the_same_file_sees_committed_records(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite3"
    writer, reader = SQLiteStore(path), SQLiteStore(path)
    try:
        record = make_record()
        await writer.create(record, now=NOW)
        assert await reader.get("r-1", now=NOW) == writer.admitted(record)
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
        long = make_record("long", ttl=TTL)
        assert await store.get("long", now=NOW + 120) == long.evolve(due_at=float(long.expires_at))
        # Purged rows are gone even for a reader that would not filter by time.
        assert await store.get("short-1", now=NOW) is None
        assert (await store.due(now=NOW, until=math.inf)).rollout_ids == ["long"]
    finally:
        await store.close()


async def test_unopenable_path_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="cannot open the SQLite store"):
        SQLiteStore(tmp_path)  # a directory, not a database file


async def test_a_state_folder_from_before_the_live_index_lists_its_pulled_rollouts(
    tmp_path: Path,
) -> None:
    """A folder whose table has no poll_until column (written before the live index) gets it,
    filled from each record in flight, so cancel by prefix and the lease check find them."""
    path = tmp_path / "old" / "rollouts.sqlite3"
    path.parent.mkdir()
    pulled = make_record("old-pulled").evolve(protocol=PROTOCOL_OSMOSIS03, poll_until=NOW + 60)
    ended = pulled.evolve(rollout_id="old-ended", slot="s-ended", state=RecordState.DELIVERED)
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE rollouts (rollout_id TEXT PRIMARY KEY, slot TEXT NOT NULL, "
            "state TEXT NOT NULL, expires_at REAL NOT NULL, body TEXT NOT NULL, due_at REAL)"
        )
        for record in (pulled, ended):
            conn.execute(
                "INSERT INTO rollouts VALUES (?, ?, ?, ?, ?, NULL)",
                (
                    record.rollout_id,
                    record.slot,
                    record.state.value,
                    record.expires_at,
                    json.dumps(record.to_dict()),
                ),
            )
    store = SQLiteStore(path)
    try:
        assert (await store.polled(now=NOW)).rollout_ids == ["old-pulled"]
        assert await store.count_polled(now=NOW) == 1
    finally:
        await store.close()
