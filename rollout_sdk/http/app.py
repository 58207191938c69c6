"""The FastAPI app: init, status, cancel, health, platform health.

Errors become HTTP answers through one table, :mod:`rollout_sdk.http.problems`.

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

from fastapi import FastAPI, Response

from rollout_sdk.agent.loop import RolloutAgentLoop
from rollout_sdk.agent.validation import validate_agent_loop
from rollout_sdk.dispatch.base import Dispatcher
from rollout_sdk.dispatch.inprocess import InProcessDispatcher
from rollout_sdk.engine.assembly import Engine
from rollout_sdk.engine.service import RolloutService, record_status
from rollout_sdk.engine.worker import RolloutWorker
from rollout_sdk.errors import ConfigurationError
from rollout_sdk.http.admission import AdmissionMiddleware
from rollout_sdk.http.auth import KeyProvider, ServerKeyMiddleware
from rollout_sdk.http.body_limits import InitBodyLimits
from rollout_sdk.http.problems import install_problem_handlers
from rollout_sdk.protocol import InitResponse, RolloutRequest, build_models
from rollout_sdk.settings import RolloutSettings, get_settings
from rollout_sdk.store.base import Store
from rollout_sdk.store.memory import MemoryStore
from rollout_sdk.telemetry import NO_TELEMETRY, Telemetry
from rollout_sdk.traingate.client import TrainGateClient
from rollout_sdk.traingate.outbound import OutboundPolicy, Reach
from rollout_sdk.vault import KeyVault, LocalVault

logger = logging.getLogger("rollout_sdk.http.app")

Hook = Callable[[], Awaitable[None] | None]


@dataclass
class Runtime:
    """What the app runs on; ``app.state.runtime`` holds it for the wiring and tests."""

    service: RolloutService
    engine: Engine
    dispatcher: Dispatcher
    settings: RolloutSettings

    @property
    def store(self) -> Store:
        """The engine's store."""
        return self.engine.store

    @property
    def client(self) -> TrainGateClient:
        """The engine's TrainGate client."""
        return self.engine.client

    @property
    def worker(self) -> RolloutWorker:
        """The engine's worker."""
        return self.engine.require_worker()


async def _call(hook: Hook | None) -> None:
    if hook is None:
        return
    result = hook()
    if inspect.isawaitable(result):
        await result


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
    engine: Engine | None = None,
    seal_at_init: bool = True,
    sweep_on_start: bool = False,
    redrive: bool = True,
    docs: bool = True,
    metrics: bool = False,
    build_all_models: bool = True,
    **more: Any,
) -> FastAPI:
    """Build the rollout server's app.

    ``api_key`` (and any ``api_keys``, for rotation) are server keys; ``key_provider`` (awaited)
    adds keys read at request time (the Lambda reads them from Secrets Manager, off the loop).
    ``store`` defaults to an in-memory store and ``dispatcher`` to an in-process one bounded by
    ``max_concurrent`` (and ``ROLLOUT_SDK_MAX_QUEUED_ROLLOUTS``). ``vault`` seals callback keys
    (default: AES-GCM under a key held in memory), kept in the record from init on when
    ``seal_at_init``. ``engine`` instead of those three: the runtime's one engine (the Lambda
    composition root builds it).
    ``sweep_on_start`` reports, at start-up, every rollout the store still shows in flight (only
    for a durable store this process owns alone); ``redrive`` re-sends undelivered responses on a
    timer while the app runs. ``metrics`` keeps the engine's counters and histograms in memory
    and serves them at ``GET /metrics`` in Prometheus' text format (the local server's; the
    Lambda API function has none: its metrics are CloudWatch's). The wire models defer their
    validators (the agent author's import stays light): ``build_all_models`` builds every one
    now, so a long-lived server pays for them at start-up, not on a first request; without it
    (the Lambda API function's cold start) only those the routes declare are built, and the
    others (final responses, chat completions: the worker's) when first used.
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
    # Before FastAPI sees one: it cannot wrap a model whose build was deferred.
    if build_all_models:
        build_models()
    else:
        InitResponse.model_rebuild()  # the init route's answer (its body model is never deferred)
    settings = settings or (engine.settings if engine is not None else get_settings())
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

    if engine is None:
        telemetry: Telemetry = NO_TELEMETRY
        if metrics:
            # Here: only the local server keeps metrics in memory; the API function's cold start skips it.
            from rollout_sdk.http.prometheus import PrometheusTelemetry

            telemetry = PrometheusTelemetry()
            if client is not None and client.telemetry is NO_TELEMETRY:
                client.telemetry = telemetry  # its chat calls and callbacks count too
        # ``is None``, not ``or``: an empty MemoryStore has len 0 and would be silently replaced.
        engine = Engine.build(
            store=store if store is not None else MemoryStore(),
            client=client
            if client is not None
            else TrainGateClient(
                settings.client,
                # The local server: TrainGate often runs beside it, on loopback or the LAN.
                policy=OutboundPolicy.from_settings(settings.kit, where=Reach.PRIVATE),
                telemetry=telemetry,
            ),
            settings=settings,
            vault=vault if vault is not None else LocalVault(),
            agent_loop=agent_loop,
            debug_dir=debug_dir,
            telemetry=telemetry,
        )
    elif store is not None or client is not None or vault is not None or debug_dir is not None:
        raise ConfigurationError(
            "create_app: pass either engine or store/client/vault/debug_dir, not both"
        )
    elif record_ttl_seconds or engine.settings is not settings:
        # The engine keeps the settings it was built with; init must use the same ones.
        raise ConfigurationError(
            "create_app: with engine, pass the engine's own settings and no record_ttl_seconds"
        )
    worker = engine.require_worker()
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
    recovery = engine.recovery
    if recovery.hand_off is None:
        # The re-drive hands off again what a duplicate's failed hand-off left waiting.
        recovery.hand_off = dispatcher.dispatch
    runtime = Runtime(
        service=RolloutService(
            agent_loop, engine.store, dispatcher, settings, engine=engine, seal_at_init=seal_at_init
        ),
        engine=engine,
        dispatcher=dispatcher,
        settings=settings,
    )
    store, client = engine.store, engine.client

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
    install_problem_handlers(app)
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

    if metrics:
        # Here, as above: the local server only.
        from rollout_sdk.http.prometheus import CONTENT_TYPE, PrometheusTelemetry

        exposed = engine.telemetry
        if not isinstance(exposed, PrometheusTelemetry):
            raise ConfigurationError(
                "create_app: metrics=True serves the engine's in-memory metrics; build the "
                "engine with a PrometheusTelemetry, or let create_app build it"
            )

        # Not in the OpenAPI schema: a scrape target, not part of the rollout protocol.
        @app.get("/metrics", include_in_schema=False)
        async def prometheus_metrics() -> Response:
            return Response(exposed.exposition(), media_type=CONTENT_TYPE)

    # Added first, so it runs inside the key check: an unauthenticated request is a 401 whatever
    # its size or content type.
    app.add_middleware(
        AdmissionMiddleware,
        max_body_bytes=settings.kit.max_body_bytes,
        init_limits=InitBodyLimits.from_settings(settings),
    )
    app.add_middleware(ServerKeyMiddleware, keys=keys, key_provider=key_provider)
    return app
