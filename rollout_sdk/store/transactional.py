"""``TransactionalStore``: the ``Store`` port's primitives written once, over a read-check-write
transaction, for the stores that can run one under one lock or transaction (in-memory, SQLite).

The port itself (the moves, the guard and the update they apply, the due index) is
:mod:`rollout_sdk.store.base`; DynamoDB writes its primitives as conditional writes instead.
"""

from __future__ import annotations

import abc
import math
from contextlib import AbstractContextManager
from typing import Protocol

from rollout_sdk.store.base import (
    CreateResult,
    DueCursor,
    DuePage,
    Guard,
    Store,
    TransitionResult,
    Update,
)
from rollout_sdk.store.record import RecordState, RolloutRecord


class Transaction(Protocol):
    """Raw access inside one lock or transaction (expired records included)."""

    def by_id(self, rollout_id: str) -> RolloutRecord | None: ...

    def by_slot(self, slot: str) -> RolloutRecord | None: ...

    def put(self, record: RolloutRecord) -> None: ...

    def delete(self, rollout_id: str) -> None: ...

    def pass_lease(self, name: str) -> tuple[str, float] | None:
        """The holder and end of the lease item ``name``, if any."""
        ...

    def set_pass_lease(self, name: str, holder: str, until: float) -> None: ...

    def drop_pass_lease(self, name: str) -> None: ...


def _live(record: RolloutRecord | None, now: float) -> RolloutRecord | None:
    return None if record is None or record.is_expired(now) else record


class TransactionalStore(Store):
    """The primitives written once, over a read-check-write transaction.

    Subclasses provide :meth:`_transaction` (atomic against every other caller), :meth:`_due`
    and :meth:`purge_expired`. Each primitive is one synchronous function handed to
    :meth:`_run`, which runs it inline by default: a back end that can block (SQLite's file
    locks) overrides it, so a unit that would wait runs whole on a thread of its own and the
    event loop never waits on it. A unit may be run again from its start there (a scan's purge,
    then its read), so each must be safe to repeat: the purge and every move are.
    """

    @abc.abstractmethod
    def _transaction(self) -> AbstractContextManager[Transaction]:
        """An exclusive transaction; committed on normal exit, rolled back on an exception."""

    @abc.abstractmethod
    def purge_expired(self, now: float) -> int:
        """Delete records whose TTL has passed (DynamoDB's TTL does this on AWS); how many."""

    @abc.abstractmethod
    def _due(self, until: float, limit: int, after: DueCursor | None) -> DuePage:
        """The due index's page (its cursor: the last entry's ``(due_at, rollout_id)``)."""

    @abc.abstractmethod
    def _polled(self, ended_by: float, prefix: str, limit: int, after: DueCursor | None) -> DuePage:
        """The live index's page of leases ended before ``ended_by`` (``math.inf``: all), ids
        starting with ``prefix`` (its cursor: the last entry's ``(poll_until, rollout_id)``)."""

    # ------------------------------------------------------------------ the transactions

    def _create(self, record: RolloutRecord, now: float, slot_until: int) -> CreateResult:
        # The slot is the record's own column here: it lives exactly as long as the record.
        with self._transaction() as txn:
            in_slot = txn.by_slot(record.slot)  # read once: nothing else moves in the transaction
            holder = _live(in_slot, now)
            if holder is not None:
                return CreateResult(False, holder, "slot")
            holder = _live(txn.by_id(record.rollout_id), now)
            if holder is not None:
                return CreateResult(False, holder, "rollout_id")
            if in_slot is not None:  # expired: a claim may take it over
                txn.delete(in_slot.rollout_id)
            txn.put(record)
            return CreateResult(True, record)

    def _get(self, rollout_id: str, now: float) -> RolloutRecord | None:
        with self._transaction() as txn:
            return _live(txn.by_id(rollout_id), now)

    def _update(
        self, rollout_id: str, guard: Guard, update: Update, now: float
    ) -> TransitionResult:
        with self._transaction() as txn:
            current = _live(txn.by_id(rollout_id), now)
            if current is None or not guard.admits(current):
                return TransitionResult(False, current)
            updated = update.applied_to(current)
            txn.put(updated)
            return TransitionResult(True, updated)

    def _release(self, rollout_id: str, slot: str, now: float) -> bool:
        with self._transaction() as txn:
            current = _live(txn.by_id(rollout_id), now)
            if (
                current is None
                or current.slot != slot
                or current.state != RecordState.ACCEPTED
                or current.handoffs
            ):
                return False
            txn.delete(rollout_id)
            return True

    def _due_page(self, now: float, until: float, limit: int, after: DueCursor | None) -> DuePage:
        # A listing's first page runs on the re-drive's timer: the place to drop expired
        # records, so a long-lived local server does not grow without bound.
        if after is None:
            self.purge_expired(now)
        return self._due(until, limit, after)

    def _polled_page(
        self,
        now: float,
        ended_by: float | None,
        prefix: str,
        limit: int,
        after: DueCursor | None,
    ) -> DuePage:
        return self._polled(math.inf if ended_by is None else ended_by, prefix, limit, after)

    def _acquire_pass(self, name: str, holder: str, until: float, now: float) -> bool:
        with self._transaction() as txn:
            current = txn.pass_lease(name)
            if current is not None and current[0] != holder and current[1] > now:
                return False
            txn.set_pass_lease(name, holder, until)
            return True

    def _release_pass(self, name: str, holder: str) -> None:
        with self._transaction() as txn:
            current = txn.pass_lease(name)
            if current is not None and current[0] == holder:
                txn.drop_pass_lease(name)
