"""A TrainGate stand-in with a scripted model, for the demo, the tests and the load driver.

It serves TrainGate's two endpoints on loopback: ``/v1/chat/completions`` answers from a scripted
model that solves ``a OP b`` questions with one ``calculate`` tool call and then a plain answer,
and ``/v1/rollout/completed`` records every final response it receives (duplicates included, so
tests can count them). Faults can be injected per endpoint.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import re
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

_QUESTION = re.compile(
    r"(-?\d+(?:\.\d+)?)\s*(\+|-|\*|/|x|plus|minus|times|divided by)\s*(-?\d+(?:\.\d+)?)"
)
_OPERATIONS = {
    "+": "add",
    "plus": "add",
    "-": "subtract",
    "minus": "subtract",
    "*": "multiply",
    "x": "multiply",
    "times": "multiply",
    "/": "divide",
    "divided by": "divide",
}


def _tokens(messages: list[dict[str, Any]]) -> int:
    return sum(len(str(m.get("content") or "").split()) + 4 for m in messages)


@dataclass
class ScriptedModel:
    """Turn 1: a ``calculate`` tool call for the question; turn 2: the tool's result as the answer.

    ``wrong_every`` > 0 makes every n-th rollout (by a hash of its id) answer off by one, so a
    demo's rewards are not all 1.0.
    """

    wrong_every: int = 0
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        messages: list[dict[str, Any]] = body.get("messages") or []
        rollout_id = str(body.get("rollout_id", ""))
        last = messages[-1] if messages else {}
        if last.get("role") == "tool":
            answer = str(last.get("content", ""))
            if self.wrong_every and answer.lstrip("-").replace(".", "", 1).isdigit():
                digest = int(hashlib.sha256(rollout_id.encode()).hexdigest(), 16)
                if digest % self.wrong_every == 0:
                    answer = str(float(answer) + 1).removesuffix(".0")
            message: dict[str, Any] = {"role": "assistant", "content": f"The answer is {answer}."}
        else:
            question = next(
                (str(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), ""
            )
            match = _QUESTION.search(question)
            if match is None:
                message = {"role": "assistant", "content": "I cannot tell what to compute."}
            else:
                a, op, b = match.groups()
                arguments = f'{{"operation": "{_OPERATIONS[op]}", "a": {a}, "b": {b}}}'
                message = {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": f"call_{next(self._ids)}",
                            "type": "function",
                            "function": {"name": "calculate", "arguments": arguments},
                        }
                    ],
                }
        prompt = _tokens(messages)
        completion = _tokens([message])
        return {
            "id": f"chatcmpl-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": str(body.get("model", "default")),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }


@dataclass
class Fault:
    """Answer the next ``count`` calls of an endpoint with ``status`` (after ``delay`` seconds).

    ``status`` 0 drops the connection instead of answering.
    """

    status: int
    count: int = 1
    delay: float = 0.0
    retry_after: str | None = None


class TrainGateStandIn:
    """The stand-in's state and its FastAPI app (``.app``)."""

    def __init__(
        self,
        *,
        model: ScriptedModel | None = None,
        chat_delay: float = 0.0,
        callback_key: str | None = None,
    ) -> None:
        self.model = model or ScriptedModel()
        self.chat_delay = chat_delay
        self.callback_key = callback_key
        self.completions: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.chat_calls = 0
        self.chat_bodies: list[dict[str, Any]] = []
        self.keep_chat_bodies = False
        self.faults: dict[str, list[Fault]] = defaultdict(list)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self.app = self._build()

    # ------------------------------------------------------------------ inspection

    def inject(self, endpoint: str, fault: Fault) -> None:
        """Queue a fault for ``endpoint`` ("chat" or "completed")."""
        with self._lock:
            self.faults[endpoint].append(fault)

    def reported(self) -> int:
        """Rollouts that have at least one final response."""
        with self._lock:
            return len(self.completions)

    def wait_for(self, count: int, timeout: float) -> bool:
        """Block until ``count`` rollouts have reported, or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while len(self.completions) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return True

    def _take_fault(self, endpoint: str) -> Fault | None:
        with self._lock:
            queue = self.faults.get(endpoint)
            if not queue:
                return None
            fault = queue[0]
            fault.count -= 1
            if fault.count <= 0:
                queue.pop(0)
            return fault

    def _authorised(self, request: Request) -> bool:
        if self.callback_key is None:
            return True
        return request.headers.get("authorization") == f"Bearer {self.callback_key}"

    # ------------------------------------------------------------------ app

    def _build(self) -> FastAPI:
        app = FastAPI(title="TrainGate stand-in", docs_url=None, redoc_url=None)

        async def faulted(endpoint: str, request: Request) -> Response | None:
            fault = self._take_fault(endpoint)
            if fault is None:
                return None
            if fault.delay:
                await asyncio.sleep(fault.delay)
            if fault.status == 0:
                transport = request.scope.get("transport")
                if transport is not None:
                    transport.close()
                raise asyncio.CancelledError
            headers = {"Retry-After": fault.retry_after} if fault.retry_after else None
            return JSONResponse({"detail": "injected fault"}, fault.status, headers=headers)

        @app.post("/v1/chat/completions", response_model=None)
        async def chat(request: Request) -> Response | dict[str, Any]:
            if not self._authorised(request):
                return JSONResponse({"detail": "bad callback key"}, 401)
            injected = await faulted("chat", request)
            if injected is not None:
                return injected
            body = await request.json()
            if self.chat_delay:
                await asyncio.sleep(self.chat_delay)
            with self._lock:
                self.chat_calls += 1
                if self.keep_chat_bodies:
                    self.chat_bodies.append(body)
            return self.model.reply(body)

        @app.post("/v1/rollout/completed", response_model=None)
        async def completed(request: Request) -> Response | dict[str, Any]:
            if not self._authorised(request):
                return JSONResponse({"detail": "bad callback key"}, 401)
            injected = await faulted("completed", request)
            if injected is not None:
                return injected
            body = await request.json()
            with self._changed:
                self.completions[str(body.get("rollout_id"))].append(body)
                self._changed.notify_all()
            return {"status": "ok"}

        return app
