"""An OpenAI-compatible chat endpoint with a scripted model, for ``rollout-sdk test``'s tests.

``POST /v1/chat/completions`` answers like OpenAI's: the calculator script of
:class:`~rollout_sdk.testing.standin.ScriptedModel` (a ``calculate`` tool call, then the answer
as text). It records every request (headers and body) so a test can check what was sent, and can
be told to behave like a stricter or a failing endpoint:

- ``api_key``: the key it accepts (401 otherwise, echoing the key it got, as some endpoints do);
- ``models``: the model names it serves (404 ``model_not_found`` for any other);
- ``refuse``: body fields it rejects with a 400, the way OpenAI's reasoning models reject
  ``max_tokens`` and ``logprobs`` and every OpenAI model rejects unknown fields;
- :meth:`OpenAIStandIn.inject`: an error status (with ``Retry-After``) or a delay for the next
  calls;
- ``gate``: an event every call waits for, so a test can count the calls in flight.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from rollout_sdk.testing.standin import ScriptedModel


@dataclass(frozen=True)
class Received:
    """One request as it arrived (``query``: its URL's query string, as sent)."""

    headers: dict[str, str]
    body: dict[str, Any]
    raw: bytes
    query: str = ""


@dataclass
class EndpointFault:
    """What the next ``count`` calls get instead of an answer: ``status`` (with ``message`` and
    ``retry_after``), after ``delay`` seconds (a 200 after a delay is a slow answer)."""

    status: int
    count: int = 1
    delay: float = 0.0
    message: str = "injected fault"
    retry_after: str | None = None


def _error(status: int, message: str, code: str | None = None, **headers: str) -> JSONResponse:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": code}}
    return JSONResponse(body, status, headers=headers or None)


@dataclass
class OpenAIStandIn:
    """The stand-in's state and its FastAPI app (:attr:`app`)."""

    api_key: str | None = None
    models: tuple[str, ...] = ("gpt-5-mini",)
    refuse: tuple[str, ...] = ()
    #: When set, every call waits until the event is set (a test counts the calls in flight).
    gate: threading.Event | None = None
    received: list[Received] = field(default_factory=list)
    faults: list[EndpointFault] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.model = ScriptedModel()
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._arrived = threading.Condition(self._lock)
        self.app = self._build()

    def inject(self, fault: EndpointFault) -> None:
        """Queue ``fault`` for the next calls."""
        with self._lock:
            self.faults.append(fault)

    def release(self) -> None:
        """End every delay and open the gate now (before the server stops)."""
        self._released.set()
        if self.gate is not None:
            self.gate.set()

    def wait_for_requests(self, count: int, timeout: float) -> bool:
        """Block until ``count`` requests have arrived, or ``timeout`` passes."""
        with self._arrived:
            return self._arrived.wait_for(lambda: len(self.received) >= count, timeout)

    def _take(self) -> EndpointFault | None:
        with self._lock:
            if not self.faults:
                return None
            fault = self.faults[0]
            fault.count -= 1
            if fault.count <= 0:
                self.faults.pop(0)
            return fault

    async def _pause(self, seconds: float) -> None:
        # On a thread, so that release() ends it at once.
        await asyncio.to_thread(self._released.wait, seconds)

    def _build(self) -> FastAPI:
        app = FastAPI(title="OpenAI-compatible stand-in", docs_url=None, redoc_url=None)

        @app.post("/v1/chat/completions", response_model=None)
        async def chat(request: Request) -> Response | dict[str, Any]:
            raw = await request.body()
            try:
                body = await request.json()
            except ValueError:
                return _error(400, "We could not parse the JSON body of your request.")
            with self._arrived:
                self.received.append(Received(dict(request.headers), body, raw, request.url.query))
                self._arrived.notify_all()
            if self.gate is not None:
                await asyncio.to_thread(self.gate.wait, 60)
            if self.api_key is not None:
                sent = request.headers.get("authorization", "")
                if sent != f"Bearer {self.api_key}":
                    given = sent.removeprefix("Bearer ")
                    return _error(401, f"Incorrect API key provided: {given}.", "invalid_api_key")
            fault = self._take()
            if fault is not None:
                if fault.delay:
                    await self._pause(fault.delay)
                if fault.status != 200:
                    headers = {"Retry-After": fault.retry_after} if fault.retry_after else {}
                    return _error(fault.status, fault.message, None, **headers)
            if body.get("model") not in self.models:
                return _error(
                    404,
                    f"The model `{body.get('model')}` does not exist or you do not have access "
                    "to it.",
                    "model_not_found",
                )
            for name in self.refuse:
                if name in body:
                    return _error(
                        400,
                        f"Unsupported parameter: '{name}' is not supported with this model.",
                        "unsupported_parameter",
                    )
            return self.model.reply(body)

        return app
