"""Init's hand-off, including a duplicate that races a failing first hand-off."""

from __future__ import annotations

import time
from typing import Any

import pytest

from rollout_sdk.dispatch.base import Job
from rollout_sdk.dispatch.inprocess import InProcessDispatcher
from rollout_sdk.engine.assembly import Engine
from rollout_sdk.engine.service import RolloutService
from rollout_sdk.errors import DispatchError
from rollout_sdk.http.app import in_process
from rollout_sdk.settings import RolloutClientSettings, load_settings
from rollout_sdk.store.base import CreateResult, TransitionResult
from rollout_sdk.store.memory import MemoryStore
from rollout_sdk.store.record import RecordState, RolloutRecord
from rollout_sdk.traingate.client import CHAT_PATH, COMPLETED_PATH, TrainGateClient

from .support import EchoAgent, FakeTrainGate, RecordingDispatcher, make_request


class RacingDispatcher(RecordingDispatcher):
    """The first hand-off lets a duplicate init through, then fails; later ones succeed."""

    def __init__(self) -> None:
        super().__init__()
        self.service: RolloutService | None = None
        self.duplicate_answer: object = None
        self.calls = 0

    async def dispatch(self, job: Job) -> None:
        self.calls += 1
        if self.calls == 1:
            assert self.service is not None
            self.duplicate_answer = await self.service.init(make_request())
            raise DispatchError("throttled")
        await super().dispatch(job)


async def test_a_duplicate_answered_202_keeps_the_rollout_when_the_first_hand_off_fails() -> None:
    store = MemoryStore()
    dispatcher = RacingDispatcher()
    service = RolloutService(EchoAgent(), store, dispatcher, load_settings())
    dispatcher.service = service
    with pytest.raises(DispatchError):
        await service.init(make_request())
    # The duplicate got 202 and handed the rollout off itself; the failed first init's release
    # must not delete the record under it.
    assert dispatcher.duplicate_answer is not None
    assert [job.rollout_id for job in dispatcher.jobs] == ["rollout-1"]
    record = await store.get("rollout-1", now=time.time())
    assert record is not None
    assert record.state == RecordState.ACCEPTED
    assert record.handoffs == 1


async def test_a_duplicate_after_the_claim_was_released_is_refused_too() -> None:
    class AlwaysFails(RacingDispatcher):
        async def dispatch(self, job: Job) -> None:
            raise DispatchError("throttled")

    store = MemoryStore()
    service = RolloutService(EchoAgent(), store, AlwaysFails(), load_settings())
    with pytest.raises(DispatchError):
        await service.init(make_request())
    assert await store.get("rollout-1", now=time.time()) is None
    # TrainGate's retry starts afresh (and fails the same way here): never a 202 for nothing.
    with pytest.raises(DispatchError):
        await service.init(make_request())
    assert await store.get("rollout-1", now=time.time()) is None


# ------------------------------------------------------------------ init creates it claimed


class CountingStore(MemoryStore):
    """A memory store that counts the claim moves and the creates given a claim."""

    def __init__(self) -> None:
        super().__init__()
        self.claims = 0
        self.claimed_creates = 0

    async def claim(self, rollout_id: str, **terms: Any) -> TransitionResult:
        self.claims += 1
        return await super().claim(rollout_id, **terms)

    async def create(self, record: RolloutRecord, **options: Any) -> CreateResult:
        if options.get("claim") is not None:
            self.claimed_creates += 1
        return await super().create(record, **options)


def _local(store: MemoryStore, gate: FakeTrainGate, *, concurrency: int) -> RolloutService:
    settings = load_settings()
    settings.server.max_concurrent_rollouts = concurrency
    client = TrainGateClient(RolloutClientSettings(max_retries=0), transport=gate.transport)
    engine = Engine.build(
        store=store,
        client=client,
        settings=settings,
        agent_loop=EchoAgent(),
        dispatcher=in_process(settings),
    )
    assert engine.dispatcher is not None
    return RolloutService(EchoAgent(), store, engine.dispatcher, settings, engine=engine)


async def _drained(service: RolloutService) -> None:
    assert isinstance(service.dispatcher, InProcessDispatcher)
    assert await service.dispatcher.drain(within=10.0)


async def test_a_rollout_that_starts_at_once_is_created_claimed_in_one_write() -> None:
    store, gate = CountingStore(), FakeTrainGate()
    service = _local(store, gate, concurrency=2)
    await service.init(make_request())
    # Created RUNNING on attempt 1, the slot taken, before the 202 was answered.
    record = await store.get("rollout-1", now=time.time())
    assert record is not None
    assert (record.state, record.attempt) == (RecordState.RUNNING, 1)
    assert record.lease_until is not None
    await _drained(service)
    assert (store.claimed_creates, store.claims) == (1, 0)
    final = await store.get("rollout-1", now=time.time())
    assert final is not None and final.state == RecordState.DELIVERED
    assert len(gate.on(COMPLETED_PATH)) == 1


async def test_a_rollout_that_must_wait_for_a_slot_is_created_accepted_and_claimed_later() -> None:
    store, gate = CountingStore(), FakeTrainGate()
    service = _local(store, gate, concurrency=1)
    await service.init(make_request())  # takes the one slot
    await service.init(make_request(rollout_id="rollout-2"))  # waits for it
    second = await store.get("rollout-2", now=time.time())
    assert second is not None and second.state == RecordState.ACCEPTED
    await _drained(service)
    assert (store.claimed_creates, store.claims) == (1, 1)
    for rollout_id in ("rollout-1", "rollout-2"):
        final = await store.get(rollout_id, now=time.time())
        assert final is not None and final.state == RecordState.DELIVERED
    assert len(gate.on(COMPLETED_PATH)) == 2


async def test_a_duplicate_init_gives_back_the_slot_it_reserved() -> None:
    store, gate = CountingStore(), FakeTrainGate(chat_delay=0.05)
    service = _local(store, gate, concurrency=2)
    dispatcher = service.dispatcher
    assert isinstance(dispatcher, InProcessDispatcher)
    await service.init(make_request())
    await service.init(make_request())  # the same rollout again: 202, nothing started
    # One slot is the running rollout's; the duplicate's reservation came back.
    assert await dispatcher.reserve()
    assert not await dispatcher.reserve()
    dispatcher.unreserve()
    await _drained(service)
    assert store.claimed_creates == 2  # both inits reserved; the second's create conflicted
    assert len(gate.on(COMPLETED_PATH)) == 1


async def test_a_cancel_before_a_claimed_rollouts_worker_starts_reaches_it() -> None:
    store, gate = CountingStore(), FakeTrainGate()
    service = _local(store, gate, concurrency=2)
    await service.init(make_request())
    # The job is dispatched but its task has not run yet: the record is RUNNING already.
    record = await store.get("rollout-1", now=time.time())
    assert record is not None and record.state == RecordState.RUNNING
    await service.cancel("rollout-1")
    await _drained(service)
    final = await store.get("rollout-1", now=time.time())
    assert final is not None and final.response is not None
    assert final.response["status"] == "ERROR"
    assert final.response["finish_reason"] == "cancelled"
    assert gate.on(CHAT_PATH) == []  # stopped before its first turn
