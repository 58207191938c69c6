"""v1's standalone LLM client, ``OsmosisLLMClient``: one rollout's calls to TrainGate, built on
the kit's own TrainGate client.

Inside the kit's server an agent gets ``ctx.llm``, a :class:`~rollout_sdk.agent.loop.RolloutLLMClient`
over the process's shared pool; this class is for code that talks to TrainGate by itself, as v1
documented::

    async with OsmosisLLMClient(server_url, rollout_id, api_key=key) as client:
        result = await client.chat_completions(messages, temperature=0.7)
        await client.complete_rollout("COMPLETED", [*messages, result.message])

It owns a :class:`~rollout_sdk.traingate.client.TrainGateClient` (its own connection pool, closed by
:meth:`close`), so the kit's retry rules apply: 5xx, 408, 429, timeouts and dropped connections
are retried with backoff and jitter, ``Retry-After`` is honoured, any 2xx is success.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rollout_sdk.agent.loop import CompletionsResult, RolloutLLMClient
from rollout_sdk.errors import (
    OsmosisServerError,
    OsmosisTimeoutError,
    OsmosisTransportError,
    OsmosisValidationError,
)
from rollout_sdk.protocol import Message, RolloutMetrics, RolloutResponse, RolloutStatus

if TYPE_CHECKING:
    from types import TracebackType

    import httpx

    from rollout_sdk.settings import RolloutClientSettings


class OsmosisLLMClient(RolloutLLMClient):
    """Chat calls and the completion callback of one rollout, on a client of its own.

    ``None`` for ``timeout_seconds`` (or 0), ``max_retries`` and ``complete_rollout_retries``
    takes the value from ``settings``, by default the process's (``get_settings().client``).
    ``transport`` (keyword only, the kit's) is the seam for tests: any httpx transport.
    """

    def __init__(
        self,
        server_url: str,
        rollout_id: str,
        api_key: str | None = None,
        timeout_seconds: float | None = None,
        max_retries: int | None = None,
        complete_rollout_retries: int | None = None,
        settings: RolloutClientSettings | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        # Imported here: naming this class (``from rollout_sdk import OsmosisLLMClient``) must
        # not load the settings or the HTTP stack.
        from rollout_sdk.settings import get_settings
        from rollout_sdk.traingate.client import TrainGateClient

        base = settings if settings is not None else get_settings().client
        self.timeout_seconds: float = timeout_seconds or base.timeout_seconds
        self.max_retries: int = max_retries if max_retries is not None else base.max_retries
        self.complete_rollout_retries: int = (
            complete_rollout_retries
            if complete_rollout_retries is not None
            else base.complete_rollout_retries
        )
        # Validated again, so an out-of-range value fails here, as the environment's would.
        own = type(base).model_validate(
            base.model_dump()
            | {
                "timeout_seconds": self.timeout_seconds,
                "max_retries": self.max_retries,
                "complete_rollout_retries": self.complete_rollout_retries,
            }
        )
        super().__init__(
            TrainGateClient(own, transport=transport),
            server_url=server_url.rstrip("/"),
            rollout_id=rollout_id,
            api_key=api_key,
        )
        self.api_key = api_key

    async def chat_completions(  # type: ignore[override]  # v1's named parameters
        self,
        messages: list[Message],
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_tokens: int = 512,
        stop: Any = None,
        logprobs: bool = True,
        **kwargs: Any,
    ) -> CompletionsResult:
        """Send the full conversation to ``{server_url}/v1/chat/completions``; the next turn.

        Raises OsmosisValidationError (a final 4xx), OsmosisServerError (5xx after every retry),
        OsmosisTimeoutError or OsmosisTransportError (no answer after every retry).
        """
        return await super().chat_completions(
            messages,
            temperature=temperature,
            top_p=top_p,
            max_tokens=max_tokens,
            stop=stop,
            logprobs=logprobs,
            **kwargs,
        )

    async def complete_rollout(
        self,
        status: str,
        final_messages: list[Message],
        finish_reason: str = "stop",
        error_message: str | None = None,
        metrics: RolloutMetrics | None = None,
        reward: float | None = None,
    ) -> None:
        """Post the rollout's final response to ``{server_url}/v1/rollout/completed``.

        ``metrics`` defaults to this client's. Raises as :meth:`chat_completions` does when no
        attempt got a 2xx: OsmosisValidationError for a final 4xx.
        """
        response = RolloutResponse(
            rollout_id=self.rollout_id,
            status=RolloutStatus(status),
            final_messages=final_messages,
            finish_reason=finish_reason,
            error_message=error_message,
            metrics=metrics if metrics is not None else self.get_metrics(),
            reward=reward,
        )
        outcome = await self._client.complete_rollout(
            self.server_url, response, api_key=self.api_key
        )
        if outcome.delivered:
            return
        error = outcome.error or "the completion callback was not delivered"
        code = outcome.status_code
        if code is None:
            raise (OsmosisTimeoutError if outcome.timed_out else OsmosisTransportError)(error)
        if code >= 500:
            raise OsmosisServerError(error, code)
        raise OsmosisValidationError(error, code)

    async def close(self) -> None:
        """Close the connection pool (a later call opens a new one)."""
        await self._client.aclose()

    async def __aenter__(self) -> OsmosisLLMClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()
