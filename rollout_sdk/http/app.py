"""The FastAPI app: init, health, platform health. Errors become HTTP status codes here, only here.

``create_app(agent_loop)`` keeps the v1 SDK's signature: with no other argument it runs rollouts in
its own process on an in-memory store, so ``uvicorn server:app`` keeps working for ported agents.
The local server and the Lambda handler pass their own store, dispatcher and client.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from rollout_sdk.agent.loop import RolloutAgentLoop
from rollout_sdk.agent.validation import validate_agent_loop
from rollout_sdk.dispatch.base import Dispatcher
from rollout_sdk.dispatch.inprocess import InProcessDispatcher
from rollout_sdk.engine.client import TrainGateClient
from rollout_sdk.engine.recovery import Recovery
from rollout_sdk.engine.service import RolloutService, record_status
from rollout_sdk.engine.vault import KeyVault, LocalVault
from rollout_sdk.engine.worker import RolloutWorker
from rollout_sdk.errors import (
    AgentToolsError,
    ConfigurationError,
    DispatchError,
    IdempotencyConflict,
    Overloaded,
    PayloadTooLarge,
    RolloutAlreadyFinished,
    RolloutNotFound,
    ServerUrlRefused,
    StoreError,
)
from rollout_sdk.http.admission import AdmissionMiddleware
from rollout_sdk.http.auth import KeyProvider, ServerKeyMiddleware
from rollout_sdk.protocol import InitResponse, RolloutRequest
from rollout_sdk.settings import RolloutSettings, get_settings
from rollout_sdk.store.base import Store
from rollout_sdk.store.memory import MemoryStore

logger = logging.getLogger("rollout_sdk.http.app")

Hook = Callable[[], Awaitable[None] | None]


@dataclass
class Runtime:
    """What the app runs on; ``app.state.runtime`` holds it for the wiring and tests."""

    service: RolloutService
    worker: RolloutWorker
    dispatcher: Dispatcher
    store: Store
    client: TrainGateClient
    settings: RolloutSettings


async def _call(hook: Hook | None) -> None:
    if hook is None:
        return
    result = hook()
    if inspect.isawaitable(result):
        await result


def _error(status: int, detail: str, **extra: Any) -> JSONResponse:
    headers = {"Retry-After": "1"} if status in (429, 503) else None
    return JSONResponse({"detail": detail, **extra}, status_code=status, headers=headers)


def _printable(text: str) -> str:
    # An unpaired surrogate cannot be encoded as UTF-8; the answer must still go out.
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


_JSON_KINDS = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}


def validation_detail(error: dict[str, Any]) -> dict[str, Any]:
    """One entry of a 422 body: FastAPI's ``type``, ``loc`` and ``msg``, never the ``input``.

    The input is left out: it can hold the callback key, or text that cannot be encoded.
    """
    kind = str(error.get("type", "value_error"))
    loc = [_printable(p) if isinstance(p, str) else p for p in error.get("loc", ())]
    msg = _printable(str(error.get("msg", "invalid")))
    if kind == "json_invalid":
        reason = _printable(str((error.get("ctx") or {}).get("error", "")))
        where = f" at character {loc[1]}" if len(loc) > 1 else ""
        msg = f"the body is not valid JSON: {reason}{where}"
    elif loc == ["body"] and kind == "missing":
        msg = "the body is empty: send the RolloutRequest as a JSON object"
    elif loc == ["body"] and kind == "model_attributes_type":
        given = error.get("input")
        what = "null" if given is None else _JSON_KINDS.get(type(given), "a number")
        msg = f"the body must be a JSON object (a RolloutRequest), not {what}"
    return {"type": kind, "loc": loc, "msg": msg}


def install_error_handlers(app: FastAPI) -> None:
    """The one place where the kit's errors become HTTP answers."""

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(
            {"detail": [validation_detail(dict(e)) for e in exc.errors()]}, status_code=422
        )

    @app.exception_handler(ServerUrlRefused)
    async def _server_url(_: Request, exc: ServerUrlRefused) -> JSONResponse:
        detail = [{"type": "value_error", "loc": ["body", exc.field], "msg": str(exc)}]
        return JSONResponse({"detail": detail}, status_code=422)

    @app.exception_handler(IdempotencyConflict)
    async def _conflict(_: Request, exc: IdempotencyConflict) -> JSONResponse:
        return _error(409, str(exc), fields=exc.fields)

    @app.exception_handler(PayloadTooLarge)
    async def _too_large(_: Request, exc: PayloadTooLarge) -> JSONResponse:
        return _error(413, str(exc))

    @app.exception_handler(AgentToolsError)
    async def _tools(_: Request, exc: AgentToolsError) -> JSONResponse:
        return _error(500, f"the agent loop could not provide its tools: {exc}")

    @app.exception_handler(Overloaded)
    async def _overloaded(_: Request, exc: Overloaded) -> JSONResponse:
        return JSONResponse(
            {"detail": f"too many rollouts: {exc}; retry the same init after {exc.retry_after} s"},
            status_code=429,
            headers={"Retry-After": str(exc.retry_after)},
        )

    @app.exception_handler(RolloutNotFound)
    async def _not_found(_: Request, exc: RolloutNotFound) -> JSONResponse:
        return _error(404, str(exc))

    @app.exception_handler(RolloutAlreadyFinished)
    async def _finished(_: Request, exc: RolloutAlreadyFinished) -> JSONResponse:
        return _error(409, str(exc))

    @app.exception_handler(DispatchError)
    async def _dispatch(_: Request, exc: DispatchError) -> JSONResponse:
        return _error(503, f"could not start the rollout: {exc}; retry the same init")

    @app.exception_handler(StoreError)
    async def _store(_: Request, exc: StoreError) -> JSONResponse:
        return _error(503, f"the record store failed: {exc}; retry the same init")


def create_app(
    agent_loop: RolloutAgentLoop,
    max_concurrent: int | None = None,
    record_ttl_seconds: float | None = None,
    settings: RolloutSettings | None = None,
    credentials: Any = None,
    server_host: str | None = None,
    server_port: int | None = None,
    api_key: str | None = None,
    debug_dir: str | Path | None = None,
    on_startup: Hook | None = None,
    on_shutdown: Hook | None = None,
    *,
    api_keys: Iterable[str] = (),
    key_provider: KeyProvider | None = None,
    store: Store | None = None,
    dispatcher: Dispatcher | None = None,
    client: TrainGateClient | None = None,
    vault: KeyVault | None = None,
    seal_at_init: bool = True,
    sweep_on_start: bool = False,
    redrive: bool = True,
    docs: bool = True,
    **more: Any,
) -> FastAPI:
    """Build the rollout server's app.

    ``api_key`` (and any ``api_keys``, for rotation) are server keys; ``key_provider`` adds keys
    read at request time (the Lambda reads them from Secrets Manager). ``store`` defaults to an
    in-memory store and ``dispatcher`` to an in-process one bounded by ``max_concurrent`` (and
    ``ROLLOUT_SDK_MAX_QUEUED_ROLLOUTS``). ``vault`` seals callback keys (default: AES-GCM under
    a key held in memory), kept in the record from init on when ``seal_at_init``.
    ``sweep_on_start`` reports, at start-up, every rollout the store still shows in flight (only
    for a durable store this process owns alone); ``redrive`` re-sends undelivered responses on a
    timer while the app runs.
    Raises AgentLoopValidationError for an invalid agent loop, ConfigurationError for bad settings.
    """
    if credentials is not None or server_host is not None or server_port is not None:
        warnings.warn(
            "create_app: credentials, server_host and server_port (self-registration) are "
            "ignored by rollout_sdk; register with `rollout-sdk register --url ...` instead",
            UserWarning,
            stacklevel=2,
        )
    if more:
        warnings.warn(
            f"create_app: ignoring unknown arguments {sorted(more)}", UserWarning, stacklevel=2
        )
    validate_agent_loop(agent_loop).raise_if_invalid()
    settings = settings or get_settings()
    server_changes: dict[str, Any] = {}
    if max_concurrent:
        server_changes["max_concurrent_rollouts"] = max_concurrent
    if record_ttl_seconds:
        server_changes["record_ttl_seconds"] = int(record_ttl_seconds)
    if server_changes:
        try:
            server = type(settings.server).model_validate(
                {**settings.server.model_dump(), **server_changes}
            )
        except ValueError as exc:
            raise ConfigurationError(f"create_app: {exc}") from exc
        settings = settings.model_copy(update={"server": server})

    # ``is None``, not ``or``: an empty MemoryStore has len 0 and would be silently replaced.
    store = store if store is not None else MemoryStore()
    client = client if client is not None else TrainGateClient(settings.client)
    vault = vault if vault is not None else LocalVault()
    worker = RolloutWorker(agent_loop, store, client, settings, vault=vault, debug_dir=debug_dir)
    dispatcher = (
        dispatcher
        if dispatcher is not None
        else InProcessDispatcher(
            worker.run,
            max_concurrent=settings.server.max_concurrent_rollouts,
            max_queued=settings.kit.max_queued_rollouts,
            retry_after=settings.kit.retry_after_seconds,
        )
    )
    recovery = Recovery(worker)
    runtime = Runtime(
        service=RolloutService(
            agent_loop, store, dispatcher, settings, worker=worker, seal_at_init=seal_at_init
        ),
        worker=worker,
        dispatcher=dispatcher,
        store=store,
        client=client,
        settings=settings,
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if sweep_on_start:
            await recovery.sweep_after_restart()
        await _call(on_startup)
        loop_task = (
            asyncio.create_task(
                recovery.run_forever(settings.kit.redrive_interval_seconds), name="re-drive"
            )
            if redrive
            else None
        )
        try:
            yield
        finally:
            if loop_task is not None:
                loop_task.cancel()
                await asyncio.gather(loop_task, return_exceptions=True)
            await dispatcher.aclose()
            await client.aclose()
            await store.close()
            await _call(on_shutdown)

    app = FastAPI(
        title=f"Rollout server ({agent_loop.name})",
        lifespan=lifespan,
        docs_url="/docs" if docs else None,
        redoc_url=None,
        openapi_url="/openapi.json" if docs else None,
    )
    app.state.runtime = runtime
    install_error_handlers(app)
    keys = [k for k in (api_key, *api_keys) if k]

    @app.post("/v1/rollout/init", status_code=202, response_model=InitResponse)
    async def init_rollout(request: RolloutRequest) -> InitResponse:
        return await runtime.service.init(request)

    def health_body() -> dict[str, Any]:
        return {
            "status": "healthy",
            "agent_loop": agent_loop.name,
            "active_rollouts": runtime.dispatcher.active,
            "completed_rollouts": runtime.dispatcher.completed,
        }

    @app.get("/v1/rollout/{rollout_id}")
    async def rollout_status(rollout_id: str) -> dict[str, Any]:
        """The rollout's record: state, timestamps, metrics, whether the callback was delivered."""
        return record_status(await runtime.service.status(rollout_id))

    @app.post("/v1/rollout/{rollout_id}/cancel", status_code=202)
    async def cancel_rollout(rollout_id: str) -> dict[str, Any]:
        """Stop the rollout before its next turn and report it once as ERROR "cancelled"."""
        return record_status(await runtime.service.cancel(rollout_id))

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return health_body()

    @app.get("/platform/health")
    async def platform_health() -> dict[str, Any]:
        return health_body()

    # Added first, so it runs inside the key check: an unauthenticated request is a 401 whatever
    # its size or content type.
    app.add_middleware(AdmissionMiddleware, max_body_bytes=settings.kit.max_body_bytes)
    app.add_middleware(ServerKeyMiddleware, keys=keys, key_provider=key_provider)
    return app
