"""Init's hand-off, including a duplicate that races a failing first hand-off."""

from __future__ import annotations

import time

import pytest

from rollout_sdk.dispatch.base import Job
from rollout_sdk.engine.service import RolloutService
from rollout_sdk.errors import DispatchError
from rollout_sdk.settings import load_settings
from rollout_sdk.store.memory import MemoryStore
from rollout_sdk.store.record import RecordState

from .support import EchoAgent, RecordingDispatcher, make_request


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
