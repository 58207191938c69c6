"""The TrainGate client: one per process, shared by every rollout (protocol.md section 5).

One ``httpx.AsyncClient`` holds one connection pool and one TLS context for the whole process; the
reference built a client per rollout and paid about 22 ms of CPU per TLS context. Retries follow the
kit rules: 5xx, 408, 429, timeouts and dropped connections are retried with exponential backoff and
jitter, ``Retry-After`` is honoured, any 2xx is success, any other 4xx is final.

Nothing above this module sees an httpx exception: each is translated into the kit's own tree.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rollout_sdk.engine.telemetry import NO_TELEMETRY, Metric, Span
from rollout_sdk.errors import (
    OsmosisServerError,
    OsmosisTimeoutError,
    OsmosisTransportError,
    OsmosisValidationError,
)
from rollout_sdk.protocol import CompletionsResponse, RolloutResponse
from rollout_sdk.settings import RolloutClientSettings

if TYPE_CHECKING:
    import httpx

    from rollout_sdk.engine.telemetry import Telemetry

CHAT_PATH = "/v1/chat/completions"
COMPLETED_PATH = "/v1/rollout/completed"

Sleep = Callable[[float], Awaitable[None]]


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


class _RetryableFailure(Exception):
    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(frozen=True)
class _Exchange:
    """The last answer of a retried POST (None when the last attempt got none) and how many
    attempts were made; ``failure`` says why the last attempt got no answer."""

    answer: httpx.Response | None
    failure: _RetryableFailure | None
    attempts: int


def _is_timeout(exc: BaseException | None) -> bool:
    import httpx

    return isinstance(exc, httpx.TimeoutException)


class TrainGateClient:
    """Calls TrainGate's chat and completion endpoints with the kit's retry rules.

    ``transport``, ``sleep`` and ``jitter`` are seams for tests (``httpx.MockTransport``, a fake sleep).
    ``telemetry`` gets each chat call's latency (and a span), and each callback POST.
    """

    def __init__(
        self,
        settings: RolloutClientSettings | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Sleep = asyncio.sleep,
        jitter: Callable[[], float] = random.random,
        telemetry: Telemetry = NO_TELEMETRY,
    ) -> None:
        self.settings = settings or RolloutClientSettings()
        self._transport = transport
        self._sleep = sleep
        self._jitter = jitter
        self.telemetry = telemetry
        self._http: httpx.AsyncClient | None = None

    @property
    def http(self) -> httpx.AsyncClient:
        """The shared ``httpx.AsyncClient``, built on first use."""
        if self._http is None:
            # Imported here, not at the top: the API function never calls TrainGate, and httpx
            # is a tenth of its cold start.
            import httpx

            s = self.settings
            self._http = httpx.AsyncClient(
                timeout=httpx.Timeout(s.timeout_seconds),
                limits=httpx.Limits(
                    max_connections=s.max_connections,
                    max_keepalive_connections=s.max_keepalive_connections,
                ),
                transport=self._transport,
            )
        return self._http

    async def aclose(self) -> None:
        """Close the connection pool."""
        if self._http is not None:
            await self._http.aclose()
            self._http = None

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

    async def _post(self, url: str, body: Any, api_key: str | None) -> httpx.Response:
        import httpx

        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        try:
            return await self.http.post(url, json=body, headers=headers)
        except httpx.TimeoutException as exc:
            raise _RetryableFailure(f"timed out calling {url}: {type(exc).__name__}") from exc
        except httpx.TransportError as exc:
            raise _RetryableFailure(f"could not reach {url}: {type(exc).__name__}: {exc}") from exc

    async def _exchange(self, url: str, body: Any, api_key: str | None, retries: int) -> _Exchange:
        """POST ``body`` until an answer that is not worth retrying (2xx or a final 4xx), or until
        ``retries`` retries have run out; the one retry loop of both TrainGate calls."""
        answer: httpx.Response | None = None
        failure: _RetryableFailure | None = None
        for attempt in range(retries + 1):
            retry_after: float | None = None
            try:
                answer, failure = await self._post(url, body, api_key), None
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
            server_url + CHAT_PATH, body, api_key, self.settings.max_retries
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
                return CompletionsResponse.model_validate(answer.json())
            except (ValueError, json.JSONDecodeError) as exc:
                raise OsmosisServerError(
                    f"TrainGate answered {code} with a body that is not a chat completion: {exc}",
                    code,
                ) from exc
        if not is_retryable_status(code):
            raise OsmosisValidationError(
                f"TrainGate refused the chat call with {code}: {answer.text[:500]}", code
            )
        raise OsmosisServerError(
            f"TrainGate answered {code} to the chat call after {outcome.attempts} attempts: "
            f"{answer.text[:500]}",
            code,
        )

    async def complete_rollout(
        self, server_url: str, response: RolloutResponse, *, api_key: str | None
    ) -> DeliveryResult:
        """POST the final response until a 2xx, a final 4xx, or the retries run out. Never raises."""
        body = response.model_dump(mode="json")
        try:
            json.dumps(body, allow_nan=False)
        except ValueError as exc:
            # No attempt can succeed; a final failure, recorded, rather than an exception.
            return DeliveryResult(False, True, 0, None, f"response is not valid JSON: {exc}")
        with self.telemetry.span(Span.CALLBACK, rollout_id=response.rollout_id):
            outcome = await self._exchange(
                server_url + COMPLETED_PATH, body, api_key, self.settings.complete_rollout_retries
            )
        self.telemetry.count(Metric.CALLBACK_ATTEMPTS, outcome.attempts)
        if outcome.answer is None:
            return DeliveryResult(False, False, outcome.attempts, None, str(outcome.failure))
        status = outcome.answer.status_code
        if 200 <= status < 300:
            return DeliveryResult(True, True, outcome.attempts, status)
        error = f"TrainGate answered {status}: {outcome.answer.text[:500]}"
        final = not is_retryable_status(status)
        return DeliveryResult(False, final, outcome.attempts, status, error)
