"""The lease heartbeat: a renewal under way when the held block ends finishes before it returns,
so it cannot re-lease what the block's next move releases. And the one rule that decides which
leases the re-drive watches."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from rollout_sdk.engine.lease import Leases
from rollout_sdk.settings import KitSettings
from rollout_sdk.store.base import Store, TransitionResult
from rollout_sdk.store.record import RecordState, RolloutRecord

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


# The one watch rule (a lease in the due index until it runs out): every lease-taking move is
# told ``watch`` by it. Each row would fail if a case were decided the other way.
SEALED_RECORD = RolloutRecord(
    rollout_id="r1", slot="rid:r1", fingerprint="f", request={}, init_response={}, sealed_key="k"
)
KEYLESS_RECORD = SEALED_RECORD.evolve(sealed_key=None)


@pytest.mark.parametrize(
    ("record", "options", "watched"),
    [
        (None, {}, False),  # a claim: the record is not read yet
        (KEYLESS_RECORD, {}, False),  # no key to report with: only the holder can
        (SEALED_RECORD, {}, True),  # the record holds the sealed key
        (KEYLESS_RECORD, {"sealing": "k2"}, True),  # the move stores one
        (None, {"sealing": "k2"}, True),
        (KEYLESS_RECORD, {"keyless": True}, True),  # the rollout needs none
        (SEALED_RECORD, {"keyless": False, "sealing": None}, True),
    ],
    ids=["claim", "no-key", "sealed", "sealing", "sealing-unread", "keyless", "sealed-explicit"],
)
def test_the_watch_rule(record: RolloutRecord | None, options: Any, watched: bool) -> None:
    assert Leases.watches(record, **options) is watched
