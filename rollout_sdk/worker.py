"""The worker: claims a rollout, runs the agent loop, fixes the final response, calls TrainGate.

The same code runs in the local server (through the in-process dispatcher) and in the worker
Lambda. Each step is a conditional move of the record (see :mod:`rollout_sdk.record`):

1. claim ACCEPTED -> RUNNING on this attempt, with a lease; losing the claim means another
   delivery of the same job owns the rollout, so nothing runs;
2. run the agent under the rollout's deadline; every outcome, exception and timeout included,
   becomes one ``RolloutResponse``;
3. finish RUNNING -> FINISHED, storing that response before any callback (the outbox);
4. deliver it: DELIVERED on a 2xx, UNDELIVERABLE on a final 4xx, else FINISHED with
   ``next_attempt_at`` for re-drive.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from .agent import (
    RolloutAgentLoop,
    RolloutCancelled,
    RolloutContext,
    RolloutLLMClient,
    RolloutResult,
)
from .errors import StoreError
from .protocol import RolloutMetrics, RolloutResponse, RolloutStatus
from .record import RecordState, RolloutRecord, expiry

if TYPE_CHECKING:
    from .client import TrainGateClient
    from .dispatch.base import Job
    from .settings import RolloutSettings
    from .store.base import Store, TransitionResult

logger = logging.getLogger("rollout_sdk.worker")

Clock = Callable[[], float]


def error_response(
    rollout_id: str,
    message: str,
    *,
    finish_reason: str = "error",
    final_messages: list[dict[str, object]] | None = None,
    metrics: RolloutMetrics | None = None,
) -> RolloutResponse:
    """An ERROR final response."""
    return RolloutResponse(
        rollout_id=rollout_id,
        status=RolloutStatus.ERROR,
        final_messages=final_messages or [],
        finish_reason=finish_reason,
        error_message=message,
        metrics=metrics or RolloutMetrics(),
    )


def _agent_failure(
    rollout_id: str, exc: BaseException, final_messages: list[dict[str, object]]
) -> RolloutResponse:
    logger.warning("agent loop raised", exc_info=exc, extra={"rollout_id": rollout_id})
    return error_response(rollout_id, f"{type(exc).__name__}: {exc}", final_messages=final_messages)


def _messages_or_empty(messages: object) -> list[dict[str, object]]:
    if isinstance(messages, list) and all(isinstance(m, dict) for m in messages):
        return list(messages)
    return []


def _to_response(
    rollout_id: str,
    outcome: RolloutResult | RolloutResponse,
    ctx_metrics: RolloutMetrics,
    elapsed_ms: float,
) -> RolloutResponse:
    """The wire response for an outcome; ValueError/TypeError when the protocol cannot carry it."""
    # The kit's own ERROR responses carry the context's metrics; an agent's result may carry its
    # own RolloutMetrics.
    metrics: RolloutMetrics | None = None
    if isinstance(outcome, RolloutResult) and outcome.metrics is not None:
        if not isinstance(outcome.metrics, RolloutMetrics):
            raise TypeError(f"metrics must be RolloutMetrics, got {type(outcome.metrics).__name__}")
        metrics = outcome.metrics
    metrics = (metrics or ctx_metrics).model_copy(update={"total_latency_ms": elapsed_ms})
    if isinstance(outcome, RolloutResponse):
        response = outcome.model_copy(update={"metrics": metrics})
    else:
        response = RolloutResponse.model_validate(
            {
                "rollout_id": rollout_id,
                "status": outcome.status,
                "final_messages": outcome.final_messages,
                "finish_reason": outcome.finish_reason,
                "error_message": outcome.error_message,
                "reward": outcome.reward,
                "metrics": metrics,
            }
        )
    if response.reward is not None and not math.isfinite(response.reward):
        raise ValueError(f"reward must be a finite number, got {response.reward}")
    for name, value in response.metrics.model_dump().items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"metrics.{name} must be a finite number, got {value}")
    # JSON as TrainGate will get it: fails here, not at the callback, if it cannot be encoded.
    json.dumps(response.model_dump(mode="json"), allow_nan=False)
    return response


class RolloutWorker:
    """Runs rollouts for one agent loop against one store and one shared TrainGate client."""

    def __init__(
        self,
        agent_loop: RolloutAgentLoop,
        store: Store,
        client: TrainGateClient,
        settings: RolloutSettings,
        *,
        debug_dir: str | Path | None = None,
        clock: Clock = time.time,
    ) -> None:
        self.agent_loop = agent_loop
        self.store = store
        self.client = client
        self.settings = settings
        self.debug_dir = debug_dir
        self.clock = clock

    def _ttl(self) -> float:
        return float(self.settings.server.record_ttl_seconds)

    async def run(self, job: Job, *, deadline_seconds: float | None = None) -> RolloutRecord | None:
        """Run one job to its final record; None when this delivery does not own the rollout.

        ``deadline_seconds`` shortens the rollout's time (the Lambda's remaining time); the
        request-timeout setting bounds it in every mode.
        """
        budget = float(self.settings.server.request_timeout_seconds)
        if deadline_seconds is not None:
            budget = min(budget, deadline_seconds)
        now = self.clock()
        claim = await self.store.transition(
            job.rollout_id,
            from_states=(RecordState.ACCEPTED,),
            changes={
                "state": RecordState.RUNNING,
                "attempt": job.attempt,
                "lease_until": now + budget,
                "updated_at": now,
                "expires_at": expiry(now, self._ttl() + budget),
            },
            now=now,
        )
        if not claim.applied or claim.record is None:
            current = claim.record
            # Absent means expired or never created: a job with no record to run is a rollout
            # that will not be reported, so say so loudly.
            log = logger.info if current is not None else logger.error
            log(
                "claim lost; nothing to run",
                extra={
                    "rollout_id": job.rollout_id,
                    "state": current.state.value if current else "absent",
                },
            )
            return None
        record = claim.record
        logger.info("rollout claimed", extra={"rollout_id": job.rollout_id, "attempt": job.attempt})
        response = await self._execute(record, job, budget)
        try:
            finished = await self._finish(job, response)
        except StoreError as exc:
            # The response could not be stored (too large, a store error): store a small ERROR
            # that says why instead, so the rollout still ends with one reported status.
            logger.error(
                "final response not stored; storing an ERROR instead",
                extra={"rollout_id": job.rollout_id, "error": str(exc)},
            )
            fallback = error_response(
                job.rollout_id,
                f"the final response could not be stored: {exc}",
                metrics=response.metrics,
            )
            finished = await self._finish(job, fallback)
            response = fallback
        if not finished.applied or finished.record is None:
            # Someone else (a recovery sweep) fixed the final response first; theirs stands.
            logger.warning(
                "finish lost; keeping the stored response", extra={"rollout_id": job.rollout_id}
            )
            return finished.record
        logger.info(
            "rollout finished",
            extra={"rollout_id": job.rollout_id, "status": response.status.value},
        )
        return await self.deliver(finished.record, api_key=job.api_key)

    async def _finish(self, job: Job, response: RolloutResponse) -> TransitionResult:
        """RUNNING -> FINISHED on this job's attempt, with the final response."""
        now = self.clock()
        return await self.store.transition(
            job.rollout_id,
            from_states=(RecordState.RUNNING,),
            attempt=job.attempt,
            changes={
                "state": RecordState.FINISHED,
                "response": response.model_dump(mode="json"),
                "lease_until": None,
                "updated_at": now,
                "expires_at": expiry(now, self._ttl()),
            },
            now=now,
        )

    async def _execute(self, record: RolloutRecord, job: Job, budget: float) -> RolloutResponse:
        started = time.perf_counter()
        request = record.rollout_request(job.api_key)
        tools = record.init_response_model().tools
        llm = RolloutLLMClient(
            self.client,
            server_url=request.server_url,
            rollout_id=request.rollout_id,
            api_key=job.api_key,
        )
        ctx = RolloutContext(request, tools, llm, debug_dir=self.debug_dir)
        outcome: RolloutResult | RolloutResponse
        deadline = asyncio.timeout(budget)
        try:
            async with deadline:
                result = await self.agent_loop.run(ctx)
            if not isinstance(result, RolloutResult):
                raise TypeError(
                    f"{type(self.agent_loop).__name__}.run returned {type(result).__name__}, "
                    "expected RolloutResult (use ctx.complete(...) or ctx.error(...))"
                )
            outcome = result
        except TimeoutError as exc:
            if not deadline.expired():
                # The agent's own TimeoutError (a tool's wait_for), not the rollout's deadline.
                outcome = _agent_failure(request.rollout_id, exc, ctx.last_messages)
            else:
                outcome = error_response(
                    request.rollout_id,
                    f"rollout exceeded its deadline of {budget:g} s "
                    "(OSMOSIS_ROLLOUT_SERVER_REQUEST_TIMEOUT_SECONDS)",
                    finish_reason="timeout",
                    final_messages=ctx.last_messages,
                )
        except RolloutCancelled:
            outcome = error_response(
                request.rollout_id,
                "rollout cancelled",
                finish_reason="cancelled",
                final_messages=ctx.last_messages,
            )
        except Exception as exc:  # the agent's own failure becomes an ERROR result
            outcome = _agent_failure(request.rollout_id, exc, ctx.last_messages)
        elapsed_ms = (time.perf_counter() - started) * 1000
        try:
            return _to_response(request.rollout_id, outcome, ctx.metrics, elapsed_ms)
        except (ValueError, TypeError) as exc:
            # A result the protocol cannot carry (a lowercase status, a NaN reward, messages
            # that are not objects) must still end the rollout: report why, as an ERROR.
            logger.warning(
                "agent result rejected", extra={"rollout_id": request.rollout_id, "error": str(exc)}
            )
            metrics = ctx.metrics.model_copy(update={"total_latency_ms": elapsed_ms})
            return error_response(
                request.rollout_id,
                f"the agent's result cannot be sent: {exc}",
                final_messages=_messages_or_empty(ctx.last_messages),
                metrics=metrics,
            )

    async def deliver(self, record: RolloutRecord, *, api_key: str | None) -> RolloutRecord:
        """Send the stored final response; record the outcome. Never sends after a 2xx."""
        response = record.response_model()
        if response is None or record.state != RecordState.FINISHED:
            return record
        server_url = str(record.request["server_url"])
        result = await self.client.complete_rollout(server_url, response, api_key=api_key)
        now = self.clock()
        attempts = record.delivery_attempts + result.attempts
        if result.delivered:
            changes: dict[str, object] = {
                "state": RecordState.DELIVERED,
                "delivered_at": now,
                "next_attempt_at": None,
                "last_error": None,
            }
            logger.info("callback delivered", extra={"rollout_id": record.rollout_id})
        elif result.final:
            changes = {"state": RecordState.UNDELIVERABLE, "last_error": result.error}
            logger.error(
                "callback refused; not retrying",
                extra={"rollout_id": record.rollout_id, "status_code": result.status_code},
            )
        else:
            changes = {
                "next_attempt_at": now + self.client.settings.retry_max_delay,
                "last_error": result.error,
            }
            logger.warning(
                "callback failed; parked for re-drive",
                extra={"rollout_id": record.rollout_id, "error": result.error},
            )
        changes.update(
            delivery_attempts=attempts, updated_at=now, expires_at=expiry(now, self._ttl())
        )
        moved = await self.store.transition(
            record.rollout_id, from_states=(RecordState.FINISHED,), changes=changes, now=now
        )
        return moved.record or record
