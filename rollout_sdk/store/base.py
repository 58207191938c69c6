"""The ``Store`` port: the rollout record's moves, named and typed, over a few primitives.

Like Powertools' ``BasePersistenceLayer``, the port names its moves (``claim``, ``renew``,
``finish``, ``park``, ``deliver``, ``mark_undeliverable``, ``settle``, ``reclaim_delivery``,
``request_cancel``, ``mark_handoff``, ``handed_off``, ``release``) and leaves each adapter
``close`` and the bodies of the primitives ``create``, ``get``, ``_apply``, ``release``, ``due``
and the pass lease: synchronous functions the port runs whole through the adapter's ``_run``
(inline, or on a thread). Every move is one ``_apply``: a :class:`Guard` (what the live record
must be) and an :class:`Update` (the fields it sets), which the adapter writes as one conditional
write (its ``_update``: one transaction in memory and SQLite, one ``UpdateItem`` with a
``ConditionExpression`` on DynamoDB). Callers never spell a field name: a misspelt one is a
TypeError when the ``Update`` is built, before any store is touched.

:class:`~rollout_sdk.store.transactional.TransactionalStore` is the ``_apply`` of the stores that
can run a read-check-write under one lock or transaction (in-memory, SQLite). One contract suite
(``tests/contract``) runs every move against every implementation.

The due index. Recoverers never scan: every record one must act on carries ``due_at`` (when to
look at it), and :meth:`Store.due` lists only those (a sparse index: a GSI on DynamoDB, a partial
index in SQLite, a dict in memory), so a pass reads O(waiting) whatever the store holds. Which
records are in it is decided here, by the moves:

- a parked response, due at its next try (``park``);
- a duplicate init's hand-off of a rollout still waiting for its worker, due when that hand-off
  lease runs out (``mark_handoff``) and out again once a hand-off succeeded (``handed_off``);
- a leased record whose lease a recoverer can take over with the callback key it holds (a
  *watched* lease: the moves are told ``watch``, which the engine decides by one rule,
  ``rollout_sdk.engine.lease.Leases.watches``, or the store is :attr:`Store.owner`'s), due when
  the lease runs out (``claim``, ``renew``, ``finish``, ``settle``, ``reclaim_delivery``,
  ``mark_handoff``; unwatched unless told);
- on a store with an owner (a local server's), every record in flight: the restart sweep finds
  what that server left through the same index (an idle ACCEPTED one is due at its expiry).

A listing is a hint: a recoverer reads the record again, consistently, and every move stays a
conditional write, so a stale entry can never deliver twice.

The live index. An osmosis-ai 0.3.8 rollout in flight holds a polling lease (``poll_until``); the
move that makes it final (``finish``, ``settle``) clears it. :meth:`Store.polled` lists the
records that hold one (a sparse index again: a GSI keyed on the protocol and the lease's end on
DynamoDB, a partial index in SQLite, a dict in memory), those whose lease ran out first, so that
cancel by prefix or all, the lease check and ``/health``'s count read O(live) and never the
table. A hint like the due index: each listed record is read again before a move.
"""

from __future__ import annotations

import abc
import enum
import functools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar

from rollout_sdk.store.record import RecordState, RolloutRecord

if TYPE_CHECKING:
    from rollout_sdk.protocol import RolloutResponse

T = TypeVar("T")
ConflictOn = Literal["slot", "rollout_id"]
#: Where :meth:`Store.due` stopped; opaque to callers.
DueCursor = tuple[Any, ...]


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


@dataclass(frozen=True)
class DuePage:
    """One page of :meth:`Store.due`: the ids, and where to go on (None: nothing more)."""

    rollout_ids: list[str]
    cursor: DueCursor | None = None


class _Unset(enum.Enum):
    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "UNSET"


#: An :class:`Update` field left as it is.
UNSET: Final = _Unset.UNSET


@dataclass(frozen=True, kw_only=True)
class Guard:
    """What a move expects of the live record: one of ``states``; when given, on ``attempt``;
    when given, with no lease held at ``lease_free_at`` (``lease_until`` unset or earlier); and
    when given, due by ``due_by`` (``due_at`` set and not later)."""

    states: tuple[RecordState, ...]
    attempt: int | None = None
    lease_free_at: float | None = None
    due_by: float | None = None
    #: When given, the record's polling lease (``poll_until``) is set and has not run out by
    #: then.
    poll_live_at: float | None = None

    def admits(self, record: RolloutRecord) -> bool:
        """The live ``record`` meets the guard."""
        return (
            record.state in self.states
            and (self.attempt is None or record.attempt == self.attempt)
            and (self.lease_free_at is None or record.lease_free(self.lease_free_at))
            and (
                self.due_by is None or (record.due_at is not None and record.due_at <= self.due_by)
            )
            and (
                self.poll_live_at is None
                or (record.poll_until is not None and record.poll_until >= self.poll_live_at)
            )
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
    due_at: float | _Unset | None = UNSET
    #: Sealed by a KeyVault; kept out of the repr, like the record's.
    sealed_key: str | _Unset | None = field(default=UNSET, repr=False)
    #: The whole ``extra`` map (the delivery moves write the rollout's cost so far there).
    extra: dict[str, Any] | _Unset = UNSET
    #: A 0.3.8 rollout's polling lease, renewed by each poll (cleared by the final move).
    poll_until: float | _Unset | None = UNSET
    #: The status a 0.3.8 rollout's polls were last answered (a poll waits for a change).
    poll_seen: str | _Unset | None = UNSET
    cancel_reason: str | _Unset | None = UNSET

    def changes(self) -> dict[str, Any]:
        """The set fields by name (for an adapter to encode)."""
        # The instance's __dict__ holds exactly the fields (no slots, no extra attributes):
        # a third of the cost of dataclasses.fields() and getattr for each, once per move.
        return {name: value for name, value in self.__dict__.items() if value is not UNSET}

    def applied_to(self, record: RolloutRecord) -> RolloutRecord:
        """``record`` with the set fields changed."""
        return record.evolve(**self.changes())


@dataclass(frozen=True, kw_only=True)
class Claim:
    """The terms of a claim (:meth:`Store.claim`, or :meth:`Store.create` given one): the
    attempt that runs, its lease's end, the record's new expiry, and whether the re-drive
    watches the lease."""

    attempt: int
    lease_until: float
    expires_at: int
    watch: bool = False


def _claimed(claim: Claim, due_at: float | None, now: float) -> Update:
    return Update(
        state=RecordState.RUNNING,
        attempt=claim.attempt,
        lease_until=claim.lease_until,
        due_at=due_at,
        updated_at=now,
        expires_at=claim.expires_at,
    )


def _finished(
    response: RolloutResponse | dict[str, Any],
    *,
    lease_until: float,
    due_at: float | None,
    expires_at: int,
    now: float,
) -> Update:
    return Update(
        state=RecordState.FINISHED,
        # A dump is stored as it is (the worker's, made once: engine/responses.py).
        response=response if isinstance(response, dict) else response.model_dump(mode="json"),
        finished_at=now,
        lease_until=lease_until,
        due_at=due_at,
        next_attempt_at=None,
        updated_at=now,
        expires_at=expires_at,
        # A final rollout holds no polling lease: it leaves the live index.
        poll_until=None,
    )


class Store(abc.ABC):
    """Durable home of rollout records. Every method is atomic; expired records read as absent.

    Each move changes the live record only if it is where the move expects it, and returns a
    :class:`TransitionResult`: applied with the new version, or not with the current one. The
    adapters raise StoreError when the back end fails.
    """

    #: The local server instance whose records these are (its id lives in its state folder), or
    #: None (AWS: records belong to no process). With an owner, every record in flight is in the
    #: due index, so the owner's restart sweep finds what it left.
    owner: str | None = None

    @property
    def watches_all(self) -> bool:
        """Every record in flight is in the due index (the store has an owner)."""
        return self.owner is not None

    def _lease_due(self, lease_until: float, watch: bool) -> float | None:
        """``due_at`` for a lease taken until ``lease_until``: its end when watched."""
        return lease_until if watch or self.watches_all else None

    def admitted(self, record: RolloutRecord) -> RolloutRecord:
        """``record`` as :meth:`create` stores it: with an owner, in the due index at its
        expiry (only the owner's restart sweep acts on it before then)."""
        if self.watches_all and record.due_at is None:
            return replace(record, due_at=float(record.expires_at))
        return record

    # ------------------------------------------------------------------ primitives
    # Each adapter writes the synchronous body of each primitive (``_create``, ``_get``,
    # ``_update``, ``_release``, ``_due_page``, ``_acquire_pass``, ``_release_pass``); the port
    # runs each body whole through :meth:`_run`.

    async def _run(self, work: Callable[[], T], *, urgent: bool = False) -> T:
        """Run ``work`` (one whole primitive) and return its result; inline here. A back end
        that can block overrides it, so the event loop never waits on the back end.
        ``urgent``: an answer on the wire waits for it (init's 202, on ``create``), so a back end
        that groups its commits (SQLite's) commits it at once rather than with its group."""
        return work()

    async def create(
        self,
        record: RolloutRecord,
        *,
        now: float,
        slot_expires_at: int | None = None,
        claim: Claim | None = None,
    ) -> CreateResult:
        """Insert an ACCEPTED record unless a live record holds its slot or its rollout id.

        ``slot_expires_at`` (at least the record's ``expires_at``) is how long a store that keeps
        the idempotency slot apart from the record (DynamoDB) keeps the slot: as long as the
        record can live, however its moves extend it. A slot whose record is gone is free.

        With ``claim``, the record is inserted already claimed, RUNNING on the claim's attempt
        (what :meth:`claim` would make of it at ``now``): one write instead of two, for a
        rollout whose worker starts at once in this process. A conflict is the same as
        without."""
        if claim is not None:
            record = _claimed(
                claim, self._lease_due(claim.lease_until, claim.watch), now
            ).applied_to(record)
        slot_until = max(record.expires_at, slot_expires_at or 0)
        return await self._run(
            functools.partial(self._create, self.admitted(record), now, slot_until), urgent=True
        )

    async def get(self, rollout_id: str, *, now: float) -> RolloutRecord | None:
        """The live record of ``rollout_id``, or None."""
        return await self._run(functools.partial(self._get, rollout_id, now))

    async def _apply(
        self, rollout_id: str, guard: Guard, update: Update, *, now: float
    ) -> TransitionResult:
        """Apply ``update`` if the live record meets ``guard``, in one conditional write;
        otherwise change nothing and return the current record."""
        return await self._run(functools.partial(self._update, rollout_id, guard, update, now))

    async def release(self, rollout_id: str, *, slot: str, now: float) -> bool:
        """Delete an ACCEPTED record whose hand-off failed, unless a duplicate init has handed it
        off since (``handoffs`` > 0); True when deleted."""
        return await self._run(functools.partial(self._release, rollout_id, slot, now))

    async def due(
        self,
        *,
        now: float,
        until: float | None = None,
        limit: int = 100,
        after: DueCursor | None = None,
    ) -> DuePage:
        """Ids of records in the due index with ``due_at <= until`` (default ``now``;
        ``math.inf``: every one; on a store with an owner, the owner's), about earliest first,
        a page of at most ``limit`` from ``after``. A hint: read each record again before
        acting on it."""
        bound = now if until is None else until
        return await self._run(functools.partial(self._due_page, now, bound, limit, after))

    async def polled(
        self,
        *,
        now: float,
        ended_by: float | None = None,
        prefix: str = "",
        limit: int = 100,
        after: DueCursor | None = None,
    ) -> DuePage:
        """Ids of the records in the live index (0.3.8 rollouts in flight, holding a polling
        lease), about earliest lease end first: those whose lease ended before ``ended_by``
        when given, those whose id starts with ``prefix``; a page of at most ``limit`` from
        ``after``. A hint: read each record again before acting on it."""
        return await self._run(
            functools.partial(self._polled_page, now, ended_by, prefix, limit, after)
        )

    async def count_polled(self, *, now: float) -> int:
        """How many records the live index holds (0.3.8 rollouts in flight)."""
        return await self._run(functools.partial(self._count_polled, now))

    async def acquire_pass(self, name: str, *, holder: str, until: float, now: float) -> bool:
        """Take the lease item ``name`` for ``holder`` until ``until`` unless another holder's
        lease is still live at ``now``; True when taken (one re-drive pass at a time)."""
        return await self._run(functools.partial(self._acquire_pass, name, holder, until, now))

    async def release_pass(self, name: str, *, holder: str) -> None:
        """Drop the lease item ``name`` if ``holder`` still holds it."""
        await self._run(functools.partial(self._release_pass, name, holder))

    @abc.abstractmethod
    def _create(self, record: RolloutRecord, now: float, slot_until: int) -> CreateResult:
        """:meth:`create`'s body, ``record`` admitted, the slot kept until ``slot_until``."""

    @abc.abstractmethod
    def _get(self, rollout_id: str, now: float) -> RolloutRecord | None:
        """:meth:`get`'s body."""

    @abc.abstractmethod
    def _update(
        self, rollout_id: str, guard: Guard, update: Update, now: float
    ) -> TransitionResult:
        """:meth:`_apply`'s body: one conditional write."""

    # A move of its own (a conditional delete, not an update), so each adapter writes it.
    @abc.abstractmethod
    def _release(self, rollout_id: str, slot: str, now: float) -> bool:
        """:meth:`release`'s body."""

    @abc.abstractmethod
    def _due_page(self, now: float, until: float, limit: int, after: DueCursor | None) -> DuePage:
        """:meth:`due`'s body, ``until`` given."""

    @abc.abstractmethod
    def _polled_page(
        self,
        now: float,
        ended_by: float | None,
        prefix: str,
        limit: int,
        after: DueCursor | None,
    ) -> DuePage:
        """:meth:`polled`'s body."""

    @abc.abstractmethod
    def _count_polled(self, now: float) -> int:
        """:meth:`count_polled`'s body."""

    @abc.abstractmethod
    def _acquire_pass(self, name: str, holder: str, until: float, now: float) -> bool:
        """:meth:`acquire_pass`'s body."""

    @abc.abstractmethod
    def _release_pass(self, name: str, holder: str) -> None:
        """:meth:`release_pass`'s body."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections and files."""

    # ------------------------------------------------------------------ running

    async def claim(
        self,
        rollout_id: str,
        *,
        attempt: int,
        lease_until: float,
        expires_at: int,
        now: float,
        watch: bool = False,
    ) -> TransitionResult:
        """ACCEPTED -> RUNNING on ``attempt``, the lease held until ``lease_until`` (watched
        when ``watch``: see the module's due index)."""
        terms = Claim(attempt=attempt, lease_until=lease_until, expires_at=expires_at, watch=watch)
        update = _claimed(terms, self._lease_due(lease_until, watch), now)
        return await self._apply(rollout_id, Guard(states=(RecordState.ACCEPTED,)), update, now=now)

    async def renew(
        self,
        rollout_id: str,
        *,
        state: RecordState,
        attempt: int,
        lease_until: float,
        now: float,
        watch: bool = False,
        sealed_key: str | None = None,
    ) -> TransitionResult:
        """Extend the lease of ``attempt`` (running, or delivering: ``state``) to
        ``lease_until``; a watched lease's due time moves with it. ``sealed_key``, when given,
        is stored (the durable worker's, so the re-drive can report its rollout alone)."""
        guard = Guard(states=(state,), attempt=attempt)
        due = self._lease_due(lease_until, watch)
        update = Update(
            lease_until=lease_until,
            due_at=UNSET if due is None else due,
            sealed_key=UNSET if sealed_key is None else sealed_key,
        )
        return await self._apply(rollout_id, guard, update, now=now)

    async def finish(
        self,
        rollout_id: str,
        *,
        attempt: int,
        response: RolloutResponse | dict[str, Any],
        lease_until: float,
        expires_at: int,
        now: float,
        watch: bool = False,
    ) -> TransitionResult:
        """RUNNING on ``attempt`` -> FINISHED with ``response`` (the outbox), the lease held
        until ``lease_until`` for delivering it. ``response`` is the model or its JSON-ready
        dump (``model_dump(mode="json")``), which the record then holds as it is."""
        guard = Guard(states=(RecordState.RUNNING,), attempt=attempt)
        update = _finished(
            response,
            lease_until=lease_until,
            due_at=self._lease_due(lease_until, watch),
            expires_at=expires_at,
            now=now,
        )
        return await self._apply(rollout_id, guard, update, now=now)

    # ------------------------------------------------------------------ delivering

    async def deliver(
        self,
        rollout_id: str,
        *,
        attempt: int,
        delivery_attempts: int,
        expires_at: int,
        now: float,
        extra: dict[str, Any] | None = None,
    ) -> TransitionResult:
        """FINISHED on ``attempt`` -> DELIVERED (a 2xx came back); the lease and the sealed key
        are dropped; ``extra``, when given, replaces the record's."""
        update = replace(
            _delivery_over(delivery_attempts, expires_at, now, extra),
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
        extra: dict[str, Any] | None = None,
    ) -> TransitionResult:
        """FINISHED on ``attempt`` -> UNDELIVERABLE (a final 4xx, or the re-drive gave up); the
        lease and the sealed key are dropped; ``extra``, when given, replaces the record's."""
        update = replace(
            _delivery_over(delivery_attempts, expires_at, now, extra),
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
        extra: dict[str, Any] | None = None,
    ) -> TransitionResult:
        """FINISHED on ``attempt`` stays FINISHED, due for re-drive at ``next_attempt_at``, the
        lease dropped; ``sealed_key``, when given, is stored (else the stored one is kept), and
        ``extra``, when given, replaces the record's."""
        update = Update(
            next_attempt_at=next_attempt_at,
            due_at=next_attempt_at,
            last_error=error,
            delivery_attempts=delivery_attempts,
            lease_until=None,
            updated_at=now,
            expires_at=expires_at,
            sealed_key=UNSET if sealed_key is None else sealed_key,
            extra=UNSET if extra is None else extra,
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
        watch: bool = False,
    ) -> TransitionResult:
        """ACCEPTED or RUNNING on ``attempt`` -> FINISHED with ``response`` (an ERROR naming the
        failure) on ``attempt + 1``, so the old attempt's finish loses; not while a lease is held
        unless ``even_if_leased``."""
        guard = Guard(
            states=(RecordState.ACCEPTED, RecordState.RUNNING),
            attempt=attempt,
            lease_free_at=None if even_if_leased else now,
        )
        finished = _finished(
            response,
            lease_until=lease_until,
            due_at=self._lease_due(lease_until, watch),
            expires_at=expires_at,
            now=now,
        )
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
        watch: bool = False,
        due_by: float | None = None,
    ) -> TransitionResult:
        """FINISHED on ``attempt`` -> FINISHED on ``attempt + 1`` with the lease until
        ``lease_until``: take over re-sending the stored response; not while a lease is held
        unless ``even_if_leased``, and when ``due_by`` is given, only if due by then (the
        re-drive: a response parked again meanwhile is not sent early)."""
        guard = Guard(
            states=(RecordState.FINISHED,),
            attempt=attempt,
            lease_free_at=None if even_if_leased else now,
            due_by=due_by,
        )
        update = Update(
            attempt=attempt + 1,
            lease_until=lease_until,
            due_at=self._lease_due(lease_until, watch),
            updated_at=now,
        )
        return await self._apply(rollout_id, guard, update, now=now)

    # ------------------------------------------------------------------ init and cancel

    async def request_cancel(
        self, rollout_id: str, *, now: float, reason: str | None = None
    ) -> TransitionResult:
        """Set the cancel flag of an ACCEPTED or RUNNING record (with ``reason``, when it is not
        a cancel request: a 0.3.8 rollout's polling lease ran out)."""
        guard = Guard(states=(RecordState.ACCEPTED, RecordState.RUNNING))
        update = Update(
            cancel_requested=True,
            updated_at=now,
            cancel_reason=UNSET if reason is None else reason,
        )
        return await self._apply(rollout_id, guard, update, now=now)

    async def renew_poll(
        self, rollout_id: str, *, until: float, now: float, seen: str | None = None
    ) -> TransitionResult:
        """A 0.3.8 rollout's polling lease held until ``until`` (a poll came), while the
        rollout has no final response and its lease has not run out (``poll_until`` at or
        after ``now``: a lease that ran out stays out); ``seen``, when given, is the status
        this poll answers (the next one waits for a change from it)."""
        guard = Guard(states=(RecordState.ACCEPTED, RecordState.RUNNING), poll_live_at=now)
        update = Update(poll_until=until, poll_seen=UNSET if seen is None else seen)
        return await self._apply(rollout_id, guard, update, now=now)

    async def mark_handoff(
        self,
        rollout_id: str,
        *,
        count: int,
        lease_until: float,
        now: float,
        sealed_key: str | None = None,
        watch: bool = False,
    ) -> TransitionResult:
        """Take the hand-off lease of an ACCEPTED record no one holds (a duplicate init, or the
        re-drive, is about to hand it off again): ``handoffs`` becomes ``count``, which makes
        :meth:`release` a no-op, and the lease runs until ``lease_until``, so at most one
        extra hand-off happens per lease. When ``watch`` (the callback key is ``sealed_key``,
        stored here, or the record needs none), the record is due when the lease runs out, so
        a hand-off that fails is tried again by the re-drive."""
        guard = Guard(states=(RecordState.ACCEPTED,), lease_free_at=now)
        due = self._lease_due(lease_until, watch)
        update = Update(
            handoffs=count,
            lease_until=lease_until,
            due_at=UNSET if due is None else due,
            updated_at=now,
            sealed_key=UNSET if sealed_key is None else sealed_key,
        )
        return await self._apply(rollout_id, guard, update, now=now)

    async def handed_off(self, rollout_id: str, *, expires_at: int, now: float) -> TransitionResult:
        """A hand-off of an ACCEPTED record succeeded (the job is durable with AWS, or queued in
        this process): it leaves the due index (on a store with an owner, it goes back to being
        due at ``expires_at``, its idle place). The hand-off lease stays, bounding hand-offs."""
        guard = Guard(states=(RecordState.ACCEPTED,))
        due = float(expires_at) if self.watches_all else None
        return await self._apply(rollout_id, guard, Update(due_at=due), now=now)


def _finished_on(attempt: int) -> Guard:
    return Guard(states=(RecordState.FINISHED,), attempt=attempt)


def _delivery_over(
    delivery_attempts: int, expires_at: int, now: float, extra: dict[str, Any] | None
) -> Update:
    # What delivered and undeliverable share: the key is no longer needed, nor the lease (nor
    # a polling lease, which finish and settle clear already; a record finished by an older
    # kit may still hold one, and must not come back into the live index).
    return Update(
        poll_until=None,
        sealed_key=None,
        next_attempt_at=None,
        due_at=None,
        delivery_attempts=delivery_attempts,
        lease_until=None,
        updated_at=now,
        expires_at=expires_at,
        extra=UNSET if extra is None else extra,
    )
