"""SQLite store: the durable default of the local server (one file, WAL mode).

A restart forgets nothing: records, idempotency slots and final responses survive the process.
``synchronous=NORMAL`` in WAL mode survives a killed process (what the local server must
withstand); only an operating-system crash or power loss can drop the last commits.

Every query can block: a commit waits for the disk, and another process's write lock holds
``BEGIN IMMEDIATE`` for up to the busy timeout. So the store owns one thread, and each operation
is one hop to it running the whole transaction: the event loop never waits on the file, and one
thread is what SQLite's single writer allows anyway.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from rollout_sdk.engine.record import RecordState, RolloutRecord
from rollout_sdk.errors import StoreError
from rollout_sdk.store.base import TransactionalStore

T = TypeVar("T")

#: How long a transaction waits for another connection's write lock before it fails.
BUSY_TIMEOUT_SECONDS = 30.0

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
    """Records in one SQLite file; every move runs in one ``BEGIN IMMEDIATE`` transaction, on the
    store's own thread. ``busy_timeout_seconds`` bounds the wait for another connection's lock
    (StoreError after it)."""

    def __init__(
        self, path: str | Path, *, busy_timeout_seconds: float = BUSY_TIMEOUT_SECONDS
    ) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # One connection, used from the store's thread (and under the lock by the synchronous
            # purge_expired a caller may run on its own thread).
            self._conn = sqlite3.connect(
                self.path,
                isolation_level=None,
                check_same_thread=False,
                timeout=busy_timeout_seconds,
            )
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the SQLite store at {self.path}: {exc}") from exc
        self._lock = threading.Lock()
        # One worker: SQLite admits one writer, so more threads would only queue on its lock.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rollout-sdk-sqlite")
        self._closed = False

    async def _run(self, work: Callable[[], T]) -> T:
        if self._closed:
            raise StoreError(f"SQLite store {self.path} is closed")
        return await asyncio.get_running_loop().run_in_executor(self._executor, work)

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

    def _close(self) -> None:
        with self._lock:
            self._conn.close()

    async def close(self) -> None:
        """Close the database file, after the transactions already handed to the thread."""
        if self._closed:
            return
        self._closed = True  # later operations fail at once; those already queued still run
        await asyncio.get_running_loop().run_in_executor(self._executor, self._close)
        self._executor.shutdown(wait=True)  # the thread is idle now: this only joins it
