"""The workflows and graders the osmosis-ai 0.3.8 suite serves (``rollout-sdk serve
--workflow tests.osmosis03.workflows:Scripted --grader tests.osmosis03.workflows:Scripted...``).
They import the kit's 0.3.8 author API only (the server runs them in the kit's environment).

What each rollout does is said by its metadata, so one server runs every case:

- ``{"answer": "..."}``: ask the model once (at ``chat_completions_url``) and return the
  conversation with its answer; the grader rewards 1.0 when the answer contains the label;
- ``{"raise": "..."}``: the workflow raises a RuntimeError with that message;
- ``{"hang": true}``: the workflow waits until it is cancelled (a timeout, a cancel, a lease);
- ``{"self_cancel": true}``: the workflow cancels its own task (a bug in the author's code);
- ``{"grader_hang": true}``: the grader waits until it is cancelled;
- ``{"grader_raise": "..."}``: the grader raises a ValueError;
- ``{"remove": true}``: the grader removes the sample instead of rewarding it;
- ``{"crash": true}``: after its model call, the workflow ends its process at once (a worker
  whose instance dies: on Lambda, a function error Lambda retries and then reports).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import httpx

from rollout_sdk.osmosis03 import (
    AgentWorkflow,
    AgentWorkflowConfig,
    AgentWorkflowContext,
    ConcurrencyConfig,
    Grader,
    GraderContext,
    get_rollout_context,
)

#: ``--workflow-config``: one rollout of the workflow at a time (0.3.8's concurrency bound).
ONE_AT_A_TIME = AgentWorkflowConfig(
    name="one at a time", concurrency=ConcurrencyConfig(max_concurrent=1)
)


class Scripted(AgentWorkflow[AgentWorkflowConfig]):
    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> list[dict[str, Any]]:
        metadata = ctx.metadata or {}
        if "raise" in metadata:
            raise RuntimeError(str(metadata["raise"]))
        if metadata.get("hang"):
            await asyncio.Event().wait()
        if metadata.get("self_cancel"):
            task = asyncio.current_task()
            assert task is not None
            task.cancel()
            await asyncio.sleep(0)
        rollout = get_rollout_context()
        assert rollout is not None
        headers = {"Authorization": f"Bearer {rollout.api_key}"} if rollout.api_key else {}
        async with httpx.AsyncClient(timeout=30) as http:
            answer = await http.post(
                rollout.chat_completions_url.rstrip("/") + "/chat/completions",
                json={"model": "default", "messages": ctx.prompt, "rollout_id": rollout.rollout_id},
                headers=headers,
            )
        answer.raise_for_status()
        if metadata.get("crash"):
            os._exit(3)
        return [*ctx.prompt, answer.json()["choices"][0]["message"]]


class ScriptedGrader(Grader):
    async def grade(self, ctx: GraderContext) -> None:
        metadata = ctx.metadata or {}
        if metadata.get("grader_hang"):
            await asyncio.Event().wait()
        if "grader_raise" in metadata:
            raise ValueError(str(metadata["grader_raise"]))
        assert ctx.sample is not None
        if metadata.get("remove"):
            ctx.sample.remove_sample = True
            return
        text = str((ctx.sample.messages[-1] if ctx.sample.messages else {}).get("content") or "")
        ctx.set_reward(1.0 if ctx.label and ctx.label in text else 0.0)
