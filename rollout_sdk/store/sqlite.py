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

The loop's moves commit in groups (see ``SQLiteStore._run``): the first move of a loop
iteration opens one ``BEGIN IMMEDIATE`` on the loop's connection, every move of that iteration
runs in a ``SAVEPOINT`` of it (a move that raises undoes only itself; each sees the moves before
it), and one ``COMMIT`` at the next iteration ends it; no move is answered before that COMMIT
has succeeded, and every move of a group whose COMMIT fails raises StoreError. A create (init's
202 waits on it: ``urgent``) commits its group at once, with itself, instead of waiting for the
next iteration: waiting there put init's p50 at 39-48 ms against 31-33 (sqlite, 500 rollouts,
50 in flight, 3 runs alternated) for no CPU saved. A group's BEGIN
that finds the write lock held by another connection is refused at once, and its move goes to
the thread as above; while moves wait there, no group opens. Measured with
``python -m bench.store_moves --store sqlite`` (1,000 rollouts of four moves, 50 in flight, on a
2-core machine; nine runs of each, interleaved), a BEGIN and a COMMIT per move cost 620 to 920
us of CPU a rollout (median 825), against 420 to 610 with the group (median 491; about 50 moves
a commit there) and 60 to 100 for the in-memory store (median 88): a commit takes and drops
the file locks and writes every page it changed to the WAL again (the same table and index
pages, move after move), so once per group instead of once per move. The WAL those rollouts
wrote shrank from 106 MB to 15 MB.

Each record is one JSON ``body`` (with the columns the queries need beside it). A move reads the
body and writes it whole again, but most of it never changes after create (the request, the tool
schemas) or after finish (the final response), so the store keeps, per rollout in flight, the
body it last wrote or read, the record that body encodes, and the JSON text of each part of it
(:class:`_Encodings`): a read whose selected body is the kept text returns the kept record
without decoding it, and a write encodes only the parts that changed and joins the kept texts
of the others. The file holds the same complete JSON object either way, byte for byte what
``json.dumps`` of the record's dict writes, so a state folder reads the same with or without
the cache, in this kit or an older one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

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
#: Most rollouts whose last body the store keeps (:class:`_Encodings`; the longest unused goes
#: first): a few thousand in flight at once, each entry a body and the record it encodes.
CACHED_ROLLOUTS = 2048
#: Most characters of body the store keeps in all (bodies are ASCII: bytes), so a few thousand
#: large rollouts (an init may be 6 MiB) do not hold gigabytes; about 16 KiB a rollout.
CACHED_BODY_CHARS = 32 * 1024 * 1024


_SCHEMA = """
CREATE TABLE IF NOT EXISTS rollouts (
    rollout_id TEXT PRIMARY KEY,
    slot       TEXT NOT NULL,
    state      TEXT NOT NULL,
    expires_at REAL NOT NULL,
    body       TEXT NOT NULL,
    due_at     REAL,
    poll_until REAL
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
CREATE INDEX IF NOT EXISTS rollouts_polled ON rollouts (poll_until, rollout_id)
    WHERE poll_until IS NOT NULL;
"""


def _migrate(conn: sqlite3.Connection) -> None:
    """Bring a state folder written before the due index or the live index up to date."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(rollouts)")}
    if "due_at" not in columns:
        _add_due_index(conn)
    if "poll_until" not in columns:
        _add_live_index(conn)


def _add_live_index(conn: sqlite3.Connection) -> None:
    """Add the live index's column, and fill it from each record still in flight (0.3.8
    rollouts written before it: the lease check and cancel by prefix find them)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("ALTER TABLE rollouts ADD COLUMN poll_until REAL")
        conn.execute(
            "UPDATE rollouts SET poll_until = json_extract(body, '$.poll_until') "
            "WHERE state IN (?, ?)",
            (RecordState.ACCEPTED.value, RecordState.RUNNING.value),
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _add_due_index(conn: sqlite3.Connection) -> None:
    """Add the due index's column, and give every record still in flight its due time (as a
    store with an owner has it: see :mod:`rollout_sdk.store.base`), so the restart sweep and
    the re-drive find it."""
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


# ---------------------------------------------------------------------- the kept encodings
#
# Why by hand: what is kept is this store's own last encoding of each row, valid only while the
# row still holds that very text, which no JSON or caching library can know. Measured before it
# (``python -m bench.profile --store sqlite``: py-spy on the local server under load),
# ``json.dumps`` of the whole record in ``put`` took 6.2% of all the server's CPU, the decoding
# of the whole body in ``by_id`` 4.9% and ``RolloutRecord.from_dict`` 1.1% more, four
# transactions a rollout (create, claim, finish, deliver), for parts that mostly never change.

#: One JSON encoder, as ``json.dumps(..., separators=(",", ":"))`` builds for each call.
_ENCODE = json.JSONEncoder(separators=(",", ":")).encode
#: The record's big fields: never changed by a move after create (the request, the tool
#: schemas) or after finish (the final response).
_BIG = frozenset({"request", "init_response", "response"})
#: States no move leaves (no guard admits them): nothing rewrites the record again, so its
#: entry goes. FINISHED stays kept: park and reclaim_delivery (the re-drive) still move it.
_FINAL = frozenset({RecordState.DELIVERED, RecordState.UNDELIVERABLE})


def _pieces() -> tuple[tuple[str, ...], ...]:
    """The body's members in ``to_dict`` order (the dataclass fields'), cut into pieces whose
    JSON text is kept: each big field alone, and each run of small fields between them (the
    first run, the id, slot and fingerprint, never changes either)."""
    pieces: list[tuple[str, ...]] = []
    run: list[str] = []
    for name in RolloutRecord.__dataclass_fields__:
        if name in _BIG:
            pieces.extend([tuple(run), (name,)] if run else [(name,)])
            run = []
        else:
            run.append(name)
    if run:
        pieces.append(tuple(run))
    return tuple(pieces)


_PIECES = _pieces()


class _Kept(NamedTuple):
    """What the store last wrote or read for one rollout."""

    #: The row's body as this store last wrote or selected it.
    body: str
    #: The record ``body`` encodes (encoded to it, or decoded from it).
    record: RolloutRecord
    #: Where in ``body`` each of ``_PIECES`` of ``record`` is written (its members, ``"k":v,...``,
    #: from start to end), None where not known (after a read). Holding ``record`` holds the
    #: very objects each piece encodes, so an ``is`` against them can never match a new object
    #: that took a collected one's id.
    spans: tuple[tuple[int, int] | None, ...]


_UNKNOWN: tuple[tuple[int, int] | None, ...] = (None,) * len(_PIECES)


class _Encodings:
    """Per rollout id, the last body this store wrote or read and the record it encodes (a
    :class:`_Kept`), at most ``capacity`` of them and ``max_chars`` of body in all, the longest
    unused dropped first.

    Never trusted alone: a read returns the kept record only when the body it selected from the
    file is the kept text (another connection, process or older kit may have rewritten the
    row). So an entry that claims a text the file does not hold (its transaction, savepoint or
    group rolled back, or the row changed behind this store) costs a decode, never a wrong
    record. Kept records are shared with callers, as the memory store shares its records:
    records are immutable and nothing changes their dicts in place (a kept text is only reused
    for the very same object).

    Both connections' transactions use one instance, from the loop's thread and the store's
    thread; each check-then-act on the dict runs under ``_lock`` (the encoding and decoding run
    outside it). Every entry is complete and consistent on its own, so whichever of two racing
    writers lands last leaves a valid entry.
    """

    def __init__(self, capacity: int, max_chars: int = CACHED_BODY_CHARS) -> None:
        self.capacity = capacity
        self.max_chars = max_chars
        self._kept: OrderedDict[str, _Kept] = OrderedDict()
        #: The length of every kept body, summed.
        self.chars = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, rollout_id: str) -> _Kept | None:
        """The entry of ``rollout_id``, if kept."""
        with self._lock:
            return self._kept.get(rollout_id)

    def decode(self, rollout_id: str, body: str) -> RolloutRecord:
        """The record of the ``body`` just selected for ``rollout_id``."""
        with self._lock:
            kept = self._kept.get(rollout_id)
            if kept is not None and kept.body == body:
                self._kept.move_to_end(rollout_id)
                return kept.record
        record = RolloutRecord.from_dict(json.loads(body))
        self._keep(_Kept(body, record, _UNKNOWN))
        return record

    def encode(self, record: RolloutRecord) -> str:
        """``record``'s body: the same text as ``json.dumps(record.to_dict(),
        separators=(",", ":"))``, a piece's kept text reused when each of its values is the
        very object the kept record has (a move's new version shares them: ``replace``)."""
        kept = self.get(record.rollout_id)  # immutable: used outside the lock
        data: dict[str, Any] | None = None
        texts: list[str] = []
        spans: list[tuple[int, int] | None] = []
        at = 1  # after the "{"
        for index, names in enumerate(_PIECES):
            if (
                kept is not None
                and (span := kept.spans[index]) is not None
                and all(getattr(kept.record, name) is getattr(record, name) for name in names)
            ):
                text = kept.body[span[0] : span[1]]
            else:
                if data is None:
                    data = record.to_dict()
                text = _ENCODE({name: data[name] for name in names})[1:-1]
            texts.append(text)
            spans.append((at, at + len(text)))
            at += len(text) + 1  # and the "," (or the "}")
        body = "{" + ",".join(texts) + "}"
        self._keep(_Kept(body, record, tuple(spans)))
        return body

    def _keep(self, kept: _Kept) -> None:
        rollout_id = kept.record.rollout_id
        with self._lock:
            self._drop(rollout_id)
            if kept.record.state in _FINAL or len(kept.body) > self.max_chars:
                return
            self._kept[rollout_id] = kept
            self.chars += len(kept.body)
            while len(self._kept) > self.capacity or self.chars > self.max_chars:
                self.chars -= len(self._kept.popitem(last=False)[1].body)

    def _drop(self, rollout_id: str) -> None:
        dropped = self._kept.pop(rollout_id, None)
        if dropped is not None:
            self.chars -= len(dropped.body)

    def forget(self, rollout_id: str) -> None:
        """Drop the entry of a deleted record."""
        with self._lock:
            self._drop(rollout_id)

    def forget_expired(self, now: float) -> None:
        """Drop the entries of records expired at ``now`` (purged from the file)."""
        with self._lock:
            for rollout_id in [k for k, kept in self._kept.items() if kept.record.is_expired(now)]:
                self._drop(rollout_id)


class _SQLiteTransaction:
    def __init__(self, conn: sqlite3.Connection, encodings: _Encodings) -> None:
        self.conn = conn
        self._encodings = encodings

    def _decode(self, row: Any) -> RolloutRecord | None:
        return None if row is None else self._encodings.decode(row[0], row[1])

    def by_id(self, rollout_id: str) -> RolloutRecord | None:
        cur = self.conn.execute(
            "SELECT rollout_id, body FROM rollouts WHERE rollout_id = ?", (rollout_id,)
        )
        return self._decode(cur.fetchone())

    def by_slot(self, slot: str) -> RolloutRecord | None:
        cur = self.conn.execute(
            "SELECT rollout_id, body FROM rollouts WHERE slot = ? ORDER BY expires_at DESC LIMIT 1",
            (slot,),
        )
        return self._decode(cur.fetchone())

    def put(self, record: RolloutRecord) -> None:
        # Kept before the commit: if the transaction rolls back, the entry claims a text the file
        # does not hold, which the next read's comparison with the selected body catches.
        self.conn.execute(
            "INSERT OR REPLACE INTO rollouts "
            "(rollout_id, slot, state, expires_at, body, due_at, poll_until) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                record.rollout_id,
                record.slot,
                record.state.value,
                record.expires_at,
                self._encodings.encode(record),
                record.due_at,
                record.poll_until,
            ),
        )

    def delete(self, rollout_id: str) -> None:
        self.conn.execute("DELETE FROM rollouts WHERE rollout_id = ?", (rollout_id,))
        self._encodings.forget(rollout_id)  # rolled back, the next read only decodes again

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


class _Group:
    """The moves that ran in the loop's connection's open transaction, one loop's, waiting for
    its COMMIT (each move's own future: a cancelled caller cancels only its own)."""

    __slots__ = ("broken", "done", "loop", "thread", "waiters")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        #: The thread that runs ``loop``: the only one that may commit the group while it runs.
        self.thread = threading.get_ident()
        self.waiters: list[asyncio.Future[None]] = []
        #: Why the group's transaction cannot commit (a move could not be undone alone, or
        #: SQLite rolled the whole transaction back), once known.
        self.broken: str | None = None
        self.done = False


class SQLiteStore(TransactionalStore):
    """Records in one SQLite file; every move runs in a ``BEGIN IMMEDIATE`` transaction: on the
    event loop, in a savepoint of the loop's open group (one COMMIT for the moves of a loop
    iteration), when it need not wait, else alone on the store's own thread.
    ``busy_timeout_seconds`` bounds the wait for another connection's lock there (StoreError
    after it); ``cached_rollouts`` bounds the rollouts whose last body it keeps
    (:class:`_Encodings`)."""

    def __init__(
        self,
        path: str | Path,
        *,
        busy_timeout_seconds: float = BUSY_TIMEOUT_SECONDS,
        owner: str | None = LOCAL_OWNER,
        cached_rollouts: int = CACHED_ROLLOUTS,
    ) -> None:
        self.path = Path(path)
        self._encodings = _Encodings(cached_rollouts)
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
        # Each connection is used by one caller at a time. The loop's lock is only ever tried,
        # and held from a group's BEGIN to its COMMIT (by the loop that opened it).
        self._prompt_lock = threading.Lock()
        self._patient_lock = threading.Lock()
        #: The open group on the loop's connection, if any (see _run).
        self._group: _Group | None = None
        #: In the thread running a move of the open group: that group (its savepoints).
        self._local = threading.local()
        # One worker: SQLite admits one writer, so more threads would only queue on its lock.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rollout-sdk-sqlite")
        #: Moves handed to the thread and not yet run: while any is, no group opens.
        self._on_thread = 0
        self._on_thread_lock = threading.Lock()
        self._since_checkpoint = 0
        self._closed = False

    def _connect(self, timeout: float) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=timeout
        )
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    # ------------------------------------------------------------------ group commit
    #
    # Why by hand: SQLite commits what one connection's transaction wrote; it has no notion of
    # one process's many logical transactions sharing a commit (its WAL writes each COMMIT's
    # pages as frames of their own, and takes and drops its file locks for each), so the store
    # groups its moves itself. Measured before it (``python -m bench.store_moves``), the SQLite
    # store cost about 740 us of CPU a rollout more than the in-memory one, four moves, much of
    # it in BEGIN and COMMIT: the same table and index pages written to the WAL again and again
    # (about 400 us more with the group: the module's docstring has the figures).
    #
    # A group is one ``BEGIN IMMEDIATE`` on the loop's connection, opened by the first move of a
    # loop iteration that finds none open; each move runs in a SAVEPOINT of it (a move that
    # raises rolls back to it and only it is undone), and its caller's awaitable resolves only
    # once the group's COMMIT has succeeded (StoreError when it failed: nothing of the group is
    # in the file). The COMMIT is scheduled with ``call_soon`` when the group opens, so it runs
    # at the next loop iteration, after every move of the current one. No size cap: each caller
    # waits for the group's commit before its next move, so a group holds at most one move per
    # task that ran in one iteration, and the write lock is held for one iteration whatever the
    # size; a cap would only add commits.
    #
    # The thread's connection never waits on the loop for anything but the write lock, which the
    # group drops at the next iteration without needing the thread: the loop's COMMIT never waits
    # for a lock (WAL commits need none beyond the write lock the group holds), so no deadlock.
    # While a move waits on the thread, no new group opens (its moves queue behind it on the
    # thread), so a group held almost every iteration under load cannot starve the thread's
    # busy handler until its timeout.

    async def _run(self, work: Callable[[], T], *, urgent: bool = False) -> T:
        if self._closed:
            raise StoreError(f"SQLite store {self.path} is closed")
        loop = asyncio.get_running_loop()
        group = self._group
        if group is None or group.loop is not loop:
            group = self._open_group(loop)
        if group is None:
            return await self._hand_to_thread(loop, work)
        self._local.group = group
        try:
            result = work()
        finally:
            self._local.group = None
        committed = loop.create_future()
        group.waiters.append(committed)
        if urgent:
            # An answer on the wire waits for it (init's 202): the group commits now, with
            # this move, rather than at the next iteration. Measured (sqlite, 500 rollouts,
            # 50 in flight, 3 runs alternated), waiting for the group put init's p50 at 39-48 ms
            # against 31-33 committed at once, for no CPU saved.
            self._commit_group(group)
            committed.result()  # StoreError when the COMMIT failed
            return result
        await committed
        return result

    def _open_group(self, loop: asyncio.AbstractEventLoop) -> _Group | None:
        """A new group on the loop's connection, or None when the move must go to the thread
        (another connection, or another loop's group, holds the write lock; or moves wait
        there already)."""
        self._settle_group()
        if self._on_thread or not self._prompt_lock.acquire(blocking=False):
            return None
        try:
            self._prompt.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            self._prompt_lock.release()
            # The extended code's low byte is the primary one: BUSY_RECOVERY, _SNAPSHOT, ...
            if (
                isinstance(exc, sqlite3.OperationalError)
                and exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY
            ):
                return None  # locked by another connection: the thread waits for it instead
            raise StoreError(f"SQLite store {self.path}: {exc}") from exc
        group = self._group = _Group(loop)
        loop.call_soon(self._commit_group, group)
        return group

    def _commit_group(self, group: _Group) -> None:
        """COMMIT ``group`` (ROLLBACK it when it cannot) and answer its moves."""
        if group.done:
            return  # committed early: by close, or a synchronous caller of _transaction
        group.done = True
        self._group = None
        error = group.broken
        try:
            if error is None:
                try:
                    self._prompt.execute("COMMIT")
                except sqlite3.Error as exc:
                    error = f"commit failed: {exc}"
            if error is not None and self._prompt.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    self._prompt.execute("ROLLBACK")
        finally:
            self._prompt_lock.release()
        if error is None:
            self._count_commit()
        for committed in group.waiters:
            if committed.done():
                continue  # its caller was cancelled
            with contextlib.suppress(RuntimeError):  # its loop is closed: no one waits
                if error is None:
                    committed.set_result(None)
                else:
                    committed.set_exception(StoreError(f"SQLite store {self.path}: {error}"))

    def _settle_group(self) -> None:
        """Commit the open group now if this thread runs its loop (a synchronous caller there
        would otherwise wait for a lock that only this thread's next iteration drops), or if
        its loop is closed (its commit will never run)."""
        group = self._group
        if group is not None and (group.thread == threading.get_ident() or group.loop.is_closed()):
            self._commit_group(group)

    async def _hand_to_thread(self, loop: asyncio.AbstractEventLoop, work: Callable[[], T]) -> T:
        def counted() -> T:
            try:
                return work()
            finally:
                with self._on_thread_lock:
                    self._on_thread -= 1

        with self._on_thread_lock:
            self._on_thread += 1
        try:
            on_thread = loop.run_in_executor(self._executor, counted)
        except RuntimeError:  # shut down: counted never runs
            with self._on_thread_lock:
                self._on_thread -= 1
            raise
        return await on_thread

    def _count_commit(self) -> None:
        self._since_checkpoint += 1
        if self._since_checkpoint >= CHECKPOINT_EVERY:
            self._since_checkpoint = 0
            with contextlib.suppress(RuntimeError):  # shut down: closing, nothing to catch up
                self._executor.submit(self._checkpoint)

    def _checkpoint(self) -> None:
        # A failed checkpoint is caught up by the next (or by SQLite's own, on this connection).
        with self._patient_lock, contextlib.suppress(sqlite3.Error):
            self._patient.execute("PRAGMA wal_checkpoint(PASSIVE)")

    @contextmanager
    def _transaction(self) -> Iterator[_SQLiteTransaction]:
        group: _Group | None = getattr(self._local, "group", None)
        if group is not None:
            # A move of the open group, run by _run on the loop: a savepoint of the group.
            yield from self._in_savepoint(group)
        else:
            # On the store's thread, or a synchronous caller of its own: it may wait.
            self._settle_group()
            with self._patient_lock:
                yield from self._in_transaction(self._patient)

    def _in_savepoint(self, group: _Group) -> Iterator[_SQLiteTransaction]:
        conn = self._prompt
        if group.broken is None and not conn.in_transaction:
            group.broken = "the transaction was rolled back"  # by SQLite, after an error
        if group.broken is not None:
            raise StoreError(f"SQLite store {self.path}: {group.broken}")
        yield from self._unit(
            conn, "SAVEPOINT move", "RELEASE move", lambda: self._undo_move(group), ended=""
        )

    def _undo_move(self, group: _Group) -> None:
        """Roll the group back to the move's savepoint; when even that fails, the whole group
        fails (its COMMIT becomes a ROLLBACK, and every move of it raises StoreError)."""
        try:
            self._prompt.execute("ROLLBACK TO move")
            self._prompt.execute("RELEASE move")
        except sqlite3.Error as exc:
            group.broken = f"a failed move could not be undone alone: {exc}"

    def _in_transaction(self, conn: sqlite3.Connection) -> Iterator[_SQLiteTransaction]:
        yield from self._unit(
            conn,
            "BEGIN IMMEDIATE",
            "COMMIT",
            lambda: conn.execute("ROLLBACK"),
            ended="commit failed: ",
        )

    def _unit(
        self,
        conn: sqlite3.Connection,
        begin: str,
        end: str,
        undo: Callable[[], object],
        *,
        ended: str,
    ) -> Iterator[_SQLiteTransaction]:
        """One unit of work on ``conn`` (a transaction, or a move's savepoint in a group):
        ``begin``, the block, ``end``; ``undo`` when the block or ``end`` fails. An SQLite
        error becomes StoreError (``ended`` prefixes one from ``end``)."""
        try:
            conn.execute(begin)
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite store {self.path}: {exc}") from exc
        try:
            yield _SQLiteTransaction(conn, self._encodings)
        except sqlite3.Error as exc:
            undo()
            raise StoreError(f"SQLite store {self.path}: {exc}") from exc
        except BaseException:
            undo()
            raise
        try:
            conn.execute(end)
        except sqlite3.Error as exc:
            undo()
            raise StoreError(f"SQLite store {self.path}: {ended}{exc}") from exc

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

    def _polled(self, ended_by: float, prefix: str, limit: int, after: DueCursor | None) -> DuePage:
        start_at, start_id = after if after is not None else (float("-inf"), "")
        with self._transaction() as txn:
            rows = txn.conn.execute(
                "SELECT poll_until, rollout_id FROM rollouts INDEXED BY rollouts_polled "
                "WHERE poll_until IS NOT NULL AND poll_until < ? "
                "AND substr(rollout_id, 1, ?) = ? AND (poll_until, rollout_id) > (?, ?) "
                "ORDER BY poll_until, rollout_id LIMIT ?",
                (ended_by, len(prefix), prefix, start_at, start_id, limit + 1),
            ).fetchall()
        page = rows[:limit]
        cursor = (page[-1][0], page[-1][1]) if len(rows) > limit else None
        return DuePage([str(rid) for _, rid in page], cursor)

    def _count_polled(self, now: float) -> int:
        with self._transaction() as txn:
            (count,) = txn.conn.execute(
                "SELECT count(*) FROM rollouts INDEXED BY rollouts_polled "
                "WHERE poll_until IS NOT NULL AND expires_at > ?",
                (now,),
            ).fetchone()
        return int(count)

    def purge_expired(self, now: float) -> int:
        """Delete records whose TTL has passed; returns how many."""
        with self._transaction() as txn:
            cur = txn.conn.execute("DELETE FROM rollouts WHERE expires_at <= ?", (now,))
            purged = cur.rowcount
        if purged:
            self._encodings.forget_expired(now)
        return purged

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
        self._settle_group()
        self._executor.submit(self._close).result()
        self._executor.shutdown(wait=True)

    async def close(self) -> None:
        """Close the database file, after the open group's commit (or its failure) and the
        transactions already handed to the thread."""
        if self._closed:
            return
        self._closed = True  # later operations fail at once; those already queued still run
        self._settle_group()  # the open group's moves are answered (committed, or StoreError)
        await asyncio.get_running_loop().run_in_executor(self._executor, self._close)
        self._executor.shutdown(wait=True)  # the thread is idle now: this only joins it
