"""SQLite store: the durable default of the local server (one file, WAL mode).

A restart forgets nothing: records, idempotency slots and final responses survive the process.
``synchronous=NORMAL`` in WAL mode survives a killed process (what the local server must
withstand); only an operating-system crash or power loss can drop the last commits.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path

from rollout_sdk.engine.record import RecordState, RolloutRecord
from rollout_sdk.errors import StoreError
from rollout_sdk.store.base import TransactionalStore

_SCHEMA = """
CREATE TABLE IF NOT EXISTS rollouts (
    rollout_id TEXT PRIMARY KEY,
    slot       TEXT NOT NULL,
    state      TEXT NOT NULL,
    expires_at REAL NOT NULL,
    body       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS rollouts_slot ON rollouts (slot);
CREATE INDEX IF NOT EXISTS rollouts_state ON rollouts (state);
"""


def _decode(row: tuple[str] | None) -> RolloutRecord | None:
    return None if row is None else RolloutRecord.from_dict(json.loads(row[0]))


class _SQLiteTransaction:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def by_id(self, rollout_id: str) -> RolloutRecord | None:
        cur = self._conn.execute("SELECT body FROM rollouts WHERE rollout_id = ?", (rollout_id,))
        return _decode(cur.fetchone())

    def by_slot(self, slot: str) -> RolloutRecord | None:
        cur = self._conn.execute(
            "SELECT body FROM rollouts WHERE slot = ? ORDER BY expires_at DESC LIMIT 1", (slot,)
        )
        return _decode(cur.fetchone())

    def put(self, record: RolloutRecord) -> None:
        self._conn.execute(
            "INSERT OR REPLACE INTO rollouts (rollout_id, slot, state, expires_at, body) "
            "VALUES (?, ?, ?, ?, ?)",
            (
                record.rollout_id,
                record.slot,
                record.state.value,
                record.expires_at,
                json.dumps(record.to_dict(), separators=(",", ":")),
            ),
        )

    def delete(self, rollout_id: str) -> None:
        self._conn.execute("DELETE FROM rollouts WHERE rollout_id = ?", (rollout_id,))


class SQLiteStore(TransactionalStore):
    """Records in one SQLite file; every move runs in one ``BEGIN IMMEDIATE`` transaction."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # One connection shared under a lock: the event loop thread does nearly all the
            # work, and a single writer is what SQLite serialises anyway.
            self._conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=30
            )
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the SQLite store at {self.path}: {exc}") from exc
        self._lock = threading.Lock()

    @contextmanager
    def _transaction(self) -> Iterator[_SQLiteTransaction]:
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StoreError(f"SQLite store {self.path}: {exc}") from exc
            try:
                yield _SQLiteTransaction(self._conn)
            except sqlite3.Error as exc:
                self._conn.execute("ROLLBACK")
                raise StoreError(f"SQLite store {self.path}: {exc}") from exc
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            try:
                self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._conn.execute("ROLLBACK")
                raise StoreError(f"SQLite store {self.path}: commit failed: {exc}") from exc

    def _scan(self, states: Collection[RecordState]) -> Iterator[RolloutRecord]:
        marks = ",".join("?" for _ in states)
        with self._lock:
            rows = self._conn.execute(
                f"SELECT body FROM rollouts WHERE state IN ({marks})",  # noqa: S608 - placeholders only
                [s.value for s in states],
            ).fetchall()
        return (r for r in (_decode(row) for row in rows) if r is not None)

    def purge_expired(self, now: float) -> int:
        """Delete records whose TTL has passed; returns how many."""
        with self._lock:
            cur = self._conn.execute("DELETE FROM rollouts WHERE expires_at <= ?", (now,))
            return cur.rowcount

    async def close(self) -> None:
        """Close the database file."""
        with self._lock:
            self._conn.close()
