"""The Host check: a local server answers only requests addressed to a name it serves under.

A web page the developer opens can make the browser send requests to 127.0.0.1 under a name
the page controls (DNS rebinding: ``rebind.attacker.example`` first resolves to the attacker,
then to 127.0.0.1). The browser then treats the loopback server as that name's own origin, so
without this check the page could start rollouts, read ``/metrics`` and, through the server's
TrainGate client, reach the developer's network. The Host header still names the attacker's
name, so refusing every Host but the server's own names stops it.

Starlette's ``TrustedHostMiddleware`` does the same comparison, but answers in plain text; this
one answers through the kit's one error table (:mod:`rollout_sdk.http.problems`): a 421 whose
problem body names the hosts served and the flag that adds one.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from rollout_sdk.errors import MisdirectedRequest
from rollout_sdk.hosts import AllowedHost
from rollout_sdk.http.problems import send_problem

#: Host header values whose verdict is kept (see HostCheckMiddleware.admits).
_SEEN_MAX = 256

#: The names every loopback server answers to, whatever address it is bound to.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def _quoted(raw: bytes) -> str:
    text = raw[:100].decode("latin-1")
    return repr("".join(c if c.isprintable() else "?" for c in text))


class HostCheckMiddleware:
    """Refuses (421) an HTTP request whose Host header names none of ``allowed``.

    ``allowed`` holds ``host`` or ``host:port`` entries (``[v6]`` and ``[v6]:port`` too): a
    ``host`` entry admits the name on any port, a ``host:port`` entry on that port only. The
    comparison is on the normal form (case, trailing dot, the spellings of one IP address).
    """

    def __init__(self, app: ASGIApp, *, allowed: Iterable[str]) -> None:
        self.app = app
        self.allowed = tuple(AllowedHost.parse(entry) for entry in allowed)
        if not self.allowed:
            raise ValueError("HostCheckMiddleware needs at least one allowed host")
        self._seen: dict[bytes, bool] = {}
        self._shown = ", ".join(
            f"{h.host}:{h.port}" if h.port is not None else h.host for h in self.allowed
        )

    def admits(self, raw: bytes | None) -> bool:
        """Whether a Host header's value names an allowed host (and port)."""
        if not raw:
            return False
        # Every request asks: a client sends the same one or two values, so each is parsed once
        # (the table is bounded, so a client sending many values cannot grow it).
        known = self._seen.get(raw)
        if known is None:
            known = self._judge(raw)
            if len(self._seen) >= _SEEN_MAX:
                self._seen.clear()
            self._seen[raw] = known
        return known

    def _judge(self, raw: bytes) -> bool:
        try:
            named = AllowedHost.parse(raw.decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            return False
        for entry in self.allowed:
            if entry.host != named.host:
                continue
            if entry.port is None or entry.port == named.port:
                return True
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan; the app serves no websockets
            await self.app(scope, receive, send)
            return
        raw = next((v for k, v in scope["headers"] if k == b"host"), None)
        if self.admits(raw):
            await self.app(scope, receive, send)
            return
        named = _quoted(raw) if raw else "no Host header"
        await send_problem(
            scope,
            receive,
            send,
            MisdirectedRequest(
                f"this server answers only to {self._shown}, not to {named}: a request under "
                "another name (a web page using DNS rebinding, say) is refused; to serve under "
                "that name too, start the server with --allowed-host NAME"
            ),
        )
