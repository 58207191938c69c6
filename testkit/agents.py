"""The reliability suite's agent, served as ``tests.reliability.agents:agent_loop``.

One loop with two behaviours, chosen by the request's metadata:

- by default, the calculator example (``examples/calculator``), sending a fresh ``run_id``
  completion param on every chat call of a run, so the TrainGate stand-in counts runs rather
  than calls (a retried call is the same run; a second run has a new id);
- with ``metadata["slow"] = {"turns": N, "turn_delay": S}``: N chat turns, S seconds apart, then
  COMPLETED with reward 1.0. Long enough to cancel, to kill mid-run, or to hit a deadline.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from examples.calculator.agent import CalculatorAgent
from rollout_sdk import RolloutContext, RolloutResult, create_tool_result

MAX_TURNS = 500


def slow_metadata(turns: int, turn_delay: float) -> dict[str, Any]:
    """The metadata that makes a rollout slow: ``turns`` turns, ``turn_delay`` s apart."""
    return {"slow": {"turns": turns, "turn_delay": turn_delay}}


class ReliabilityAgent(CalculatorAgent):
    """The calculator, with a run id on every chat call, or a slow multi-turn loop."""

    name = "reliability"

    async def run(self, ctx: RolloutContext) -> RolloutResult:
        params = {**ctx.request.completion_params, "run_id": uuid.uuid4().hex}
        ctx.request = ctx.request.model_copy(update={"completion_params": params})
        slow = ctx.request.metadata.get("slow")
        if isinstance(slow, dict):
            turns = min(int(slow.get("turns", 5)), MAX_TURNS)
            return await self._slow(ctx, turns, float(slow.get("turn_delay", 0.2)))
        return await super().run(ctx)

    async def _slow(self, ctx: RolloutContext, turns: int, turn_delay: float) -> RolloutResult:
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


agent_loop = ReliabilityAgent()
