"""The local TrainGate's FastAPI app: it stands where TrainGate would for ``rollout-sdk test``
(and ``rollout-sdk demo --base-url``), which run the agent through the kit's real server and
worker.

Its ``/v1/chat/completions`` maps the kit's chat body (:func:`~.endpoint.map_chat_body`) and
sends it to ``{base_url}/chat/completions`` through the TrainGate client's send
(:func:`rollout_sdk.traingate.transport.send`: once more at once on a pooled connection the
endpoint had closed); the answer goes back to the kit as the endpoint gave it (tool calls
included), a failure as the status the kit's client reads as final or retryable
(:mod:`~.failures`). ``/v1/rollout/completed`` records each rollout's final response for the
runner.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from rollout_sdk.local.forward.endpoint import (
    TOKEN_FIELDS,
    Endpoint,
    map_chat_body,
    other_token_field,
)
from rollout_sdk.local.forward.failures import (
    ABORTED,
    EndpointFailure,
    bad_answer,
    classify_exception,
    classify_status,
)

if TYPE_CHECKING:
    import httpx

# The package's name, which the --debug lines show.
log = logging.getLogger("rollout_sdk.local.forward")

#: How long a chat call waits for its rollout's init answer (the tools) to be recorded.
TOOLS_WAIT_SECONDS = 30.0
#: The status the kit's client sees for a failure no retry can mend (final, not 408 or 429).
FINAL_STATUS = 424

T = TypeVar("T")


class Slot(Generic[T]):
    """A value set once from any thread and awaited from any event loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = False
        self._value: T | None = None
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[T]]] = []

    def set(self, value: T) -> None:
        """Set the value (a second call is ignored) and wake every waiter."""
        with self._lock:
            if self._done:
                return
            self._done, self._value = True, value
            waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            # A loop that has closed has nobody waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_resolve, future, value)

    @property
    def done(self) -> bool:
        return self._done

    async def wait(self) -> T:
        """The value, once set (bound the wait with ``asyncio.timeout``)."""
        with self._lock:
            if self._done:
                return self._value  # type: ignore[return-value]
            future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
            self._waiters.append((asyncio.get_running_loop(), future))
        return await future


def _resolve(future: asyncio.Future[T], value: T) -> None:
    if not future.done():
        future.set_result(value)


class Interactor(Protocol):
    """What ``--interactive`` does at each chat call (awaited on the forwarder's loop)."""

    async def before(
        self, rollout_id: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> None:
        """Before the call is forwarded: ``messages`` is the conversation being sent."""

    async def after(self, rollout_id: str, answer: dict[str, Any]) -> bool:
        """After the endpoint answered; False aborts the rollout."""


@dataclass
class _Rollout:
    completion_params: dict[str, Any]
    tools: Slot[list[dict[str, Any]]] = field(default_factory=Slot)
    result: Slot[dict[str, Any]] = field(default_factory=Slot)
    failure: EndpointFailure | None = None


#: What answers a chat call or a callback, given its body and its rollout.
_Handler = Callable[[dict[str, Any], _Rollout], Awaitable[Response | dict[str, Any]]]


class ForwardingTrainGate:
    """The local TrainGate's state and its FastAPI app (``.app``).

    The runner calls :meth:`expect` before a rollout's init, :meth:`set_tools` with its init
    answer, and awaits :meth:`result`. ``transport`` is a seam (tests, or another stack); by
    default the kit's :class:`~rollout_sdk.traingate.transport.AiohttpTransport`, built on the
    server's loop and closed when it stops.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        callback_key: str,
        interactor: Interactor | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.callback_key = callback_key
        self._expected = f"Bearer {callback_key}".encode()
        self.interactor = interactor
        self.token_field = endpoint.token_field
        self.forwarded = 0
        self._given = transport
        self._transport = transport
        self._lock = threading.Lock()
        self._rollouts: dict[str, _Rollout] = {}
        self._tripped: EndpointFailure | None = None
        self.app = self._build()

    # ------------------------------------------------------------------ the runner's side

    def expect(self, rollout_id: str, completion_params: dict[str, Any]) -> None:
        """Get ready for ``rollout_id`` (before its init is posted)."""
        with self._lock:
            self._rollouts[rollout_id] = _Rollout(dict(completion_params))

    def set_tools(self, rollout_id: str, tools: list[dict[str, Any]]) -> None:
        """The tools ``rollout_id``'s init answered with (sent with each of its chat calls)."""
        self._rollouts[rollout_id].tools.set(tools)

    async def result(self, rollout_id: str) -> dict[str, Any]:
        """``rollout_id``'s final response, once the kit has sent it."""
        return await self._rollouts[rollout_id].result.wait()

    def failure(self, rollout_id: str) -> EndpointFailure | None:
        """The endpoint failure that ended ``rollout_id``'s last chat call, if it failed."""
        state = self._rollouts.get(rollout_id)
        return None if state is None else state.failure

    @property
    def tripped(self) -> EndpointFailure | None:
        """The systemic failure that stopped the run, if one did."""
        return self._tripped

    # ------------------------------------------------------------------ forwarding

    def _http(self) -> httpx.AsyncBaseTransport:
        if self._transport is None:
            from rollout_sdk.settings import get_settings
            from rollout_sdk.traingate.outbound import OutboundPolicy, Reach
            from rollout_sdk.traingate.transport import AiohttpTransport

            # The endpoint is the user's own (often on loopback), but never link-local unless
            # they say so, and its answers are capped as TrainGate's are.
            policy = OutboundPolicy.from_settings(get_settings().kit, where=Reach.PRIVATE)
            self._transport = AiohttpTransport(max_connections=64, policy=policy)
        return self._transport

    async def _post(self, body: dict[str, Any]) -> httpx.Response:
        import httpx

        from rollout_sdk.traingate.transport import send

        headers = [(b"Content-Type", b"application/json"), (b"Accept", b"application/json")]
        if self.endpoint.authorization is not None:
            headers.append((b"Authorization", self.endpoint.authorization))
        timeout = self.endpoint.timeout
        request = httpx.Request(
            "POST",
            self.endpoint.chat_url,
            headers=headers,
            content=json.dumps(body, ensure_ascii=False).encode(),
            extensions={"timeout": dict.fromkeys(("connect", "read", "write", "pool"), timeout)},
        )
        # As the TrainGate client sends: once more at once when a pooled connection the
        # endpoint had closed failed before any answer.
        return await send(self._http(), request)

    async def forward(
        self, body: dict[str, Any], tools: list[dict[str, Any]], params: dict[str, Any]
    ) -> dict[str, Any] | EndpointFailure:
        """Send one of the kit's chat bodies to the endpoint: its completion, or the failure."""
        import httpx

        for attempt in range(2):
            sent_field = self.token_field
            mapped = map_chat_body(
                body,
                model=self.endpoint.model,
                tools=tools,
                completion_params=params,
                limit_field=sent_field,
            )
            log.debug("forwarding a chat call: %s", sorted(mapped))
            try:
                answer = await asyncio.wait_for(
                    self._post(mapped), timeout=self.endpoint.timeout + 5
                )
            except (httpx.HTTPError, TimeoutError) as exc:
                if isinstance(exc, TimeoutError):
                    exc = httpx.ReadTimeout(str(exc) or "no answer")
                return classify_exception(self.endpoint, exc)
            except Exception as exc:  # the HTTP stack's other errors: said (redacted), no traceback
                return classify_exception(self.endpoint, exc)
            self.forwarded += 1
            if answer.status_code == 200:
                try:
                    parsed = answer.json()
                except ValueError:
                    return bad_answer(self.endpoint, "a body that is not JSON")
                if not isinstance(parsed, dict) or not isinstance(parsed.get("choices"), list):
                    return bad_answer(self.endpoint, "JSON without 'choices'")
                if not parsed["choices"]:
                    return bad_answer(self.endpoint, "no choices")
                return parsed
            text = answer.text
            names_field = any(name in mapped for name in TOKEN_FIELDS)
            if answer.status_code == 400 and attempt == 0 and names_field and sent_field in text:
                # The model wants the other name for the token limit: use it from now on.
                other = other_token_field(sent_field)
                log.debug("the endpoint refused %s; sending %s instead", sent_field, other)
                self.token_field = other
                continue
            return classify_status(self.endpoint, answer.status_code, text, answer.headers)
        raise AssertionError("unreachable")  # pragma: no cover - the loop always returns

    def _refuse(self, state: _Rollout, failure: EndpointFailure) -> Response:
        state.failure = failure
        if failure.systemic and self._tripped is None:
            self._tripped = failure
        if failure.retryable:
            status = 429 if failure.kind == "rate_limited" else 502
            headers = {"Retry-After": failure.retry_after} if failure.retry_after else None
            return JSONResponse({"detail": failure.message}, status, headers=headers)
        return JSONResponse({"detail": failure.message}, FINAL_STATUS)

    async def _chat(self, body: dict[str, Any], state: _Rollout) -> Response | dict[str, Any]:
        rollout_id = str(body["rollout_id"])
        try:
            async with asyncio.timeout(TOOLS_WAIT_SECONDS):
                tools = await state.tools.wait()
        except TimeoutError:
            return JSONResponse({"detail": "the rollout's init never answered"}, 409)
        if self._tripped is not None:
            return self._refuse(state, self._tripped)
        if self.interactor is not None:
            await self.interactor.before(rollout_id, list(body.get("messages") or []), tools)
        outcome = await self.forward(body, tools, state.completion_params)
        if isinstance(outcome, EndpointFailure):
            return self._refuse(state, outcome)
        if self.interactor is not None and not await self.interactor.after(rollout_id, outcome):
            return self._refuse(state, ABORTED)
        state.failure = None
        return outcome

    async def _completed(self, body: dict[str, Any], state: _Rollout) -> dict[str, Any]:
        state.result.set(body)
        return {"status": "ok"}

    # ------------------------------------------------------------------ app

    def _authorised(self, request: Request) -> bool:
        # The header's bytes as sent (Starlette decodes them as latin-1), compared in constant
        # time; a missing header is an empty one.
        presented = request.headers.get("authorization", "").encode("latin-1")
        return hmac.compare_digest(presented, self._expected)

    def _build(self) -> FastAPI:
        @asynccontextmanager
        async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
            try:
                yield
            finally:
                transport, self._transport = self._transport, self._given
                if transport is not None and transport is not self._given:
                    await transport.aclose()

        app = FastAPI(
            title="rollout-sdk local TrainGate",
            docs_url=None,
            redoc_url=None,
            openapi_url=None,
            lifespan=lifespan,
        )

        def route(path: str, handle: _Handler) -> None:
            """``handle`` answers a POST to ``path`` whose body names a rollout of this run,
            under the callback key."""

            async def answer(request: Request) -> Response | dict[str, Any]:
                if not self._authorised(request):
                    return JSONResponse({"detail": "bad callback key"}, 401)
                try:
                    body = await request.json()
                except ValueError:
                    return JSONResponse({"detail": "the body is not JSON"}, 400)
                state = (
                    self._rollouts.get(str(body.get("rollout_id")))
                    if isinstance(body, dict)
                    else None
                )
                if state is None:
                    return JSONResponse({"detail": "not a rollout of this run"}, 404)
                return await handle(body, state)

            app.add_api_route(path, answer, methods=["POST"], response_model=None)

        route("/v1/chat/completions", self._chat)
        route("/v1/rollout/completed", self._completed)
        return app
