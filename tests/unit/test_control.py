"""Status, cancel and backpressure through the app (ASGITransport), with the real in-process
worker and a MockTransport TrainGate."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from rollout_sdk.agent.loop import RolloutContext, RolloutResult
from rollout_sdk.http.app import create_app
from rollout_sdk.protocol import Message
from rollout_sdk.settings import load_settings
from rollout_sdk.store.memory import MemoryStore
from rollout_sdk.store.record import RecordState
from rollout_sdk.traingate.client import CHAT_PATH, COMPLETED_PATH
from testkit.wait import until, until_true

from .support import EchoAgent, FakeTrainGate, quiet_client, request_body

AUTH = {"Authorization": "Bearer server-key"}


class LoopingAgent(EchoAgent):
    """Chats turn after turn until cancelled (or 50 turns)."""

    name = "looping"

    async def run(self, ctx: RolloutContext) -> RolloutResult:
        messages: list[Message] = list(ctx.request.messages)
        for _ in range(50):
            turn = await ctx.chat(messages)
            messages.append(turn.message)
        return ctx.complete(messages)


@dataclass
class Server:
    http: httpx.AsyncClient
    gate: FakeTrainGate
    store: MemoryStore

    async def init(self, **overrides: Any) -> httpx.Response:
        return await self.http.post(
            "/v1/rollout/init", json=request_body(**overrides), headers=AUTH
        )

    def reports(self, rollout_id: str) -> list[dict[str, Any]]:
        return [b for b in self.gate.bodies(COMPLETED_PATH) if b["rollout_id"] == rollout_id]

    async def wait_reported(self, rollout_id: str, timeout: float = 5.0) -> dict[str, Any]:
        await until_true(
            lambda: bool(self.reports(rollout_id)), within=timeout, what=f"{rollout_id} reported"
        )
        return self.reports(rollout_id)[0]

    async def wait_delivered(self, rollout_id: str) -> None:
        """Until the record says DELIVERED (it is written after the 2xx of the callback)."""

        async def delivered() -> bool:
            record = await self.store.get(rollout_id, now=time.time())
            return record is not None and record.state == RecordState.DELIVERED

        await until(delivered, within=5, what=f"{rollout_id} recorded as delivered")

    async def wait_idle(self) -> None:
        """Until no job is running or queued (``/health``'s ``active_rollouts`` is 0)."""

        async def idle() -> bool:
            return int((await self.http.get("/health")).json()["active_rollouts"]) == 0

        await until(idle, within=5, what="every job ended")


async def serve(agent: EchoAgent, gate: FakeTrainGate, **server: Any) -> AsyncIterator[Server]:
    store = MemoryStore()
    settings = load_settings(server=server.pop("server", {}), kit=server.pop("kit", {}))
    client = quiet_client(gate)
    app = create_app(agent, api_key="server-key", settings=settings, store=store, client=client)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://rollout") as http:
            yield Server(http, gate, store)


@pytest.fixture
async def looping() -> AsyncIterator[Server]:
    async for s in serve(LoopingAgent(), FakeTrainGate(chat_delay=0.02)):
        yield s


async def test_status_of_a_delivered_rollout() -> None:
    async for s in serve(EchoAgent(), FakeTrainGate()):
        await s.init(api_key="cb")
        await s.wait_reported("rollout-1")
        await s.wait_delivered("rollout-1")
        answer = await s.http.get("/v1/rollout/rollout-1", headers=AUTH)
        assert answer.status_code == 200
        body = answer.json()
        assert (body["state"], body["status"], body["delivered"]) == (
            "DELIVERED",
            "COMPLETED",
            True,
        )
        assert body["delivered_at"] >= body["created_at"] > 0
        assert body["metrics"]["num_llm_calls"] == 1
        assert body["delivery_attempts"] == 1
        assert "api_key" not in answer.text and "cb" not in body.values()


async def test_status_needs_the_key_and_knows_only_real_rollouts(looping: Server) -> None:
    assert (await looping.http.get("/v1/rollout/nobody")).status_code == 401
    missing = await looping.http.get("/v1/rollout/nobody", headers=AUTH)
    assert missing.status_code == 404
    assert "nobody" in missing.json()["detail"]


async def test_cancel_stops_a_running_rollout_before_its_next_turn(looping: Server) -> None:
    await looping.init(api_key="cb")
    await until_true(lambda: len(looping.gate.on(CHAT_PATH)) >= 2, within=5, what="two turns")
    answer = await looping.http.post("/v1/rollout/rollout-1/cancel", headers=AUTH)
    assert answer.status_code == 202
    assert answer.json()["cancel_requested"] is True
    report = await looping.wait_reported("rollout-1")
    assert (report["status"], report["finish_reason"]) == ("ERROR", "cancelled")
    turns = len(looping.gate.on(CHAT_PATH))
    assert turns < 50
    await looping.wait_idle()  # the run has ended: any turn it still took is counted now
    assert len(looping.gate.on(CHAT_PATH)) == turns  # nothing after the cancel
    assert len(looping.gate.on(COMPLETED_PATH)) == 1
    again = await looping.http.post("/v1/rollout/rollout-1/cancel", headers=AUTH)
    assert again.status_code == 409  # finished: nothing to cancel


async def test_cancel_of_a_rollout_not_started_reports_it_without_running() -> None:
    async for s in serve(
        LoopingAgent(), FakeTrainGate(chat_delay=0.05), server={"max_concurrent_rollouts": 1}
    ):
        await s.init(rollout_id="first", api_key="cb")
        await s.init(rollout_id="queued", api_key="cb")  # waits behind "first"
        answer = await s.http.post("/v1/rollout/queued/cancel", headers=AUTH)
        assert answer.status_code == 202
        assert answer.json()["state"] == "DELIVERED"
        report = await s.wait_reported("queued")
        assert (report["status"], report["finish_reason"]) == ("ERROR", "cancelled")
        await s.http.post("/v1/rollout/first/cancel", headers=AUTH)
        await s.wait_reported("first")
        await s.wait_idle()  # the queued job has had its slot, and found nothing to run
        ran = [b["rollout_id"] for b in s.gate.bodies(CHAT_PATH)]
        assert "queued" not in ran  # never run
        assert len([b for b in s.gate.bodies(COMPLETED_PATH) if b["rollout_id"] == "queued"]) == 1


async def test_cancel_of_an_unknown_rollout_is_404(looping: Server) -> None:
    assert (await looping.http.post("/v1/rollout/ghost/cancel", headers=AUTH)).status_code == 404


async def test_past_the_queue_bound_init_is_429_with_retry_after_and_stores_nothing() -> None:
    async for s in serve(
        LoopingAgent(),
        FakeTrainGate(chat_delay=0.05),
        server={"max_concurrent_rollouts": 1},
        kit={"max_queued_rollouts": 1, "retry_after_seconds": 3},
    ):
        assert (await s.init(rollout_id="a")).status_code == 202
        assert (await s.init(rollout_id="b")).status_code == 202
        refused = await s.init(rollout_id="c")
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "3"
        assert "ROLLOUT_SDK_MAX_QUEUED_ROLLOUTS" in refused.json()["detail"]
        assert await s.store.get("c", now=time.time()) is None  # the claim was released
        for rid in ("a", "b"):
            await s.http.post(f"/v1/rollout/{rid}/cancel", headers=AUTH)


async def test_the_local_store_keeps_the_callback_key_only_sealed() -> None:
    async for s in serve(LoopingAgent(), FakeTrainGate(chat_delay=0.05)):
        await s.init(api_key="plain-callback-key")
        record = await s.store.get("rollout-1", now=time.time())
        assert record is not None and record.sealed_key is not None
        assert "plain-callback-key" not in str(record.to_dict())
        await s.http.post("/v1/rollout/rollout-1/cancel", headers=AUTH)
        await s.wait_reported("rollout-1")
        await s.wait_delivered("rollout-1")
        done = await s.store.get("rollout-1", now=time.time())
        assert done is not None and done.state == RecordState.DELIVERED
        assert done.sealed_key is None  # dropped once delivered
