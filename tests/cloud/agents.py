"""The cloud suite's agent, served as ``tests.cloud.agents:agent_loop``.

Locally the suite serves it itself; a stack runs it only when deployed with it on purpose (a
test stack: ``make build-lambda AGENT_SOURCES="examples tests"`` and ``AgentLoop`` set to
``tests.cloud.agents:agent_loop``, see docs/aws.md, "First deploy"). It imports the kit and the
calculator example only, since nothing else of the repository is in a Lambda artifact.

One loop, three behaviours, chosen by ``metadata["cloud_suite"]``:

- absent: the calculator example (``examples/calculator``), with a fresh ``run_id`` completion
  param on every chat call of a run, so the TrainGate stand-in counts runs, not calls;
- ``{"mode": "slow", "turns": N, "turn_delay": S}``: N chat turns S seconds apart, then
  COMPLETED with reward 1.0 (long enough to be cancelled);
- ``{"mode": "block", "seconds": S}``: one chat turn, then a synchronous ``time.sleep(S)`` that
  blocks the event loop on purpose: nothing of the process runs until it returns (no deadline,
  no heartbeat, no other rollout), the way a long synchronous call in an agent does. On Lambda
  the invocation ends at the worker's timeout; locally the server hangs until it is restarted.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from examples.calculator.agent import CalculatorAgent
from rollout_sdk import RolloutContext, RolloutResult, create_tool_result

NAME = "cloud_suite"
MAX_TURNS = 200
MAX_BLOCK_SECONDS = 3600.0


def slow(turns: int, turn_delay: float) -> dict[str, Any]:
    """Metadata for a slow rollout: ``turns`` chat turns, ``turn_delay`` s apart."""
    return {NAME: {"mode": "slow", "turns": turns, "turn_delay": turn_delay}}


def block(seconds: float) -> dict[str, Any]:
    """Metadata for a rollout that blocks its event loop for ``seconds`` after one turn."""
    return {NAME: {"mode": "block", "seconds": seconds}}


class CloudSuiteAgent(CalculatorAgent):
    """The calculator with a run id on every chat call, or a slow loop, or a blocking one."""

    name = NAME

    async def run(self, ctx: RolloutContext) -> RolloutResult:
        params = {**ctx.request.completion_params, "run_id": uuid.uuid4().hex}
        ctx.request = ctx.request.model_copy(update={"completion_params": params})
        plan = ctx.request.metadata.get(NAME)
        if not isinstance(plan, dict):
            return await super().run(ctx)
        if plan.get("mode") == "block":
            return await self._block(ctx, min(float(plan.get("seconds", 0)), MAX_BLOCK_SECONDS))
        turns = min(int(plan.get("turns", 5)), MAX_TURNS)
        return await self._turns(ctx, turns, float(plan.get("turn_delay", 0.2)))

    async def _turns(self, ctx: RolloutContext, turns: int, turn_delay: float) -> RolloutResult:
        messages = list(ctx.request.messages)
        for turn in range(turns):
            if turn:
                await asyncio.sleep(turn_delay)
            reply = await ctx.chat(messages, **ctx.request.completion_params)
            messages.append(reply.message)
            if reply.has_tool_calls:
                for call in reply.tool_calls:
                    messages.append(create_tool_result(str(call.get("id", "call")), "42"))
            else:
                messages.append({"role": "user", "content": f"Turn {turn + 2}: what is 6 * 7?"})
        return ctx.complete(messages, finish_reason="stop", reward=1.0)

    async def _block(self, ctx: RolloutContext, seconds: float) -> RolloutResult:
        messages = list(ctx.request.messages)
        reply = await ctx.chat(messages, **ctx.request.completion_params)
        messages.append(reply.message)
        # The defect under test: a synchronous call inside the coroutine. Never do this in an
        # agent (use `await asyncio.to_thread(...)`); docs/architecture.md says what follows.
        time.sleep(seconds)
        return ctx.complete(messages, finish_reason="stop", reward=0.0)


agent_loop = CloudSuiteAgent()
