"""The ``Store`` port: conditional moves of the rollout record, and the shared logic of the stores
that can run a read-check-write under one lock or transaction (in-memory, SQLite).

A DynamoDB adapter expresses the same moves as conditional writes; one contract suite
(``tests/contract``) runs against every implementation.
"""

from __future__ import annotations

import abc
from collections.abc import Collection, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from rollout_sdk.engine.record import RecordState, RolloutRecord

ConflictOn = Literal["slot", "rollout_id"]


@dataclass(frozen=True)
class CreateResult:
    """Outcome of :meth:`Store.create`: created, or the live record that holds the slot or id."""

    created: bool
    record: RolloutRecord
    conflict_on: ConflictOn | None = None


@dataclass(frozen=True)
class TransitionResult:
    """Outcome of :meth:`Store.transition`: ``record`` is the new version when ``applied``, else
    the current one (``None`` when the record is absent or expired)."""

    applied: bool
    record: RolloutRecord | None


@runtime_checkable
class Store(Protocol):
    """Durable home of rollout records. Every method is atomic; expired records read as absent."""

    async def create(self, record: RolloutRecord, *, now: float) -> CreateResult:
        """Insert an ACCEPTED record unless a live record holds its slot or its rollout id."""
        ...

    async def get(self, rollout_id: str, *, now: float) -> RolloutRecord | None:
        """The live record of ``rollout_id``, or None."""
        ...

    async def transition(
        self,
        rollout_id: str,
        *,
        from_states: Collection[RecordState],
        changes: Mapping[str, Any],
        now: float,
        attempt: int | None = None,
        lease_free_at: float | None = None,
    ) -> TransitionResult:
        """Apply ``changes`` if the live record is in one of ``from_states`` (and, when given, on
        ``attempt``, and with no lease held at ``lease_free_at``: ``lease_until`` unset or
        earlier); otherwise change nothing and return the current record."""
        ...

    async def release(self, rollout_id: str, *, slot: str, now: float) -> bool:
        """Delete an ACCEPTED record whose hand-off failed, unless a duplicate init has handed it
        off since (``handoffs`` > 0); True when deleted."""
        ...

    async def scan(
        self, states: Collection[RecordState], *, now: float, limit: int = 100
    ) -> list[RolloutRecord]:
        """Live records in ``states``, oldest update first (sweeps and re-drive)."""
        ...

    async def close(self) -> None:
        """Release connections and files."""
        ...


class Transaction(Protocol):
    """Raw access inside one lock or transaction (expired records included)."""

    def by_id(self, rollout_id: str) -> RolloutRecord | None: ...

    def by_slot(self, slot: str) -> RolloutRecord | None: ...

    def put(self, record: RolloutRecord) -> None: ...

    def delete(self, rollout_id: str) -> None: ...


def _live(record: RolloutRecord | None, now: float) -> RolloutRecord | None:
    return None if record is None or record.is_expired(now) else record


class TransactionalStore(abc.ABC):
    """The state-machine moves written once, over a read-check-write transaction.

    Subclasses provide :meth:`_transaction` (atomic against every other caller) and :meth:`_scan`.
    The methods are ``async`` to fit the port, but run synchronously: both back ends answer in
    microseconds, and a thread hop would cost more than the work.
    """

    @abc.abstractmethod
    def _transaction(self) -> AbstractContextManager[Transaction]:
        """An exclusive transaction; committed on normal exit, rolled back on an exception."""

    @abc.abstractmethod
    @abc.abstractmethod
    def purge_expired(self, now: float) -> int:
        """Delete records whose TTL has passed (DynamoDB's TTL does this on AWS); how many."""

    @abc.abstractmethod
    def _scan(self, states: Collection[RecordState]) -> Iterator[RolloutRecord]:
        """Every record in ``states``, expired ones included."""

    async def create(self, record: RolloutRecord, *, now: float) -> CreateResult:
        with self._transaction() as txn:
            holder = _live(txn.by_slot(record.slot), now)
            if holder is not None:
                return CreateResult(False, holder, "slot")
            holder = _live(txn.by_id(record.rollout_id), now)
            if holder is not None:
                return CreateResult(False, holder, "rollout_id")
            stale = txn.by_slot(record.slot)
            if stale is not None:  # expired: a claim may take it over
                txn.delete(stale.rollout_id)
            txn.put(record)
            return CreateResult(True, record)

    async def get(self, rollout_id: str, *, now: float) -> RolloutRecord | None:
        with self._transaction() as txn:
            return _live(txn.by_id(rollout_id), now)

    async def transition(
        self,
        rollout_id: str,
        *,
        from_states: Collection[RecordState],
        changes: Mapping[str, Any],
        now: float,
        attempt: int | None = None,
        lease_free_at: float | None = None,
    ) -> TransitionResult:
        with self._transaction() as txn:
            current = _live(txn.by_id(rollout_id), now)
            if current is None or current.state not in from_states:
                return TransitionResult(False, current)
            if attempt is not None and current.attempt != attempt:
                return TransitionResult(False, current)
            if lease_free_at is not None and not current.lease_free(lease_free_at):
                return TransitionResult(False, current)
            updated = current.evolve(**changes)
            txn.put(updated)
            return TransitionResult(True, updated)

    async def release(self, rollout_id: str, *, slot: str, now: float) -> bool:
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

    async def scan(
        self, states: Collection[RecordState], *, now: float, limit: int = 100
    ) -> list[RolloutRecord]:
        # Scans run on the re-drive's timer: the place to drop expired records, so a long-lived
        # local server does not grow without bound.
        self.purge_expired(now)
        live = [r for r in self._scan(states) if not r.is_expired(now)]
        live.sort(key=lambda r: r.updated_at)
        return live[:limit]
