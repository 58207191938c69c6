"""osmosis-ai 0.3.8's own ``RolloutClient`` against the Lambda path: ``rollout-sdk start-api``
serving handler.py's API function as a deploy with the ``Workflow`` and ``Grader`` parameters
runs it, each request on an instance of its own while it waits (as Lambda scales it), the
worker function's invocations, its retries and failure destination, and the re-drive on its
schedule (every second here), all over the embedded AWS emulator (DynamoDB's live index
included).

Most cases shorten the result wait and the leases through ``--env-vars``, as an operator's
variables would; one keeps the template's own 20-second wait."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from osmosis_ai.rollout.types import (
    CancelRolloutsResponse,
    RolloutErrorCategory,
    RolloutInitResponse,
    RolloutResultResponse,
    RolloutStatus,
)

from .conftest import LLM_KEY, Model, Server
from .rollouts import AUTH, idle, poll, run, submit

pytestmark = pytest.mark.timeout(240)

StartApi = Callable[..., Server]
#: A short wait and short leases: a lease that runs out, and a dead worker's, within seconds.
SHORT = {
    "ROLLOUT_SDK_OSMOSIS03_RESULT_WAIT_SECONDS": "2",
    "ROLLOUT_SDK_OSMOSIS03_POLLING_LEASE_SECONDS": "5",
    "ROLLOUT_SDK_LEASE_SECONDS": "6",
    "ROLLOUT_SDK_HEARTBEAT_SECONDS": "2",
}


def submitted(server: Server, model: Model, rollout_id: str, **body: Any) -> RolloutInitResponse:
    answer = submit(server, model, rollout_id, **body)
    assert answer.status_code == 202, answer.text
    return RolloutInitResponse.model_validate(answer.json())


def polled(server: Server, rollout_id: str, token: str) -> RolloutResultResponse:
    answer = poll(server, rollout_id, token)
    assert answer.status_code == 200, answer.text
    return RolloutResultResponse.model_validate(answer.json())


def calls_of(model: Model, rollout_id: str) -> int:
    return sum(call.get("rollout_id") == rollout_id for call in model.calls)


async def test_graded_rollouts_succeed_under_the_templates_own_wait(
    start_api: StartApi, model: Model
) -> None:
    server = start_api()
    accepted = submitted(server, model, "lambda-wait", metadata={"answer": "x"})
    # The template's bound: a poll waits at most 20 s inside API Gateway's 30.
    assert accepted.result_wait_timeout_sec == 20
    # Polled at once, on instances of their own: each answers when its rollout changes.
    results = await asyncio.gather(
        *(run(server, model, f"lambda-graded-{n}", metadata={"answer": "x"}) for n in range(3))
    )
    for result in results:
        assert result.status is RolloutStatus.SUCCESS
        assert result.sample is not None and result.sample.reward == 1.0
    graded = [c for c in model.calls if str(c.get("rollout_id")).startswith("lambda-graded-")]
    assert [c["auth"] for c in graded] == [f"Bearer {LLM_KEY}"] * 3
    final = polled(server, "lambda-wait", accepted.polling_lease_token)
    while final.status not in (RolloutStatus.SUCCESS, RolloutStatus.FAILURE):
        final = polled(server, "lambda-wait", accepted.polling_lease_token)
    assert final.status is RolloutStatus.SUCCESS


async def test_a_workflow_that_raises_fails_as_the_agents_error(
    start_api: StartApi, model: Model
) -> None:
    server = start_api(**SHORT)
    result = await run(server, model, "lambda-raises", metadata={"raise": "no tools today"})
    assert result.status is RolloutStatus.FAILURE
    assert result.err_category is RolloutErrorCategory.AGENT_ERROR
    assert result.err_message is not None and "no tools today" in result.err_message
    assert result.sample is None or result.sample.reward is None


async def test_cancel_by_ids_prefix_and_all_from_the_live_index(
    start_api: StartApi, model: Model
) -> None:
    server = start_api(**SHORT)
    tokens = {
        rollout_id: submitted(
            server, model, rollout_id, metadata={"hang": True}
        ).polling_lease_token
        for rollout_id in ("one-1", "batch-1", "batch-2", "rest-1")
    }
    health = httpx.get(f"{server.url}/health", timeout=40).json()
    assert health["lifecycle"]["active_rollouts"] == 4  # the live index's count

    def cancel(body: dict[str, Any]) -> dict[str, str]:
        answer = httpx.post(f"{server.url}/rollout/cancel", json=body, headers=AUTH, timeout=40)
        assert answer.status_code == 200, answer.text
        dispositions: dict[str, str] = CancelRolloutsResponse.model_validate(
            answer.json()
        ).dispositions
        return dispositions

    assert set(cancel({"ids": ["one-1", "nobody"]}).items()) <= {
        ("one-1", "cancelled_queued"),
        ("one-1", "cancelled_running"),
        ("nobody", "not_found"),
    }
    assert sorted(cancel({"prefix": "batch-"})) == ["batch-1", "batch-2"]
    assert "rest-1" in cancel({"all": True})
    for rollout_id, token in tokens.items():
        answer = polled(server, rollout_id, token)
        while answer.status not in (RolloutStatus.CANCELLED, RolloutStatus.FAILURE):
            answer = polled(server, rollout_id, token)
        assert answer.status is RolloutStatus.CANCELLED, (rollout_id, answer)
    health = await idle(server, within=120)
    assert health["lifecycle"]["active_rollouts"] == 0


async def test_an_unpolled_lease_is_ended_by_the_redrive_once(
    start_api: StartApi, model: Model
) -> None:
    server = start_api(**SHORT)
    accepted = submitted(server, model, "lambda-lease", metadata={"hang": True})
    assert accepted.polling_lease_timeout_sec == 5
    # Nobody polls: no function runs on a timer but the re-drive, whose pass ends it.
    health = await idle(server, within=120)
    assert health["lifecycle"]["active_rollouts"] == 0
    answer = polled(server, "lambda-lease", accepted.polling_lease_token)
    assert answer.status is RolloutStatus.FAILURE
    assert answer.err_category is RolloutErrorCategory.LEASE_EXPIRED
    assert polled(server, "lambda-lease", accepted.polling_lease_token) == answer  # final once


async def test_a_worker_whose_instance_dies_is_reported_once_and_not_run_again(
    start_api: StartApi, model: Model
) -> None:
    server = start_api(**SHORT)
    result = await run(server, model, "lambda-crash", metadata={"crash": True})
    # Lambda retried the invocation: the retry found the dead worker's lease and, once it ran
    # out, ended the rollout itself; the workflow did not run again.
    assert result.status is RolloutStatus.FAILURE
    assert result.err_category is RolloutErrorCategory.INTERNAL_ERROR
    assert calls_of(model, "lambda-crash") == 1
    await idle(server, within=120)


async def test_wait_idle_sees_one_process_across_instances(
    start_api: StartApi, model: Model
) -> None:
    server = start_api(**SHORT)
    # Concurrent requests each get an instance of their own (cold starts): one identity.
    async with httpx.AsyncClient(timeout=60) as http:
        healths = await asyncio.gather(*(http.get(f"{server.url}/health") for _ in range(3)))
    ids = {answer.json()["process_id"] for answer in healths}
    assert len(ids) == 1
    (process_id,) = ids
    await asyncio.gather(
        *(run(server, model, f"lambda-idle-{n}", metadata={"answer": "x"}) for n in range(3))
    )
    health = await idle(server, within=120, process_id=process_id)
    assert health["lifecycle"] == {"accepting_rollouts": True, "active_rollouts": 0}
