"""The local server (build_local_app on SQLite) against the TrainGate stand-in, over real HTTP."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

import httpx
import pytest

from rollout_sdk.settings import load_settings
from rollout_sdk.store.record import RecordState
from rollout_sdk.testing.standin import TrainGateStandIn
from rollout_sdk.testing.threads import ServerThread
from testkit.bodies import calculator_body, make_questions
from testkit.wait import until

from .support import AUTH, CountingAgent, HeaderRecorder, init_all, local_app

pytestmark = pytest.mark.integration


async def test_batch_is_reported_once_each_completed_with_reward_and_metrics(
    standin: TrainGateStandIn, traingate: ServerThread, tmp_path: Path
) -> None:
    questions = make_questions(30, seed=11)
    ids = [f"batch-{i:03d}" for i in range(len(questions))]
    truth = dict(zip(ids, (answer for _, answer in questions), strict=True))
    with ServerThread(local_app(tmp_path / "state")) as server:
        async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=30) as client:
            responses = await init_all(client, traingate.url, ids, questions)
            assert [r.status_code for r in responses] == [202] * len(ids)
            assert [r.json()["rollout_id"] for r in responses] == ids
            assert {t["function"]["name"] for t in responses[0].json()["tools"]} >= {"calculate"}
            assert await asyncio.to_thread(standin.wait_for, len(ids), 30)

            async def all_counted() -> bool:
                health = (await client.get("/health")).json()
                return bool(health["completed_rollouts"] == len(ids))

            await until(all_counted, what="/health counting every rollout")
            health = (await client.get("/health")).json()
            assert health["active_rollouts"] == 0
            assert health["agent_loop"] == "calculator"

    assert sorted(standin.completions) == ids
    for rid in ids:
        (body,) = standin.completions[rid]
        assert body["status"] == "COMPLETED", body
        assert body["reward"] == 1.0
        assert truth[rid] in body["final_messages"][-1]["content"]
        metrics = body["metrics"]
        assert metrics["num_llm_calls"] == 2
        assert metrics["num_tool_calls"] == 1
        assert metrics["prompt_tokens"] > 0
        assert metrics["response_tokens"] > 0
        assert metrics["total_latency_ms"] > 0
    assert standin.chat_calls == 2 * len(ids)


async def test_concurrent_identical_inits_run_once_and_answer_identical_bodies(
    standin: TrainGateStandIn, traingate: ServerThread, tmp_path: Path
) -> None:
    body = calculator_body("dup-1", traingate.url, idempotency_key="step-7-sample-0")
    with ServerThread(local_app(tmp_path / "state")) as server:
        async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=30) as client:
            # A retry may carry a rotated callback key and is still the same request.
            bodies = [body] * 18 + [{**body, "api_key": f"rotated-{i}"} for i in range(2)]
            responses = await asyncio.gather(
                *(client.post("/v1/rollout/init", json=b) for b in bodies)
            )
            assert {r.status_code for r in responses} == {202}
            assert len({r.content for r in responses}) == 1
            assert await asyncio.to_thread(standin.wait_for, 1, 20)
            # A retry after the rollout finished still gets the same answer and starts nothing.
            late = await client.post("/v1/rollout/init", json=body)
            assert late.status_code == 202
            assert late.content == responses[0].content

            # Every job handed off (the first init's and the duplicates') has ended: a second
            # run or callback, if there were one, has happened by now.
            async def idle() -> bool:
                return bool((await client.get("/health")).json()["active_rollouts"] == 0)

            await until(idle, within=20, what="every handed-off job to end")
            health = (await client.get("/health")).json()
    assert len(standin.completions["dup-1"]) == 1
    assert standin.completions["dup-1"][0]["status"] == "COMPLETED"
    assert standin.chat_calls == 2  # one run: a tool call turn and an answer turn
    assert health["completed_rollouts"] == 1


async def test_callback_key_is_sent_as_bearer_on_chat_and_completed_and_never_stored(
    tmp_path: Path,
) -> None:
    callback_key = "callback-key-0123456789"
    standin = TrainGateStandIn(callback_key=callback_key)
    recorder = HeaderRecorder(standin.app)
    state = tmp_path / "state"
    app = local_app(state)
    with ServerThread(recorder) as traingate, ServerThread(app) as server:
        async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=30) as client:
            for i in range(3):
                response = await client.post(
                    "/v1/rollout/init",
                    json=calculator_body(f"keyed-{i}", traingate.url, api_key=callback_key),
                )
                assert response.status_code == 202
            wrong = await client.post(
                "/v1/rollout/init",
                json=calculator_body("wrong-key", traingate.url, api_key="not-the-callback-key"),
            )
            assert wrong.status_code == 202
            assert await asyncio.to_thread(standin.wait_for, 3, 20)
            store = app.state.services.store

            async def refused() -> bool:
                record = await store.get("wrong-key", now=0.0)
                return record is not None and record.state == RecordState.UNDELIVERABLE

            # TrainGate refused the wrong key with 401: final, so the rollout is not re-sent.
            await until(refused, what="the wrong-key rollout becoming UNDELIVERABLE")

    assert sorted(standin.completions) == ["keyed-0", "keyed-1", "keyed-2"]
    assert all(b[0]["status"] == "COMPLETED" for b in standin.completions.values())
    chat = [auth for path, auth in recorder.seen if path == "/v1/chat/completions"]
    completed = [auth for path, auth in recorder.seen if path == "/v1/rollout/completed"]
    good, bad = f"Bearer {callback_key}", "Bearer not-the-callback-key"
    # Three rollouts with two turns each, plus the wrong key's single refused chat call.
    assert Counter(chat) == {good: 6, bad: 1}
    assert Counter(completed) == {good: 3, bad: 1}
    # The callback key travels with the job, never into the store (protocol.md section 3).
    for path in state.iterdir():
        if path.is_file():
            assert callback_key.encode() not in path.read_bytes(), path


async def test_max_concurrent_rollouts_bounds_running_agents(
    traingate: ServerThread, standin: TrainGateStandIn, tmp_path: Path
) -> None:
    standin.chat_delay = 0.1
    agent = CountingAgent()
    settings = load_settings(server={"max_concurrent_rollouts": 3})
    app = local_app(tmp_path / "state", agent_loop=agent, settings=settings)
    count = 12
    with ServerThread(app) as server:
        async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=30) as client:
            responses = await asyncio.gather(
                *(
                    client.post("/v1/rollout/init", json=calculator_body(f"cap-{i}", traingate.url))
                    for i in range(count)
                )
            )
            assert {r.status_code for r in responses} == {202}
            assert await asyncio.to_thread(standin.wait_for, count, 30)
    assert agent.runs == count
    assert agent.peak == 3
    assert all(b[0]["status"] == "COMPLETED" for b in standin.completions.values())


def test_metadata_limit_applies_and_the_key_is_checked_before_the_body(
    traingate: ServerThread, tmp_path: Path
) -> None:
    settings = load_settings(max_metadata_size_bytes=2048)
    body = calculator_body("big", traingate.url)
    body["metadata"]["padding"] = "x" * 4096
    with ServerThread(local_app(tmp_path / "state", settings=settings)) as server:
        response = httpx.post(f"{server.url}/v1/rollout/init", json=body, headers=AUTH)
        unauthorised = httpx.post(f"{server.url}/v1/rollout/init", content=b"{not json")
    assert response.status_code == 413, response.text
    assert unauthorised.status_code == 401
    assert json.loads(response.text)["detail"]
