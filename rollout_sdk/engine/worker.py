"""The worker: claims a rollout, runs the agent loop, fixes the final response, hands it to delivery.

The same code runs in the local server (through the in-process dispatcher) and in the worker
Lambda. Each step is a conditional move of the record (see :mod:`rollout_sdk.store.record`):

1. claim ACCEPTED -> RUNNING on this attempt, with a short lease that a heartbeat renews while
   the agent runs (:mod:`rollout_sdk.engine.lease`); losing the claim means another delivery of
   the same job owns the rollout, so nothing runs (unless the owner's lease ran out: then the
   owner died, and :mod:`rollout_sdk.engine.settlement` ends the rollout);
2. run the agent under the rollout's deadline; every outcome, exception and timeout included,
   becomes one ``RolloutResponse`` (:mod:`rollout_sdk.engine.responses`);
3. finish RUNNING -> FINISHED, storing that response before any callback (the outbox);
4. deliver it (:mod:`rollout_sdk.engine.delivery`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rollout_sdk.agent.journal import current_journal
from rollout_sdk.agent.loop import (
    RolloutAgentLoop,
    RolloutContext,
    RolloutLLMClient,
    RolloutResult,
)
from rollout_sdk.engine.costs import NO_COSTS, CostLedger
from rollout_sdk.engine.responses import (
    FinalResponse,
    agent_failure,
    error_response,
    failure_of,
    final_form,
    messages_or_empty,
    to_response,
)
from rollout_sdk.errors import FailureCategory, RolloutCancelled, RolloutError, StoreError
from rollout_sdk.protocol import RolloutResponse
from rollout_sdk.store.base import Claim
from rollout_sdk.store.record import PROTOCOL_OSMOSIS03, RecordState, RolloutRecord, expiry
from rollout_sdk.telemetry import (
    NO_TELEMETRY,
    Metric,
    finished_dimensions,
    rollout_scope,
)

if TYPE_CHECKING:
    from rollout_sdk.agent.journal import Journal
    from rollout_sdk.dispatch.base import Job
    from rollout_sdk.engine.cancels import CancelSignals
    from rollout_sdk.engine.delivery import Delivery
    from rollout_sdk.engine.lease import Leases
    from rollout_sdk.engine.settlement import Settlement
    from rollout_sdk.engine.workflows import WorkflowRunner
    from rollout_sdk.settings import RolloutSettings
    from rollout_sdk.store.base import Store, TransitionResult
    from rollout_sdk.telemetry import Telemetry
    from rollout_sdk.traingate.client import TrainGateClient

logger = logging.getLogger("rollout_sdk.engine.worker")


def _cancelled_workflow(rollout_id: str, reason: str | None, attempt: int) -> RolloutResponse:
    """A 0.3.8 rollout cancelled (or whose polling lease ran out) before it started. The 0.3.8
    modules are loaded here, not with the worker: a v1 worker (every Lambda one) never needs
    them."""
    from rollout_sdk.engine.workflows import cancel_outcome, kit_response

    return kit_response(rollout_id, cancel_outcome(reason), attempt=attempt)


@dataclass(eq=False, repr=False)
class RolloutWorker:
    """Runs rollouts of one agent loop: claim, run, finish, then delivery.

    Built by :class:`~rollout_sdk.engine.assembly.Engine`, which gives it the runtime's one
    store, TrainGate client, leases, delivery, settlement and cancel signals.
    """

    agent_loop: RolloutAgentLoop
    _: KW_ONLY
    store: Store
    client: TrainGateClient
    settings: RolloutSettings
    leases: Leases
    delivery: Delivery
    settlement: Settlement
    cancels: CancelSignals
    debug_dir: str | Path | None = None
    clock: Callable[[], float] = time.time
    telemetry: Telemetry = NO_TELEMETRY
    #: The cost estimate (on Lambda; nothing on the local server).
    costs: CostLedger = NO_COSTS
    #: What runs osmosis-ai 0.3.8 rollouts (``rollout-sdk serve --workflow``); None: none here.
    workflows: WorkflowRunner | None = None

    def _ttl(self) -> float:
        return float(self.settings.server.record_ttl_seconds)

    async def run(
        self, job: Job, *, deadline_seconds: float | None = None, journal: Journal | None = None
    ) -> RolloutRecord | None:
        """Run one job to its final record; None when this delivery does not own the rollout.

        ``deadline_seconds`` shortens the rollout's time (the Lambda's remaining time); the
        request-timeout setting bounds it in every mode. A failure of the kit itself (not the
        agent's) still ends the rollout with a reported ERROR. ``journal``: the durable
        worker's record of the rollout (:mod:`rollout_sdk.agent.journal`), through which the
        agent's turns and steps go; a cancel then lets the recorded turns replay and refuses
        the next new one, so the rollout is reported with what it did.
        """
        with rollout_scope(job.rollout_id):
            try:
                return await self._run(job, deadline_seconds, journal)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.exception("the worker failed", extra={"rollout_id": job.rollout_id})
                return await self.settlement.settle(
                    job.rollout_id,
                    reason=f"the worker failed: {type(exc).__name__}: {exc}",
                    # Not the agent's (its failures end in _run_agent): the kit's own.
                    category=exc.category
                    if isinstance(exc, RolloutError)
                    else FailureCategory.INFRASTRUCTURE,
                    api_key=job.api_key,
                    owner_attempt=job.attempt,
                )

    def _budget(self, deadline_seconds: float | None) -> float:
        budget = float(self.settings.server.request_timeout_seconds)
        return budget if deadline_seconds is None else min(budget, deadline_seconds)

    def claim_terms(
        self, attempt: int, now: float, *, deadline_seconds: float | None = None
    ) -> Claim:
        """What this worker's claim of a rollout at ``now`` takes: a lease and an expiry that
        outlives the rollout's budget (the claim move's, or init's when it creates the record
        claimed for a job that starts at once: :meth:`Store.create`)."""
        budget = self._budget(deadline_seconds)
        return Claim(
            attempt=attempt,
            lease_until=self.leases.until(now),
            expires_at=expiry(now, self._ttl() + budget),
        )

    async def _run(
        self, job: Job, deadline_seconds: float | None, journal: Journal | None
    ) -> RolloutRecord | None:
        budget = self._budget(deadline_seconds)
        if job.claimed is not None:
            # Init created the record claimed for this job (it starts at once, here): the
            # claim move is already made, in the same write as the record.
            if not isinstance(job.claimed, RolloutRecord):
                raise TypeError(f"Job.claimed must be a RolloutRecord, not {type(job.claimed)}")
            record = job.claimed
            claimed_at = record.updated_at
        else:
            now = self.clock()
            terms = self.claim_terms(job.attempt, now, deadline_seconds=deadline_seconds)
            claim = await self.store.claim(
                job.rollout_id,
                attempt=terms.attempt,
                lease_until=terms.lease_until,
                expires_at=terms.expires_at,
                now=now,
            )
            if not claim.applied or claim.record is None:
                return await self._claim_lost(job, claim.record)
            record = claim.record
            claimed_at = now
        if journal is None:
            # (A durable rollout counts its start once, at its claim step, not per invocation.)
            self.telemetry.count(Metric.ROLLOUTS_STARTED)
        logger.info("rollout claimed", extra={"rollout_id": job.rollout_id, "attempt": job.attempt})
        if record.cancel_requested and journal is None:
            pulled = record.protocol == PROTOCOL_OSMOSIS03
            final = final_form(
                _cancelled_workflow(job.rollout_id, record.cancel_reason, job.attempt)
                if pulled
                else error_response(
                    job.rollout_id,
                    "rollout cancelled before it started",
                    category=FailureCategory.CANCELLED,
                    attempt=job.attempt,
                ),
                encoded=not pulled,
            )
        else:
            final = await self._execute(record, job, budget, journal)
        watch = self.leases.watches(record)
        try:
            finished, final = await self._finish(job, final, watch=watch)
        except StoreError as exc:
            # The response could not be stored (too large, a store error): store a small ERROR
            # that says why instead, so the rollout still ends with one reported status.
            logger.error(
                "final response not stored; storing an ERROR instead",
                extra={"rollout_id": job.rollout_id, "error": str(exc)},
            )
            stored_instead = error_response(
                job.rollout_id,
                f"the final response could not be stored: {exc}",
                category=FailureCategory.INFRASTRUCTURE,
                attempt=job.attempt,
                metrics=final.model.metrics,
            )
            finished, final = await self._finish(job, final_form(stored_instead), watch=watch)
        if not finished.applied or finished.record is None:
            # Someone else (a recovery) fixed the final response first; theirs stands.
            logger.warning(
                "finish lost; keeping the stored response", extra={"rollout_id": job.rollout_id}
            )
            return finished.record
        failure = failure_of(finished.record.response)
        status = final.model.status.value
        self.telemetry.count(
            Metric.ROLLOUTS_FINISHED,
            **finished_dimensions(status, str(failure["category"]) if failure else None),
        )
        self.telemetry.observe(Metric.ROLLOUT_DURATION, max(0.0, self.clock() - claimed_at))
        logger.info(
            "rollout finished",
            extra={"rollout_id": job.rollout_id, "status": status},
        )
        # The encoding made with the dump is posted as it is, if the record holds that very dump
        # (the memory and SQLite stores return the record they wrote; DynamoDB's copy, read back
        # from the item, is encoded again by the client).
        body = final.body if finished.record.response is final.dump else None
        return await self.delivery.deliver(finished.record, api_key=job.api_key, body=body)

    async def _claim_lost(self, job: Job, current: RolloutRecord | None) -> RolloutRecord | None:
        if current is None:
            # Expired or never created: a job with no record to run is a rollout that will not
            # be reported, so say so loudly.
            logger.error("claim lost; no record to run", extra={"rollout_id": job.rollout_id})
            return None
        if current.state in (RecordState.RUNNING, RecordState.FINISHED):
            # Another delivery of this job owns the rollout, or owned it and died: a live owner
            # renews its lease every heartbeat, a dead one lets it run out.
            return await self.settlement.watch_owner(job, current)
        logger.info(
            "claim lost; nothing to run",
            extra={"rollout_id": job.rollout_id, "state": current.state.value},
        )
        return None

    async def _finish(
        self, job: Job, final: FinalResponse, *, watch: bool
    ) -> tuple[TransitionResult, FinalResponse]:
        """RUNNING -> FINISHED on this job's attempt, with the final response and the lease for
        delivering it (watched by the re-drive when ``watch``); the move's result, and the
        response as stored (with what it cost so far, on AWS)."""
        estimated = self.costs.with_estimate(final.model)
        if estimated is not final.model:
            # Metered (on AWS): the estimate is part of what is stored; DynamoDB returns the
            # item read back, so an encoding made here would never be posted.
            final = final_form(estimated, encoded=False)
        now = self.clock()
        finished = await self.store.finish(
            job.rollout_id,
            attempt=job.attempt,
            response=final.dump,
            lease_until=self.leases.until(now),
            expires_at=expiry(now, self._ttl()),
            now=now,
            watch=watch,
        )
        return finished, final

    async def _execute(
        self, record: RolloutRecord, job: Job, budget: float, journal: Journal | None
    ) -> FinalResponse:
        with self.cancels.watching(job.rollout_id) as cancelled:
            seen = record

            def note_cancel(current: RolloutRecord) -> None:
                nonlocal seen
                if current.cancel_requested:
                    seen = current  # with its reason (a 0.3.8 polling lease that ran out)
                    cancelled.set()

            note_cancel(record)  # requested before this run (a durable rollout's replay)

            async with self.leases.holding(
                job.rollout_id,
                job.attempt,
                RecordState.RUNNING,
                note_cancel,
                watch=self.leases.watches(record),
            ):
                if record.protocol == PROTOCOL_OSMOSIS03:
                    return final_form(
                        await self._run_workflow(record, job, budget, cancelled, lambda: seen),
                        encoded=False,  # published for its polls, never posted
                    )
                if journal is None:
                    return await self._run_agent(record, job, budget, cancelled, None)
                journal.bind(cancelled)
                token = current_journal.set(journal)
                try:
                    return await self._run_agent(record, job, budget, cancelled, journal)
                finally:
                    current_journal.reset(token)

    async def _run_workflow(
        self,
        record: RolloutRecord,
        job: Job,
        budget: float,
        cancelled: asyncio.Event,
        latest: Callable[[], RolloutRecord],
    ) -> RolloutResponse:
        """An osmosis-ai 0.3.8 rollout: its workflow and grader (rollout_sdk/engine/workflows.py)."""
        if self.workflows is None:
            return error_response(
                job.rollout_id,
                "this server runs no osmosis-ai 0.3.8 workflow (rollout-sdk serve --workflow)",
                category=FailureCategory.INFRASTRUCTURE,
                attempt=job.attempt,
            )
        response = await self.workflows.run(
            record,
            api_key=job.api_key,
            attempt=job.attempt,
            budget=budget,
            cancelled=cancelled,
            cancel_reason=lambda: latest().cancel_reason or self.cancels.reason(job.rollout_id),
        )
        return response

    async def _run_agent(
        self,
        record: RolloutRecord,
        job: Job,
        budget: float,
        cancelled: asyncio.Event,
        journal: Journal | None,
    ) -> FinalResponse:
        # One piece on purpose (over 80 lines): the deadline, the agent's exceptions, a failure
        # the LLM client ended the rollout with, and a result the protocol cannot carry decide
        # one outcome in this order of precedence, which reads top to bottom only here.
        started = time.perf_counter()
        # Validated once: init's models when the job never left this process (same content as
        # the stored copy, which is validated again only after a hand-off or a restart).
        request = job.request if job.request is not None else record.rollout_request(job.api_key)
        init_response = job.init_response or record.init_response_model()
        tools = init_response.tools
        llm = RolloutLLMClient(
            self.client,
            server_url=request.server_url,
            rollout_id=request.rollout_id,
            api_key=job.api_key,
            journal=journal,
        )
        ctx = RolloutContext(
            request, tools, llm, debug_dir=self.debug_dir, cancelled=cancelled, journal=journal
        )
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
                outcome = agent_failure(
                    request.rollout_id, exc, ctx.last_messages, attempt=job.attempt
                )
            else:
                outcome = error_response(
                    request.rollout_id,
                    f"rollout exceeded its deadline of {budget:g} s "
                    "(OSMOSIS_ROLLOUT_SERVER_REQUEST_TIMEOUT_SECONDS)",
                    category=FailureCategory.TIMEOUT,
                    attempt=job.attempt,
                    final_messages=ctx.last_messages,
                )
        except RolloutCancelled:
            outcome = error_response(
                request.rollout_id,
                "rollout cancelled",
                category=FailureCategory.CANCELLED,
                attempt=job.attempt,
                final_messages=ctx.last_messages,
            )
        except Exception as exc:  # the agent's own failure becomes an ERROR result
            outcome = agent_failure(request.rollout_id, exc, ctx.last_messages, attempt=job.attempt)
        ended_by = llm.ended_by or (journal.ended_by if journal is not None else None)
        if ended_by is not None:
            # Whatever the agent made of it (it may have caught the exception), the rollout
            # ends in that failure's category: a refused address, an answer over the cap, on
            # the durable worker its deadline or a diverging replay.
            outcome = error_response(
                request.rollout_id,
                str(ended_by),
                category=ended_by.category,
                attempt=job.attempt,
                final_messages=ctx.last_messages,
            )
        elapsed_ms = (time.perf_counter() - started) * 1000
        try:
            return to_response(
                request.rollout_id, outcome, ctx.metrics, elapsed_ms, attempt=job.attempt
            )
        except (ValueError, TypeError) as exc:
            # A result the protocol cannot carry (a lowercase status, a NaN reward, messages
            # that are not objects) must still end the rollout: report why, as an ERROR.
            logger.warning(
                "agent result rejected", extra={"rollout_id": request.rollout_id, "error": str(exc)}
            )
            metrics = ctx.metrics.model_copy(update={"total_latency_ms": elapsed_ms})
            return final_form(
                error_response(
                    request.rollout_id,
                    f"the agent's result cannot be sent: {exc}",
                    category=FailureCategory.INVALID_RESULT,
                    attempt=job.attempt,
                    final_messages=messages_or_empty(ctx.last_messages),
                    metrics=metrics,
                )
            )
