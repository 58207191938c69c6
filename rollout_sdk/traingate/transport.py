"""The HTTP stack under the TrainGate client: an ``aiohttp`` pool behind a POST of its own and
behind an ``httpx`` transport's seam.

Chosen by measurement (``python -m bench.clients``, docs/performance.md): per rollout (two chat calls
and one callback), httpx's own pool (httpcore) cost the client process about 14 ms of CPU,
httpx2 about 7, httpx with the httpx-aiohttp transport about 4.4, aiohttp alone about 2; this
transport, called without ``httpx.AsyncClient`` above it, comes within a few tenths of a
millisecond of aiohttp alone. httpcore's pool looks at every pooled connection on each request
(encode/httpcore#1035); aiohttp keeps idle connections per host in a queue and takes the newest.

Two ways in, one exchange under both. :meth:`AiohttpTransport.post` is the TrainGate client's: the
URL as a string or a parsed ``yarl.URL`` (aiohttp's own type), plain header pairs, the bytes and
an ``aiohttp.ClientTimeout`` (its ``timeouts``); it answers an :class:`Answer` (status, headers,
body) and builds no httpx object, which a profile of the local server had put at about a tenth of
its CPU (the client module says more). :meth:`AiohttpTransport.handle_async_request` keeps httpx's
seam for every other caller (``rollout-sdk test``'s forwarder, :mod:`rollout_sdk.network`, tests):
the client gives any other ``httpx.AsyncBaseTransport`` (``httpx.MockTransport`` in tests,
``httpx.AsyncHTTPTransport``) an ``httpx.Request`` and reads its ``httpx.Response`` as an
:class:`Answer`. Both ways run the same exchange (``AiohttpTransport._exchange``): the policy's
check of a literal host, the answer cap, the stale-connection mark and the error translation are
written there once. Failures are httpx's exception classes on both, those of :meth:`post` built
without a request (``request=None``: nothing in the kit reads ``exc.request``).

This module is written here rather than taken from the httpx-aiohttp package because the client's
error rules need what that package does not give: every aiohttp failure mapped to the httpx
exception that says what happened (it maps a dropped connection to ``ConnectTimeout``), and
whether the failed request went out on a connection taken from the pool
(:class:`StaleConnectionError`). It reads each body whole (TrainGate's answers are small JSON), so
there is no stream to manage, but never more of it than ``max_answer_bytes`` after decoding: past
that the call fails (:class:`AnswerTooLargeError`) without reading on. Bodies are decoded by
aiohttp as they stream in, so the limit holds for a compressed answer too.

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
:class:`StaleConnectionError`, which :func:`once_more_if_stale` sends once more at once: the one
rule under :func:`send` (the httpx seam: the forwarder, and the client on any other transport)
and under the client's calls of :meth:`AiohttpTransport.post`.
"""

from __future__ import annotations

import contextvars
import ipaddress
import socket
import ssl
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import aiohttp
import httpx
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

if TYPE_CHECKING:
    from aiohttp.connector import Connection
    from aiohttp.tracing import Trace

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


class Answer:
    """An answer read whole, as the TrainGate client reads one whichever way it was sent: the
    status, the headers (``.get`` ignores case: aiohttp's ``CIMultiDictProxy`` from
    :meth:`AiohttpTransport.post`, ``httpx.Headers`` from an httpx transport) and the body,
    decoded."""

    __slots__ = ("content", "headers", "status_code")

    def __init__(self, status_code: int, headers: Mapping[str, str], content: bytes) -> None:
        self.status_code = status_code
        self.headers = headers
        self.content = content

    @classmethod
    def of(cls, response: httpx.Response) -> Answer:
        """An httpx transport's answer, its body read already (:func:`send` reads it)."""
        return cls(response.status_code, response.headers, response.content)

    def __repr__(self) -> str:
        return f"<Answer {self.status_code}, {len(self.content)} bytes>"


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


#: Per request (the task's context): whether the connector took its connection from the pool.
_REUSED: contextvars.ContextVar[bool] = contextvars.ContextVar("rollout_sdk_reused", default=False)


class _PoolConnector(aiohttp.TCPConnector):
    """aiohttp's connector, saying in :data:`_REUSED` whether each connection it hands out came
    from its pool: a connection whose protocol it has handed out before is a pooled one.

    Deliberately not aiohttp's trace signal for this (``on_connection_reuseconn``): with any
    trace config, aiohttp builds a trace object per request and sends every one of its signals
    (request start, headers sent, chunk sent, request end, each with its parameters object),
    4.9% of the local server's CPU in ``python -m bench.profile --store memory``; this is one
    weak-set lookup per connection handed out.
    """

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._handed_out: weakref.WeakSet[object] = weakref.WeakSet()

    async def connect(
        self,
        req: aiohttp.ClientRequest,
        traces: list[Trace],
        timeout: aiohttp.ClientTimeout,  # noqa: ASYNC109 - aiohttp's signature, overridden
    ) -> Connection:
        connection = await super().connect(req, traces, timeout)
        protocol = connection.protocol
        reused = protocol in self._handed_out
        if not reused:
            self._handed_out.add(protocol)
        _REUSED.set(reused)
        return connection


def client_timeout(extension: Mapping[str, float | None]) -> aiohttp.ClientTimeout:
    """httpx's four timeouts (its ``timeout`` extension) as aiohttp's: what
    :meth:`AiohttpTransport.post` takes, built once by its caller."""
    # Waiting for a pooled connection and connecting (``connect`` covers both), each socket
    # read; no overall limit beyond those, as httpx ("write" has no aiohttp counterpart).
    return aiohttp.ClientTimeout(
        total=None,
        connect=extension.get("pool"),
        sock_connect=extension.get("connect"),
        sock_read=extension.get("read"),
    )


class AiohttpTransport(httpx.AsyncBaseTransport):
    """One shared ``aiohttp`` session, called by :meth:`post` (no httpx objects) or as an
    ``httpx`` transport (:meth:`handle_async_request`).

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
        resolver = self.resolver
        if self.policy is not None:
            resolver = PolicyResolver(self.policy, resolver)
        connector = _PoolConnector(
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
        )

    def _timeout_for(self, request: httpx.Request) -> aiohttp.ClientTimeout:
        extension = request.extensions.get("timeout") or {}
        key = tuple(extension.get(name) for name in ("connect", "read", "write", "pool"))
        timeout = self._timeouts.get(key)
        if timeout is None:
            timeout = self._timeouts[key] = client_timeout(extension)
        return timeout

    async def post(
        self,
        url: URL | str,
        headers: Iterable[tuple[str, str]],
        content: bytes,
        timeouts: aiohttp.ClientTimeout,
    ) -> Answer:
        """POST ``content`` to ``url`` and read the answer whole, building no httpx object.

        Sent once: the caller re-sends a :class:`StaleConnectionError` (:func:`once_more_if_stale`).
        Fails as :meth:`handle_async_request` does, with httpx's exception classes (no request).
        """
        answer, body = await self._exchange("POST", url, headers, content, timeouts, None)
        return Answer(answer.status, answer.headers, body)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        answer, body = await self._exchange(
            request.method,
            str(request.url),
            request.headers.multi_items(),
            request.content or None,
            self._timeout_for(request),
            request,
        )
        headers = answer.raw_headers
        if "Content-Encoding" in answer.headers:
            # Decoded already (aiohttp decodes what it knows, and passes the rest as it came):
            # httpx must not decode it again.
            headers = tuple((k, v) for k, v in headers if k.lower() != b"content-encoding")
        return httpx.Response(
            answer.status,
            headers=headers,
            content=body,
            request=request,
            extensions={"http_version": b"HTTP/1.1"},
        )

    async def _exchange(
        self,
        method: str,
        url: URL | str,
        headers: Iterable[tuple[str, str]],
        content: bytes | None,
        timeouts: aiohttp.ClientTimeout,
        request: httpx.Request | None,
    ) -> tuple[aiohttp.ClientResponse, bytes]:
        """The one exchange under both ways in: the policy's check of a literal host, the
        request, the body read under the cap, aiohttp's failures translated (``request``, the
        httpx request when there is one, goes on their exceptions). The answer comes back
        released, its status and headers still on it."""
        target = url if isinstance(url, URL) else parse_url(url, request)
        if self.policy is not None:
            # A literal address never reaches the resolver: checked here (the policy keeps its
            # answer per host and port, so this is a lookup). The host and port aiohttp will
            # connect to (yarl gives the scheme's port when the URL names none).
            refusal = self.policy.host_refusal(target.host or "", target.port or 0)
            if refusal is not None:
                raise AddressRefusedError(f"{target.host!r} {refusal}", request=request)
        session = self._session
        if session is None or session.closed:
            session = self._session = self._open()
        _REUSED.set(False)
        try:
            async with session.request(
                method,
                target,
                headers=headers,
                data=content,
                allow_redirects=False,
                timeout=timeouts,
            ) as answer:
                body = await self._read(answer, request)
        except aiohttp.ClientError as exc:
            raise _translate(exc, request, reused=_REUSED.get()) from exc
        except TimeoutError as exc:
            raise httpx.ReadTimeout(f"no answer in time: {exc}", request=request) from exc
        return answer, body

    async def _read(self, answer: aiohttp.ClientResponse, request: httpx.Request | None) -> bytes:
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


T = TypeVar("T")


def parse_url(url: str, request: httpx.Request | None = None) -> URL:
    """``url`` as aiohttp takes it (what it would parse it to); one it cannot take fails as
    aiohttp's refusal of it would (:func:`_translate`: ``httpx.UnsupportedProtocol``)."""
    try:
        return URL(url)
    except ValueError as exc:
        raise _translate(aiohttp.InvalidUrlClientError(url), request, reused=False) from exc


async def once_more_if_stale(attempt: Callable[[], Awaitable[T]]) -> T:
    """``attempt()``, made once more at once when it failed on a pooled connection before any
    answer (:class:`StaleConnectionError`): the one re-send rule, under :func:`send` and under
    the TrainGate client's :meth:`AiohttpTransport.post`.

    The server most likely closed the idle connection as the request went out, so the second
    copy goes out on a new one. It is not a retry (a caller's retries do not count it): the one
    duplicate it can make, the first copy having arrived after all, is the one HTTP allows for a
    POST whose answer was lost (docs/architecture.md, "The one duplicate HTTP allows"). Every
    other failure, and a second stale connection, is raised as the transport raised it.
    """
    try:
        return await attempt()
    except StaleConnectionError:
        return await attempt()


async def send(transport: httpx.AsyncBaseTransport, request: httpx.Request) -> httpx.Response:
    """``request`` through ``transport``, its answer read whole; sent once more at once when it
    failed on a pooled connection before any answer (:func:`once_more_if_stale`)."""
    return await once_more_if_stale(lambda: _send_once(transport, request))


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


def _translate(
    exc: aiohttp.ClientError, request: httpx.Request | None, *, reused: bool
) -> Exception:
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
