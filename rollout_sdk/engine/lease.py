"""Leases: whoever holds a record's lease runs it or delivers its response; a heartbeat renews it.

A lease that is not renewed for ``ROLLOUT_SDK_LEASE_SECONDS`` belongs to a worker that died, and
anyone may then take the record over (by a conditional move that requires the lease to be free).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING

from rollout_sdk.errors import StoreError

if TYPE_CHECKING:
    from rollout_sdk.settings import KitSettings
    from rollout_sdk.store.base import Store
    from rollout_sdk.store.record import RecordState, RolloutRecord

logger = logging.getLogger("rollout_sdk.engine.lease")

Clock = Callable[[], float]


class Leases:
    """The lease rules of one runtime, and the heartbeat that keeps a lease while work runs."""

    def __init__(self, store: Store, kit: KitSettings, *, clock: Clock) -> None:
        self.store = store
        self.kit = kit
        self.clock = clock
        # The heartbeat of every held lease: one timer of the event loop for all of them, at
        # the earliest renewal due (see holding). Holds wait in the order their renewals are
        # due: each is (re)added a heartbeat after now, and the heartbeat is one length.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: dict[int, _Hold] = {}
        self._timer: asyncio.TimerHandle | None = None

    @property
    def seconds(self) -> float:
        """How long a lease lasts unless renewed (``ROLLOUT_SDK_LEASE_SECONDS``)."""
        return float(self.kit.lease_seconds)

    @property
    def heartbeat_seconds(self) -> float:
        """How often a held lease is renewed (``ROLLOUT_SDK_HEARTBEAT_SECONDS``)."""
        return float(self.kit.heartbeat_seconds)

    def until(self, now: float) -> float:
        """When a lease taken or renewed at ``now`` runs out."""
        return now + self.seconds

    @staticmethod
    def watches(
        record: RolloutRecord | None, *, sealing: str | None = None, keyless: bool = False
    ) -> bool:
        """Whether a lease taken on ``record`` is watched by the re-drive (in the due index
        until it runs out): the one rule, which every move that takes or renews a lease is
        given (``watch=``).

        Watched when a recoverer can act without the holder: the record holds the sealed
        callback key (its own, or ``sealing``, which the move stores), or the rollout needs
        none (``keyless``: its init carried no callback key). A claim is not watched: the
        claimer has not read the record yet, and its first renewal decides. (On a store with an
        owner, every lease is watched whatever this says: the store sees to that.)"""
        if keyless or sealing is not None:
            return True
        return record is not None and record.sealed_key is not None

    @property
    def waiting(self) -> int:
        """Held leases waiting for their next renewal (not counting renewals under way)."""
        return len(self._waiting)

    def holding(
        self,
        rollout_id: str,
        attempt: int,
        state: RecordState,
        on_record: Callable[[RolloutRecord], None] | None = None,
        *,
        watch: bool = False,
    ) -> _Holding:
        """An async context manager: renew the lease every ``heartbeat_seconds`` while the
        block runs; ``on_record`` sees each renewed record (the worker reads
        ``cancel_requested`` from it); a ``watch``-ed lease's due time moves with it.

        Every lease held in this runtime shares one heartbeat timer, armed for the earliest
        renewal due; a renewal runs as a task only when it is due. Measured
        (``python -m bench.profile``), a task per held block waiting on an event with a timeout
        cost about 4% of the local server's CPU, and a timer per block still about 3%, while
        most blocks end before their first renewal. Entering and leaving a block is two dict
        operations."""
        return _Holding(self, _Hold(rollout_id, attempt, state, on_record, watch))

    def begin(self, hold: _Hold) -> None:
        """A block begins holding ``hold``'s lease (``holding``'s context manager calls it)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            # A new event loop (a Lambda invocation runs one each): what the old one held
            # died with it.
            self._loop, self._waiting, self._timer = loop, {}, None
        self._wait(hold)

    def _wait(self, hold: _Hold) -> None:
        if not hold.held or self._loop is None:
            return
        hold.due = self._loop.time() + self.heartbeat_seconds
        self._waiting[id(hold)] = hold
        if self._timer is None:
            self._timer = self._loop.call_at(hold.due, self._tick)

    def _tick(self) -> None:
        loop = self._loop
        self._timer = None
        if loop is None:
            return
        now = loop.time()
        while self._waiting:
            key, hold = next(iter(self._waiting.items()))
            if hold.due > now:
                self._timer = loop.call_at(hold.due, self._tick)
                return
            del self._waiting[key]
            hold.renewal = loop.create_task(self._renew(hold), name=f"lease:{hold.rollout_id}")

    async def _renew(self, hold: _Hold) -> None:
        now = self.clock()
        try:
            renewed = await self.store.renew(
                hold.rollout_id,
                state=hold.state,
                attempt=hold.attempt,
                lease_until=self.until(now),
                now=now,
                watch=hold.watch,
            )
        except StoreError as exc:
            logger.warning(
                "lease renewal failed", extra={"rollout_id": hold.rollout_id, "error": str(exc)}
            )
            self._wait(hold)  # tried again a heartbeat later
            return
        if renewed.record is not None and hold.on_record is not None:
            hold.on_record(renewed.record)
        if renewed.applied:
            self._wait(hold)  # else no longer ours: no more renewals

    async def end(self, hold: _Hold) -> None:
        """The block of ``hold`` ends: no more renewals, and one under way has finished."""
        hold.held = False
        self._waiting.pop(id(hold), None)
        # Not cancelled: a renewal under way (on a store's thread, which a cancel would not
        # stop) finishes before the block's next move, or it could re-lease what that move
        # just released (a parked response, held for a lease period more).
        if hold.renewal is not None:
            await asyncio.gather(hold.renewal, return_exceptions=True)


@dataclass(eq=False, slots=True)
class _Hold:
    """One held lease: what its renewals move, when the next is due, the one under way."""

    rollout_id: str
    attempt: int
    state: RecordState
    on_record: Callable[[RolloutRecord], None] | None
    watch: bool
    due: float = 0.0
    held: bool = True
    renewal: asyncio.Task[None] | None = None


class _Holding:
    """``Leases.holding``'s context manager (a class: two per rollout, and a generator-based
    one costs a generator and its frames each time)."""

    __slots__ = ("_hold", "_leases")

    def __init__(self, leases: Leases, hold: _Hold) -> None:
        self._leases = leases
        self._hold = hold

    async def __aenter__(self) -> None:
        self._leases.begin(self._hold)

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._leases.end(self._hold)
