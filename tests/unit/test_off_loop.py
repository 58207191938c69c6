"""Blocking back ends stay off the event loop: a slow KMS call, a SQLite transaction waiting for
another connection's lock, and a Secrets Manager read each wait on a thread of their adapter's
own while the other rollouts and requests of the same process carry on.

Each slow call blocks on a ``threading.Event`` with a bounded wait, so a call made on the loop
(the bug these tests guard against) fails the test in seconds instead of hanging it.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from rollout_sdk.agent.loop import RolloutContext, RolloutResult
from rollout_sdk.dispatch.base import Job
from rollout_sdk.engine.client import TrainGateClient
from rollout_sdk.engine.record import RecordState
from rollout_sdk.engine.worker import RolloutWorker
from rollout_sdk.errors import StoreError
from rollout_sdk.protocol import Message
from rollout_sdk.settings import RolloutClientSettings, load_settings
from rollout_sdk.store.base import Store
from rollout_sdk.store.sqlite import SQLiteStore
from testkit.wait import until_true

from .support import (
    EchoAgent,
    FakeSleep,
    FakeTrainGate,
    accepted_record,
)

if TYPE_CHECKING:
    pass

#: How long a blocked fake waits for its release before it gives up (and fails the test).
HOLD = 5.0
KEY = "cb-key"


def _worker(agent: EchoAgent, store: Store, gate: FakeTrainGate, **kwargs: Any) -> RolloutWorker:
    client = TrainGateClient(
        RolloutClientSettings(max_retries=0, complete_rollout_retries=0),
        transport=gate.transport,
        sleep=FakeSleep(),
    )
    return RolloutWorker(agent, store, client, load_settings(), **kwargs)


async def _accept(store: Store, *rollout_ids: str) -> None:
    now = time.time()
    for rid in rollout_ids:
        assert (await store.create(accepted_record(rid, now=now), now=now)).created


# ---------------------------------------------------------------------- SQLite


class CountingAgent(EchoAgent):
    """``held`` waits for ``go`` once it runs, then makes ``turns`` chat turns; others make one."""

    name = "counting"

    def __init__(self, held: str, turns: int) -> None:
        self.held = held
        self.turns = turns
        self.running = asyncio.Event()
        self.go = asyncio.Event()
        self.done_turns = 0

    async def run(self, ctx: RolloutContext) -> RolloutResult:
        messages: list[Message] = list(ctx.request.messages)
        if ctx.request.rollout_id != self.held:
            return await super().run(ctx)
        self.running.set()
        await self.go.wait()
        for _ in range(self.turns):
            result = await ctx.chat(messages)
            messages.append(result.message)
            self.done_turns += 1
        return ctx.complete(messages, reward=1.0)


async def test_a_sqlite_transaction_waiting_for_a_lock_does_not_stall_other_rollouts(
    tmp_path: Path,
) -> None:
    path = tmp_path / "rollouts.db"
    store = SQLiteStore(path, busy_timeout_seconds=HOLD)
    await _accept(store, "running", "waiting")
    agent = CountingAgent("running", turns=5)
    worker = _worker(agent, store, FakeTrainGate())
    running = asyncio.create_task(worker.run(Job("running", 1, KEY)))
    await asyncio.wait_for(agent.running.wait(), HOLD)  # claimed: its agent is under way
    # Another connection (another process, a backup) takes the write lock.
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        waiting = asyncio.create_task(worker.run(Job("waiting", 1, KEY)))  # its claim must wait
        agent.go.set()
        await until_true(lambda: agent.done_turns == agent.turns, within=HOLD, what="the turns")
        assert not waiting.done()  # its transaction still waits for the lock, off the loop
    finally:
        other.execute("ROLLBACK")
        other.close()
    finals = await asyncio.wait_for(asyncio.gather(running, waiting), HOLD)
    assert [r.state if r else None for r in finals] == [RecordState.DELIVERED] * 2
    await store.close()


async def test_a_closed_sqlite_store_refuses_at_once(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "rollouts.db")
    await _accept(store, "r1")
    await store.close()
    await store.close()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        await store.get("r1", now=time.time())
