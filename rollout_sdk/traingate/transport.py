"""The HTTP stack under the TrainGate client: an ``httpx`` transport over an ``aiohttp`` pool.

Chosen by measurement (``python -m bench.clients``, README "Speed"): per rollout (two chat calls
and one callback), httpx's own pool (httpcore) cost the client process about 14 ms of CPU,
httpx2 about 7, httpx with the httpx-aiohttp transport about 4.4, aiohttp alone about 2; this
transport, called without ``httpx.AsyncClient`` above it, comes within a few tenths of a
millisecond of aiohttp alone. httpcore's pool looks at every pooled connection on each request
(encode/httpcore#1035); aiohttp keeps idle connections per host in a queue and takes the newest.

The seam stays httpx's: :class:`~rollout_sdk.traingate.client.TrainGateClient` builds an
``httpx.Request`` and hands it to any ``httpx.AsyncBaseTransport``; tests give it
``httpx.MockTransport``, and ``httpx.AsyncHTTPTransport`` still works. This module is written
here rather than taken from the httpx-aiohttp package because the client's error rules need what
that package does not give: every aiohttp failure mapped to the httpx exception that says what
happened (it maps a dropped connection to ``ConnectTimeout``), and whether the failed request
went out on a connection taken from the pool (:class:`StaleConnectionError`). It reads each body
whole (TrainGate's answers are small JSON), so there is no stream to manage, but never more of it
than ``max_answer_bytes`` after decoding: past that the call fails (:class:`AnswerTooLargeError`)
without reading on. Bodies are decoded by aiohttp as they stream in, so the limit holds for a
compressed answer too.

Given an :class:`~rollout_sdk.traingate.outbound.OutboundPolicy`, it connects only where the policy
allows: a literal host is checked before the request is sent, and a name's resolved addresses in
the resolver the connector is given (:class:`PolicyResolver`), every time the name is resolved,
so a name that re-resolves to a refused address is not contacted
(:class:`AddressRefusedError`). Without one (``detect_public_ip``, which must reach the metadata
address) it connects anywhere.

Stale connections: a pooled connection may have been closed by the server (uvicorn closes one
idle for 5 s; a thawed Lambda environment may hold connections the far end forgot long ago).
Idle connections are dropped after :data:`KEEPALIVE_EXPIRY_SECONDS`, below those idle timeouts,
and a request that fails on a reused connection before any answer raises
:class:`StaleConnectionError`, which :func:`send` sends once more at once: the one send both the
TrainGate client and ``rollout-sdk test``'s forwarder use.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from typing import TYPE_CHECKING, Any

import aiohttp
import httpx
from aiohttp.abc import AbstractResolver, ResolveResult

if TYPE_CHECKING:
    from types import SimpleNamespace

    from rollout_sdk.traingate.outbound import OutboundPolicy

#: Seconds an idle pooled connection is kept: below the idle timeouts of common servers
#: (uvicorn 5 s, gunicorn 2 s is the exception, nginx 75 s, AWS ALB 60 s), so the pool rarely
#: offers a connection its server has already closed.
KEEPALIVE_EXPIRY_SECONDS = 4.0


class StaleConnectionError(httpx.RemoteProtocolError):
    """The request went out on a pooled connection that failed before any answer came back:
    most likely the server had closed it while it sat idle. The request may or may not have
    reached the server (a POST's delivery cannot be known once bytes were sent)."""


class AddressRefusedError(httpx.ConnectError):
    """The outbound policy refused the address the request would connect to: nothing was sent.
    Retrying cannot help."""


class AnswerTooLargeError(httpx.DecodingError):
    """The answer's body passed the transport's ``max_answer_bytes``; the rest was not read.
    The request was sent and its status may have been a success."""


class _Refused(OSError):
    """Raised inside the resolver, so aiohttp reports it as the lookup's failure."""


class PolicyResolver(AbstractResolver):
    """Resolves through ``inner`` (aiohttp's default: the system's ``getaddrinfo`` in a thread)
    and refuses the name when any address it resolved to is one ``policy`` refuses: all of them
    rather than the allowed ones only, so a name pointing inside the network says so at once."""

    def __init__(self, policy: OutboundPolicy, inner: AbstractResolver | None = None) -> None:
        self.policy = policy
        self.inner = inner if inner is not None else aiohttp.DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self.inner.resolve(host, port, family)
        for result in results:
            address = ipaddress.ip_address(result["host"].partition("%")[0])
            refusal = self.policy.address_refusal(address, host=host, port=port)
            if refusal is not None:
                raise _Refused(f"{host!r} resolves to {address}, which {refusal}")
        return results

    async def close(self) -> None:
        await self.inner.close()


class _RequestTrace:
    """Per request: whether aiohttp took the connection from its pool."""

    __slots__ = ("reused",)

    def __init__(self) -> None:
        self.reused = False


async def _on_reuse(_session: Any, context: SimpleNamespace, _params: Any) -> None:
    context.trace_request_ctx.reused = True


def _timeout(extension: dict[str, float | None]) -> aiohttp.ClientTimeout:
    # httpx's four timeouts onto aiohttp's: waiting for a pooled connection and connecting
    # (``connect`` covers both), each socket read; no overall limit beyond those, as httpx.
    return aiohttp.ClientTimeout(
        total=None,
        connect=extension.get("pool"),
        sock_connect=extension.get("connect"),
        sock_read=extension.get("read"),
    )


class AiohttpTransport(httpx.AsyncBaseTransport):
    """An ``httpx`` transport that sends each request through one shared ``aiohttp`` session.

    The session (and its connector) is built on first use, inside the running event loop, and
    rebuilt after :meth:`aclose` (a restored snapshot, a closed client).
    """

    def __init__(
        self,
        *,
        max_connections: int = 100,
        keepalive_expiry: float = KEEPALIVE_EXPIRY_SECONDS,
        ssl_context: ssl.SSLContext | None = None,
        policy: OutboundPolicy | None = None,
        max_answer_bytes: int | None = None,
        resolver: AbstractResolver | None = None,
    ) -> None:
        self.max_connections = max_connections
        self.keepalive_expiry = keepalive_expiry
        self.policy = policy
        #: The policy's cap unless given; None reads any size (only without a policy).
        self.max_answer_bytes = (
            max_answer_bytes
            if max_answer_bytes is not None
            else (policy.max_answer_bytes if policy is not None else None)
        )
        #: The resolver under the policy's check (a seam: tests give one that answers as they
        #: say); aiohttp's default when None.
        self.resolver = resolver
        self._ssl = ssl_context
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[tuple[float | None, ...], aiohttp.ClientTimeout] = {}

    @property
    def is_open(self) -> bool:
        """A session (and its pool) exists: built by the first request, gone after aclose()."""
        return self._session is not None and not self._session.closed

    def _open(self) -> aiohttp.ClientSession:
        trace = aiohttp.TraceConfig()
        trace.on_connection_reuseconn.append(_on_reuse)
        resolver = self.resolver
        if self.policy is not None:
            resolver = PolicyResolver(self.policy, resolver)
        connector = aiohttp.TCPConnector(
            limit=self.max_connections,
            keepalive_timeout=self.keepalive_expiry,
            # aiohttp's default context (the system's trust store, verified), built when aiohttp
            # is imported: a second one would cost about 50 ms of CPU on the first call.
            ssl=self._ssl if self._ssl is not None else True,
            resolver=resolver,
        )
        return aiohttp.ClientSession(
            connector=connector,
            # aiohttp decodes the body as it streams in, so the answer cap counts decoded
            # bytes (httpx would decode a whole gzip bomb at once); TrainGate sets no cookies.
            auto_decompress=True,
            cookie_jar=aiohttp.DummyCookieJar(),
            trace_configs=[trace],
        )

    def _timeout_for(self, request: httpx.Request) -> aiohttp.ClientTimeout:
        extension = request.extensions.get("timeout") or {}
        key = tuple(extension.get(name) for name in ("connect", "read", "write", "pool"))
        timeout = self._timeouts.get(key)
        if timeout is None:
            timeout = self._timeouts[key] = _timeout(extension)
        return timeout

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.policy is not None:
            # A literal address never reaches the resolver: checked here (the policy keeps its
            # answer per host and port, so this is a lookup).
            url = request.url
            refusal = self.policy.host_refusal(url.host, url.port or _DEFAULT_PORTS[url.scheme])
            if refusal is not None:
                raise AddressRefusedError(f"{url.host!r} {refusal}", request=request)
        if self._session is None or self._session.closed:
            self._session = self._open()
        trace = _RequestTrace()
        try:
            async with self._session.request(
                request.method,
                str(request.url),
                headers=request.headers.multi_items(),
                data=request.content or None,
                allow_redirects=False,
                timeout=self._timeout_for(request),
                trace_request_ctx=trace,
            ) as answer:
                body = await self._read(answer, request)
                headers = answer.raw_headers
                if "Content-Encoding" in answer.headers:
                    # Decoded already (aiohttp decodes what it knows, and passes the rest as
                    # it came): httpx must not decode it again.
                    headers = tuple((k, v) for k, v in headers if k.lower() != b"content-encoding")
                return httpx.Response(
                    answer.status,
                    headers=headers,
                    content=body,
                    request=request,
                    extensions={"http_version": b"HTTP/1.1"},
                )
        except aiohttp.ClientError as exc:
            raise _translate(exc, request, reused=trace.reused) from exc
        except TimeoutError as exc:
            raise httpx.ReadTimeout(f"no answer in time: {exc}", request=request) from exc

    async def _read(self, answer: aiohttp.ClientResponse, request: httpx.Request) -> bytes:
        """The whole body, decoded; AnswerTooLargeError once it passes the cap."""
        limit = self.max_answer_bytes
        if limit is None:
            return await answer.read()
        declared = answer.content_length
        if declared is not None and declared > limit and not answer.headers.get("Content-Encoding"):
            raise AnswerTooLargeError(_too_large(declared, limit), request=request)
        chunks: list[bytes] = []
        received = 0
        async for chunk in answer.content.iter_any():
            received += len(chunk)
            if received > limit:
                raise AnswerTooLargeError(_too_large(None, limit), request=request)
            chunks.append(chunk)
        return b"".join(chunks)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


_DEFAULT_PORTS = {"http": 80, "https": 443}


async def send(transport: httpx.AsyncBaseTransport, request: httpx.Request) -> httpx.Response:
    """``request`` through ``transport``, its answer read whole; sent once more at once when it
    failed on a pooled connection before any answer (:class:`StaleConnectionError`).

    The server most likely closed the idle connection as the request went out, so the second
    copy goes out on a new one. It is not a retry (a caller's retries do not count it): the one
    duplicate it can make, the first copy having arrived after all, is the one HTTP allows for a
    POST whose answer was lost (docs/architecture.md, "The one duplicate HTTP allows"). Every
    other failure, and a second stale connection, is raised as the transport raised it.
    """
    try:
        return await _send_once(transport, request)
    except StaleConnectionError:
        return await _send_once(transport, request)


async def _send_once(transport: httpx.AsyncBaseTransport, request: httpx.Request) -> httpx.Response:
    answer = await transport.handle_async_request(request)
    try:
        await answer.aread()
    finally:
        await answer.aclose()
    return answer


def _too_large(declared: int | None, limit: int) -> str:
    size = f"is {declared} bytes" if declared is not None else "is larger than that"
    return (
        f"the answer's body {size}; the limit is {limit} bytes "
        "(raise it with ROLLOUT_SDK_MAX_ANSWER_BYTES)"
    )


def _translate(exc: aiohttp.ClientError, request: httpx.Request, *, reused: bool) -> Exception:
    """The httpx exception that says what happened (the client's rules are written on httpx's
    tree); the most specific aiohttp classes first."""
    message = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, aiohttp.ClientConnectorError) and isinstance(exc.os_error, _Refused):
        return AddressRefusedError(str(exc.os_error), request=request)
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(message, request=request)
    if isinstance(exc, aiohttp.ServerTimeoutError):
        return httpx.ReadTimeout(message, request=request)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return httpx.ConnectError(message, request=request)
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError):
        if reused:
            return StaleConnectionError(f"pooled connection failed: {message}", request=request)
        return httpx.ReadError(message, request=request)
    if isinstance(exc, aiohttp.ClientPayloadError):
        return httpx.ReadError(message, request=request)
    if isinstance(exc, aiohttp.InvalidURL):
        return httpx.UnsupportedProtocol(message, request=request)
    return httpx.RemoteProtocolError(message, request=request)
