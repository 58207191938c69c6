"""The ``Store`` port: the rollout record's moves, named and typed, over a few primitives.

Like Powertools' ``BasePersistenceLayer``, the port names its moves (``claim``, ``renew``,
``finish``, ``park``, ``deliver``, ``mark_undeliverable``, ``settle``, ``reclaim_delivery``,
``request_cancel``, ``mark_handoff``, ``release``) and leaves each adapter the primitives
``create``, ``get``, ``_apply``, ``release``, ``scan`` and ``close``. Every move is one
``_apply``: a :class:`Guard` (what the live record must be) and an :class:`Update` (the fields it
sets), which the adapter writes as one conditional write (one transaction in memory and SQLite,
one ``UpdateItem`` with a ``ConditionExpression`` on DynamoDB). Callers never spell a field name:
a misspelt one is a TypeError when the ``Update`` is built, before any store is touched.

``TransactionalStore`` is the ``_apply`` of the stores that can run a read-check-write under one
lock or transaction (in-memory, SQLite). One contract suite (``tests/contract``) runs every move
against every implementation.
"""

from __future__ import annotations

import abc
import enum
import functools
from collections.abc import Callable, Collection, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, TypeVar

from rollout_sdk.engine.record import RecordState, RolloutRecord

if TYPE_CHECKING:
    from rollout_sdk.protocol import RolloutResponse

ConflictOn = Literal["slot", "rollout_id"]
T = TypeVar("T")


@dataclass(frozen=True)
class CreateResult:
    """Outcome of :meth:`Store.create`: created, or the live record that holds the slot or id."""

    created: bool
    record: RolloutRecord
    conflict_on: ConflictOn | None = None


@dataclass(frozen=True)
class TransitionResult:
    """Outcome of a move: ``record`` is the new version when ``applied``, else the current one
    (``None`` when the record is absent or expired)."""

    applied: bool
    record: RolloutRecord | None


class _Unset(enum.Enum):
    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "UNSET"


#: An :class:`Update` field left as it is.
UNSET: Final = _Unset.UNSET


@dataclass(frozen=True, kw_only=True)
class Guard:
    """What a move expects of the live record: one of ``states``; when given, on ``attempt``; and
    when given, with no lease held at ``lease_free_at`` (``lease_until`` unset or earlier)."""

    states: tuple[RecordState, ...]
    attempt: int | None = None
    lease_free_at: float | None = None

    def admits(self, record: RolloutRecord) -> bool:
        """The live ``record`` meets the guard."""
        return (
            record.state in self.states
            and (self.attempt is None or record.attempt == self.attempt)
            and (self.lease_free_at is None or record.lease_free(self.lease_free_at))
        )


@dataclass(frozen=True, kw_only=True)
class Update:
    """The record fields a move sets. ``UNSET`` fields stay as they are; ``None`` clears one.

    Only the fields a move may change are here (never the id, slot, request or tools). Building
    one with a field it does not have raises TypeError (and mypy reports it).
    """

    state: RecordState | _Unset = UNSET
    attempt: int | _Unset = UNSET
    lease_until: float | _Unset | None = UNSET
    response: dict[str, Any] | _Unset = UNSET
    cancel_requested: bool | _Unset = UNSET
    updated_at: float | _Unset = UNSET
    expires_at: int | _Unset = UNSET
    finished_at: float | _Unset = UNSET
    delivered_at: float | _Unset = UNSET
    delivery_attempts: int | _Unset = UNSET
    next_attempt_at: float | _Unset | None = UNSET
    last_error: str | _Unset | None = UNSET
    handoffs: int | _Unset = UNSET
    #: Sealed by a KeyVault; kept out of the repr, like the record's.
    sealed_key: str | _Unset | None = field(default=UNSET, repr=False)

    def changes(self) -> dict[str, Any]:
        """The set fields by name (for an adapter to encode)."""
        return {f.name: v for f in fields(self) if (v := getattr(self, f.name)) is not UNSET}

    def applied_to(self, record: RolloutRecord) -> RolloutRecord:
        """``record`` with the set fields changed."""
        return replace(record, **self.changes())


def _finished(
    response: RolloutResponse, *, lease_until: float, expires_at: int, now: float
) -> Update:
    return Update(
        state=RecordState.FINISHED,
        response=response.model_dump(mode="json"),
        finished_at=now,
        lease_until=lease_until,
        next_attempt_at=None,
        updated_at=now,
        expires_at=expires_at,
    )


class Store(abc.ABC):
    """Durable home of rollout records. Every method is atomic; expired records read as absent.

    Each move changes the live record only if it is where the move expects it, and returns a
    :class:`TransitionResult`: applied with the new version, or not with the current one. The
    adapters raise StoreError when the back end fails.
    """

    # ------------------------------------------------------------------ primitives

    @abc.abstractmethod
    async def create(self, record: RolloutRecord, *, now: float) -> CreateResult:
        """Insert an ACCEPTED record unless a live record holds its slot or its rollout id."""

    @abc.abstractmethod
    async def get(self, rollout_id: str, *, now: float) -> RolloutRecord | None:
        """The live record of ``rollout_id``, or None."""

    @abc.abstractmethod
    async def _apply(
        self, rollout_id: str, guard: Guard, update: Update, *, now: float
    ) -> TransitionResult:
        """Apply ``update`` if the live record meets ``guard``, in one conditional write;
        otherwise change nothing and return the current record."""

    # A move of its own (a conditional delete, not an update), so each adapter writes it.
    @abc.abstractmethod
    async def release(self, rollout_id: str, *, slot: str, now: float) -> bool:
        """Delete an ACCEPTED record whose hand-off failed, unless a duplicate init has handed it
        off since (``handoffs`` > 0); True when deleted."""

    @abc.abstractmethod
    async def scan(
        self, states: Collection[RecordState], *, now: float, limit: int = 100
    ) -> list[RolloutRecord]:
        """Live records in ``states``, oldest update first (sweeps and re-drive)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections and files."""

    # ------------------------------------------------------------------ running

    async def claim(
        self, rollout_id: str, *, attempt: int, lease_until: float, expires_at: int, now: float
    ) -> TransitionResult:
        """ACCEPTED -> RUNNING on ``attempt``, the lease held until ``lease_until``."""
        update = Update(
            state=RecordState.RUNNING,
            attempt=attempt,
            lease_until=lease_until,
            updated_at=now,
            expires_at=expires_at,
        )
        return await self._apply(rollout_id, Guard(states=(RecordState.ACCEPTED,)), update, now=now)

    async def renew(
        self,
        rollout_id: str,
        *,
        state: RecordState,
        attempt: int,
        lease_until: float,
        now: float,
    ) -> TransitionResult:
        """Extend the lease of ``attempt`` (running, or delivering: ``state``) to
        ``lease_until``."""
        guard = Guard(states=(state,), attempt=attempt)
        return await self._apply(rollout_id, guard, Update(lease_until=lease_until), now=now)

    async def finish(
        self,
        rollout_id: str,
        *,
        attempt: int,
        response: RolloutResponse,
        lease_until: float,
        expires_at: int,
        now: float,
    ) -> TransitionResult:
        """RUNNING on ``attempt`` -> FINISHED with ``response`` (the outbox), the lease held
        until ``lease_until`` for delivering it."""
        guard = Guard(states=(RecordState.RUNNING,), attempt=attempt)
        update = _finished(response, lease_until=lease_until, expires_at=expires_at, now=now)
        return await self._apply(rollout_id, guard, update, now=now)

    # ------------------------------------------------------------------ delivering

    async def deliver(
        self, rollout_id: str, *, attempt: int, delivery_attempts: int, expires_at: int, now: float
    ) -> TransitionResult:
        """FINISHED on ``attempt`` -> DELIVERED (a 2xx came back); the lease and the sealed key
        are dropped."""
        update = replace(
            _delivery_over(delivery_attempts, expires_at, now),
            state=RecordState.DELIVERED,
            delivered_at=now,
            last_error=None,
        )
        return await self._apply(rollout_id, _finished_on(attempt), update, now=now)

    async def mark_undeliverable(
        self,
        rollout_id: str,
        *,
        attempt: int,
        error: str | None,
        delivery_attempts: int,
        expires_at: int,
        now: float,
    ) -> TransitionResult:
        """FINISHED on ``attempt`` -> UNDELIVERABLE (a final 4xx, or the re-drive gave up); the
        lease and the sealed key are dropped."""
        update = replace(
            _delivery_over(delivery_attempts, expires_at, now),
            state=RecordState.UNDELIVERABLE,
            last_error=error,
        )
        return await self._apply(rollout_id, _finished_on(attempt), update, now=now)

    async def park(
        self,
        rollout_id: str,
        *,
        attempt: int,
        error: str | None,
        next_attempt_at: float,
        delivery_attempts: int,
        expires_at: int,
        now: float,
        sealed_key: str | None = None,
    ) -> TransitionResult:
        """FINISHED on ``attempt`` stays FINISHED, due for re-drive at ``next_attempt_at``, the
        lease dropped; ``sealed_key``, when given, is stored (else the stored one is kept)."""
        update = Update(
            next_attempt_at=next_attempt_at,
            last_error=error,
            delivery_attempts=delivery_attempts,
            lease_until=None,
            updated_at=now,
            expires_at=expires_at,
            sealed_key=UNSET if sealed_key is None else sealed_key,
        )
        return await self._apply(rollout_id, _finished_on(attempt), update, now=now)

    # ------------------------------------------------------------------ recovering

    async def settle(
        self,
        rollout_id: str,
        *,
        attempt: int,
        response: RolloutResponse,
        lease_until: float,
        expires_at: int,
        now: float,
        even_if_leased: bool = False,
    ) -> TransitionResult:
        """ACCEPTED or RUNNING on ``attempt`` -> FINISHED with ``response`` (an ERROR naming the
        failure) on ``attempt + 1``, so the old attempt's finish loses; not while a lease is held
        unless ``even_if_leased``."""
        guard = Guard(
            states=(RecordState.ACCEPTED, RecordState.RUNNING),
            attempt=attempt,
            lease_free_at=None if even_if_leased else now,
        )
        finished = _finished(response, lease_until=lease_until, expires_at=expires_at, now=now)
        update = replace(finished, attempt=attempt + 1)
        return await self._apply(rollout_id, guard, update, now=now)

    async def reclaim_delivery(
        self,
        rollout_id: str,
        *,
        attempt: int,
        lease_until: float,
        now: float,
        even_if_leased: bool = False,
    ) -> TransitionResult:
        """FINISHED on ``attempt`` -> FINISHED on ``attempt + 1`` with the lease until
        ``lease_until``: take over re-sending the stored response; not while a lease is held
        unless ``even_if_leased``."""
        guard = Guard(
            states=(RecordState.FINISHED,),
            attempt=attempt,
            lease_free_at=None if even_if_leased else now,
        )
        update = Update(attempt=attempt + 1, lease_until=lease_until, updated_at=now)
        return await self._apply(rollout_id, guard, update, now=now)

    # ------------------------------------------------------------------ init and cancel

    async def request_cancel(self, rollout_id: str, *, now: float) -> TransitionResult:
        """Set the cancel flag of an ACCEPTED or RUNNING record."""
        guard = Guard(states=(RecordState.ACCEPTED, RecordState.RUNNING))
        update = Update(cancel_requested=True, updated_at=now)
        return await self._apply(rollout_id, guard, update, now=now)

    async def mark_handoff(self, rollout_id: str, *, count: int, now: float) -> TransitionResult:
        """Record that a duplicate init handed an ACCEPTED record off again (``handoffs`` becomes
        ``count``), which makes :meth:`release` a no-op."""
        guard = Guard(states=(RecordState.ACCEPTED,))
        return await self._apply(rollout_id, guard, Update(handoffs=count), now=now)


def _finished_on(attempt: int) -> Guard:
    return Guard(states=(RecordState.FINISHED,), attempt=attempt)


def _delivery_over(delivery_attempts: int, expires_at: int, now: float) -> Update:
    # What delivered and undeliverable share: the key is no longer needed, nor the lease.
    return Update(
        sealed_key=None,
        next_attempt_at=None,
        delivery_attempts=delivery_attempts,
        lease_until=None,
        updated_at=now,
        expires_at=expires_at,
    )


class Transaction(Protocol):
    """Raw access inside one lock or transaction (expired records included)."""

    def by_id(self, rollout_id: str) -> RolloutRecord | None: ...

    def by_slot(self, slot: str) -> RolloutRecord | None: ...

    def put(self, record: RolloutRecord) -> None: ...

    def delete(self, rollout_id: str) -> None: ...


def _live(record: RolloutRecord | None, now: float) -> RolloutRecord | None:
    return None if record is None or record.is_expired(now) else record


class TransactionalStore(Store):
    """The primitives written once, over a read-check-write transaction.

    Subclasses provide :meth:`_transaction` (atomic against every other caller) and :meth:`_scan`.
    Each primitive is one synchronous function handed to :meth:`_run`, which runs it inline by
    default: a back end that can block (SQLite's file locks) overrides it, so a unit that would
    wait runs whole on a thread of its own and the event loop never waits on it. A unit may be
    run again from its start there (a scan's purge, then its read), so each must be safe to
    repeat: the purge and every move are.
    """

    async def _run(self, work: Callable[[], T]) -> T:
        """Run ``work`` (one whole transaction) and return its result; inline here."""
        return work()

    @abc.abstractmethod
    def _transaction(self) -> AbstractContextManager[Transaction]:
        """An exclusive transaction; committed on normal exit, rolled back on an exception."""

    @abc.abstractmethod
    def purge_expired(self, now: float) -> int:
        """Delete records whose TTL has passed (DynamoDB's TTL does this on AWS); how many."""

    @abc.abstractmethod
    def _scan(self, states: Collection[RecordState]) -> Iterator[RolloutRecord]:
        """Every record in ``states``, expired ones included."""

    async def create(self, record: RolloutRecord, *, now: float) -> CreateResult:
        return await self._run(functools.partial(self._create, record, now))

    async def get(self, rollout_id: str, *, now: float) -> RolloutRecord | None:
        return await self._run(functools.partial(self._get, rollout_id, now))

    async def _apply(
        self, rollout_id: str, guard: Guard, update: Update, *, now: float
    ) -> TransitionResult:
        return await self._run(functools.partial(self._update, rollout_id, guard, update, now))

    async def release(self, rollout_id: str, *, slot: str, now: float) -> bool:
        return await self._run(functools.partial(self._release, rollout_id, slot, now))

    async def scan(
        self, states: Collection[RecordState], *, now: float, limit: int = 100
    ) -> list[RolloutRecord]:
        return await self._run(functools.partial(self._scan_live, tuple(states), now, limit))

    # ------------------------------------------------------------------ the transactions

    def _create(self, record: RolloutRecord, now: float) -> CreateResult:
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

    def _scan_live(
        self, states: Collection[RecordState], now: float, limit: int
    ) -> list[RolloutRecord]:
        # Scans run on the re-drive's timer: the place to drop expired records, so a long-lived
        # local server does not grow without bound.
        self.purge_expired(now)
        live = [r for r in self._scan(states) if not r.is_expired(now)]
        live.sort(key=lambda r: r.updated_at)
        return live[:limit]
