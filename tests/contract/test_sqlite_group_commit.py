"""The SQLite store's group commit: the moves a loop iteration makes on the loop's connection
share one transaction (each in a savepoint) and one COMMIT, and no move is answered before the
COMMIT that holds its write has succeeded.

To catch the loop between a group's moves and its COMMIT (scheduled with ``call_soon`` when the
group opens), a test starts tasks and yields once (``asyncio.sleep(0)``, no timed wait): the
tasks run their moves in the next iteration, ahead of the test, and the COMMIT comes after it.
The test checks the group is open before relying on it.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest

from rollout_sdk.errors import StoreError
from rollout_sdk.store import sqlite as sqlite_store
from rollout_sdk.store.record import RecordState, RolloutRecord
from rollout_sdk.store.sqlite import SQLiteStore

from .records import NOW, claim, make_record

#: How long a blocked thread or a waiting connection holds on before the test fails.
HOLD = 5.0

# A move that is never answered (a group whose COMMIT never runs) hangs its caller: fail soon.
pytestmark = pytest.mark.timeout(30)


class Grouped(SQLiteStore):
    """The store with its creates grouped like every other move. The real one commits a create
    at once (``urgent``: init's 202 waits on it; tested below, on SQLiteStore itself); these
    tests need many writes of new rows in one group, and create is the move that makes them."""

    async def _run(self, work: Callable[[], Any], *, urgent: bool = False) -> Any:
        return await super()._run(work)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    opened = Grouped(tmp_path / "rollouts.sqlite3", busy_timeout_seconds=HOLD)
    try:
        yield opened
    finally:
        await opened.close()


def _rows(store: SQLiteStore) -> dict[str, str]:
    """Each row's state, as another connection reads the file (committed rows only)."""
    with closing(sqlite3.connect(store.path)) as conn:
        return dict(conn.execute("SELECT rollout_id, state FROM rollouts").fetchall())


@contextmanager
def _statements(conn: sqlite3.Connection) -> Iterator[list[str]]:
    """The statements ``conn`` runs meanwhile, in order."""
    seen: list[str] = []
    conn.set_trace_callback(seen.append)
    try:
        yield seen
    finally:
        conn.set_trace_callback(None)


def _deny_commit_once(conn: sqlite3.Connection) -> None:
    """The next COMMIT on ``conn`` fails (the disk full, an I/O error), the ones after succeed."""
    denied: list[bool] = []

    def authorize(action: int, arg1: str | None, *_: Any) -> int:
        if action == sqlite3.SQLITE_TRANSACTION and arg1 == "COMMIT" and not denied:
            denied.append(True)
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    conn.set_authorizer(authorize)


async def _create(store: SQLiteStore, *rollout_ids: str) -> list[Any]:
    """Create ``rollout_ids`` at once (their moves in one loop iteration); each outcome."""
    return await asyncio.gather(
        *(store.create(make_record(rid), now=NOW) for rid in rollout_ids), return_exceptions=True
    )


async def test_the_moves_of_one_loop_iteration_share_one_commit(store: SQLiteStore) -> None:
    ids = [f"r-{index}" for index in range(10)]
    with _statements(store._prompt) as seen:
        created = await _create(store, *ids)
    assert all(result.created for result in created)
    assert seen.count("BEGIN IMMEDIATE") == 1
    assert seen.count("COMMIT") == 1
    assert seen.count("SAVEPOINT move") == len(ids)  # each move in a savepoint of its own
    assert _rows(store) == dict.fromkeys(ids, RecordState.ACCEPTED.value)
    # A caller's next move, after its answer, is in a later group.
    with _statements(store._prompt) as seen:
        for rid in ids[:3]:
            await claim(store, rid)
    assert seen.count("COMMIT") == 3


async def test_no_move_is_answered_before_its_commit(store: SQLiteStore) -> None:
    events: list[str] = []

    async def create(rollout_id: str) -> None:
        assert (await store.create(make_record(rollout_id), now=NOW)).created
        events.append(f"answered {rollout_id}")

    store._prompt.set_trace_callback(lambda sql: events.append(sql) if sql == "COMMIT" else None)
    await asyncio.gather(create("r-1"), create("r-2"), create("r-3"))
    store._prompt.set_trace_callback(None)
    assert events[0] == "COMMIT"
    assert sorted(events[1:]) == ["answered r-1", "answered r-2", "answered r-3"]


async def test_a_failed_commit_fails_every_move_of_its_group_and_writes_none(
    store: SQLiteStore,
) -> None:
    assert (await store.create(make_record("before"), now=NOW)).created
    _deny_commit_once(store._prompt)
    outcomes = await _create(store, "r-1", "r-2", "r-3")
    assert all(isinstance(outcome, StoreError) for outcome in outcomes), outcomes
    assert all("commit failed" in str(outcome) for outcome in outcomes)
    assert _rows(store) == {"before": RecordState.ACCEPTED.value}
    # Nothing of it is read back on the loop's connection either, and the store goes on.
    assert await store.get("r-1", now=NOW) is None
    assert all(result.created for result in await _create(store, "r-1", "r-2"))
    assert set(_rows(store)) == {"before", "r-1", "r-2"}


async def test_a_rolled_back_group_leaves_no_kept_body_trusted(store: SQLiteStore) -> None:
    created = await store.create(make_record(), now=NOW)
    assert created.created
    accepted = created.record
    _deny_commit_once(store._prompt)
    with pytest.raises(StoreError, match="commit failed"):
        await claim(store)
    # The kept entry claims the claimed body, which no COMMIT wrote...
    kept = store._encodings.get("r-1")
    assert kept is not None and kept.record.state == RecordState.RUNNING
    # ... and a read compares it with the file's row: the record is still the accepted one.
    assert await store.get("r-1", now=NOW + 1) == accepted
    running = await claim(store)
    with closing(sqlite3.connect(store.path)) as conn:
        body = conn.execute("SELECT body FROM rollouts WHERE rollout_id = 'r-1'").fetchone()[0]
    assert body == json.dumps(running.to_dict(), separators=(",", ":"))


async def test_a_move_that_raises_in_a_group_rolls_back_only_itself(store: SQLiteStore) -> None:
    def failing() -> None:
        with store._transaction() as txn:
            txn.put(make_record("r-2"))
            raise RuntimeError("after the put")

    async def get_r2() -> RolloutRecord | None:
        return await store.get("r-2", now=NOW)

    with _statements(store._prompt) as seen:
        first, failed, seen_r2, third = await asyncio.gather(
            store.create(make_record("r-1"), now=NOW),
            store._run(failing),
            get_r2(),  # a later move of the same group: the failed one's write is not there
            store.create(make_record("r-3"), now=NOW),
            return_exceptions=True,
        )
    assert isinstance(failed, RuntimeError)
    assert seen_r2 is None
    assert first.created and third.created  # type: ignore[union-attr]
    assert seen.count("COMMIT") == 1
    assert "ROLLBACK TO move" in seen
    assert _rows(store) == {"r-1": "ACCEPTED", "r-3": "ACCEPTED"}


async def test_a_move_sees_the_earlier_moves_of_its_group(store: SQLiteStore) -> None:
    with _statements(store._prompt) as seen:
        first, duplicate = await asyncio.gather(
            store.create(make_record("r-1", key="k"), now=NOW),
            store.create(make_record("r-2", key="k"), now=NOW),
        )
    assert seen.count("COMMIT") == 1
    assert first.created
    assert (duplicate.created, duplicate.conflict_on) == (False, "slot")
    assert duplicate.record == first.record


async def test_moves_go_to_the_thread_while_it_holds_the_write_lock_and_complete(
    store: SQLiteStore,
) -> None:
    assert (await store.create(make_record("r-1"), now=NOW)).created
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        # A synchronous caller on a thread of its own (a purge, a migration): the thread's
        # connection, holding the write lock until released.
        with store._transaction() as txn:
            txn.put(make_record("held"))
            holding.set()
            if not release.wait(HOLD):
                raise TimeoutError("never released")

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(HOLD)
        with _statements(store._prompt) as seen:
            waiting = asyncio.gather(claim(store, "r-1"), store.create(make_record("r-2"), now=NOW))
            await asyncio.sleep(0)  # one iteration: the moves try the loop's connection
            assert seen.count("BEGIN IMMEDIATE") == 1  # refused at once (busy): to the thread
            # Another move while they wait there opens no group: it queues behind them.
            later = asyncio.ensure_future(store.get("r-1", now=NOW + 1))
            await asyncio.sleep(0)
            assert seen.count("BEGIN IMMEDIATE") == 1
            assert not waiting.done()
        release.set()
        claimed, created = await asyncio.wait_for(waiting, HOLD)
        got = await asyncio.wait_for(later, HOLD)
    finally:
        release.set()
        holder.join(HOLD)
    assert created.created
    assert got == claimed
    assert _rows(store) == {"r-1": "RUNNING", "r-2": "ACCEPTED", "held": "ACCEPTED"}


async def test_the_loop_groups_again_once_the_thread_is_done_even_after_a_failure(
    store: SQLiteStore,
) -> None:
    def failing() -> None:
        with store._transaction() as txn:
            txn.put(make_record("r-1"))
            raise RuntimeError("after the put")

    other = sqlite3.connect(store.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        on_thread = asyncio.ensure_future(store._run(failing))
        await asyncio.sleep(0)  # one iteration: refused on the loop, it waits on the thread
        assert not on_thread.done()
    finally:
        other.execute("ROLLBACK")
        other.close()
    with pytest.raises(RuntimeError, match="after the put"):
        await asyncio.wait_for(on_thread, HOLD)
    with _statements(store._prompt) as seen:
        assert all(result.created for result in await _create(store, "r-2", "r-3"))
    assert seen.count("COMMIT") == 1  # on the loop again, in one group
    assert _rows(store) == {"r-2": "ACCEPTED", "r-3": "ACCEPTED"}


async def test_a_thread_transaction_waits_for_an_open_group_and_no_one_deadlocks(
    tmp_path: Path,
) -> None:
    # A short busy timeout: a deadlock would fail the thread's transaction in a second.
    store = Grouped(tmp_path / "rollouts.sqlite3", busy_timeout_seconds=1.0)
    began = threading.Event()
    store._patient.set_trace_callback(lambda sql: began.set() if sql == "BEGIN IMMEDIATE" else None)
    loop = asyncio.get_running_loop()
    waiting: list[asyncio.Future[None]] = []

    def put(rollout_id: str) -> None:
        with store._transaction() as txn:
            txn.put(make_record(rollout_id))

    def in_the_group() -> None:
        put("in-group")
        # A transaction on another thread wants the write lock the open group holds...
        waiting.append(loop.run_in_executor(None, put, "from-thread"))
        assert began.wait(HOLD)  # ... and waits for it in its busy handler
        assert _rows(store) == {}

    try:
        await asyncio.wait_for(store._run(in_the_group), HOLD)
        await asyncio.wait_for(waiting[0], HOLD)
        assert _rows(store) == {"in-group": "ACCEPTED", "from-thread": "ACCEPTED"}
    finally:
        await store.close()


async def test_a_synchronous_caller_on_the_loop_commits_the_open_group_first(
    tmp_path: Path,
) -> None:
    # Without that it would wait for a lock only this thread's next loop iteration drops.
    store = Grouped(tmp_path / "rollouts.sqlite3", busy_timeout_seconds=1.0)
    try:
        tasks = [asyncio.ensure_future(store.create(make_record(rid), now=NOW)) for rid in "ab"]
        await asyncio.sleep(0)
        assert store._group is not None and len(store._group.waiters) == 2
        assert store.purge_expired(NOW) == 0
        assert store._group is None
        assert _rows(store) == {"a": "ACCEPTED", "b": "ACCEPTED"}
        assert all(result.created for result in await asyncio.gather(*tasks))
    finally:
        await store.close()


@pytest.mark.parametrize("fails", [False, True])
async def test_close_commits_or_fails_the_open_group(store: SQLiteStore, fails: bool) -> None:
    if fails:
        _deny_commit_once(store._prompt)
    tasks = [asyncio.ensure_future(store.create(make_record(rid), now=NOW)) for rid in "ab"]
    await asyncio.sleep(0)
    assert store._group is not None and len(store._group.waiters) == 2
    await store.close()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    if fails:
        assert all(isinstance(outcome, StoreError) for outcome in outcomes)
        assert _rows(store) == {}
    else:
        assert all(outcome.created for outcome in outcomes)  # type: ignore[union-attr]
        assert _rows(store) == {"a": "ACCEPTED", "b": "ACCEPTED"}


async def test_close_now_on_the_loop_commits_the_open_group(tmp_path: Path) -> None:
    # Synchronous: without committing the group first, its thread would wait for ever for the
    # loop connection's lock, which only this (blocked) thread's next iteration drops.
    store = Grouped(tmp_path / "rollouts.sqlite3")
    task = asyncio.ensure_future(store.create(make_record(), now=NOW))
    await asyncio.sleep(0)
    assert store._group is not None
    store.close_now()
    assert (await asyncio.wait_for(task, HOLD)).created
    assert _rows(store) == {"r-1": "ACCEPTED"}


async def test_checkpoints_count_commits_not_moves(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_store, "CHECKPOINT_EVERY", 2)
    checkpoints: list[str] = []
    checkpoint: Callable[[], None] = store._checkpoint

    def counted() -> None:
        checkpoints.append(threading.current_thread().name)
        checkpoint()

    monkeypatch.setattr(store, "_checkpoint", counted)
    for group in range(3):  # three groups of five moves: three commits, one checkpoint
        await _create(store, *(f"r-{group}-{index}" for index in range(5)))
    await store.close()  # after the checkpoint handed to the store's thread
    assert len(checkpoints) == 1
    assert checkpoints[0].startswith("rollout-sdk-sqlite")


async def test_a_create_commits_at_once_with_its_group(tmp_path: Path) -> None:
    # The real store: init's 202 waits on its create, so the create does not wait for the next
    # iteration's COMMIT; the group's other moves commit with it.
    store = SQLiteStore(tmp_path / "rollouts.sqlite3")
    try:
        assert (await store.create(make_record("r-1"), now=NOW)).created
        with _statements(store._prompt) as seen:
            claiming = asyncio.ensure_future(claim(store, "r-1"))
            await asyncio.sleep(0)  # the claim runs in its group, not committed yet
            assert store._group is not None and len(store._group.waiters) == 1
            created = await store.create(make_record("r-2"), now=NOW)
            assert created.created
            # Answered without a loop iteration passing: the claim, answered by the same
            # COMMIT, has not even woken yet (waiting for the group, it would have: its task
            # was woken first).
            assert not claiming.done()
            # Answered with its write in the file, and the claim's with it, in one COMMIT.
            assert _rows(store) == {"r-1": "RUNNING", "r-2": "ACCEPTED"}
            assert seen.count("COMMIT") == 1
            assert store._group is None
            assert (await asyncio.wait_for(claiming, HOLD)).state == RecordState.RUNNING
    finally:
        await store.close()


async def test_a_create_whose_commit_fails_raises(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "rollouts.sqlite3")
    try:
        _deny_commit_once(store._prompt)
        with pytest.raises(StoreError, match="commit failed"):
            await store.create(make_record("r-1"), now=NOW)
        assert _rows(store) == {}
        assert (await store.create(make_record("r-1"), now=NOW)).created
    finally:
        await store.close()
