"""The durable worker's test pieces: simulated time, a model whose turns take it, and a long
agent (``testkit.durable:long_agent``).

The testing SDK's runner skips durable waits and reports 900 s left in every invocation, so a
rollout's "40 minutes" pass on a :class:`SimClock`: the runtime's clock (the engine's, and the
durable worker's own deadline) and the model's turns, each of which takes ``turn_seconds`` of
it. Nothing sleeps.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from rollout_sdk import RolloutAgentLoop, RolloutContext, RolloutResult
from rollout_sdk.protocol import OpenAIFunctionToolSchema, RolloutRequest


class SimClock:
    """A clock that moves only when told (thread-safe); starts at the real time."""

    def __init__(self, start: float | None = None) -> None:
        self._now = time.time() if start is None else start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds


@dataclass
class TurnModel:
    """A TrainGate stand-in's model (``TrainGateStandIn(model=...)``): each chat call takes
    ``turn_seconds`` of ``clock`` and answers ``turn <n>``, n counted from the conversation, so
    the same conversation always gets the same answer."""

    clock: SimClock
    turn_seconds: float = 60.0
    calls: int = field(default=0)
    #: Turns whose answer carries ``big_bytes`` more characters (a long completion).
    big_turns: frozenset[int] = frozenset()
    big_bytes: int = 0

    def _content(self, turn: int) -> str:
        return f"turn {turn}" + (" " + "x" * self.big_bytes if turn in self.big_turns else "")

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        self.clock.advance(self.turn_seconds)
        self.calls += 1
        messages = body.get("messages") or []
        turn = sum(1 for m in messages if m.get("role") == "assistant") + 1
        return {
            "id": f"chatcmpl-{turn}",
            "object": "chat.completion",
            "created": 0,
            "model": "default",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": self._content(turn)},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 10 * turn, "completion_tokens": 2, "total_tokens": 0},
        }


#: Set by a test to make the agent diverge: from this turn on, it asks a different question
#: than a replay of the same rollout recorded (None: deterministic).
DIVERGE_FROM_TURN: int | None = None
#: Turns whose ``ctx.step`` has run (not replayed), by rollout: what a test counts.
STEPS_RUN: dict[str, int] = {}


class LongAgent(RolloutAgentLoop):
    """``metadata["turns"]`` chat turns (40 by default), each followed by a user message; a
    ``ctx.step`` ("note") every tenth turn; then COMPLETED with reward 1.0. With
    ``metadata["concurrent"]``, two chat calls at once instead (which a durable worker refuses).
    """

    name = "long"

    def get_tools(self, request: RolloutRequest) -> list[OpenAIFunctionToolSchema]:
        return []

    async def run(self, ctx: RolloutContext) -> RolloutResult:
        turns = int(ctx.request.metadata.get("turns", 40))
        messages = list(ctx.request.messages)
        rollout_id = ctx.request.rollout_id
        if ctx.request.metadata.get("concurrent"):
            params = ctx.request.completion_params
            await asyncio.gather(ctx.chat(messages, **params), ctx.chat(messages, **params))
        for turn in range(1, turns + 1):
            reply = await ctx.chat(messages, **ctx.request.completion_params)
            messages.append(reply.message)
            if turn % 10 == 0:

                def note(turn: int = turn) -> str:
                    STEPS_RUN[rollout_id] = STEPS_RUN.get(rollout_id, 0) + 1
                    return f"noted at turn {turn}"

                messages.append({"role": "user", "content": await ctx.step("note", note)})
            else:
                diverged = DIVERGE_FROM_TURN is not None and turn >= DIVERGE_FROM_TURN
                messages.append(
                    {"role": "user", "content": "something else" if diverged else "go on"}
                )
        return ctx.complete(messages, reward=1.0)


long_agent = LongAgent()


def close_runner(runner: Any) -> None:
    """Close a testing SDK runner (``DurableFunctionTestRunner``), and the event loop its
    scheduler stops but never closes (1.4.0), which would otherwise leave its sockets to the
    garbage collector."""
    runner.close()
    runner._scheduler._loop.close()  # noqa: SLF001 - the SDK gives no other way to it
