"""What a rollout POST must be before the app reads it: a body within the size limit, and JSON.

:class:`AdmissionMiddleware` (pure ASGI, like :mod:`rollout_sdk.http.auth`) answers 413 for a body
over ``ROLLOUT_SDK_MAX_BODY_BYTES`` and 415 for an init that is not JSON, before the app parses
anything, and 413 for an init body that holds more than its counts allow
(:mod:`rollout_sdk.http.body_limits`: values, depth, messages, tools, metadata), before the app
builds it. It sits inside the server-key middleware, so an unauthenticated caller gets 401
whatever it sends. What the body says (``server_url``, the fields' values) is the engine's to
check: :mod:`rollout_sdk.engine.rules`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rollout_sdk.errors import PayloadTooLarge, RequestRejected, UnsupportedMediaType
from rollout_sdk.http.auth import request_paths
from rollout_sdk.http.body_limits import InitBodyLimits
from rollout_sdk.http.problems import send_problem
from rollout_sdk.settings import KIT_PREFIX

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: POSTs under these prefixes carry bodies the limit applies to (v1's routes, and osmosis-ai
#: 0.3.8's ``/rollout`` and ``/rollout/cancel``, whose bodies a record keeps too).
ROLLOUT_PREFIX = "/v1/rollout/"
OSMOSIS03_PREFIX = "/rollout"
LIMITED_PREFIXES = (ROLLOUT_PREFIX, OSMOSIS03_PREFIX)
#: The one route whose body must be JSON.
INIT_PATH = "/v1/rollout/init"

MAX_BODY_VARIABLE = KIT_PREFIX + "MAX_BODY_BYTES"

_SHOWN_CONTENT_TYPE = 100  # characters of a refused Content-Type echoed back


def is_json_content_type(raw: bytes | None) -> bool:
    """Whether a Content-Type header says JSON: ``application/json`` or ``application/*+json``.

    A ``charset`` parameter, if any, must be UTF-8 (RFC 8259: JSON between systems is UTF-8);
    other parameters are ignored.
    """
    if raw is None:
        return False
    media, *params = raw.decode("latin-1").split(";")
    kind, _, subtype = media.strip().lower().partition("/")
    if kind != "application":
        return False
    if subtype != "json" and not (subtype.endswith("+json") and len(subtype) > len("+json")):
        return False
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip().strip('"').lower() not in (
            "utf-8",
            "utf8",
        ):
            return False
    return True


def _header(scope: Scope, name: bytes) -> bytes | None:
    return next((v for k, v in scope["headers"] if k == name), None)


def _declared_length(scope: Scope) -> int | None:
    """The Content-Length, or None when absent or not a number (the body is counted instead)."""
    raw = _header(scope, b"content-length")
    digits = raw.strip() if raw is not None else b""
    if not digits.isdigit():
        return None
    # Past 18 digits it is over any limit; int() would refuse a few thousand digits anyway.
    return int(digits) if len(digits) <= 18 else 10**18


def replaying(messages: list[Message], receive: Receive) -> Receive:
    """A ``receive`` that gives the body's ``messages`` as they came, then whatever the client
    sends next (its disconnect): for an app after a middleware that read the body."""
    replay = iter(messages)

    async def replaying_receive() -> Message:
        message = next(replay, None)
        return message if message is not None else await receive()

    return replaying_receive


class AdmissionMiddleware:
    """413 for a ``POST /v1/rollout/*`` body over ``max_body_bytes``; 415 for a non-JSON init.

    A Content-Length over the limit is refused before the body is read. Otherwise the body is
    read here, up to the limit, before the app runs: past the limit the answer is 413 and the app
    never runs (so nothing answers a body it did not get whole); within it the app reads the
    same messages, replayed. Holding the body here costs no memory the app would not spend: the
    init route reads the whole body into memory to parse it anyway (cancel reads none, and its
    body is held to the same limit). An init body is then held to ``init_limits``, when given.
    Add it before :class:`~rollout_sdk.http.auth.ServerKeyMiddleware` so it runs inside the key check.
    """

    def __init__(
        self, app: ASGIApp, *, max_body_bytes: int, init_limits: InitBodyLimits | None = None
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.init_limits = init_limits

    def _too_large(self, declared: int | None = None) -> PayloadTooLarge:
        size = f"is {declared} bytes" if declared is not None else "is larger than that"
        return PayloadTooLarge(
            f"the request body {size}; the limit is {self.max_body_bytes} bytes "
            f"(raise it with {MAX_BODY_VARIABLE})"
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        paths = request_paths(scope)
        if not any(p.startswith(LIMITED_PREFIXES) for p in paths):
            await self.app(scope, receive, send)
            return
        init = INIT_PATH in paths
        refusal = self._refusal_by_headers(scope, init=init)
        if refusal is not None:
            await send_problem(scope, receive, send, refusal)
            return
        messages = await self._read_within_limit(receive)
        if messages is None:
            await send_problem(scope, receive, send, self._too_large())
            return
        if init and self.init_limits is not None:
            try:
                self.init_limits.check(b"".join(m.get("body", b"") for m in messages))
            except PayloadTooLarge as exc:
                await send_problem(scope, receive, send, exc)
                return
        await self.app(scope, replaying(messages, receive), send)

    def _refusal_by_headers(self, scope: Scope, *, init: bool) -> RequestRejected | None:
        """415 for an init that is not JSON, then 413 for a declared length over the limit."""
        if init:
            content_type = _header(scope, b"content-type")
            if not is_json_content_type(content_type):
                got = (
                    f"got {content_type.decode('latin-1')[:_SHOWN_CONTENT_TYPE]!r}"
                    if content_type is not None
                    else "no Content-Type was sent"
                )
                return UnsupportedMediaType(
                    f"init takes a JSON body: send 'Content-Type: application/json' ({got})"
                )
        declared = _declared_length(scope)
        if declared is not None and declared > self.max_body_bytes:
            return self._too_large(declared)
        return None

    async def _read_within_limit(self, receive: Receive) -> list[Message] | None:
        """The body's messages up to its last (or a disconnect); None once it passes the limit."""
        messages: list[Message] = []
        received = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                return messages  # http.disconnect: the app learns of it as it would have
            received += len(message.get("body", b""))
            if received > self.max_body_bytes:
                return None
            if not message.get("more_body", False):
                return messages
