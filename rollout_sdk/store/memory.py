"""In-memory store: the v1 SDK's behaviour (nothing survives a restart) and the unit-test fake."""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterator
from contextlib import contextmanager

from rollout_sdk.engine.record import RecordState, RolloutRecord
from rollout_sdk.store.base import TransactionalStore


class _MemoryTransaction:
    def __init__(self, by_id: dict[str, RolloutRecord], by_slot: dict[str, str]) -> None:
        self._by_id = by_id
        self._by_slot = by_slot

    def by_id(self, rollout_id: str) -> RolloutRecord | None:
        return self._by_id.get(rollout_id)

    def by_slot(self, slot: str) -> RolloutRecord | None:
        rollout_id = self._by_slot.get(slot)
        return None if rollout_id is None else self._by_id.get(rollout_id)

    def put(self, record: RolloutRecord) -> None:
        old = self._by_id.get(record.rollout_id)
        if old is not None and old.slot != record.slot:
            self._by_slot.pop(old.slot, None)
        self._by_id[record.rollout_id] = record
        self._by_slot[record.slot] = record.rollout_id

    def delete(self, rollout_id: str) -> None:
        old = self._by_id.pop(rollout_id, None)
        if old is not None and self._by_slot.get(old.slot) == rollout_id:
            del self._by_slot[old.slot]


class MemoryStore(TransactionalStore):
    """Records in two dicts under one lock. Records are immutable, so readers share them safely.

    Because records are only swapped whole, a transaction that raises half-way can at most have
    applied a complete put or delete; the moves in the base class raise before writing.

    Transactions run inline on the caller's thread (the base's ``_run``): a move is a few dict
    operations, microseconds, and nothing in it can block, so a hop to a thread would cost more
    than the work it moved.
    """

    def __init__(self) -> None:
        self._by_id: dict[str, RolloutRecord] = {}
        self._by_slot: dict[str, str] = {}
        self._lock = threading.Lock()

    @contextmanager
    def _transaction(self) -> Iterator[_MemoryTransaction]:
        with self._lock:
            yield _MemoryTransaction(self._by_id, self._by_slot)

    def purge_expired(self, now: float) -> int:
        """Forget records whose TTL has passed; returns how many."""
        with self._transaction() as txn:
            expired = [rid for rid, r in self._by_id.items() if r.is_expired(now)]
            for rollout_id in expired:
                txn.delete(rollout_id)
        return len(expired)

    def _scan(self, states: Collection[RecordState]) -> Iterator[RolloutRecord]:
        with self._lock:
            records = list(self._by_id.values())
        return (r for r in records if r.state in states)

    def __len__(self) -> int:
        return len(self._by_id)

    async def close(self) -> None:
        """Nothing to release."""
