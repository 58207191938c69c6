"""The SQLite store outlives the server: a restarted server remembers finished rollouts."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from rollout_sdk.store.record import RecordState
from rollout_sdk.testing.standin import TrainGateStandIn
from rollout_sdk.testing.threads import ServerThread
from testkit.bodies import calculator_body
from testkit.wait import until

from .support import AUTH, idle, local_app

pytestmark = pytest.mark.integration


async def test_restarted_server_answers_a_duplicate_of_a_finished_rollout_and_runs_nothing(
    standin: TrainGateStandIn, traingate: ServerThread, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    body = calculator_body("durable-1", traingate.url, question="What is 19 + 23?")

    with ServerThread(local_app(state)) as first:
        async with httpx.AsyncClient(base_url=first.url, headers=AUTH, timeout=30) as client:
            accepted = await client.post("/v1/rollout/init", json=body)
            assert accepted.status_code == 202
            assert await asyncio.to_thread(standin.wait_for, 1, 20)

            async def counted() -> bool:
                return bool((await client.get("/health")).json()["completed_rollouts"] == 1)

            # The worker records DELIVERED just after the callback; let it before stopping.
            await until(counted, what="the first server finishing the rollout")
    assert standin.chat_calls == 2

    app = local_app(state)
    with ServerThread(app) as second:
        async with httpx.AsyncClient(base_url=second.url, headers=AUTH, timeout=30) as client:
            duplicate = await client.post("/v1/rollout/init", json=body)
            changed = await client.post(
                "/v1/rollout/init", json={**body, "metadata": {"ground_truth": "43"}}
            )
            await idle(client)  # a run, had either init started one, has ended
            health = (await client.get("/health")).json()
            record = await app.state.services.store.get("durable-1", now=0.0)

    assert duplicate.status_code == 202
    assert duplicate.content == accepted.content
    # The restarted server also still knows the request it accepted, field by field.
    assert changed.status_code == 409, changed.text
    assert health["active_rollouts"] == 0
    assert health["completed_rollouts"] == 0
    assert record is not None
    assert record.state == RecordState.DELIVERED
    assert standin.chat_calls == 2
    assert len(standin.completions["durable-1"]) == 1
