"""SQLite store: the durable default of the local server (one file, WAL mode).

A restart forgets nothing: records, idempotency slots and final responses survive the process.
``synchronous=NORMAL`` in WAL mode survives a killed process (what the local server must
withstand); only an operating-system crash or power loss can drop the last commits.

What can block is waiting: for another connection's write lock (up to the busy timeout), and
for the disk when the WAL is checkpointed into the database file. Neither may happen on the event
loop, so the store owns one thread, and a transaction that would wait runs there, whole, in one
hop. A transaction that cannot wait runs on the loop: its connection's busy timeout is 0 and
it never checkpoints, so it either runs at once (tens of microseconds: in WAL mode with
``synchronous=NORMAL`` a commit appends to the WAL without syncing) or is refused at once and
handed to the thread. Measured, a hop per transaction doubled init's median latency on a busy
2-core machine (the thread waits for the GIL after each statement, up to the 5 ms switch
interval), which is why the hop is kept for the transactions that need it. The thread also
checkpoints the WAL every :data:`CHECKPOINT_EVERY` commits made on the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from rollout_sdk.errors import StoreError
from rollout_sdk.store.base import DueCursor, DuePage
from rollout_sdk.store.record import RecordState, RolloutRecord
from rollout_sdk.store.transactional import TransactionalStore

T = TypeVar("T")

#: The owner of a store file no caller named: the one server its folder lock admits.
LOCAL_OWNER = "local"

#: How long a transaction waits for another connection's write lock before it fails.
BUSY_TIMEOUT_SECONDS = 30.0
#: Commits on the loop between two checkpoints on the store's thread (SQLite's own automatic
#: checkpoint, off on the loop's connection, runs at about 1,000 pages of WAL).
CHECKPOINT_EVERY = 200


class _WouldWait(Exception):
    """The loop's connection cannot run this transaction now without waiting."""


_SCHEMA = """
CREATE TABLE IF NOT EXISTS rollouts (
    rollout_id TEXT PRIMARY KEY,
    slot       TEXT NOT NULL,
    state      TEXT NOT NULL,
    expires_at REAL NOT NULL,
    body       TEXT NOT NULL,
    due_at     REAL
);
CREATE INDEX IF NOT EXISTS rollouts_slot ON rollouts (slot);
CREATE TABLE IF NOT EXISTS pass_leases (
    name   TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    until  REAL NOT NULL
);
"""
#: The due index holds only the records that have a due time (a partial index).
_DUE_INDEX = """
DROP INDEX IF EXISTS rollouts_state;
CREATE INDEX IF NOT EXISTS rollouts_due ON rollouts (due_at, rollout_id) WHERE due_at IS NOT NULL;
"""


def _migrate(conn: sqlite3.Connection) -> None:
    """Bring a state folder written before the due index up to date: add the column, and give
    every record still in flight its due time (as a store with an owner has it: see
    :mod:`rollout_sdk.store.base`), so the restart sweep and the re-drive find it."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(rollouts)")}
    if "due_at" in columns:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("ALTER TABLE rollouts ADD COLUMN due_at REAL")
        rows = conn.execute(
            "SELECT rollout_id, body FROM rollouts WHERE state NOT IN (?, ?)",
            (RecordState.DELIVERED.value, RecordState.UNDELIVERABLE.value),
        ).fetchall()
        for rollout_id, body in rows:
            record = RolloutRecord.from_dict(json.loads(body))
            due = record.next_attempt_at or record.lease_until or float(record.expires_at)
            updated = json.dumps({**record.to_dict(), "due_at": due}, separators=(",", ":"))
            conn.execute(
                "UPDATE rollouts SET due_at = ?, body = ? WHERE rollout_id = ?",
                (due, updated, rollout_id),
            )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _decode(row: tuple[str] | None) -> RolloutRecord | None:
    return None if row is None else RolloutRecord.from_dict(json.loads(row[0]))


class _SQLiteTransaction:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def by_id(self, rollout_id: str) -> RolloutRecord | None:
        cur = self.conn.execute("SELECT body FROM rollouts WHERE rollout_id = ?", (rollout_id,))
        return _decode(cur.fetchone())

    def by_slot(self, slot: str) -> RolloutRecord | None:
        cur = self.conn.execute(
            "SELECT body FROM rollouts WHERE slot = ? ORDER BY expires_at DESC LIMIT 1", (slot,)
        )
        return _decode(cur.fetchone())

    def put(self, record: RolloutRecord) -> None:
        self.conn.execute(
            "INSERT OR REPLACE INTO rollouts (rollout_id, slot, state, expires_at, body, due_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                record.rollout_id,
                record.slot,
                record.state.value,
                record.expires_at,
                json.dumps(record.to_dict(), separators=(",", ":")),
                record.due_at,
            ),
        )

    def delete(self, rollout_id: str) -> None:
        self.conn.execute("DELETE FROM rollouts WHERE rollout_id = ?", (rollout_id,))

    def pass_lease(self, name: str) -> tuple[str, float] | None:
        row = self.conn.execute(
            "SELECT holder, until FROM pass_leases WHERE name = ?", (name,)
        ).fetchone()
        return None if row is None else (str(row[0]), float(row[1]))

    def set_pass_lease(self, name: str, holder: str, until: float) -> None:
        self.conn.execute(
            "INSERT OR REPLACE INTO pass_leases (name, holder, until) VALUES (?, ?, ?)",
            (name, holder, until),
        )

    def drop_pass_lease(self, name: str) -> None:
        self.conn.execute("DELETE FROM pass_leases WHERE name = ?", (name,))


class SQLiteStore(TransactionalStore):
    """Records in one SQLite file; every move runs in one ``BEGIN IMMEDIATE`` transaction, on the
    event loop when it cannot wait, else on the store's own thread. ``busy_timeout_seconds``
    bounds the wait for another connection's lock there (StoreError after it)."""

    def __init__(
        self,
        path: str | Path,
        *,
        busy_timeout_seconds: float = BUSY_TIMEOUT_SECONDS,
        owner: str | None = LOCAL_OWNER,
    ) -> None:
        self.path = Path(path)
        #: The file is one local server's (its folder lock says so): every record in flight
        #: is in the due index, for that server's restart sweep.
        self.owner = owner
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # The thread's connection waits for locks; the loop's never does (timeout 0) and
            # leaves checkpoints to the thread.
            self._patient = self._connect(busy_timeout_seconds)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the SQLite store at {self.path}: {exc}") from exc
        try:
            self._patient.executescript(_SCHEMA)
            _migrate(self._patient)
            self._patient.executescript(_DUE_INDEX)
            self._prompt = self._connect(0)
            self._prompt.execute("PRAGMA wal_autocheckpoint=0")
        except (OSError, sqlite3.Error) as exc:
            self._patient.close()
            raise StoreError(f"cannot open the SQLite store at {self.path}: {exc}") from exc
        # Each connection is used by one caller at a time; the loop's lock is only ever tried.
        self._prompt_lock = threading.Lock()
        self._patient_lock = threading.Lock()
        #: Set while _run tries a transaction on the loop's connection, in the loop's thread.
        self._local = threading.local()
        # One worker: SQLite admits one writer, so more threads would only queue on its lock.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rollout-sdk-sqlite")
        self._since_checkpoint = 0
        self._closed = False

    def _connect(self, timeout: float) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=timeout
        )
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    async def _run(self, work: Callable[[], T]) -> T:
        if self._closed:
            raise StoreError(f"SQLite store {self.path} is closed")
        if self._prompt_lock.acquire(blocking=False):
            self._local.prompt = True
            try:
                result = work()
            except _WouldWait:
                pass  # locked by another connection: the thread waits for it instead
            else:
                self._count_commit()
                return result
            finally:
                self._local.prompt = False
                self._prompt_lock.release()
        return await asyncio.get_running_loop().run_in_executor(self._executor, work)

    def _count_commit(self) -> None:
        self._since_checkpoint += 1
        if self._since_checkpoint >= CHECKPOINT_EVERY:
            self._since_checkpoint = 0
            self._executor.submit(self._checkpoint)

    def _checkpoint(self) -> None:
        # A failed checkpoint is caught up by the next (or by SQLite's own, on this connection).
        with self._patient_lock, contextlib.suppress(sqlite3.Error):
            self._patient.execute("PRAGMA wal_checkpoint(PASSIVE)")

    @contextmanager
    def _transaction(self) -> Iterator[_SQLiteTransaction]:
        if getattr(self._local, "prompt", False):
            # Tried on the loop by _run, which holds the loop connection's lock.
            yield from self._in_transaction(self._prompt, may_wait=False)
        else:
            # On the store's thread, or a synchronous caller of its own: it may wait.
            with self._patient_lock:
                yield from self._in_transaction(self._patient, may_wait=True)

    def _in_transaction(
        self, conn: sqlite3.Connection, *, may_wait: bool
    ) -> Iterator[_SQLiteTransaction]:
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            # The extended code's low byte is the primary one: BUSY_RECOVERY, _SNAPSHOT, ...
            if not may_wait and exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY:
                raise _WouldWait from exc
            raise StoreError(f"SQLite store {self.path}: {exc}") from exc
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite store {self.path}: {exc}") from exc
        try:
            yield _SQLiteTransaction(conn)
        except sqlite3.Error as exc:
            conn.execute("ROLLBACK")
            raise StoreError(f"SQLite store {self.path}: {exc}") from exc
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            conn.execute("ROLLBACK")
            raise StoreError(f"SQLite store {self.path}: commit failed: {exc}") from exc

    def _due(self, until: float, limit: int, after: DueCursor | None) -> DuePage:
        start_at, start_id = after if after is not None else (float("-inf"), "")
        with self._transaction() as txn:
            rows = txn.conn.execute(
                "SELECT due_at, rollout_id FROM rollouts INDEXED BY rollouts_due "
                "WHERE due_at IS NOT NULL AND due_at <= ? AND (due_at, rollout_id) > (?, ?) "
                "ORDER BY due_at, rollout_id LIMIT ?",
                (until, start_at, start_id, limit + 1),
            ).fetchall()
        page = rows[:limit]
        cursor = (page[-1][0], page[-1][1]) if len(rows) > limit else None
        return DuePage([str(rid) for _, rid in page], cursor)

    def purge_expired(self, now: float) -> int:
        """Delete records whose TTL has passed; returns how many."""
        with self._transaction() as txn:
            cur = txn.conn.execute("DELETE FROM rollouts WHERE expires_at <= ?", (now,))
            return cur.rowcount

    def _close(self) -> None:
        with self._patient_lock, self._prompt_lock:
            self._prompt.close()
            self._patient.close()

    def close_now(self) -> None:
        """Close the database file at once, from synchronous code that ran nothing on it yet
        (a server that failed to start)."""
        if self._closed:
            return
        self._closed = True
        self._executor.submit(self._close).result()
        self._executor.shutdown(wait=True)

    async def close(self) -> None:
        """Close the database file, after the transactions already handed to the thread."""
        if self._closed:
            return
        self._closed = True  # later operations fail at once; those already queued still run
        await asyncio.get_running_loop().run_in_executor(self._executor, self._close)
        self._executor.shutdown(wait=True)  # the thread is idle now: this only joins it
