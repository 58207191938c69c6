"""The TrainGate client: one per process, shared by every rollout (protocol.md section 5).

One transport holds one connection pool and one TLS context for the whole process; the reference
built a client per rollout and paid about 22 ms of CPU per TLS context. ``httpx.AsyncClient`` is
not used: its per-request work (merging URLs, headers and cookies, auth and redirect flows) cost
more CPU than the whole exchange on the wire, and TrainGate needs none of it.

Two paths under :meth:`TrainGateClient._send`, one above it. On the kit's own transport
(:class:`~rollout_sdk.traingate.transport.AiohttpTransport`, the default, chosen by measurement:
see that module) each POST goes through its
:meth:`~rollout_sdk.traingate.transport.AiohttpTransport.post`: the endpoint's URL parsed once
(a ``yarl.URL``, kept per endpoint), header pairs, the bytes and one ``aiohttp.ClientTimeout``
built once, and no httpx object at all. That path exists because a profile of the local server
put httpx's model objects at about 10% of all its CPU, per chat call and per callback:
``httpx.Request.__init__`` 5.0%, ``httpx.Response.__init__`` 3.6%, ``httpx.Headers`` 1.7%. Any
other ``httpx.AsyncBaseTransport`` (``httpx.MockTransport`` in tests, ``httpx.AsyncHTTPTransport``
for httpx's own pool) is given an ``httpx.Request`` as before, and its ``httpx.Response`` is read
as the same :class:`~rollout_sdk.traingate.transport.Answer`; so retries, ``Retry-After``, the
status rules, the quoted bodies and :class:`DeliveryResult` are one code path whichever
transport sent the request.

Retries follow the kit rules: 5xx, 408, 429, timeouts and dropped connections are retried with
exponential backoff and jitter, ``Retry-After`` is honoured, any 2xx is success, any other 4xx is
final. A request that fails on a reused pooled connection before any answer
(:class:`~rollout_sdk.traingate.transport.StaleConnectionError`) is sent once more at once, on a new
connection, without counting against the retries, on either path (one rule,
:func:`~rollout_sdk.traingate.transport.once_more_if_stale`): the server most likely closed the
idle connection, and the one duplicate this can make (the first copy had arrived after all) is
the one HTTP allows for a POST whose answer was lost (docs/architecture.md, "The one duplicate
HTTP allows").

Nothing above this module sees an httpx exception: each is translated into the kit's own tree.

httpx, aiohttp, yarl and the transport are imported inside the functions that use them: the author
API imports this module (``ctx.chat`` wraps the client), and an agent author's import loads no
HTTP client (``tests/unit/test_imports.py``); the first call pays for them.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rollout_sdk.errors import (
    AnswerTooLarge,
    OsmosisServerError,
    OsmosisTimeoutError,
    OsmosisTransportError,
    OsmosisValidationError,
    OutboundRefused,
)
from rollout_sdk.protocol import CompletionsResponse, RolloutResponse
from rollout_sdk.settings import RolloutClientSettings
from rollout_sdk.telemetry import NO_TELEMETRY, Metric, Span
from rollout_sdk.traingate.outbound import OutboundPolicy

if TYPE_CHECKING:
    import aiohttp
    import httpx
    import yarl

    from rollout_sdk.telemetry import Telemetry
    from rollout_sdk.traingate.transport import Answer

CHAT_PATH = "/v1/chat/completions"
COMPLETED_PATH = "/v1/rollout/completed"

Sleep = Callable[[float], Awaitable[None]]

#: Distinct endpoint URLs kept parsed (one TrainGate has two; a shared server sees a few).
_URL_CACHE_SIZE = 64
#: Characters of a remote body a message (and so a status answer) quotes.
_QUOTED = 300
#: Every POST's body type, as a header pair of the kit's transport and as httpx's.
_JSON = ("Content-Type", "application/json")
_JSON_BYTES = (b"Content-Type", b"application/json")


def encode_json(body: Any) -> bytes:
    """A POST's body as the client sends it: JSON once, compact, UTF-8; NaN and infinities are
    refused (ValueError): JSON has none."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def _shown(char: str) -> str:
    if char.isprintable():
        return char
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def quoted(body: bytes) -> str:
    """At most a few hundred characters of a remote body, with control and other unprintable
    characters (newlines, escapes a terminal would act on) shown as escapes: what a status
    answer or a log line may quote of an answer the kit did not write."""
    text = body[: _QUOTED * 4].decode("utf-8", "replace")
    cut = len(body) > _QUOTED * 4 or len(text) > _QUOTED
    return "".join(_shown(c) for c in text[:_QUOTED]) + ("..." if cut else "")


def is_retryable_status(status_code: int) -> bool:
    """5xx, 408 and 429 may succeed later; every other non-2xx is final."""
    return status_code >= 500 or status_code in (408, 429)


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP-date), else None."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


@dataclass(frozen=True)
class DeliveryResult:
    """Outcome of sending a rollout's final response."""

    delivered: bool
    final: bool
    attempts: int
    status_code: int | None = None
    error: str | None = None
    #: No answer came back because the last attempt timed out (rather than failing to connect).
    timed_out: bool = False
    #: Why the call itself was refused or cut short (the outbound policy, the answer cap):
    #: final, whatever the status.
    ended_by: OutboundRefused | AnswerTooLarge | None = None


class _RetryableFailure(Exception):
    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(frozen=True)
class _Exchange:
    """The last answer of a retried POST (None when the last attempt got none) and how many
    attempts were made; ``failure`` says why the last attempt got no answer."""

    answer: Answer | None
    failure: _RetryableFailure | None
    attempts: int


def _is_timeout(exc: BaseException | None) -> bool:
    import httpx

    return isinstance(exc, httpx.TimeoutException)


class TrainGateClient:
    """Calls TrainGate's chat and completion endpoints with the kit's retry rules.

    ``policy`` says where it may connect and how much of an answer it reads (default: the local
    one, loopback and private addresses allowed, link-local refused); it is applied by the
    default transport, at connect time. ``transport`` (any ``httpx.AsyncBaseTransport``:
    ``httpx.MockTransport`` in tests, ``httpx.AsyncHTTPTransport`` for httpx's own pool, which
    applies no policy), ``sleep`` and ``jitter`` are seams. ``telemetry`` gets each chat call's
    latency (and a span), each callback POST, and each call the policy refused.
    """

    def __init__(
        self,
        settings: RolloutClientSettings | None = None,
        *,
        policy: OutboundPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Sleep = asyncio.sleep,
        jitter: Callable[[], float] = random.random,
        telemetry: Telemetry = NO_TELEMETRY,
    ) -> None:
        self.settings = settings or RolloutClientSettings()
        self.policy = policy if policy is not None else OutboundPolicy()
        self._given = transport
        self._transport: httpx.AsyncBaseTransport | None = transport
        self._sleep = sleep
        self._jitter = jitter
        self._telemetry = telemetry
        # Built once, not per request: the timeouts (httpx's extension, and aiohttp's from it
        # when first needed), and each endpoint's URL, in the type its transport takes
        # (parsing a URL is a tenth of an exchange's CPU).
        self._timeouts = {
            name: self.settings.timeout_seconds for name in ("connect", "read", "write", "pool")
        }
        self._client_timeout: aiohttp.ClientTimeout | None = None
        self._urls: dict[str, httpx.URL] = {}
        self._yarl_urls: dict[str, yarl.URL] = {}

    @property
    def telemetry(self) -> Telemetry:
        """Where this client's chat calls and callbacks count (given at construction)."""
        return self._telemetry

    @property
    def transport(self) -> httpx.AsyncBaseTransport:
        """The shared transport (one pool for the process), built on first use."""
        if self._transport is None:
            # Imported here, not at the top: the API function never calls TrainGate, and the
            # HTTP stack is a tenth of its cold start.
            from rollout_sdk.traingate.transport import AiohttpTransport

            self._transport = AiohttpTransport(
                max_connections=self.settings.max_connections, policy=self.policy
            )
        return self._transport

    @property
    def prepared(self) -> bool:
        """The transport exists: :meth:`prepare` or a first call built it."""
        return self._transport is not None

    def prepare(self) -> None:
        """Load the HTTP stack and build the transport now (its pool still opens on the first
        call, in the running loop): a long-lived server pays for the import, about 0.3 s of CPU,
        at start-up rather than on its first rollout. The Lambda functions do not call it: the
        API function never calls TrainGate, and the worker's first call is its first use."""
        _ = self.transport

    async def aclose(self) -> None:
        """Close the connection pool; the next call opens a new one (after a restored snapshot,
        say)."""
        transport, self._transport = self._transport, self._given
        if transport is not None:
            await transport.aclose()

    def _url(self, url: str) -> httpx.URL:
        parsed = self._urls.get(url)
        if parsed is None:
            # Here: no HTTP client at import (the module docstring).
            import httpx

            if len(self._urls) >= _URL_CACHE_SIZE:
                self._urls.clear()
            parsed = self._urls[url] = httpx.URL(url)
        return parsed

    def _yarl_url(self, url: str) -> yarl.URL:
        parsed = self._yarl_urls.get(url)
        if parsed is None:
            # Here: no HTTP client at import (the module docstring).
            from rollout_sdk.traingate.transport import parse_url

            if len(self._yarl_urls) >= _URL_CACHE_SIZE:
                self._yarl_urls.clear()
            parsed = self._yarl_urls[url] = parse_url(url)
        return parsed

    def backoff(self, attempt: int, retry_after: float | None = None) -> float:
        """Delay before retry ``attempt`` (0-based): capped exponential with jitter, or Retry-After."""
        s = self.settings
        capped = min(s.retry_base_delay * (2**attempt), s.retry_max_delay)
        # "Equal jitter": half fixed, half random, so retries of many rollouts spread out
        # without ever collapsing to zero delay.
        delay: float = capped / 2 + self._jitter() * capped / 2
        if retry_after is not None:
            delay = max(delay, min(retry_after, s.timeout_seconds))
        return delay

    async def _send(self, url: str, content: bytes, api_key: str | None) -> Answer:
        """One POST of ``content``, its answer read whole, sent once more at once when a reused
        connection failed before any answer
        (:func:`~rollout_sdk.traingate.transport.once_more_if_stale`): through the kit's
        transport's own POST, else as an ``httpx.Request`` (the module docstring)."""
        # Here: no HTTP client at import (the module docstring).
        from rollout_sdk.traingate.transport import (
            AiohttpTransport,
            client_timeout,
            once_more_if_stale,
        )

        transport = self.transport
        if isinstance(transport, AiohttpTransport):
            target = self._yarl_url(url)
            timeout = self._client_timeout
            if timeout is None:
                timeout = self._client_timeout = client_timeout(self._timeouts)
            headers = (_JSON, ("Authorization", "Bearer " + api_key)) if api_key else (_JSON,)
            return await once_more_if_stale(
                lambda: transport.post(target, headers, content, timeout)
            )
        return await self._send_httpx(transport, url, content, api_key)

    async def _send_httpx(
        self, transport: httpx.AsyncBaseTransport, url: str, content: bytes, api_key: str | None
    ) -> Answer:
        # Here: no HTTP client at import (the module docstring).
        import httpx

        from rollout_sdk.traingate.transport import Answer, send

        headers = [_JSON_BYTES]
        if api_key:
            headers.append((b"Authorization", b"Bearer " + api_key.encode()))
        request = httpx.Request(
            "POST",
            self._url(url),
            headers=headers,
            content=content,
            extensions={"timeout": self._timeouts},
        )
        return Answer.of(await send(transport, request))

    async def _post(self, url: str, content: bytes, api_key: str | None) -> Answer:
        """:meth:`_send`, its failures translated: a refused address and an answer over the cap
        are final, every other failure becomes a :class:`_RetryableFailure`."""
        # Here: no HTTP client at import (the module docstring).
        import httpx

        # Here: no HTTP client at import (the module docstring).
        from rollout_sdk.traingate.transport import AddressRefusedError, AnswerTooLargeError

        try:
            return await self._send(url, content, api_key)
        except AddressRefusedError as exc:
            # Final: the same URL leads to the same refusal. Nothing was sent.
            self.telemetry.count(Metric.OUTBOUND_REFUSED)
            raise OutboundRefused(
                f"the outbound policy refused to call {url}: {exc}; nothing was sent"
            ) from exc
        except AnswerTooLargeError as exc:
            raise AnswerTooLarge(f"calling {url}: {exc}") from exc
        except httpx.TimeoutException as exc:
            raise _RetryableFailure(f"timed out calling {url}: {type(exc).__name__}") from exc
        except httpx.TransportError as exc:
            raise _RetryableFailure(f"could not reach {url}: {type(exc).__name__}: {exc}") from exc

    async def _exchange(
        self, url: str, content: bytes, api_key: str | None, retries: int
    ) -> _Exchange:
        """POST ``content`` until an answer that is not worth retrying (2xx or a final 4xx), or
        until ``retries`` retries have run out; the one retry loop of both TrainGate calls."""
        answer: Answer | None = None
        failure: _RetryableFailure | None = None
        for attempt in range(retries + 1):
            retry_after: float | None = None
            try:
                answer, failure = await self._post(url, content, api_key), None
            except _RetryableFailure as exc:
                answer, failure = None, exc
            else:
                if not is_retryable_status(answer.status_code):
                    return _Exchange(answer, None, attempt + 1)
                retry_after = parse_retry_after(answer.headers.get("retry-after"))
            if attempt < retries:
                await self._sleep(self.backoff(attempt, retry_after))
        return _Exchange(answer, failure, retries + 1)

    async def chat(
        self, server_url: str, body: dict[str, Any], *, api_key: str | None
    ) -> CompletionsResponse:
        """POST one chat completion; retry what may succeed later.

        Raises OsmosisValidationError (final 4xx), OsmosisServerError (5xx after every retry),
        OsmosisTimeoutError or OsmosisTransportError (no answer after every retry).
        """
        started = time.perf_counter()
        try:
            # The protocol puts the rollout's id in every chat body (RolloutLLMClient does).
            with self.telemetry.span(Span.CHAT, rollout_id=str(body.get("rollout_id", ""))):
                return await self._chat(server_url, body, api_key)
        finally:
            # Every call, failed ones included: the time the agent waited, retries and all.
            self.telemetry.observe(Metric.CHAT_CALL_LATENCY, time.perf_counter() - started)

    async def _chat(
        self, server_url: str, body: dict[str, Any], api_key: str | None
    ) -> CompletionsResponse:
        outcome = await self._exchange(
            server_url + CHAT_PATH, encode_json(body), api_key, self.settings.max_retries
        )
        if outcome.failure is not None or outcome.answer is None:
            cause = outcome.failure.__cause__ if outcome.failure is not None else None
            if _is_timeout(cause):
                raise OsmosisTimeoutError(str(outcome.failure)) from cause
            raise OsmosisTransportError(str(outcome.failure)) from cause
        answer = outcome.answer
        code = answer.status_code
        if 200 <= code < 300:
            try:
                # Parsed and validated in one pass by pydantic-core, from the bytes.
                return CompletionsResponse.model_validate_json(answer.content)
            except ValueError as exc:
                raise OsmosisServerError(
                    f"TrainGate answered {code} with a body that is not a chat completion: {exc}",
                    code,
                ) from exc
        if not is_retryable_status(code):
            raise OsmosisValidationError(
                f"TrainGate refused the chat call with {code}: {quoted(answer.content)}", code
            )
        raise OsmosisServerError(
            f"TrainGate answered {code} to the chat call after {outcome.attempts} attempts: "
            f"{quoted(answer.content)}",
            code,
        )

    async def complete_rollout(
        self,
        server_url: str,
        response: RolloutResponse | Mapping[str, Any],
        *,
        api_key: str | None,
        body: bytes | None = None,
    ) -> DeliveryResult:
        """POST the final response until a 2xx, a final 4xx, or the retries run out. Never raises.

        ``response`` is the model, or its JSON-ready dump (``model_dump(mode="json")``, as the
        rollout record stores it), which is encoded as it is, with no pydantic on the way.
        ``body``, when given, is that encoding already made (:func:`encode_json` of the dump:
        the worker makes it once per rollout, when it checks that JSON can carry the response),
        and is posted as it is.
        """
        try:
            if body is not None:
                content = body
            elif isinstance(response, RolloutResponse):
                content = encode_json(response.model_dump(mode="json"))
            else:
                # json.dumps takes a dict (a dump is one); another mapping is copied into one.
                content = encode_json(response if isinstance(response, dict) else dict(response))
        except (ValueError, TypeError) as exc:
            # NaN or an infinity (ValueError; or a model pydantic cannot dump), or a value in a
            # dump JSON has no form for (TypeError): no attempt can succeed. A final failure,
            # recorded, rather than an exception.
            return DeliveryResult(False, True, 0, None, f"response is not valid JSON: {exc}")
        rollout_id = (
            response.rollout_id
            if isinstance(response, RolloutResponse)
            else str(response.get("rollout_id", ""))
        )
        with self.telemetry.span(Span.CALLBACK, rollout_id=rollout_id):
            try:
                outcome = await self._exchange(
                    server_url + COMPLETED_PATH,
                    content,
                    api_key,
                    self.settings.complete_rollout_retries,
                )
            except (OutboundRefused, AnswerTooLarge) as exc:
                attempts = 0 if isinstance(exc, OutboundRefused) else 1
                self.telemetry.count(Metric.CALLBACK_ATTEMPTS, attempts)
                return DeliveryResult(False, True, attempts, None, str(exc), ended_by=exc)
        self.telemetry.count(Metric.CALLBACK_ATTEMPTS, outcome.attempts)
        if outcome.answer is None:
            cause = outcome.failure.__cause__ if outcome.failure is not None else None
            return DeliveryResult(
                False, False, outcome.attempts, None, str(outcome.failure), _is_timeout(cause)
            )
        status = outcome.answer.status_code
        if 200 <= status < 300:
            return DeliveryResult(True, True, outcome.attempts, status)
        error = f"TrainGate answered {status}: {quoted(outcome.answer.content)}"
        final = not is_retryable_status(status)
        return DeliveryResult(False, final, outcome.attempts, status, error)
