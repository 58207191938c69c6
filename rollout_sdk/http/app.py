"""The FastAPI app: init, status, cancel, health, platform health.

Errors become HTTP answers through one table, :mod:`rollout_sdk.http.problems`.

One builder, :func:`build_app`, and two named compositions over it: :func:`local_app`, a process
that runs its own rollouts (the local server, and v1's ``create_app``), and
:func:`lambda_api_app`, the Lambda API function, which hands them to another function. Each
composition passes what differs as collaborators and steps, never as switches.

``create_app(agent_loop)`` keeps the v1 SDK's signature: with no other argument it runs rollouts in
its own process on an in-memory store, so ``uvicorn server:app`` keeps working for ported agents.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Response

from rollout_sdk.agent.loop import RolloutAgentLoop
from rollout_sdk.agent.validation import validate_agent_loop
from rollout_sdk.dispatch.base import Dispatcher
from rollout_sdk.dispatch.inprocess import InProcessDispatcher
from rollout_sdk.engine.assembly import DispatcherFor, Engine
from rollout_sdk.engine.no_v1 import NoV1AgentLoop
from rollout_sdk.engine.service import RolloutService, record_status
from rollout_sdk.engine.worker import RolloutWorker
from rollout_sdk.errors import ConfigurationError
from rollout_sdk.http.admission import AdmissionMiddleware
from rollout_sdk.http.auth import KeyProvider, ServerKeyMiddleware
from rollout_sdk.http.body_limits import InitBodyLimits
from rollout_sdk.http.init_route import LeanInitRoute
from rollout_sdk.http.problems import install_problem_handlers
from rollout_sdk.protocol import PROTOCOL_NAMES, InitResponse, RolloutRequest, build_models
from rollout_sdk.settings import RolloutSettings, get_settings
from rollout_sdk.store.base import Store
from rollout_sdk.store.memory import MemoryStore
from rollout_sdk.telemetry import NO_TELEMETRY, Telemetry
from rollout_sdk.traingate.client import TrainGateClient
from rollout_sdk.traingate.outbound import OutboundPolicy, Reach
from rollout_sdk.vault import KeyVault, LocalVault

if TYPE_CHECKING:
    from rollout_sdk.engine.osmosis03 import Osmosis03Service
    from rollout_sdk.engine.workflows import Workflows
    from rollout_sdk.http.prometheus import PrometheusTelemetry

logger = logging.getLogger("rollout_sdk.http.app")

Hook = Callable[[], Awaitable[object] | None]
#: Work that runs while the app serves (the local re-drive loop), cancelled at shutdown.
Background = Callable[[], Coroutine[Any, Any, object]]


@dataclass(frozen=True)
class AppServices:
    """What the app runs on: the init service, the engine, and the dispatcher init hands off
    through; ``app.state.services`` holds it for the wiring and tests."""

    service: RolloutService
    engine: Engine
    dispatcher: Dispatcher
    #: The osmosis-ai 0.3.8 routes' service, where a workflow is served.
    osmosis03: Osmosis03Service | None = None
    #: The osmosis-ai 0.3.8 workflow and grader served, by name (``/health`` says them), where
    #: one is: the engine's own, or on the Lambda API function, which never loads them (only
    #: the worker runs them), the names the template gave.
    workflow_names: tuple[str, str | None] | None = None
    #: What ``/health``'s lifecycle counts as active where the dispatcher runs nothing itself
    #: (the Lambda API function: the 0.3.8 rollouts in flight, the live index's count); None:
    #: the dispatcher's own count.
    active: Callable[[], Awaitable[int]] | None = None

    @property
    def process_id(self) -> str:
        """This process (a new id each start): ``/health``'s ``process_id``."""
        return self.engine.process_id

    @property
    def settings(self) -> RolloutSettings:
        """The engine's settings (init uses the same ones)."""
        return self.engine.settings

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


async def _call(hook: Hook) -> None:
    result = hook()
    if inspect.isawaitable(result):
        await result


def build_app(
    agent_loop: RolloutAgentLoop,
    services: AppServices,
    *,
    keys: Iterable[str | None] = (),
    key_provider: KeyProvider | None = None,
    docs: bool = True,
    on_startup: Iterable[Hook] = (),
    while_serving: Iterable[tuple[str, Background]] = (),
    on_shutdown: Iterable[Hook] = (),
    metrics: PrometheusTelemetry | None = None,
) -> FastAPI:
    """The one builder: the routes over ``services``, behind the server key (``keys``, and
    those ``key_provider`` returns at request time) and admission. At start-up it awaits each
    of ``on_startup`` in order, then runs each of ``while_serving`` (a task name, the work) until
    shutdown; at shutdown it closes the dispatcher, the client and the store, then awaits each
    of ``on_shutdown``. ``docs`` serves ``/docs`` and ``/openapi.json``; ``metrics`` is served
    at ``GET /metrics`` in Prometheus' text format.
    Raises AgentLoopValidationError for an invalid agent loop.
    """
    validate_agent_loop(agent_loop).raise_if_invalid()
    # Before FastAPI sees it: it cannot wrap a model whose build was deferred. Init's body
    # model is never deferred; the others are built where a composition says so, or when used.
    InitResponse.model_rebuild()
    starting, serving, stopping = tuple(on_startup), tuple(while_serving), tuple(on_shutdown)
    lifecycle = Lifecycle()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        for hook in starting:
            await _call(hook)
        tasks = [asyncio.create_task(work(), name=name) for name, work in serving]
        try:
            yield
        finally:
            lifecycle.accepting = False
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await services.dispatcher.aclose()
            await services.client.aclose()
            await services.store.close()
            for hook in stopping:
                await _call(hook)

    app = FastAPI(
        title=f"Rollout server ({agent_loop.name})",
        lifespan=lifespan,
        docs_url="/docs" if docs else None,
        redoc_url=None,
        openapi_url="/openapi.json" if docs else None,
    )
    app.state.services = services
    install_problem_handlers(app)
    _add_routes(app, agent_loop, services, lifecycle)
    if services.osmosis03 is not None:
        from rollout_sdk.http.osmosis03_routes import add_osmosis03_routes

        add_osmosis03_routes(app, services.osmosis03)
    if metrics is not None:
        _add_metrics_route(app, metrics)
    # Innermost: it sees only what the key check and admission let through.
    app.add_middleware(LeanInitRoute, service=services.service)
    # Inside the key check: an unauthenticated request is a 401 whatever its size or content
    # type.
    app.add_middleware(
        AdmissionMiddleware,
        max_body_bytes=services.settings.kit.max_body_bytes,
        init_limits=InitBodyLimits.from_settings(services.settings),
    )
    app.add_middleware(ServerKeyMiddleware, keys=[k for k in keys if k], key_provider=key_provider)
    return app


@dataclass
class Lifecycle:
    """Whether the app still takes rollouts (False from the start of its shutdown)."""

    accepting: bool = True


def _add_routes(
    app: FastAPI, agent_loop: RolloutAgentLoop, services: AppServices, lifecycle: Lifecycle
) -> None:
    service = services.service

    @app.post("/v1/rollout/init", status_code=202, response_model=InitResponse)
    async def init_rollout(request: RolloutRequest) -> InitResponse:
        return await service.init(request)

    names = services.workflow_names
    # Which wires this server answers: v1's unless it serves a 0.3.8 workflow alone.
    protocols = [
        *([] if isinstance(agent_loop, NoV1AgentLoop) else [PROTOCOL_NAMES["v1"]]),
        *([] if names is None else [PROTOCOL_NAMES["osmosis03"]]),
    ]

    async def health_body() -> dict[str, Any]:
        # One answer for both protocols' clients: v1's fields, and osmosis-ai 0.3.8's identity
        # and lifecycle (RolloutClient.wait_idle reads process_id and lifecycle).
        count = services.active
        active = services.dispatcher.active if count is None else await count()
        body: dict[str, Any] = {
            "status": "healthy",
            "agent_loop": agent_loop.name,
            "active_rollouts": active,
            "completed_rollouts": services.dispatcher.completed,
            "instance_id": services.store.owner or services.process_id,
            "process_id": services.process_id,
            "lifecycle": {"accepting_rollouts": lifecycle.accepting, "active_rollouts": active},
        }
        body["protocols"] = protocols
        if names is not None:
            body["workflow"], body["grader"] = names
        return body

    @app.get("/v1/rollout/{rollout_id}")
    async def rollout_status(rollout_id: str) -> dict[str, Any]:
        """The rollout's record: state, timestamps, metrics, whether the callback was delivered."""
        return record_status(await service.status(rollout_id))

    @app.post("/v1/rollout/{rollout_id}/cancel", status_code=202)
    async def cancel_rollout(rollout_id: str) -> dict[str, Any]:
        """Stop the rollout before its next turn and report it once as ERROR "cancelled"."""
        return record_status(await service.cancel(rollout_id))

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return await health_body()

    @app.get("/platform/health")
    async def platform_health() -> dict[str, Any]:
        return await health_body()


def _add_metrics_route(app: FastAPI, metrics: PrometheusTelemetry) -> None:
    # Here: only the local server keeps metrics in memory; the API function's cold start skips it.
    from rollout_sdk.http.prometheus import CONTENT_TYPE

    # Not in the OpenAPI schema: a scrape target, not part of the rollout protocol.
    @app.get("/metrics", include_in_schema=False)
    async def prometheus_metrics() -> Response:
        return Response(metrics.exposition(), media_type=CONTENT_TYPE)


# ---------------------------------------------------------------------- the two compositions


def in_process(settings: RolloutSettings) -> DispatcherFor:
    """The local hand-off: the engine's own worker, on this event loop, bounded by
    ``settings`` (the concurrency, and ``ROLLOUT_SDK_MAX_QUEUED_ROLLOUTS`` waiting)."""

    def build(worker: RolloutWorker) -> Dispatcher:
        return InProcessDispatcher(
            worker.run,
            max_concurrent=settings.server.max_concurrent_rollouts,
            max_queued=settings.kit.max_queued_rollouts,
            retry_after=settings.kit.retry_after_seconds,
        )

    return build


def local_engine(
    agent_loop: RolloutAgentLoop,
    settings: RolloutSettings,
    *,
    store: Store | None = None,
    client: TrainGateClient | None = None,
    vault: KeyVault | None = None,
    dispatcher: Dispatcher | None = None,
    debug_dir: str | Path | None = None,
    telemetry: Telemetry = NO_TELEMETRY,
    workflows: Workflows | None = None,
) -> Engine:
    """The engine of a process that runs its own rollouts: on ``store`` (default: in memory),
    calling TrainGate through ``client`` (default: one that may reach loopback and the LAN,
    counting into ``telemetry``), sealing callback keys with ``vault`` (default: AES-GCM under a
    key held in memory), handing off to ``dispatcher`` (default: :func:`in_process`)."""
    # ``is None``, not ``or``: an empty MemoryStore has len 0 and would be silently replaced.
    if client is None:
        # TrainGate often runs beside a local server, on loopback or the LAN.
        policy = OutboundPolicy.from_settings(settings.kit, where=Reach.PRIVATE)
        client = TrainGateClient(settings.client, policy=policy, telemetry=telemetry)
    return Engine.build(
        store=store if store is not None else MemoryStore(),
        client=client,
        settings=settings,
        vault=vault if vault is not None else LocalVault(),
        agent_loop=agent_loop,
        debug_dir=debug_dir,
        telemetry=telemetry,
        dispatcher=in_process(settings) if dispatcher is None else lambda _worker: dispatcher,
        workflows=workflows,
    )


def local_app(
    agent_loop: RolloutAgentLoop,
    engine: Engine,
    *,
    keys: Iterable[str | None] = (),
    key_provider: KeyProvider | None = None,
    docs: bool = True,
    on_startup: Iterable[Hook] = (),
    on_shutdown: Iterable[Hook] = (),
    metrics: PrometheusTelemetry | None = None,
) -> FastAPI:
    """A process that runs its own rollouts, on ``engine`` and the dispatcher it built: every
    wire model built now and the TrainGate client's HTTP stack loaded at start-up (a long-lived
    server pays for them then, not on a first request or rollout), callback keys sealed into the
    record from init on (its restart sweep and cancel need them), and the re-drive on a timer
    while it serves. ConfigurationError for an engine without its dispatcher."""
    if engine.dispatcher is None:
        raise ConfigurationError(
            "the app runs its engine's worker: build the engine with a dispatcher "
            "(rollout_sdk.http.app.local_engine does)"
        )
    build_models()
    service = RolloutService(
        agent_loop,
        engine.store,
        engine.dispatcher,
        engine.settings,
        engine=engine,
        seal_at_init=True,
    )
    osmosis03 = None
    serving: list[tuple[str, Background]] = [
        (
            "re-drive",
            lambda: engine.recovery.run_forever(engine.settings.kit.redrive_interval_seconds),
        )
    ]
    if engine.workflows is not None:
        from rollout_sdk.engine.osmosis03 import Osmosis03Service

        osmosis03 = Osmosis03Service.for_engine(service, engine)
        serving.append(("0.3.8 polling leases", osmosis03.leases.watch_leases))
    workflows = engine.workflows
    services = AppServices(
        service=service,
        engine=engine,
        dispatcher=engine.dispatcher,
        osmosis03=osmosis03,
        workflow_names=None if workflows is None else (workflows.name, workflows.grader_name),
    )
    return build_app(
        agent_loop,
        services,
        keys=keys,
        key_provider=key_provider,
        docs=docs,
        on_startup=(engine.client.prepare, *on_startup),
        while_serving=serving,
        on_shutdown=on_shutdown,
        metrics=metrics,
    )


def lambda_api_app(
    agent_loop: RolloutAgentLoop,
    engine: Engine,
    dispatcher: Dispatcher,
    *,
    key_provider: KeyProvider,
    docs: bool,
    workflow_names: tuple[str, str | None] | None,
    recheck_seconds: float,
) -> FastAPI:
    """The Lambda API function: init hands each rollout to ``dispatcher`` (another function),
    and nothing runs after a response (no timers: the re-drive and the failure destination are
    functions of their own; a 0.3.8 polling lease that runs out is found by the next poll and
    the re-drive's pass). Where the deployment serves a workflow (``workflow_names``: it runs
    in the worker function, so this one never imports it), the 0.3.8 routes too, their polls
    reading the record every ``recheck_seconds`` (nothing in this function hears the worker)
    and ``/health`` counting the live index. The callback key is sealed only when a response is parked, and
    the cold start builds only the models its routes declare (the worker's final responses and
    chat completions are built when first used)."""
    service = RolloutService(agent_loop, engine.store, dispatcher, engine.settings, engine=engine)
    osmosis03 = None
    if workflow_names is not None:
        # Here: only a deployment that serves a workflow loads the 0.3.8 modules.
        from rollout_sdk.engine.osmosis03 import Osmosis03Service

        osmosis03 = Osmosis03Service.for_engine(service, engine, recheck_seconds=recheck_seconds)
    services = AppServices(
        service=service,
        engine=engine,
        dispatcher=dispatcher,
        osmosis03=osmosis03,
        workflow_names=workflow_names,
        active=None if osmosis03 is None else osmosis03.active,
    )
    return build_app(agent_loop, services, key_provider=key_provider, docs=docs)


# ---------------------------------------------------------------------- v1's create_app


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
    docs: bool = True,
    **more: Any,
) -> FastAPI:
    """Build the rollout server's app: :func:`local_app` over :func:`local_engine`.

    ``api_key`` (and any ``api_keys``, for rotation) are server keys; ``key_provider`` (awaited)
    adds keys read at request time. ``store``, ``client``, ``vault`` and ``dispatcher`` default
    as :func:`local_engine` says (the dispatcher bounded by ``max_concurrent``); ``engine``
    instead of those: one built with its dispatcher. ``docs`` serves ``/docs``.
    Raises AgentLoopValidationError for an invalid agent loop, ConfigurationError for bad settings.
    """
    _warn_ignored(credentials, server_host, server_port, more)
    settings = _with_v1_options(
        settings or (engine.settings if engine is not None else get_settings()),
        max_concurrent=max_concurrent,
        record_ttl_seconds=record_ttl_seconds,
    )
    if engine is None:
        engine = local_engine(
            agent_loop,
            settings,
            store=store,
            client=client,
            vault=vault,
            dispatcher=dispatcher,
            debug_dir=debug_dir,
        )
    else:
        _check_given(
            engine, settings, record_ttl_seconds, store, client, vault, dispatcher, debug_dir
        )
    return local_app(
        agent_loop,
        engine,
        keys=(api_key, *api_keys),
        key_provider=key_provider,
        docs=docs,
        on_startup=() if on_startup is None else (on_startup,),
        on_shutdown=() if on_shutdown is None else (on_shutdown,),
    )


def _check_given(
    engine: Engine, settings: RolloutSettings, record_ttl_seconds: float | None, *parts: object
) -> None:
    """An engine comes with its own store, client, vault, dispatcher and settings."""
    if any(part is not None for part in parts):
        raise ConfigurationError(
            "create_app: pass either engine or store/client/vault/dispatcher/debug_dir, not both"
        )
    if record_ttl_seconds or engine.settings is not settings:
        # The engine keeps the settings it was built with; init must use the same ones.
        raise ConfigurationError(
            "create_app: with engine, pass the engine's own settings and no record_ttl_seconds"
        )


def _warn_ignored(credentials: Any, host: str | None, port: int | None, more: Any) -> None:
    if credentials is not None or host is not None or port is not None:
        warnings.warn(
            "create_app: credentials, server_host and server_port (self-registration) are "
            "ignored by rollout_sdk; register with `rollout-sdk register --url ...` instead",
            UserWarning,
            stacklevel=3,
        )
    if more:
        warnings.warn(
            f"create_app: ignoring unknown arguments {sorted(more)}", UserWarning, stacklevel=3
        )


def _with_v1_options(
    settings: RolloutSettings, *, max_concurrent: int | None, record_ttl_seconds: float | None
) -> RolloutSettings:
    """``settings`` with v1's ``max_concurrent`` and ``record_ttl_seconds`` applied."""
    changes: dict[str, Any] = {}
    if max_concurrent:
        changes["max_concurrent_rollouts"] = max_concurrent
    if record_ttl_seconds:
        changes["record_ttl_seconds"] = int(record_ttl_seconds)
    if not changes:
        return settings
    try:
        server = type(settings.server).model_validate({**settings.server.model_dump(), **changes})
    except ValueError as exc:
        raise ConfigurationError(f"create_app: {exc}") from exc
    return settings.model_copy(update={"server": server})
