"""Builders and fakes shared by the unit tests. Every fake implements one of the kit's own ports
(``Dispatcher``) or stands behind httpx's own seam (``MockTransport``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
from fastapi import FastAPI

from rollout_sdk.agent.loop import RolloutAgentLoop, RolloutContext, RolloutResult
from rollout_sdk.dispatch.base import Job
from rollout_sdk.engine.assembly import Engine
from rollout_sdk.errors import DispatchError
from rollout_sdk.http.app import create_app
from rollout_sdk.protocol import (
    InitResponse,
    Message,
    OpenAIFunctionParametersSchema,
    OpenAIFunctionPropertySchema,
    OpenAIFunctionSchema,
    OpenAIFunctionToolSchema,
    RolloutRequest,
)
from rollout_sdk.settings import RolloutClientSettings, load_settings
from rollout_sdk.store.base import Store
from rollout_sdk.store.memory import MemoryStore
from rollout_sdk.store.record import RolloutRecord
from rollout_sdk.telemetry import NO_TELEMETRY, Telemetry
from rollout_sdk.traingate.client import TrainGateClient

TRAINGATE = "http://traingate.test/base"


class SocketUsed(OSError):
    """A unit test tried to open a network connection or listen (see conftest.py). An OSError,
    so the caller closes its socket as on any failed connect."""


def request_body(**overrides: Any) -> dict[str, Any]:
    """A valid init body; ``overrides`` replace top-level fields."""
    body: dict[str, Any] = {
        "rollout_id": "rollout-1",
        "server_url": TRAINGATE,
        "messages": [{"role": "user", "content": "What is 2 + 2?"}],
        "completion_params": {"temperature": 0.7, "max_tokens": 64},
    }
    body.update(overrides)
    return body


def make_request(**overrides: Any) -> RolloutRequest:
    """A valid ``RolloutRequest``."""
    return RolloutRequest.model_validate(request_body(**overrides))


def completion(
    content: str | None = "4",
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    usage: tuple[int, int, int] | None = (10, 5, 15),
    finish_reason: str | None = "stop",
) -> dict[str, Any]:
    """A chat-completion body as TrainGate sends it."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    body: dict[str, Any] = {
        "id": "cmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "default",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": None
        if usage is None
        else {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": usage[2]},
        "token_ids": [1, 2, 3],
        "logprobs": [-0.1, -0.2, -0.3],
    }
    return body


def accepted_record(rollout_id: str, *, now: float, ttl_seconds: float = 3600) -> RolloutRecord:
    """A new ACCEPTED record of a valid request for ``rollout_id``, offering :data:`ADD_TOOL`."""
    return RolloutRecord.new(
        make_request(rollout_id=rollout_id),
        InitResponse(rollout_id=rollout_id, tools=[ADD_TOOL]),
        now=now,
        ttl_seconds=ttl_seconds,
    )


ADD_TOOL = OpenAIFunctionToolSchema(
    function=OpenAIFunctionSchema(
        name="add",
        description="Add two numbers.",
        parameters=OpenAIFunctionParametersSchema(
            properties={
                "a": OpenAIFunctionPropertySchema(type="number", description="left operand"),
                "b": OpenAIFunctionPropertySchema(type="number"),
                "mode": OpenAIFunctionPropertySchema(type="string", enum=["exact", "round"]),
            },
            required=["a", "b"],
        ),
    )
)


class EchoAgent(RolloutAgentLoop):
    """One chat turn, then complete. ``metadata["tools_fail"]`` makes get_tools raise."""

    name = "echo"

    def get_tools(self, request: RolloutRequest) -> list[OpenAIFunctionToolSchema]:
        if request.metadata.get("tools_fail"):
            raise RuntimeError("tool catalogue unavailable")
        return [ADD_TOOL]

    async def run(self, ctx: RolloutContext) -> RolloutResult:
        messages: list[Message] = list(ctx.request.messages)
        result = await ctx.chat(messages, **ctx.request.completion_params)
        messages.append(result.message)
        return ctx.complete(messages, reward=1.0)


class RecordingDispatcher:
    """A ``Dispatcher`` that records jobs instead of running them; ``fail_next`` makes the next
    hand-offs raise DispatchError."""

    def __init__(self) -> None:
        self.jobs: list[Job] = []
        self.fail_next = 0
        self.active_count = 0
        self.completed_count = 0
        self.closed = False

    async def dispatch(self, job: Job) -> None:
        if self.fail_next > 0:
            self.fail_next -= 1
            raise DispatchError("worker queue unavailable")
        self.jobs.append(job)

    @property
    def active(self) -> int:
        return self.active_count

    @property
    def completed(self) -> int:
        return self.completed_count

    async def aclose(self) -> None:
        self.closed = True


@dataclass
class AppServer:
    """The app of ``create_app`` through ``httpx.ASGITransport``: an :class:`EchoAgent`, its jobs
    recorded (:class:`RecordingDispatcher`), its records in a ``MemoryStore``."""

    app: FastAPI
    http: httpx.AsyncClient
    dispatcher: RecordingDispatcher
    store: MemoryStore


ServerT = TypeVar("ServerT", bound=AppServer)


async def serve_app(
    kind: type[ServerT], *, root_path: str = "", **options: Any
) -> AsyncIterator[ServerT]:
    """A ``kind`` of :class:`AppServer` for the app ``create_app`` makes with ``options``."""
    dispatcher = RecordingDispatcher()
    store = MemoryStore()
    app = create_app(EchoAgent(), store=store, dispatcher=dispatcher, **options)
    transport = httpx.ASGITransport(app=app, root_path=root_path)
    base_url = "http://rollout.test" + root_path
    async with httpx.AsyncClient(transport=transport, base_url=base_url) as http:
        yield kind(app, http, dispatcher, store)


class FakeSleep:
    """Records every requested delay and returns at once."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


Reply = httpx.Response | Exception


class FakeTrainGate:
    """TrainGate behind ``httpx.MockTransport``: scripted answers per path, every request kept.

    ``chat`` and ``completed`` are lists consumed in order (the last entry repeats); an
    ``Exception`` entry is raised as the transport's failure.
    """

    def __init__(
        self,
        *,
        chat: list[Reply] | None = None,
        completed: list[Reply] | None = None,
        chat_delay: float = 0.0,
    ) -> None:
        self.chat_replies = chat or [httpx.Response(200, json=completion())]
        self.completed_replies = completed or [httpx.Response(200, json={"ok": True})]
        self.chat_delay = chat_delay
        self.requests: list[httpx.Request] = []

    @property
    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def on(self, path: str) -> list[httpx.Request]:
        """The requests sent to ``path``."""
        return [r for r in self.requests if r.url.path.endswith(path)]

    def bodies(self, path: str) -> list[dict[str, Any]]:
        """The JSON bodies sent to ``path``."""
        return [json.loads(r.content) for r in self.on(path)]

    async def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.url.path.endswith("/v1/chat/completions"):
            if self.chat_delay:
                await asyncio.sleep(self.chat_delay)
            replies = self.chat_replies
        elif request.url.path.endswith("/v1/rollout/completed"):
            replies = self.completed_replies
        else:
            return httpx.Response(404)
        index = min(len(self.on(request.url.path)) - 1, len(replies) - 1)
        reply = replies[index]
        if isinstance(reply, Exception):
            raise reply
        return reply


def responses(*codes: int, body: Callable[[], dict[str, Any]] | None = None) -> list[Reply]:
    """Replies with the given status codes (2xx ones carry ``body()``)."""
    make = body or completion
    return [
        httpx.Response(code, json=make()) if 200 <= code < 300 else httpx.Response(code)
        for code in codes
    ]


def quiet_client(gate: FakeTrainGate, *, telemetry: Telemetry = NO_TELEMETRY) -> TrainGateClient:
    """A TrainGate client calling ``gate`` that never retries (and never really sleeps)."""
    return TrainGateClient(
        RolloutClientSettings(max_retries=0, complete_rollout_retries=0),
        transport=gate.transport,
        sleep=FakeSleep(),
        telemetry=telemetry,
    )


def engine_for(
    gate: FakeTrainGate,
    *,
    store: Store | None = None,
    telemetry: Telemetry = NO_TELEMETRY,
    **given: Any,
) -> Engine:
    """An ``Engine`` over ``store`` (a fresh ``MemoryStore``) and fresh settings, reporting to
    ``gate`` through a :func:`quiet_client`; ``given`` goes to ``Engine.build`` as it is."""
    return Engine.build(
        store=store if store is not None else MemoryStore(),
        client=quiet_client(gate, telemetry=telemetry),
        settings=load_settings(),
        telemetry=telemetry,
        **given,
    )
