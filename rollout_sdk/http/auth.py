"""Server-key check as a small ASGI middleware, run before the body is read.

FastAPI reads and validates a declared body before it solves dependencies, so a dependency would
let an unauthenticated caller learn the schema and cost validation work; a middleware does not,
and leaves the OpenAPI schema intact.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable, Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from rollout_sdk.errors import (
    EndpointDisabled,
    RolloutError,
    ServerKeyMissing,
    ServerKeyUnavailable,
    Unauthorized,
)
from rollout_sdk.http.problems import send_problem

#: Paths that need the server key when one is configured (the local server's /metrics says how
#: many rollouts ran and failed, and its /docs and /openapi.json map every route and setting:
#: not for anyone who can reach the port). Only /health stays open, for a load balancer (and
#: v1's clients; osmosis-ai 0.3.8's send the key there too, which changes nothing). ``/rollout``:
#: the osmosis-ai 0.3.8 routes (``/rollout``, ``/rollout/{id}/result``, ``/rollout/cancel``).
PROTECTED_PREFIXES = (
    "/v1/rollout",
    "/rollout",
    "/platform/",
    "/metrics",
    "/docs",
    "/openapi.json",
)


def request_paths(scope: Scope) -> tuple[str, str]:
    """The path as the router matches it, and the raw path.

    ASGI puts ``root_path`` (``uvicorn --root-path``, a stage prefix) in front of ``path`` and the
    router strips it before matching, so a check must look at the path as routed as well as the
    raw one.
    """
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    routed = path[len(root) :] if root and path.startswith(root + "/") else path
    return routed, path


def _protected_path(scope: Scope) -> str | None:
    """The protected path a request addresses, or None."""
    for candidate in request_paths(scope):
        if candidate.startswith(PROTECTED_PREFIXES):
            return candidate
    return None


def parse_authorization(raw: bytes | None) -> bytes | None:
    """The presented key: ``Bearer <key>`` or, for compatibility with the reference, the raw key.

    Returns None for an absent, empty or malformed header (non-printable or non-ASCII bytes).
    """
    if not raw:
        return None
    if any(b < 0x20 or b > 0x7E for b in raw):
        return None
    value = raw.strip()
    scheme, _, rest = value.partition(b" ")
    if rest and scheme.lower() == b"bearer":
        value = rest.strip()
    elif rest:
        return None  # another scheme ("Basic ...") or a key with spaces
    return value or None


#: The keys valid right now, read asynchronously: a provider whose source can block (a network
#: read on a cache miss) does it off the event loop, so one slow read never stalls other requests.
KeyProvider = Callable[[], Awaitable[Iterable[str]]]

logger = logging.getLogger("rollout_sdk.http.auth")


class ServerKeyMiddleware:
    """Answers 401 (or 404 for /platform/health with no key configured) before the app runs.

    ``keys`` is a fixed list; ``key_provider`` is awaited on every protected request (on Lambda it
    reads the secret through a cache, so a rotated key takes effect without a redeploy).
    """

    def __init__(
        self, app: ASGIApp, *, keys: Iterable[str] = (), key_provider: KeyProvider | None = None
    ) -> None:
        self.app = app
        fixed = [k.encode() for k in keys if k]
        self._provider = key_provider
        self._fixed = fixed

    async def current_keys(self) -> list[bytes]:
        """The keys valid right now."""
        if self._provider is None:
            return self._fixed
        return self._fixed + [k.encode() for k in await self._provider() if k]

    @staticmethod
    def accepts(presented: bytes | None, keys: list[bytes]) -> bool:
        """Whether ``presented`` equals one of ``keys``, compared in constant time."""
        if presented is None:
            return False
        # Compare against every key (rotation) without stopping early.
        matched = False
        for key in keys:
            matched |= hmac.compare_digest(presented, key)
        return matched

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = _protected_path(scope) if scope["type"] == "http" else None
        if path is None:
            await self.app(scope, receive, send)
            return
        refusal = await self.refusal(scope, path)
        if refusal is not None:
            await send_problem(scope, receive, send, refusal)
            return
        await self.app(scope, receive, send)

    async def refusal(self, scope: Scope, path: str) -> RolloutError | None:
        """Why a request for the protected ``path`` is refused, or None when it may pass."""
        try:
            keys = await self.current_keys()
        except Exception:
            # The key source (Secrets Manager) failed: refuse, never fail open, and say it may pass.
            logger.exception("server keys could not be read")
            return ServerKeyUnavailable()
        if not keys and self._provider is not None:
            return ServerKeyMissing()  # a key source is configured but holds no key: fail closed
        if not keys:
            if path.startswith("/platform/"):
                return EndpointDisabled("no server key is configured, so /platform/health is off")
            return None
        raw = next((v for k, v in scope["headers"] if k == b"authorization"), None)
        if not self.accepts(parse_authorization(raw), keys):
            return Unauthorized()
        return None
