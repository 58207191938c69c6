"""v1's ``serve_agent_loop`` and its defaults, importable wherever the agent is (Lambda included).

An agent module written for v1 often imports ``serve_agent_loop`` for its ``__main__`` block. The
Lambda artifact leaves the local server out, so the name must resolve without it: only calling it
needs the local server (:mod:`rollout_sdk.local.server`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rollout_sdk.errors import ServeError

if TYPE_CHECKING:
    from pathlib import Path

    from rollout_sdk.agent.loop import RolloutAgentLoop
    from rollout_sdk.local.server import StoreKind
    from rollout_sdk.settings import RolloutSettings

DEFAULT_HOST = "0.0.0.0"  # the v1 SDK's default for serve_agent_loop
DEFAULT_PORT = 9000


def serve_agent_loop(
    agent_loop: RolloutAgentLoop,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    api_key: str | None = None,
    store: StoreKind = "sqlite",
    state_dir: str | Path = ".rollout-state",
    settings: RolloutSettings | None = None,
    debug_dir: str | Path | None = None,
    log_level: str = "info",
    **ignored: Any,
) -> None:
    """Validate ``agent_loop`` and serve it with uvicorn until interrupted (v1 API).

    Raises AgentLoopValidationError for an invalid loop, ServeError when the server cannot start
    (or is not installed here: the Lambda artifact does not ship it).
    """
    try:
        from rollout_sdk.local import server
    except ImportError as exc:
        raise ServeError(
            "the local server is not part of this deployment (the Lambda artifact leaves "
            "rollout_sdk/local out); run serve_agent_loop where the kit is installed"
        ) from exc
    server.serve(
        agent_loop,
        host=host,
        port=port,
        api_key=api_key,
        store=store,
        state_dir=state_dir,
        settings=settings,
        debug_dir=debug_dir,
        log_level=log_level,
        **ignored,
    )
