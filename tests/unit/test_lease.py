"""The lease heartbeat: a renewal under way when the held block ends finishes before it returns,
so it cannot re-lease what the block's next move releases. And the one rule that decides which
leases the re-drive watches."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from rollout_sdk.engine.lease import Leases
from rollout_sdk.errors import StoreError
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


class CountingRenewals:
    """A store whose renew answers at once: applied for the first ``applied`` calls, then not;
    ``seen`` is set after ``wanted`` calls, and a StoreError is raised on the calls in
    ``failing``."""

    def __init__(self, *, applied: int, wanted: int, failing: frozenset[int] = frozenset()) -> None:
        self.applied = applied
        self.wanted = wanted
        self.failing = failing
        self.calls = 0
        self.seen = asyncio.Event()

    async def renew(self, rollout_id: str, **_: Any) -> TransitionResult:
        self.calls += 1
        if self.calls >= self.wanted:
            self.seen.set()
        if self.calls in self.failing:
            raise StoreError("the store is down")
        return TransitionResult(self.calls <= self.applied, None)


def _leases(store: object) -> Leases:
    kit = KitSettings.model_construct(lease_seconds=60.0, heartbeat_seconds=0.001)
    return Leases(cast("Store", store), kit, clock=lambda: 0.0)


class Timers:
    """The running loop's ``call_at``, watched: every heartbeat timer the leases arm (others,
    such as ``wait_for``'s timeouts, pass through uncounted)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        loop = asyncio.get_running_loop()
        self.armed: list[asyncio.TimerHandle] = []
        original = loop.call_at

        def call_at(when: float, callback: Any, *args: Any, **kwargs: Any) -> Any:
            handle = original(when, callback, *args, **kwargs)
            if getattr(callback, "__qualname__", "").startswith("Leases."):
                self.armed.append(handle)
            return handle

        monkeypatch.setattr(loop, "call_at", call_at)


async def test_the_heartbeat_renews_again_and_again_while_the_block_runs() -> None:
    # A failed renewal is tried again a heartbeat later: call 2 fails, 3 and 4 still come.
    store = CountingRenewals(applied=100, wanted=4, failing=frozenset({2}))
    leases = _leases(store)
    async with leases.holding("r1", 1, RecordState.RUNNING):
        await asyncio.wait_for(store.seen.wait(), WITHIN)
    assert store.calls >= 4
    assert leases.waiting == 0  # nothing is left to renew after the block


async def test_a_renewal_not_applied_stops_the_heartbeat() -> None:
    store = CountingRenewals(applied=1, wanted=2)
    leases = _leases(store)
    async with leases.holding("r1", 1, RecordState.RUNNING):
        # The store answers at once, so the renewal that was refused (no longer ours) has
        # ended when this wakes: the lease no longer waits for a renewal.
        await asyncio.wait_for(store.seen.wait(), WITHIN)
        assert store.calls == 2
        assert leases.waiting == 0


async def test_a_block_that_ends_before_its_first_heartbeat_starts_no_task() -> None:
    store = CountingRenewals(applied=100, wanted=1)
    kit = KitSettings.model_construct(lease_seconds=60.0, heartbeat_seconds=30.0)
    leases = Leases(cast("Store", store), kit, clock=lambda: 0.0)
    before = len(asyncio.all_tasks())
    async with leases.holding("r1", 1, RecordState.RUNNING):
        assert len(asyncio.all_tasks()) == before
        assert leases.waiting == 1
    assert leases.waiting == 0
    assert store.calls == 0


async def test_every_held_lease_shares_one_heartbeat_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    store = CountingRenewals(applied=1000, wanted=10_000)
    kit = KitSettings.model_construct(lease_seconds=60.0, heartbeat_seconds=30.0)
    leases = Leases(cast("Store", store), kit, clock=lambda: 0.0)
    timers = Timers(monkeypatch)
    release = asyncio.Event()
    entered = 0
    all_in = asyncio.Event()

    async def hold(rollout_id: str) -> None:
        nonlocal entered
        async with leases.holding(rollout_id, 1, RecordState.RUNNING):
            entered += 1
            if entered == 50:
                all_in.set()
            await release.wait()

    tasks = [asyncio.create_task(hold(f"r{i}")) for i in range(50)]
    await asyncio.wait_for(all_in.wait(), WITHIN)
    assert leases.waiting == 50
    assert len(timers.armed) == 1  # one timer for the fifty
    release.set()
    await asyncio.wait_for(asyncio.gather(*tasks), WITHIN)
    assert leases.waiting == 0


async def test_renewals_come_in_order_each_a_heartbeat_after_the_last() -> None:
    renewed: list[str] = []
    done = asyncio.Event()

    class Recording:
        async def renew(self, rollout_id: str, **_: Any) -> TransitionResult:
            renewed.append(rollout_id)
            if len(renewed) >= 6:
                done.set()
            return TransitionResult(True, None)

    leases = _leases(Recording())
    async with (
        leases.holding("a", 1, RecordState.RUNNING),
        leases.holding("b", 1, RecordState.RUNNING),
    ):
        await asyncio.wait_for(done.wait(), WITHIN)
    # Each lease renewed again and again, neither starved by the other.
    assert renewed.count("a") >= 2 and renewed.count("b") >= 2
    assert leases.waiting == 0


async def test_a_new_event_loop_starts_with_no_holds() -> None:
    # A Lambda invocation runs its own loop: a hold left by a loop that closed must not keep
    # the heartbeat timer of the next from being armed.
    store = CountingRenewals(applied=100, wanted=2)
    leases = _leases(store)

    def in_a_loop_that_dies() -> None:
        async def hold_and_vanish() -> None:
            holding = leases.holding("old", 1, RecordState.RUNNING)
            await holding.__aenter__()  # never left: the loop ends with it held

        asyncio.run(hold_and_vanish())

    await asyncio.get_running_loop().run_in_executor(None, in_a_loop_that_dies)
    async with leases.holding("r1", 1, RecordState.RUNNING):
        await asyncio.wait_for(store.seen.wait(), WITHIN)
    assert store.calls >= 2
