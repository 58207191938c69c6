"""osmosis-ai 0.3.8's own ``RolloutClient`` against ``rollout-sdk serve --workflow``: what a
trainer on today's Osmosis does, end to end over loopback, answers checked with 0.3.8's models.

Waiting is the client's own: its long-poll for a result, and ``wait_idle`` for the server to
have nothing in flight. Every case starts a server of its own (a few hundred milliseconds)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from osmosis_ai.rollout.client import (
    RolloutAdmissionTimeoutError,
    RolloutProtocolError,
)
from osmosis_ai.rollout.types import (
    CancelRolloutsResponse,
    RolloutErrorCategory,
    RolloutInitResponse,
    RolloutResultResponse,
    RolloutStatus,
)

from .conftest import LLM_KEY, Model, Server
from .rollouts import AUTH, client, idle, poll, run, submit

pytestmark = pytest.mark.timeout(120)

Serve = Callable[..., Server]
#: A short lease and wait, for the cases that let a lease run out.
SHORT_LEASE = {
    "ROLLOUT_SDK_OSMOSIS03_RESULT_WAIT_SECONDS": "1",
    "ROLLOUT_SDK_OSMOSIS03_POLLING_LEASE_SECONDS": "3",
}


# ------------------------------------------------------------------------ graded rollouts


async def test_a_graded_rollout_succeeds_with_its_reward_and_the_models_key(
    serve: Serve, model: Model
) -> None:
    server = serve()
    right = await run(server, model, "graded-1", metadata={"case": "answer"})
    wrong = await run(server, model, "graded-2", label="7", metadata={"case": "answer"})
    assert right.status is RolloutStatus.SUCCESS and right.err_category is None
    assert right.sample is not None and right.sample.reward == 1.0
    assert right.sample.messages[-1]["content"] == "the answer is 42"
    assert wrong.status is RolloutStatus.SUCCESS
    assert wrong.sample is not None and wrong.sample.reward == 0.0
    # The workflow called the endpoint it was sent, with the rollout's llm_api_key.
    assert [c["auth"] for c in model.calls] == [f"Bearer {LLM_KEY}"] * 2
    assert {c["path"] for c in model.calls} == {"/v1/chat/completions"}


async def test_the_result_on_the_wire_has_no_trajectory_and_the_same_answer_again(
    serve: Serve, model: Model
) -> None:
    server = serve()
    accepted = submit(server, model, "wire-1", label="42", metadata={"case": "answer"})
    assert accepted.status_code == 202
    admission = RolloutInitResponse.model_validate(accepted.json())
    assert admission.status is RolloutStatus.QUEUED
    assert (admission.result_wait_timeout_sec, admission.polling_lease_timeout_sec) == (30, 120)
    first = await _final(server, "wire-1", admission.polling_lease_token)
    assert "trajectory_messages" not in first.json()["sample"]
    again = poll(server, "wire-1", admission.polling_lease_token)
    assert again.json() == first.json()  # kept (retention), and final: the same answer
    assert poll(server, "wire-1", "not-the-token").status_code == 403
    assert poll(server, "nobody", admission.polling_lease_token).status_code == 404
    unkeyed = httpx.get(f"{server.url}/rollout/wire-1/result", timeout=5)
    assert unkeyed.status_code == 401


async def _final(server: Server, rollout_id: str, token: str) -> httpx.Response:
    """Poll as the client does until the status is final (each poll waits for a change)."""
    for _ in range(60):
        answer = await asyncio.to_thread(poll, server, rollout_id, token)
        assert answer.status_code == 200, answer.text
        status = RolloutResultResponse.model_validate(answer.json()).status
        if status in (RolloutStatus.SUCCESS, RolloutStatus.FAILURE, RolloutStatus.CANCELLED):
            return answer
    raise AssertionError(f"{rollout_id} did not end")


async def test_a_removed_sample_succeeds_without_a_reward(serve: Serve, model: Model) -> None:
    result = await run(serve(), model, "removed-1", metadata={"remove": True})
    assert result.status is RolloutStatus.SUCCESS
    assert (
        result.sample is not None and result.sample.remove_sample and result.sample.reward is None
    )


# ------------------------------------------------------------------------ failures


async def test_a_workflow_that_raises_fails_as_the_agents_error(serve: Serve, model: Model) -> None:
    result = await run(serve(), model, "raises-1", metadata={"raise": "the tool broke"})
    assert result.status is RolloutStatus.FAILURE
    assert result.err_category is RolloutErrorCategory.AGENT_ERROR
    assert result.err_message == "the tool broke"
    assert model.calls == []


async def test_a_workflow_that_cancels_its_own_task_still_ends_once(
    serve: Serve, model: Model
) -> None:
    result = await run(serve(), model, "self-cancel-1", metadata={"self_cancel": True})
    assert result.status is RolloutStatus.FAILURE
    assert result.err_category is RolloutErrorCategory.AGENT_ERROR
    assert result.err_message == "the workflow's own code cancelled its task"


async def test_a_grader_that_raises_fails_without_a_reward(serve: Serve, model: Model) -> None:
    result = await run(serve(), model, "grader-raises-1", metadata={"grader_raise": "bad label"})
    assert result.status is RolloutStatus.FAILURE
    assert result.err_category is RolloutErrorCategory.VALIDATION_ERROR
    assert result.err_message == "bad label"
    assert result.sample is not None and result.sample.reward is None


async def test_the_agent_and_grader_timeouts_end_their_phase(serve: Serve, model: Model) -> None:
    server = serve()
    agent, grader = await asyncio.gather(
        run(server, model, "agent-timeout-1", metadata={"hang": True}, agent_timeout_sec=1),
        run(
            server, model, "grader-timeout-1", metadata={"grader_hang": True}, grader_timeout_sec=1
        ),
    )
    assert agent.status is RolloutStatus.FAILURE
    assert agent.err_category is RolloutErrorCategory.TIMEOUT
    assert agent.err_message is not None and agent.err_message.startswith(
        "workflow exceeded its 1.0s deadline"
    )
    assert grader.status is RolloutStatus.FAILURE
    assert grader.err_category is RolloutErrorCategory.TIMEOUT
    assert grader.err_message == "grader exceeded its 1.0s deadline"
    assert grader.sample is not None and grader.sample.reward is None  # the workflow's sample


async def test_grade_without_a_grader_fails_naming_the_fix(serve: Serve, model: Model) -> None:
    server = serve(grader=False)
    graded = await run(server, model, "no-grader-1")
    ungraded = await run(server, model, "no-grader-2", grade=False)
    assert graded.status is RolloutStatus.FAILURE
    assert graded.err_message is not None and "--grader" in graded.err_message
    assert ungraded.status is RolloutStatus.SUCCESS
    assert ungraded.sample is not None and ungraded.sample.reward is None


# ------------------------------------------------------------------------ admission


async def test_an_id_registered_already_is_409(serve: Serve, model: Model) -> None:
    server = serve()
    assert submit(server, model, "twice-1", metadata={"hang": True}).status_code == 202
    again = submit(server, model, "twice-1")
    assert again.status_code == 409 and again.json() == {
        "detail": "rollout_id is already registered"
    }
    rollouts = client(server)
    with pytest.raises(RolloutProtocolError) as refused:
        await rollouts.run_rollout_async(
            initial_messages=[], chat_completions_url=model.url, rollout_id="twice-1"
        )
    await rollouts.aclose()
    assert refused.value.status_code == 409


async def test_a_full_server_answers_429_with_retry_after(serve: Serve, model: Model) -> None:
    server = serve(
        OSMOSIS_ROLLOUT_SERVER_MAX_CONCURRENT_ROLLOUTS="1", ROLLOUT_SDK_MAX_QUEUED_ROLLOUTS="0"
    )
    assert submit(server, model, "full-1", metadata={"hang": True}).status_code == 202
    full = submit(server, model, "full-2")
    assert full.status_code == 429 and full.headers["Retry-After"] == "2"
    # The client waits Retry-After and tries again, until its admission timeout.
    rollouts = client(server, admission_timeout_sec=3)
    with pytest.raises(RolloutAdmissionTimeoutError):
        await rollouts.run_rollout_async(
            initial_messages=[], chat_completions_url=model.url, rollout_id="full-3"
        )
    await rollouts.aclose()
    # Nothing was kept of the refused ones: their ids are free.
    cancelled = await client(server).cancel_rollout("full-1")
    assert cancelled.dispositions == {"full-1": "cancelled_running"}
    await idle(server)
    assert submit(server, model, "full-2", metadata={"case": "answer"}).status_code == 202


# ------------------------------------------------------------------------ cancel


async def test_cancel_by_id_ends_a_running_rollout_once(serve: Serve, model: Model) -> None:
    server = serve()
    rollouts = client(server)
    handle = await rollouts.run_rollout_async(
        initial_messages=[{"role": "user", "content": "x"}],
        chat_completions_url=model.url,
        rollout_id="cancel-1",
        metadata={"hang": True},
    )
    assert await handle.wait_for_running() is RolloutStatus.RUNNING
    first = await rollouts.cancel_rollout("cancel-1")
    result = await handle
    after = await rollouts.cancel_rollout("cancel-1")
    unknown = await rollouts.cancel_rollout("nobody")
    await rollouts.aclose()
    assert first.dispositions == {"cancel-1": "cancelled_running"}
    assert result.status is RolloutStatus.CANCELLED
    assert after.dispositions == {"cancel-1": "not_found"}  # final: nothing to cancel
    assert unknown.dispositions == {"nobody": "not_found"}


async def test_cancel_by_prefix_and_all_and_one_selector_only(serve: Serve, model: Model) -> None:
    server = serve()
    tokens = {}
    for rollout_id in ("batch-a-1", "batch-a-2", "batch-b-1", "done-1"):
        metadata = {"case": "answer"} if rollout_id == "done-1" else {"hang": True}
        accepted = submit(server, model, rollout_id, label="42", metadata=metadata)
        tokens[rollout_id] = RolloutInitResponse.model_validate(accepted.json()).polling_lease_token
    await _final(server, "done-1", tokens["done-1"])

    def cancel(body: dict[str, Any]) -> httpx.Response:
        return httpx.post(f"{server.url}/rollout/cancel", json=body, headers=AUTH, timeout=10)

    by_prefix = CancelRolloutsResponse.model_validate(cancel({"prefix": "batch-a-"}).json())
    assert by_prefix.dispositions == {
        "batch-a-1": "cancelled_running",
        "batch-a-2": "cancelled_running",
    }
    everything = CancelRolloutsResponse.model_validate(cancel({"all": True}).json())
    # The live ones (the two already cancelling again, idempotent), never the finished one.
    assert everything.dispositions.get("batch-b-1") == "cancelled_running"
    assert "done-1" not in everything.dispositions
    for body in ({}, {"ids": ["x"], "all": True}, {"prefix": "b", "ids": []}):
        refused = cancel(body)
        assert refused.status_code == 422, body
        assert refused.json() == {"detail": "pass exactly one selector: ids, prefix, or all"}
    for rollout_id in ("batch-a-1", "batch-a-2", "batch-b-1"):
        final = await _final(server, rollout_id, tokens[rollout_id])
        assert final.json()["status"] == "cancelled"
    await idle(server)


async def test_a_rollout_waiting_for_the_configs_slot_is_cancelled_at_once(
    serve: Serve, model: Model
) -> None:
    # A poll that waited for a change from what the server last saw (not from what it last
    # answered) would hold each status step for the whole wait: 600 s here, past the test's
    # timeout.
    server = serve(
        "--workflow-config",
        "tests.osmosis03.workflows:ONE_AT_A_TIME",
        ROLLOUT_SDK_OSMOSIS03_RESULT_WAIT_SECONDS="600",
        ROLLOUT_SDK_OSMOSIS03_POLLING_LEASE_SECONDS="1200",
    )
    rollouts = client(server)
    holder = await rollouts.run_rollout_async(
        initial_messages=[],
        chat_completions_url=model.url,
        rollout_id="slot-1",
        metadata={"hang": True},
    )
    assert await holder.wait_for_running() is RolloutStatus.RUNNING
    waiting = await rollouts.run_rollout_async(
        initial_messages=[],
        chat_completions_url=model.url,
        rollout_id="slot-2",
        metadata={"hang": True},
    )
    assert await waiting.wait_for_running() is RolloutStatus.RUNNING  # claimed, not started
    assert (await rollouts.cancel_rollout("slot-2")).dispositions == {"slot-2": "cancelled_running"}
    result = await waiting  # ends while slot-1 still holds the slot
    assert result.status is RolloutStatus.CANCELLED
    assert not holder.done()
    await rollouts.cancel_rollout("slot-1")
    assert (await holder).status is RolloutStatus.CANCELLED
    await rollouts.aclose()


# ------------------------------------------------------------------------ the polling lease


async def test_an_unpolled_lease_ends_the_rollout_as_lease_expired(
    serve: Serve, model: Model
) -> None:
    server = serve(**SHORT_LEASE)
    running = RolloutInitResponse.model_validate(
        submit(server, model, "lease-1", metadata={"hang": True}).json()
    )
    assert (running.result_wait_timeout_sec, running.polling_lease_timeout_sec) == (1, 3)
    # Nobody polls: the server ends it by itself once the lease is out (wait_idle sees it).
    await idle(server)
    answer = RolloutResultResponse.model_validate(
        poll(server, "lease-1", running.polling_lease_token).json()
    )
    assert answer.status is RolloutStatus.FAILURE
    assert answer.err_category is RolloutErrorCategory.LEASE_EXPIRED
    assert answer.err_message == "polling lease expired"


async def test_a_polled_rollout_keeps_its_lease_past_the_lease_time(
    serve: Serve, model: Model
) -> None:
    server = serve(**SHORT_LEASE)
    rollouts = client(server)
    handle = await rollouts.run_rollout_async(
        initial_messages=[],
        chat_completions_url=model.url,
        rollout_id="kept-1",
        metadata={"hang": True},
        agent_timeout_sec=5,
    )
    result = await handle  # polled every second: the 3 s lease holds for the 5 s it runs
    await rollouts.aclose()
    assert result.status is RolloutStatus.FAILURE
    assert result.err_category is RolloutErrorCategory.TIMEOUT


# ------------------------------------------------------------------------ restarts and idle


async def test_a_killed_server_restarted_reports_the_rollout_once(
    serve: Serve, model: Model
) -> None:
    server = serve()
    before = await client(server).health()
    first = before["process_id"]
    running = RolloutInitResponse.model_validate(
        submit(server, model, "crash-1", metadata={"hang": True}).json()
    )
    server.restart()  # SIGKILL, then the same state folder
    health = await client(server).health()
    # A new process, the same instance (the state folder's id).
    assert health["process_id"] != first
    assert health["instance_id"] == before["instance_id"]
    first_answer = poll(server, "crash-1", running.polling_lease_token).json()
    answer = RolloutResultResponse.model_validate(first_answer)
    assert answer.status is RolloutStatus.FAILURE
    assert answer.err_category is RolloutErrorCategory.INTERNAL_ERROR
    assert answer.err_message is not None
    # Final once: every later poll answers the same.
    assert poll(server, "crash-1", running.polling_lease_token).json() == first_answer
    with pytest.raises(RolloutProtocolError, match="restarted"):
        await idle(server, process_id=first)


async def test_wait_idle_returns_once_nothing_is_in_flight(serve: Serve, model: Model) -> None:
    server = serve()
    await asyncio.gather(
        *(run(server, model, f"idle-{n}", metadata={"case": "answer"}) for n in range(5))
    )
    health = await idle(server)
    assert health["lifecycle"] == {"accepting_rollouts": True, "active_rollouts": 0}
    assert health["completed_rollouts"] == 5
