"""The reliability suite's agent, served as ``testkit.agents:agent_loop``, and the
observability tests' (``testkit.agents:observed_agent``).

One loop with two behaviours, chosen by the request's metadata:

- by default, the calculator example (``examples/calculator``), sending a fresh ``run_id``
  completion param on every chat call of a run, so the TrainGate stand-in counts runs rather
  than calls (a retried call is the same run; a second run has a new id);
- with ``metadata["slow"] = {"turns": N, "turn_delay": S}``: N chat turns, S seconds apart, then
  COMPLETED with reward 1.0. Long enough to cancel, to kill mid-run, or to hit a deadline.
"""

from __future__ import annotations

import asyncio
import logging
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
            self.turn_done(ctx, turn)
            messages.append(reply.message)
            if reply.has_tool_calls:
                for call in reply.tool_calls:
                    messages.append(create_tool_result(str(call.get("id", "call")), "42"))
            else:
                messages.append({"role": "user", "content": f"Turn {turn + 2}: what is 6 * 7?"})
        return ctx.complete(messages, finish_reason="stop", reward=1.0)

    def turn_done(self, ctx: RolloutContext, turn: int) -> None:
        """Called after each chat turn of a slow rollout (``turn`` from 0)."""


agent_loop = ReliabilityAgent()


#: Under the Lambda handler's Powertools logger ("rollout-sdk"), as an agent's own logger is when
#: it uses Powertools' ``Logger(child=True)``: its lines go out through that logger's handler.
AGENT_LOGGER = logging.getLogger("rollout-sdk.agent")


class ObservedAgent(ReliabilityAgent):
    """The reliability agent that logs a line of its own each chat turn (without naming the
    rollout: the kit's log context must), and raises after its first chat call when the metadata
    says ``{"fail": "<message>"}`` (an agent error)."""

    name = "observed"

    async def run(self, ctx: RolloutContext) -> RolloutResult:
        failure = ctx.request.metadata.get("fail")
        if isinstance(failure, str):
            await ctx.chat(list(ctx.request.messages), **ctx.request.completion_params)
            AGENT_LOGGER.info("turn 1 of %s: failing on purpose", ctx.request.rollout_id)
            raise RuntimeError(failure)
        return await super().run(ctx)

    def turn_done(self, ctx: RolloutContext, turn: int) -> None:
        AGENT_LOGGER.info("turn %d of %s", turn + 1, ctx.request.rollout_id)


observed_agent = ObservedAgent()
