"""What init admits before any work is done: body size, content type, and where ``server_url`` goes.

- :class:`AdmissionMiddleware` (pure ASGI, like :mod:`rollout_sdk.http.auth`) answers 413 for a body
  over ``ROLLOUT_SDK_MAX_BODY_BYTES`` and 415 for an init that is not JSON, before the app parses
  anything. It sits inside the server-key middleware, so an unauthenticated caller gets 401
  whatever it sends.
- :func:`check_server_url` refuses a ``server_url`` outside the host allowlist or at a link-local
  address (where cloud metadata services live); the service calls it before any other work, and
  the app maps its :class:`~rollout_sdk.errors.ServerUrlRefused` to 422.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from rollout_sdk.errors import PayloadTooLarge, ServerUrlRefused
from rollout_sdk.http.auth import request_paths, send_json
from rollout_sdk.settings import KIT_PREFIX

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from rollout_sdk.settings import KitSettings

#: POSTs under this prefix carry bodies the limit applies to.
ROLLOUT_PREFIX = "/v1/rollout/"
#: The one route whose body must be JSON.
INIT_PATH = "/v1/rollout/init"

MAX_BODY_VARIABLE = KIT_PREFIX + "MAX_BODY_BYTES"
ALLOWED_HOSTS_VARIABLE = KIT_PREFIX + "ALLOWED_SERVER_HOSTS"
ALLOW_LINK_LOCAL_VARIABLE = KIT_PREFIX + "ALLOW_LINK_LOCAL"

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


class AdmissionMiddleware:
    """413 for a ``POST /v1/rollout/*`` body over ``max_body_bytes``; 415 for a non-JSON init.

    A Content-Length over the limit is refused before the body is read. A body without one
    (chunked) is counted as it streams; once it passes the limit the app's answer, if any, is
    dropped and 413 goes out instead, so nothing that read a truncated body gets to reply.
    Add it before :class:`~rollout_sdk.http.auth.ServerKeyMiddleware` so it runs inside the key check.
    """

    def __init__(self, app: ASGIApp, *, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    def _too_large(self, declared: int | None = None) -> str:
        size = f"is {declared} bytes" if declared is not None else "is larger than that"
        return (
            f"the request body {size}; the limit is {self.max_body_bytes} bytes "
            f"(raise it with {MAX_BODY_VARIABLE})"
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        paths = request_paths(scope)
        if not any(p.startswith(ROLLOUT_PREFIX) for p in paths):
            await self.app(scope, receive, send)
            return
        if INIT_PATH in paths:
            content_type = _header(scope, b"content-type")
            if not is_json_content_type(content_type):
                got = (
                    f"got {content_type.decode('latin-1')[:_SHOWN_CONTENT_TYPE]!r}"
                    if content_type is not None
                    else "no Content-Type was sent"
                )
                await send_json(
                    send,
                    415,
                    f"init takes a JSON body: send 'Content-Type: application/json' ({got})",
                )
                return
        declared = _declared_length(scope)
        if declared is not None and declared > self.max_body_bytes:
            await send_json(send, 413, self._too_large(declared))
            return
        await self._counted(scope, receive, send)

    async def _counted(self, scope: Scope, receive: Receive, send: Send) -> None:
        received = 0
        exceeded = False
        started = False

        async def counting_receive() -> Message:
            nonlocal received, exceeded
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    exceeded = True
                    raise PayloadTooLarge(self._too_large())
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if exceeded and not started:
                return  # the app answered a body it never got whole: the 413 below replaces it
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, guarded_send)
        except Exception:
            if not exceeded or started:
                raise
        if exceeded and not started:
            await send_json(send, 413, self._too_large())


# --------------------------------------------------------------------------- server_url

#: AWS's instance metadata service on IPv6 (Nitro); not link-local, but the same service.
_METADATA_ADDRESSES = frozenset({ipaddress.ip_address("fd00:ec2::254")})
#: The well-known NAT64 prefix: an address in it reaches the IPv4 address in its last 32 bits.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def _normal_host(host: str) -> str:
    """A host as compared: lower case, percent-decoded, no brackets or trailing dot, and an IP
    address in its canonical form."""
    host = unquote(host).strip().lower().removeprefix("[").removesuffix("]").rstrip(".")
    address = _literal_address(host)
    return str(address) if address is not None else host


def _literal_address(host: str) -> IPAddress | None:
    """The IP address ``host`` spells, in any form a resolver takes literally, or None.

    Besides dotted quads this covers the forms ``inet_aton`` accepts (``2852039166``,
    ``0xa9fea9fe``, ``0251.0376.0251.0376``, ``169.254.43518``), which name the same address to
    the resolver the HTTP client uses.
    """
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if host and all(c in "0123456789abcdefx." for c in host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def _is_link_local(address: IPAddress) -> bool:
    if isinstance(address, ipaddress.IPv6Address):
        if address in _METADATA_ADDRESSES:
            return True
        embedded = address.ipv4_mapped
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            return embedded.is_link_local
    return address.is_link_local


def check_server_url(server_url: str, kit: KitSettings) -> None:
    """Refuse a ``server_url`` this deployment may not call.

    With a non-empty allowlist (``ROLLOUT_SDK_ALLOWED_SERVER_HOSTS``) the host must be on it
    (IP addresses compare in canonical form). Unless ``ROLLOUT_SDK_ALLOW_LINK_LOCAL`` is set,
    a link-local address (169.254.0.0/16, fe80::/10, and those written as IPv4-mapped or NAT64
    IPv6, or in the numeric forms a resolver accepts) and AWS's IPv6 metadata address
    (fd00:ec2::254) are refused.

    Hostnames are not resolved: a DNS name that points at a link-local address passes the
    link-local check, and only the allowlist stops it. (Resolving here would not help: the
    name may resolve differently when the worker connects.)

    Raises ServerUrlRefused naming the setting that would allow the URL.
    """
    raw_host = urlsplit(server_url).hostname or ""
    host = _normal_host(raw_host)
    allowed = {_normal_host(h) for h in kit.allowed_hosts()}
    if allowed and host not in allowed:
        raise ServerUrlRefused(
            f"server_url host {raw_host[:256]!r} is not in the allowed hosts "
            f"({ALLOWED_HOSTS_VARIABLE})"
        )
    address = _literal_address(host)
    if address is not None and not kit.allow_link_local and _is_link_local(address):
        raise ServerUrlRefused(
            f"server_url host {raw_host[:256]!r} is a link-local or cloud-metadata address "
            f"({address}); refused unless {ALLOW_LINK_LOCAL_VARIABLE}=true"
        )
