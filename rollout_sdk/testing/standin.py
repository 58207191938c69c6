"""A TrainGate stand-in with a scripted model, for the demo, the tests and the load driver.

It serves TrainGate's two endpoints on loopback: ``/v1/chat/completions`` answers from a scripted
model that solves ``a OP b`` questions with one ``calculate`` tool call and then a plain answer,
and ``/v1/rollout/completed`` records every final response it receives (duplicates included, so
tests can count them); ``GET /standin/rollouts/{rollout_id}`` reads that record back over HTTP. Every call is logged with how it ended, so a test can tell a re-send after a
lost acknowledgement from a duplicate, and count agent runs per rollout. Faults can be injected per
endpoint, and per rollout: an error status (with ``Retry-After``), a dropped connection, a delay
(slowness, or a timeout when longer than the caller waits), a lost acknowledgement.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import re
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.requests import ClientDisconnect

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


class ChatModel(Protocol):
    """What answers the stand-in's chat calls: a chat-completion body for each request body."""

    def reply(self, body: dict[str, Any]) -> dict[str, Any]: ...


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
    """What the stand-in does to the next ``count`` calls of an endpoint instead of answering.

    - ``status``: the answer; 0 drops the connection instead of answering; a 2xx handles the
      call normally (after ``delay``: slowness).
    - ``delay``: seconds to wait first; longer than the kit's client timeout, it is a timeout.
    - ``retry_after``: a ``Retry-After`` header on the answer.
    - ``lose_ack``: ``/v1/rollout/completed`` only: take the final response (TrainGate has it),
      then drop the connection, so the kit never sees the 2xx (a lost acknowledgement).
    - ``rollout_id``: only that rollout's calls (None: the next calls, whichever rollout).
    """

    status: int
    count: int = 1
    delay: float = 0.0
    retry_after: str | None = None
    lose_ack: bool = False
    rollout_id: str | None = None


#: How the stand-in ended a call (:attr:`Call.outcome`).
#: The template parameter a stack calling a stand-in on this machine is deployed with: on
#: Lambda the functions call only public addresses and the hosts the operator names.
LOOPBACK_TRAINGATE = {"AllowedServerHosts": "127.0.0.1"}

OK = "ok"
ACK_LOST = "ack_lost"
REFUSED = "refused"
FAILED = "failed"


@dataclass(frozen=True)
class Call:
    """One call the stand-in received, and how it ended.

    ``outcome`` is ``ok`` (handled, and the 2xx went to a caller still connected),
    ``ack_lost`` (handled, but the caller never got the 2xx: an injected lost acknowledgement,
    or the caller had gone by the time the answer was ready), ``refused`` (a final 4xx: not
    handled) or ``failed`` (5xx, 408, 429, a dropped connection or a hang: not handled).
    Times are ``time.monotonic()``.
    """

    endpoint: str
    rollout_id: str
    outcome: str
    status: int | None
    arrived: float
    answered: float
    body: dict[str, Any] | None = None
    run_id: str | None = None
    first_turn: bool = False

    @property
    def handled(self) -> bool:
        """TrainGate processed the call, whether or not its 2xx got back."""
        return self.outcome in (OK, ACK_LOST)


def _transport(request: Request) -> asyncio.BaseTransport | None:
    """The connection under ``request``. uvicorn keeps it on the request's cycle, whose bound
    ``receive`` is the ASGI receive callable (the ASGI scope itself carries no transport)."""
    transport = getattr(getattr(request.receive, "__self__", None), "transport", None)
    return transport if isinstance(transport, asyncio.BaseTransport) else None


async def _drop(request: Request) -> Response:
    """Close the connection without a byte of answer: the caller sees it dropped.

    Once the server has seen the connection go, whatever is returned here is never sent (and
    nothing is logged); if the connection cannot be found or does not go, raise, so that no
    answer is ever completed.
    """
    transport = _transport(request)
    if transport is None:
        raise RuntimeError("cannot drop the connection: no transport found under this server")
    transport.close()
    for _ in range(400):
        if await request.is_disconnected():
            return Response(status_code=204)  # never sent: the connection is closed
        await asyncio.sleep(0.005)
    raise RuntimeError("the connection did not close")


def _record(body: dict[str, Any]) -> dict[str, Any]:
    """The answer to a final response (the stand-in records it whatever it holds)."""
    return {"status": "ok"}


class TrainGateStandIn:
    """The stand-in's state and its FastAPI app (``.app``).

    Every call is logged with how it ended (:meth:`calls_for`). ``completions`` holds the final
    responses TrainGate received (re-sends included) and ``chat_calls`` counts the chat calls it
    answered. A chat call may carry a ``run_id`` completion param, one per agent run:
    :meth:`runs` counts a rollout's distinct runs, so a retried call never looks like a rerun.
    """

    def __init__(
        self,
        *,
        model: ChatModel | None = None,
        chat_delay: float = 0.0,
        callback_key: str | None = None,
    ) -> None:
        self.model: ChatModel = model or ScriptedModel()
        self.chat_delay = chat_delay
        self.callback_key = callback_key
        self.completions: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.chat_calls = 0
        self.chat_bodies: list[dict[str, Any]] = []
        self.keep_chat_bodies = False
        self.faults: dict[str, list[Fault]] = defaultdict(list)
        self._targeted: dict[tuple[str, str], list[Fault]] = defaultdict(list)
        self._calls: dict[tuple[str, str], list[Call]] = defaultdict(list)
        self._pending: dict[tuple[str, str], int] = defaultdict(int)
        self._released = threading.Event()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self.app = self._build()

    # ------------------------------------------------------------------ inspection

    def inject(self, endpoint: str, fault: Fault) -> None:
        """Queue a fault for ``endpoint`` ("chat" or "completed"); when it names a rollout, it
        applies to that rollout's calls only (and before any untargeted fault)."""
        if endpoint not in ("chat", "completed"):
            raise ValueError(f"unknown endpoint {endpoint!r}; use 'chat' or 'completed'")
        with self._lock:
            if fault.rollout_id is None:
                self.faults[endpoint].append(fault)
            else:
                self._targeted[(endpoint, fault.rollout_id)].append(fault)

    def reported(self) -> int:
        """Rollouts that have at least one final response."""
        with self._lock:
            return len(self.completions)

    def wait_for(self, count: int, timeout: float) -> bool:
        """Block until ``count`` rollouts have reported, or ``timeout`` passes."""
        with self._changed:
            return self._changed.wait_for(lambda: len(self.completions) >= count, timeout)

    def calls_for(self, endpoint: str, rollout_id: str) -> list[Call]:
        """Every call of ``endpoint`` ("chat" or "completed") for ``rollout_id``, in the order
        they were answered."""
        with self._lock:
            return list(self._calls.get((endpoint, rollout_id), ()))

    def chat_count(self, rollout_id: str) -> int:
        """Chat calls of ``rollout_id`` that TrainGate answered (faulted ones left out)."""
        return sum(1 for c in self.calls_for("chat", rollout_id) if c.handled)

    def runs(self, rollout_id: str) -> int:
        """Agent runs of ``rollout_id`` seen by TrainGate: the distinct ``run_id`` params of its
        chat calls, answered or not (an answered call without one counts when it opens a
        conversation)."""
        calls = self.calls_for("chat", rollout_id)
        ids = {c.run_id for c in calls if c.run_id is not None}
        return len(ids) + sum(1 for c in calls if c.run_id is None and c.first_turn and c.handled)

    def observed(self, rollout_id: str) -> dict[str, Any]:
        """What TrainGate saw of ``rollout_id``, as ``GET /standin/rollouts/{rollout_id}``
        answers it: the final responses received (re-sends included), how each completed call
        ended, and the chat calls answered and agent runs seen."""
        with self._lock:
            completions = list(self.completions.get(rollout_id, ()))
            completed = [c.outcome for c in self._calls.get(("completed", rollout_id), ())]
        return {
            "rollout_id": rollout_id,
            "completions": completions,
            "completed_calls": completed,
            "chat_calls": self.chat_count(rollout_id),
            "runs": self.runs(rollout_id),
        }

    def pending(self, endpoint: str, rollout_id: str) -> int:
        """Calls of ``endpoint`` for ``rollout_id`` received and not answered yet (hanging)."""
        with self._lock:
            return self._pending.get((endpoint, rollout_id), 0)

    def pending_total(self) -> int:
        """Calls received and not answered yet, over every endpoint and rollout."""
        with self._lock:
            return sum(self._pending.values())

    def release(self) -> None:
        """End every delay now (before stopping the server, so no call is left hanging)."""
        self._released.set()

    async def _pause(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        for _ in range(int(seconds / 0.05) + 2):  # bounded: each step sleeps up to 0.05 s
            left = end - time.monotonic()
            if left <= 0 or self._released.is_set():
                return
            await asyncio.sleep(min(0.05, left))

    def _take_fault(self, endpoint: str, rollout_id: str) -> Fault | None:
        with self._lock:
            queue = self._targeted.get((endpoint, rollout_id)) or self.faults.get(endpoint)
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

    def _log(self, call: Call) -> None:
        with self._changed:
            self._calls[(call.endpoint, call.rollout_id)].append(call)
            if call.endpoint == "chat" and call.handled:
                self.chat_calls += 1
                if self.keep_chat_bodies and call.body is not None:
                    self.chat_bodies.append(call.body)
            if call.endpoint == "completed" and call.handled and call.body is not None:
                self.completions[call.rollout_id].append(call.body)
            self._changed.notify_all()

    # ------------------------------------------------------------------ app

    def _build(self) -> FastAPI:
        app = FastAPI(title="TrainGate stand-in", docs_url=None, redoc_url=None)

        @app.post("/v1/chat/completions", response_model=None)
        async def chat(request: Request) -> Response | dict[str, Any]:
            return await self._handle("chat", request, self.model.reply)

        @app.post("/v1/rollout/completed", response_model=None)
        async def completed(request: Request) -> Response | dict[str, Any]:
            return await self._handle("completed", request, _record)

        # Not TrainGate's: how a test that cannot share this process (the cloud suite, whose
        # stand-in Lambda must reach over the internet) sees the callbacks. Guarded by the
        # callback key like the two endpoints above.
        @app.get("/standin/rollouts/{rollout_id}", response_model=None)
        async def observed(rollout_id: str, request: Request) -> Response | dict[str, Any]:
            if not self._authorised(request):
                return JSONResponse({"detail": "bad callback key"}, 401)
            return self.observed(rollout_id)

        return app

    async def _handle(
        self, endpoint: str, request: Request, answer: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> Response | dict[str, Any]:
        """One call of ``endpoint``: its key and body checked, then answered as its next fault
        says or by ``answer``, counted as pending until then, and logged with how it ended."""
        arrived = time.monotonic()
        body = await self._body_of(request)
        if isinstance(body, Response):
            return body
        rollout_id = str(body.get("rollout_id"))
        log = self._call_log(endpoint, rollout_id, body, arrived)
        key = (endpoint, rollout_id)
        with self._lock:
            self._pending[key] += 1
        try:
            return await self._answer(endpoint, rollout_id, request, body, answer, log)
        finally:
            with self._lock:
                self._pending[key] -= 1

    async def _body_of(self, request: Request) -> dict[str, Any] | Response:
        """The call's JSON object, or the answer to a call without the key or such a body."""
        if not self._authorised(request):
            return JSONResponse({"detail": "bad callback key"}, 401)
        try:
            body = await request.json()
        except ClientDisconnect:
            # The caller went before its request was whole (a killed process): no call.
            return Response(status_code=499)  # never sent: the caller is gone
        except ValueError:
            return JSONResponse({"detail": "the body is not JSON"}, 400)
        if not isinstance(body, dict):
            return JSONResponse({"detail": "the body is not a JSON object"}, 400)
        return body

    def _call_log(
        self, endpoint: str, rollout_id: str, body: dict[str, Any], arrived: float
    ) -> Callable[[str, int | None], None]:
        """What logs this call once it ended: ``log(outcome, status)``."""
        run_id = body.get("run_id")
        messages = body.get("messages")
        first_turn = endpoint == "chat" and not any(
            isinstance(m, dict) and m.get("role") == "assistant"
            for m in (messages if isinstance(messages, list) else [])
        )
        keep = endpoint == "completed" or self.keep_chat_bodies

        def log(outcome: str, status: int | None) -> None:
            self._log(
                Call(
                    endpoint=endpoint,
                    rollout_id=rollout_id,
                    outcome=outcome,
                    status=status,
                    arrived=arrived,
                    answered=time.monotonic(),
                    body=body if keep else None,
                    run_id=None if run_id is None else str(run_id),
                    first_turn=first_turn,
                )
            )

        return log

    async def _answer(
        self,
        endpoint: str,
        rollout_id: str,
        request: Request,
        body: dict[str, Any],
        answer: Callable[[dict[str, Any]], dict[str, Any]],
        log: Callable[[str, int | None], None],
    ) -> Response | dict[str, Any]:
        """The next fault for the call, if one is set (a delay, a dropped connection, an error
        status), else ``answer``'s."""
        fault = self._take_fault(endpoint, rollout_id)
        status = 200
        if fault is not None:
            if fault.delay:
                await self._pause(fault.delay)
            status = fault.status
            if fault.lose_ack or status == 0:
                log(ACK_LOST if fault.lose_ack else FAILED, None)
                return await _drop(request)
            if not 200 <= status < 300:
                final = 400 <= status < 500 and status not in (408, 429)
                log(REFUSED if final else FAILED, status)
                headers = {"Retry-After": fault.retry_after} if fault.retry_after else None
                return JSONResponse({"detail": "injected fault"}, status, headers=headers)
        if endpoint == "chat" and self.chat_delay:
            await self._pause(self.chat_delay)  # release() ends it
        result = answer(body)
        # A caller that gave up waiting never sees this 2xx: its acknowledgement is lost.
        log(ACK_LOST if await request.is_disconnected() else OK, status)
        return result
