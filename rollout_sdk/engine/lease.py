"""Leases: whoever holds a record's lease runs it or delivers its response; a heartbeat renews it.

A lease that is not renewed for ``ROLLOUT_SDK_LEASE_SECONDS`` belongs to a worker that died, and
anyone may then take the record over (by a conditional move that requires the lease to be free).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
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

    @asynccontextmanager
    async def holding(
        self,
        rollout_id: str,
        attempt: int,
        state: RecordState,
        on_record: Callable[[RolloutRecord], None] | None = None,
        *,
        watch: bool = False,
    ) -> AsyncIterator[None]:
        """Renew the lease every ``heartbeat_seconds`` while the block runs; ``on_record`` sees
        each renewed record (the worker reads ``cancel_requested`` from it); a ``watch``-ed
        lease's due time moves with it.

        The heartbeat is a timer of the event loop, not a task: a task waiting on an event
        with a timeout cost about 4% of the local server's CPU (``python -m bench.profile``:
        a task, an event and a timeout per held block, two blocks a rollout), while most blocks
        end before their first renewal is due. A renewal runs as a task only when its timer
        fires."""
        loop = asyncio.get_running_loop()
        held = True
        timer: asyncio.TimerHandle | None = None
        renewal: asyncio.Task[None] | None = None

        def arm() -> None:
            nonlocal timer
            if held:
                timer = loop.call_later(self.heartbeat_seconds, fire)

        def fire() -> None:
            nonlocal renewal
            if held:
                renewal = loop.create_task(renew(), name=f"lease:{rollout_id}")

        async def renew() -> None:
            now = self.clock()
            try:
                renewed = await self.store.renew(
                    rollout_id,
                    state=state,
                    attempt=attempt,
                    lease_until=self.until(now),
                    now=now,
                    watch=watch,
                )
            except StoreError as exc:
                logger.warning(
                    "lease renewal failed", extra={"rollout_id": rollout_id, "error": str(exc)}
                )
                arm()  # tried again a heartbeat later
                return
            if renewed.record is not None and on_record is not None:
                on_record(renewed.record)
            if renewed.applied:
                arm()  # else no longer ours: no more renewals

        arm()
        try:
            yield
        finally:
            held = False
            if timer is not None:
                timer.cancel()
            # Not cancelled: a renewal under way (on a store's thread, which a cancel would not
            # stop) finishes before the block's next move, or it could re-lease what that move
            # just released (a parked response, held for a lease period more).
            if renewal is not None:
                await asyncio.gather(renewal, return_exceptions=True)
