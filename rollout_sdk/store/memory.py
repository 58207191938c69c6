"""In-memory store: the v1 SDK's behaviour (nothing survives a restart) and the unit-test fake."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from rollout_sdk.store.base import DueCursor, DuePage
from rollout_sdk.store.record import RolloutRecord
from rollout_sdk.store.transactional import TransactionalStore


@dataclass
class _Tables:
    """What a memory store holds: records by id, the slot of each, the due index, the pass
    leases."""

    by_id: dict[str, RolloutRecord] = field(default_factory=dict)
    by_slot: dict[str, str] = field(default_factory=dict)
    due: dict[str, float] = field(default_factory=dict)
    #: The live index: each 0.3.8 rollout in flight, and its polling lease's end.
    polled: dict[str, float] = field(default_factory=dict)
    passes: dict[str, tuple[str, float]] = field(default_factory=dict)


class _MemoryTransaction:
    def __init__(self, tables: _Tables) -> None:
        self._store = tables

    def by_id(self, rollout_id: str) -> RolloutRecord | None:
        return self._store.by_id.get(rollout_id)

    def by_slot(self, slot: str) -> RolloutRecord | None:
        rollout_id = self._store.by_slot.get(slot)
        return None if rollout_id is None else self._store.by_id.get(rollout_id)

    def put(self, record: RolloutRecord) -> None:
        store = self._store
        old = store.by_id.get(record.rollout_id)
        if old is not None and old.slot != record.slot:
            store.by_slot.pop(old.slot, None)
        store.by_id[record.rollout_id] = record
        store.by_slot[record.slot] = record.rollout_id
        if record.due_at is None:
            store.due.pop(record.rollout_id, None)
        else:
            store.due[record.rollout_id] = record.due_at
        if record.poll_until is None:
            store.polled.pop(record.rollout_id, None)
        else:
            store.polled[record.rollout_id] = record.poll_until

    def delete(self, rollout_id: str) -> None:
        store = self._store
        old = store.by_id.pop(rollout_id, None)
        store.due.pop(rollout_id, None)
        store.polled.pop(rollout_id, None)
        if old is not None and store.by_slot.get(old.slot) == rollout_id:
            del store.by_slot[old.slot]

    def pass_lease(self, name: str) -> tuple[str, float] | None:
        return self._store.passes.get(name)

    def set_pass_lease(self, name: str, holder: str, until: float) -> None:
        self._store.passes[name] = (holder, until)

    def drop_pass_lease(self, name: str) -> None:
        self._store.passes.pop(name, None)


class MemoryStore(TransactionalStore):
    """Records in dicts under one lock. Records are immutable, so readers share them safely.

    Because records are only swapped whole, a transaction that raises half-way can at most have
    applied a complete put or delete; the moves in the base class raise before writing. The due
    index is a dict of the records that have a ``due_at``, so a listing reads only those.

    Transactions run inline on the caller's thread (the base's ``_run``): a move is a few dict
    operations, microseconds, and nothing in it can block, so a hop to a thread would cost more
    than the work it moved.
    """

    def __init__(self, *, owner: str | None = None) -> None:
        self.owner = owner
        self._tables = _Tables()
        self._by_id = self._tables.by_id
        self._lock = threading.Lock()

    @contextmanager
    def _transaction(self) -> Iterator[_MemoryTransaction]:
        with self._lock:
            yield _MemoryTransaction(self._tables)

    def purge_expired(self, now: float) -> int:
        """Forget records whose TTL has passed; returns how many."""
        with self._transaction() as txn:
            expired = [rid for rid, r in self._by_id.items() if r.is_expired(now)]
            for rollout_id in expired:
                txn.delete(rollout_id)
        return len(expired)

    def _due(self, until: float, limit: int, after: DueCursor | None) -> DuePage:
        with self._lock:
            entries = sorted(
                (at, rid)
                for rid, at in self._tables.due.items()
                if at <= until and (after is None or (at, rid) > after)
            )
        page = entries[:limit]
        cursor = page[-1] if len(entries) > limit else None
        return DuePage([rid for _, rid in page], cursor)

    def _polled(self, ended_by: float, prefix: str, limit: int, after: DueCursor | None) -> DuePage:
        with self._lock:
            entries = sorted(
                (until, rid)
                for rid, until in self._tables.polled.items()
                if until < ended_by
                and rid.startswith(prefix)
                and (after is None or (until, rid) > after)
            )
        page = entries[:limit]
        cursor = page[-1] if len(entries) > limit else None
        return DuePage([rid for _, rid in page], cursor)

    def _count_polled(self, now: float) -> int:
        with self._lock:
            return sum(not self._by_id[rid].is_expired(now) for rid in self._tables.polled)

    def __len__(self) -> int:
        return len(self._by_id)

    async def close(self) -> None:
        """Nothing to release."""
