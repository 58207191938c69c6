"""v1's ``serve_agent_loop`` and its defaults, importable wherever the agent is (Lambda included).

An agent module written for v1 often imports ``serve_agent_loop`` for its ``__main__`` block. The
Lambda artifact leaves the local server out, so the name must resolve without it: only calling it
needs the local server (:mod:`rollout_sdk.local.server`), imported then. So this module sits
above ``local/``, beside the facade that exports it, and nothing below imports it.
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Iterable
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
    local_debug: bool = False,
    store: StoreKind = "sqlite",
    state_dir: str | Path = ".rollout-state",
    settings: RolloutSettings | None = None,
    debug_dir: str | Path | None = None,
    log_level: str = "info",
    allow_unauthenticated: bool = False,
    allowed_hosts: Iterable[str] = (),
    **ignored: Any,
) -> None:
    """Validate ``agent_loop`` and serve it with uvicorn until interrupted (v1 API).

    As in v1, with no ``api_key`` a server key is generated and shown (on standard error), and
    ``local_debug=True`` serves with no key at all (``api_key`` with it is a ServeError). Unlike
    v1, a server with no key is refused on an address other machines can reach (v1's default
    ``0.0.0.0`` included) unless ``allow_unauthenticated=True`` says the network is trusted;
    and a loopback server answers only to its own names and ``allowed_hosts``
    (:mod:`rollout_sdk.local.exposure`).

    Raises AgentLoopValidationError for an invalid loop, ServeError when the server cannot (or
    may not) start, or is not installed here (the Lambda artifact does not ship it).
    """
    if local_debug and api_key:
        raise ServeError(
            "serve_agent_loop: api_key and local_debug=True exclude each other (local_debug "
            "serves with no server key); drop one"
        )
    if not local_debug and not api_key:
        api_key = generated_server_key()
        print(
            f"rollout-sdk: generated server key (send 'Authorization: Bearer <key>'): {api_key}",
            file=sys.stderr,
        )
    try:
        # Here: the Lambda artifact leaves local/ out; only calling this needs it.
        from rollout_sdk.local.exposure import OPT_OUT_ARGUMENT, Exposure
        from rollout_sdk.local.server import StoreChoice, run_server
    except ImportError as exc:
        raise ServeError(
            "the local server is not part of this deployment (the Lambda artifact leaves "
            "rollout_sdk/local out); run serve_agent_loop where the kit is installed"
        ) from exc
    from rollout_sdk.agent.validation import validate_agent_loop

    exposure = Exposure(
        host,
        port,
        keyed=bool(api_key),
        allow_unauthenticated=allow_unauthenticated,
        allowed_hosts=tuple(allowed_hosts),
    )
    exposure.check(flag=OPT_OUT_ARGUMENT, key_hint="api_key=...")
    validate_agent_loop(agent_loop).raise_if_invalid()
    run_server(
        agent_loop,
        exposure,
        api_keys=[api_key] if api_key else [],
        store=StoreChoice(store),
        state_dir=state_dir,
        settings=settings,
        debug_dir=debug_dir,
        log_level=log_level,
    )


def generated_server_key() -> str:
    """A fresh server key in v1's form (``osm_rollout_`` and 32 random bytes, URL-safe)."""
    return "osm_rollout_" + secrets.token_urlsafe(32)
