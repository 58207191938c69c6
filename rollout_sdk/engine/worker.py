"""The worker: claims a rollout, runs the agent loop, fixes the final response, calls TrainGate.

The same code runs in the local server (through the in-process dispatcher) and in the worker
Lambda. Each step is a conditional move of the record (see :mod:`rollout_sdk.engine.record`):

1. claim ACCEPTED -> RUNNING on this attempt, with a short lease that a heartbeat renews while
   the agent runs; losing the claim means another delivery of the same job owns the rollout, so
   nothing runs (unless the owner's lease ran out: then the owner died, see ``settle``);
2. run the agent under the rollout's deadline; every outcome, exception and timeout included,
   becomes one ``RolloutResponse``;
3. finish RUNNING -> FINISHED, storing that response before any callback (the outbox);
4. deliver it, holding the lease: DELIVERED on a 2xx, UNDELIVERABLE on a final 4xx, else parked
   (FINISHED with ``next_attempt_at`` and the callback key sealed) for the re-drive.

``settle`` ends a rollout whose worker failed or died: the stored response is sent if there is
one, else an ERROR naming the failure; every path goes through the same conditional moves, so a
rollout gets one final response however many recoverers race.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from rollout_sdk.agent.loop import (
    RolloutAgentLoop,
    RolloutContext,
    RolloutLLMClient,
    RolloutResult,
)
from rollout_sdk.engine.record import RecordState, RolloutRecord, expiry
from rollout_sdk.errors import RolloutCancelled, StoreError
from rollout_sdk.protocol import RolloutMetrics, RolloutResponse, RolloutStatus

if TYPE_CHECKING:
    from rollout_sdk.dispatch.base import Job
    from rollout_sdk.engine.client import DeliveryResult, TrainGateClient
    from rollout_sdk.engine.vault import KeyVault
    from rollout_sdk.settings import RolloutSettings
    from rollout_sdk.store.base import Store, TransitionResult

logger = logging.getLogger("rollout_sdk.engine.worker")

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
    """Runs rollouts for one agent loop against one store and one shared TrainGate client.

    ``vault`` seals callback keys: a response parked for re-drive keeps its key sealed, and the
    local server (``seal_at_init`` in the service) keeps it sealed while the rollout is in flight.
    """

    def __init__(
        self,
        agent_loop: RolloutAgentLoop,
        store: Store,
        client: TrainGateClient,
        settings: RolloutSettings,
        *,
        vault: KeyVault | None = None,
        debug_dir: str | Path | None = None,
        clock: Clock = time.time,
    ) -> None:
        self.agent_loop = agent_loop
        self.store = store
        self.client = client
        self.settings = settings
        self.vault = vault
        self.debug_dir = debug_dir
        self.clock = clock
        #: Cancel signals of the rollouts this process is running (cancel reaches them at once).
        self.cancels: dict[str, asyncio.Event] = {}

    def _ttl(self) -> float:
        return float(self.settings.server.record_ttl_seconds)

    @property
    def _lease(self) -> float:
        return float(self.settings.kit.lease_seconds)

    # ------------------------------------------------------------------ running

    async def run(self, job: Job, *, deadline_seconds: float | None = None) -> RolloutRecord | None:
        """Run one job to its final record; None when this delivery does not own the rollout.

        ``deadline_seconds`` shortens the rollout's time (the Lambda's remaining time); the
        request-timeout setting bounds it in every mode. A failure of the kit itself (not the
        agent's) still ends the rollout with a reported ERROR.
        """
        try:
            return await self._run(job, deadline_seconds)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.exception("the worker failed", extra={"rollout_id": job.rollout_id})
            return await self.settle(
                job.rollout_id,
                reason=f"the worker failed: {type(exc).__name__}: {exc}",
                api_key=job.api_key,
                owner_attempt=job.attempt,
            )

    async def _run(self, job: Job, deadline_seconds: float | None) -> RolloutRecord | None:
        budget = float(self.settings.server.request_timeout_seconds)
        if deadline_seconds is not None:
            budget = min(budget, deadline_seconds)
        now = self.clock()
        claim = await self.store.claim(
            job.rollout_id,
            attempt=job.attempt,
            lease_until=now + self._lease,
            expires_at=expiry(now, self._ttl() + budget),
            now=now,
        )
        if not claim.applied or claim.record is None:
            return await self._claim_lost(job, claim.record)
        record = claim.record
        logger.info("rollout claimed", extra={"rollout_id": job.rollout_id, "attempt": job.attempt})
        if record.cancel_requested:
            response = error_response(
                job.rollout_id, "rollout cancelled before it started", finish_reason="cancelled"
            )
        else:
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
            response = error_response(
                job.rollout_id,
                f"the final response could not be stored: {exc}",
                metrics=response.metrics,
            )
            finished = await self._finish(job, response)
        if not finished.applied or finished.record is None:
            # Someone else (a recovery) fixed the final response first; theirs stands.
            logger.warning(
                "finish lost; keeping the stored response", extra={"rollout_id": job.rollout_id}
            )
            return finished.record
        logger.info(
            "rollout finished",
            extra={"rollout_id": job.rollout_id, "status": response.status.value},
        )
        return await self.deliver(finished.record, api_key=job.api_key)

    async def _claim_lost(self, job: Job, current: RolloutRecord | None) -> RolloutRecord | None:
        if current is None:
            # Expired or never created: a job with no record to run is a rollout that will not
            # be reported, so say so loudly.
            logger.error("claim lost; no record to run", extra={"rollout_id": job.rollout_id})
            return None
        if current.state in (RecordState.RUNNING, RecordState.FINISHED):
            # Another delivery of this job owns the rollout, or owned it and died: a live owner
            # renews its lease every heartbeat, a dead one lets it run out.
            return await self._watch_owner(job, current)
        logger.info(
            "claim lost; nothing to run",
            extra={"rollout_id": job.rollout_id, "state": current.state.value},
        )
        return None

    async def report_failed_job(self, job: Job, *, reason: str) -> RolloutRecord | None:
        """A job AWS gave up on (the on-failure destination, the dead-letter queue): settle its
        rollout once, naming ``reason``. When a live lease holds the record (a delivery of the
        job still runs it, or died moments ago), wait for the lease to be renewed or run out
        first. Returns the record as it ends up."""
        record = await self.settle(job.rollout_id, reason=reason, api_key=job.api_key)
        held = record is not None and record.state in (RecordState.RUNNING, RecordState.FINISHED)
        if held and record is not None and not record.lease_free(self.clock()):
            await self.await_owner(job, reason=reason)
            record = await self.store.get(job.rollout_id, now=self.clock())
        return record

    async def await_owner(self, job: Job, *, reason: str) -> RolloutRecord | None:
        """Wait for whoever holds the rollout's lease (running it, or delivering its stored
        response): None when it renews the lease (alive) or reports; when the lease runs out
        (it died), settle the rollout, naming ``reason`` if it has no response yet."""
        current = await self.store.get(job.rollout_id, now=self.clock())
        if current is None or current.state not in (RecordState.RUNNING, RecordState.FINISHED):
            return current
        return await self._watch_owner(job, current, reason=reason)

    async def _watch_owner(
        self,
        job: Job,
        current: RolloutRecord,
        *,
        reason: str = "the worker that ran this rollout stopped before reporting it",
    ) -> RolloutRecord | None:
        """Wait until the owner reports (None), renews its lease (None: it is alive), or lets the
        lease run out (it died: settle the rollout with this job's callback key)."""
        poll = min(1.0, float(self.settings.kit.heartbeat_seconds) / 4)
        first_lease = current.lease_until
        record: RolloutRecord | None = current
        while record is not None and record.state in (RecordState.RUNNING, RecordState.FINISHED):
            now = self.clock()
            if record.lease_free(now):
                return await self.settle(job.rollout_id, reason=reason, api_key=job.api_key)
            if record.lease_until != first_lease:
                break  # renewed: the owner is alive and will report
            await asyncio.sleep(min(poll, (record.lease_until or now) - now + 0.05))
            record = await self.store.get(job.rollout_id, now=self.clock())
        logger.info("claim lost; the owner reports it", extra={"rollout_id": job.rollout_id})
        return None

    async def _finish(self, job: Job, response: RolloutResponse) -> TransitionResult:
        """RUNNING -> FINISHED on this job's attempt, with the final response and the lease for
        delivering it."""
        now = self.clock()
        return await self.store.finish(
            job.rollout_id,
            attempt=job.attempt,
            response=response,
            lease_until=now + self._lease,
            expires_at=expiry(now, self._ttl()),
            now=now,
        )

    @asynccontextmanager
    async def _holding(
        self,
        rollout_id: str,
        attempt: int,
        state: RecordState,
        on_record: Callable[[RolloutRecord], None] | None = None,
    ) -> AsyncIterator[None]:
        """Renew the lease every ``heartbeat_seconds`` while the block runs."""

        async def beat() -> None:
            interval = float(self.settings.kit.heartbeat_seconds)
            while True:
                await asyncio.sleep(interval)
                now = self.clock()
                try:
                    renewed = await self.store.renew(
                        rollout_id,
                        state=state,
                        attempt=attempt,
                        lease_until=now + self._lease,
                        now=now,
                    )
                except StoreError as exc:
                    logger.warning(
                        "lease renewal failed", extra={"rollout_id": rollout_id, "error": str(exc)}
                    )
                    continue
                if renewed.record is not None and on_record is not None:
                    on_record(renewed.record)
                if not renewed.applied:
                    return  # no longer ours

        task = asyncio.create_task(beat(), name=f"lease:{rollout_id}")
        try:
            yield
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _execute(self, record: RolloutRecord, job: Job, budget: float) -> RolloutResponse:
        cancelled = self.cancels.setdefault(job.rollout_id, asyncio.Event())

        def watch(current: RolloutRecord) -> None:
            if current.cancel_requested:
                cancelled.set()

        try:
            async with self._holding(job.rollout_id, job.attempt, RecordState.RUNNING, watch):
                return await self._run_agent(record, job, budget, cancelled)
        finally:
            self.cancels.pop(job.rollout_id, None)

    async def _run_agent(
        self, record: RolloutRecord, job: Job, budget: float, cancelled: asyncio.Event
    ) -> RolloutResponse:
        started = time.perf_counter()
        request = record.rollout_request(job.api_key)
        tools = record.init_response_model().tools
        llm = RolloutLLMClient(
            self.client,
            server_url=request.server_url,
            rollout_id=request.rollout_id,
            api_key=job.api_key,
        )
        ctx = RolloutContext(request, tools, llm, debug_dir=self.debug_dir, cancelled=cancelled)
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

    # ------------------------------------------------------------------ delivering

    async def deliver(self, record: RolloutRecord, *, api_key: str | None) -> RolloutRecord:
        """Send the stored final response, holding the record's lease; record the outcome.

        Never sends after a 2xx: the caller holds the lease (from finishing, or from claiming the
        delivery), and every outcome is written conditionally on that holding.
        """
        response = record.response_model()
        if response is None or record.state != RecordState.FINISHED:
            return record
        server_url = str(record.request["server_url"])
        async with self._holding(record.rollout_id, record.attempt, RecordState.FINISHED):
            result = await self.client.complete_rollout(server_url, response, api_key=api_key)
        return await self._record_delivery(record, result, api_key)

    async def _record_delivery(
        self, record: RolloutRecord, result: DeliveryResult, api_key: str | None
    ) -> RolloutRecord:
        now = self.clock()
        attempts = record.delivery_attempts + result.attempts
        finished_at = record.finished_at or record.updated_at
        gave_up = now - finished_at >= self.settings.kit.redrive_max_age_seconds
        rollout_id, attempt = record.rollout_id, record.attempt
        if result.delivered:
            logger.info("callback delivered", extra={"rollout_id": rollout_id})
            moved = await self.store.deliver(
                rollout_id,
                attempt=attempt,
                delivery_attempts=attempts,
                expires_at=expiry(now, self._ttl()),
                now=now,
            )
        elif result.final or gave_up:
            error = result.error if result.final else f"gave up re-sending: {result.error}"
            logger.error(
                "callback not delivered; not retrying",
                extra={"rollout_id": rollout_id, "status_code": result.status_code},
            )
            moved = await self.store.mark_undeliverable(
                rollout_id,
                attempt=attempt,
                error=error,
                delivery_attempts=attempts,
                expires_at=expiry(now, self._ttl()),
                now=now,
            )
        else:
            logger.warning(
                "callback failed; parked for re-drive",
                extra={"rollout_id": rollout_id, "error": result.error},
            )
            moved = await self._park(record, now, result.error, api_key, attempts)
        return moved.record or record

    async def _park(
        self,
        record: RolloutRecord,
        now: float,
        error: str | None,
        api_key: str | None,
        delivery_attempts: int,
    ) -> TransitionResult:
        """FINISHED, due for re-drive, the key sealed, alive until the re-drive gives up."""
        sealed_key = None
        if record.sealed_key is None and api_key is not None and self.vault is not None:
            sealed_key = await self.vault.seal(api_key)
        return await self.store.park(
            record.rollout_id,
            attempt=record.attempt,
            error=error,
            next_attempt_at=now + float(self.settings.kit.redrive_interval_seconds),
            delivery_attempts=delivery_attempts,
            expires_at=expiry(
                record.finished_at or now,
                self._ttl() + self.settings.kit.redrive_max_age_seconds,
            ),
            now=now,
            sealed_key=sealed_key,
        )

    # ------------------------------------------------------------------ recovering

    async def _open_key(self, record: RolloutRecord) -> str | None:
        if record.sealed_key is None or self.vault is None:
            return None
        return await self.vault.open(record.sealed_key)

    async def settle(
        self,
        rollout_id: str,
        *,
        reason: str,
        api_key: str | None = None,
        owner_attempt: int | None = None,
        force: bool = False,
        finish_reason: str = "error",
    ) -> RolloutRecord | None:
        """End a rollout whose worker failed or died, once: send its stored response if it has
        one, else fix an ERROR naming ``reason`` and send that.

        A running rollout is taken over only when its lease ran out, or ``force`` (its process
        is known dead), or it is ``owner_attempt``'s own. The callback key is ``api_key`` or the
        record's sealed one.
        """
        now = self.clock()
        record = await self.store.get(rollout_id, now=now)
        if record is None:
            logger.error("nothing to settle; no record", extra={"rollout_id": rollout_id})
            return None
        if record.state in (RecordState.DELIVERED, RecordState.UNDELIVERABLE):
            return record
        key = api_key if api_key is not None else await self._open_key(record)
        if record.state in (RecordState.ACCEPTED, RecordState.RUNNING):
            mine = owner_attempt is not None and record.attempt == owner_attempt
            moved = await self.store.settle(
                rollout_id,
                attempt=record.attempt,
                response=error_response(rollout_id, reason, finish_reason=finish_reason),
                lease_until=now + self._lease,
                expires_at=expiry(now, self._ttl()),
                now=now,
                even_if_leased=force or mine,
            )
            if moved.applied:
                logger.error(
                    "rollout settled as ERROR", extra={"rollout_id": rollout_id, "reason": reason}
                )
        elif record.state == RecordState.FINISHED:
            moved = await self.store.reclaim_delivery(
                rollout_id,
                attempt=record.attempt,
                lease_until=now + self._lease,
                now=now,
                even_if_leased=force,
            )
        else:  # pragma: no cover - every state is handled above
            return record
        if not moved.applied or moved.record is None:
            return moved.record  # someone else holds it and will report it
        return await self.deliver(moved.record, api_key=key)
