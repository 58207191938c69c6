"""The SQLite store's kept bodies (``_Encodings``): a move encodes only what changed and reads
back what it wrote without decoding, yet the file is what it always was and always wins."""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path

import pytest

from rollout_sdk.store import sqlite as sqlite_store
from rollout_sdk.store.record import RecordState, RolloutRecord, expiry
from rollout_sdk.store.sqlite import _PIECES, SQLiteStore

from .records import NOW, RESPONSE, SEALED, TTL, claim, make_record, reach


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    opened = SQLiteStore(tmp_path / "rollouts.sqlite3")
    try:
        yield opened
    finally:
        await opened.close()


def _dumps(record: RolloutRecord) -> str:
    """The body as the store wrote it before it kept anything (and as an older kit writes it)."""
    return json.dumps(record.to_dict(), separators=(",", ":"))


def _body(store: SQLiteStore, rollout_id: str = "r-1") -> str:
    """The row's body as another connection reads it from the file."""
    with closing(sqlite3.connect(store.path)) as conn:
        row = conn.execute("SELECT body FROM rollouts WHERE rollout_id = ?", (rollout_id,))
        body: str = row.fetchone()[0]
    return body


def _rewrite(store: SQLiteStore, record: RolloutRecord, body: str | None = None) -> None:
    """Another connection (another process, an older kit, a hand edit) rewrites the row."""
    with closing(sqlite3.connect(store.path, isolation_level=None)) as conn:
        conn.execute(
            "UPDATE rollouts SET body = ? WHERE rollout_id = ?",
            (_dumps(record) if body is None else body, record.rollout_id),
        )


def _members_of(*names: str) -> set[str]:
    """Every member of the pieces that hold ``names``."""
    return {member for piece in _PIECES if set(piece) & set(names) for member in piece}


def _written(store: SQLiteStore, record: RolloutRecord | None) -> RolloutRecord:
    """``record`` is what the file holds, byte for byte as ``json.dumps`` writes it."""
    assert record is not None
    body = _body(store, record.rollout_id)
    assert body == _dumps(record)
    assert RolloutRecord.from_dict(json.loads(body)) == record
    return record


@pytest.fixture
def encoded(monkeypatch: pytest.MonkeyPatch) -> list[set[str]]:
    """The members of each piece the store encodes from here on (one set a call)."""
    calls: list[set[str]] = []

    def counting(value: dict[str, object]) -> str:
        calls.append(set(value))
        return original(value)

    original = sqlite_store._ENCODE
    monkeypatch.setattr(sqlite_store, "_ENCODE", counting)
    return calls


def _members(calls: list[set[str]]) -> set[str]:
    encoded = set().union(*calls)
    calls.clear()
    return encoded


async def test_every_move_writes_the_body_json_dumps_writes(
    store: SQLiteStore, encoded: list[set[str]]
) -> None:
    created = await store.create(make_record().evolve(sealed_key=SEALED), now=NOW)
    accepted = _written(store, created.record)
    assert {"request", "init_response", "rollout_id"} <= _members(encoded)
    running = _written(store, await claim(store))
    assert running.request is accepted.request  # a move's version shares the big parts...
    # ... so their text is reused, not encoded again (nor the id, slot and fingerprint).
    assert _members(encoded) == _members_of("state", "cancel_requested")
    finished = await store.finish(
        "r-1",
        attempt=1,
        response=RESPONSE,
        lease_until=NOW + 62,
        expires_at=expiry(NOW + 2, TTL),
        now=NOW + 2,
    )
    _written(store, finished.record)
    assert _members(encoded) == _members_of("state", "response", "cancel_requested")
    parked = await store.park(
        "r-1",
        attempt=1,
        error="503",
        next_attempt_at=NOW + 30,
        delivery_attempts=1,
        expires_at=expiry(NOW + 3, TTL),
        now=NOW + 3,
        extra={"cost": {"usd": 0.25, "note": "ünïcode"}},
    )
    _written(store, parked.record)
    reclaimed = await store.reclaim_delivery("r-1", attempt=1, lease_until=NOW + 90, now=NOW + 31)
    _written(store, reclaimed.record)
    assert "response" not in _members(encoded)
    # A new version whose big part is another object, equal in kind but not in content, gets
    # its own text, never the kept one.
    assert reclaimed.record is not None
    other = reclaimed.record.evolve(request={**reclaimed.record.request, "max_turns": 3})
    with store._transaction() as txn:
        txn.put(other)
    _written(store, other)
    assert "request" in _members(encoded)
    assert await store.get("r-1", now=NOW + 31) == other


async def test_a_read_returns_the_kept_record_without_decoding(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.create(make_record(), now=NOW)
    running = await claim(store)

    def no_decoding(data: object) -> RolloutRecord:
        raise AssertionError("decoded a body the store wrote itself")

    monkeypatch.setattr(RolloutRecord, "from_dict", no_decoding)
    assert await store.get("r-1", now=NOW + 1) is running
    # The slot's reader too (a duplicate init finds the holder).
    duplicate = await store.create(make_record(), now=NOW + 1)
    assert (duplicate.created, duplicate.record) == (False, running)
    assert duplicate.record is running


async def test_a_row_changed_behind_the_store_reads_as_the_file_says(store: SQLiteStore) -> None:
    await store.create(make_record(key="k"), now=NOW)
    running = await claim(store)
    elsewhere = running.evolve(attempt=7, cancel_requested=True, last_error="set elsewhere")
    _rewrite(store, elsewhere)
    assert await store.get("r-1", now=NOW + 1) == elsewhere
    # By slot as by id: a duplicate init sees the holder the file has.
    _rewrite(store, elsewhere.evolve(attempt=8))
    duplicate = await store.create(make_record("r-2", key="k"), now=NOW + 1)
    assert (duplicate.created, duplicate.record) == (False, elsewhere.evolve(attempt=8))
    # A move builds on the file's version, and writes it whole.
    finished = await store.finish(
        "r-1",
        attempt=8,
        response=RESPONSE,
        lease_until=NOW + 62,
        expires_at=expiry(NOW + 2, TTL),
        now=NOW + 2,
    )
    assert finished.applied
    assert _written(store, finished.record).last_error == "set elsewhere"
    # An older kit's spelling of the same record (other separators) reads as that record.
    assert finished.record is not None
    spelled = finished.record.evolve(attempt=9)
    _rewrite(store, spelled, json.dumps(spelled.to_dict(), indent=1))
    assert await store.get("r-1", now=NOW + 2) == spelled


async def test_a_rolled_back_put_leaves_the_next_read_on_the_old_row(store: SQLiteStore) -> None:
    await store.create(make_record(), now=NOW)
    running = await claim(store)
    changed = running.evolve(attempt=9, lease_until=None)
    with pytest.raises(RuntimeError, match="after the put"), store._transaction() as txn:
        txn.put(changed)
        raise RuntimeError("after the put")
    # The entry claims the rolled-back text, which the file does not hold...
    kept = store._encodings.get("r-1")
    assert kept is not None and kept.record is changed
    assert _body(store) == _dumps(running)
    # ... and the read, comparing it with the row it selected, decodes the row instead.
    assert await store.get("r-1", now=NOW + 1) == running
    moved = await store.renew(
        "r-1", state=RecordState.RUNNING, attempt=1, lease_until=NOW + 70, now=NOW + 2
    )
    assert moved.applied
    _written(store, moved.record)


def _kept_ids(store: SQLiteStore, count: int) -> list[str]:
    ids = [f"r-{index}" for index in range(count)]
    return [rollout_id for rollout_id in ids if store._encodings.get(rollout_id) is not None]


async def test_the_kept_bodies_stay_within_their_cap(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "capped.sqlite3", cached_rollouts=3)
    try:
        for index in range(5):
            assert (await store.create(make_record(f"r-{index}"), now=NOW)).created
        assert len(store._encodings) == 3
        assert _kept_ids(store, 5) == ["r-2", "r-3", "r-4"]  # the oldest went
        # A dropped one still reads right, from the file, and is kept again in place of the
        # longest unused (r-2); a read keeps r-3 in use, so r-4 goes next.
        first = await store.get("r-0", now=NOW)
        assert first == store.admitted(make_record("r-0"))
        assert await store.get("r-3", now=NOW) is not None
        await store.create(make_record("r-5"), now=NOW)
        assert len(store._encodings) == 3
        assert _kept_ids(store, 6) == ["r-0", "r-3", "r-5"]
    finally:
        await store.close()


async def test_the_kept_bodies_stay_within_their_character_budget(store: SQLiteStore) -> None:
    await store.create(make_record("r-0"), now=NOW)
    size = store._encodings.chars
    assert size == len(_body(store, "r-0"))
    store._encodings.max_chars = 2 * size + size // 2  # room for two bodies
    for index in range(1, 4):
        await store.create(make_record(f"r-{index}"), now=NOW)
    assert _kept_ids(store, 4) == ["r-2", "r-3"]
    assert store._encodings.chars == 2 * size
    # A body larger than the whole budget is not kept, nor does it push the others out.
    store._encodings.max_chars = 4 * size
    small = make_record("r-9")
    big = small.evolve(request={**small.request, "metadata": {"notes": "x" * (4 * size)}})
    await store.create(big, now=NOW)
    assert store._encodings.get("r-9") is None
    assert await store.get("r-9", now=NOW) == store.admitted(big)
    assert _kept_ids(store, 4) == ["r-2", "r-3"]


@pytest.mark.parametrize("final", [RecordState.DELIVERED, RecordState.UNDELIVERABLE])
async def test_the_entry_goes_at_a_final_state(store: SQLiteStore, final: RecordState) -> None:
    record = await reach(store, final)
    assert store._encodings.get("r-1") is None
    # Read again (a duplicate init's answer), it is not kept either: no move rewrites it.
    assert await store.get("r-1", now=NOW + 3) == record
    assert (len(store._encodings), store._encodings.chars) == (0, 0)
    _written(store, record)


async def test_a_finished_record_stays_kept_and_a_deleted_or_purged_one_goes(
    store: SQLiteStore,
) -> None:
    # FINISHED: park and the re-drive's reclaim_delivery still rewrite it.
    finished = await reach(store, RecordState.FINISHED)
    kept = store._encodings.get("r-1")
    assert kept is not None and kept.record is finished
    # Released (deleted): gone.
    await store.create(make_record("r-2"), now=NOW)
    assert store._encodings.get("r-2") is not None
    assert await store.release("r-2", slot="rid:r-2", now=NOW)
    assert store._encodings.get("r-2") is None
    # Purged once expired: gone.
    assert (await store.due(now=finished.expires_at + 1, until=math.inf)).rollout_ids == []
    assert store._encodings.get("r-1") is None
    assert (len(store._encodings), store._encodings.chars) == (0, 0)
