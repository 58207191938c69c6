"""The lease heartbeat: a renewal under way when the held block ends finishes before it returns,
so it cannot re-lease what the block's next move releases."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from rollout_sdk.engine.lease import Leases
from rollout_sdk.settings import KitSettings
from rollout_sdk.store.base import Store, TransitionResult
from rollout_sdk.store.record import RecordState

WITHIN = 5.0


class SlowRenewals:
    """A store whose renew waits until ``release`` is set, and says when it started and ended."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.events: list[str] = []

    async def renew(self, rollout_id: str, **_: Any) -> TransitionResult:
        self.events.append("renew started")
        self.started.set()
        await self.release.wait()
        self.events.append("renew committed")
        return TransitionResult(True, None)


async def test_a_renewal_under_way_finishes_before_the_held_block_returns() -> None:
    store = SlowRenewals()
    kit = KitSettings.model_construct(lease_seconds=60.0, heartbeat_seconds=0.01)
    leases = Leases(cast("Store", store), kit, clock=lambda: 0.0)

    async def hold() -> None:
        async with leases.holding("r1", 1, RecordState.FINISHED):
            await asyncio.wait_for(store.started.wait(), WITHIN)
        store.events.append("block returned")

    held = asyncio.create_task(hold())
    await asyncio.wait_for(store.started.wait(), WITHIN)
    assert not held.done()  # it waits for the renewal under way
    store.release.set()
    await asyncio.wait_for(held, WITHIN)
    assert store.events == ["renew started", "renew committed", "block returned"]
