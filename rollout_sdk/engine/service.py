"""Init, as the app and the Lambda handler both run it: input rules, claim, hand-off, 202 body."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rollout_sdk.engine.lease import Leases
from rollout_sdk.engine.no_v1 import NOT_V1, NoV1AgentLoop
from rollout_sdk.engine.responses import failure_of
from rollout_sdk.engine.rules import AgentTools, check_metadata_size, check_server_url
from rollout_sdk.errors import (
    DispatchError,
    FailureCategory,
    IdempotencyConflict,
    ProtocolNotServed,
    RolloutAlreadyFinished,
    RolloutNotFound,
)
from rollout_sdk.protocol import (
    ROLLOUT_ID_MAX_BYTES,
    ROLLOUT_ID_MAX_CHARS,
    InitResponse,
    RolloutRequest,
    rollout_id_fits,
)
from rollout_sdk.store.record import (
    MAX_HANDOFF_WAIT_SECONDS,
    RecordState,
    RolloutRecord,
    differing_fields,
    expiry,
)
from rollout_sdk.telemetry import NO_TELEMETRY, Metric, Span, rollout_scope
from rollout_sdk.traingate.outbound import OutboundPolicy, Reach

if TYPE_CHECKING:
    from rollout_sdk.agent.loop import RolloutAgentLoop
    from rollout_sdk.dispatch.base import Dispatcher
    from rollout_sdk.engine.assembly import Engine
    from rollout_sdk.settings import RolloutSettings
    from rollout_sdk.store.base import Claim, CreateResult, Store
    from rollout_sdk.telemetry import Telemetry

from rollout_sdk.dispatch.base import Job, Reserving

logger = logging.getLogger("rollout_sdk.engine.service")


def slot_expiry(now: float, settings: RolloutSettings) -> int:
    """How long an idempotency slot taken at ``now`` is kept: as long as its record can live,
    however its moves extend it (the longest wait for a worker, the run, the re-drive's age
    limit, then the record TTL after the last move, and a lease of slack). A slot that outlives
    its record is free for the next create."""
    ttl = float(settings.server.record_ttl_seconds)
    return expiry(
        now,
        MAX_HANDOFF_WAIT_SECONDS
        + float(settings.server.request_timeout_seconds)
        + float(settings.kit.redrive_max_age_seconds)
        + ttl
        + float(settings.kit.lease_seconds),
    )


class RolloutService:
    """Accepts rollouts: one record per rollout, one hand-off per record."""

    def __init__(
        self,
        agent_loop: RolloutAgentLoop,
        store: Store,
        dispatcher: Dispatcher,
        settings: RolloutSettings,
        *,
        engine: Engine | None = None,
        seal_at_init: bool = False,
        outbound: OutboundPolicy | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.agent_loop = agent_loop
        self.tools = AgentTools(agent_loop)
        self.store = store
        self.dispatcher = dispatcher
        # Checked once: isinstance against a runtime-checkable protocol looks up each of its
        # members, about 1% of the local server's CPU when it ran on every init.
        self._reserving = dispatcher if isinstance(dispatcher, Reserving) else None
        self.settings = settings
        #: What cancel needs: the vault, the cancel signals of this process, settlement.
        self.engine = engine
        #: Keep the callback key (sealed) in the record from init on: the local server does, so
        #: that its restart sweep and cancel can report rollouts no process holds any more.
        self.seal_at_init = seal_at_init
        #: What init checks ``server_url`` against: the policy the engine's client connects
        #: under (without an engine, the local default).
        self.outbound = outbound or (
            engine.client.policy
            if engine is not None
            else OutboundPolicy.from_settings(settings.kit, where=Reach.PRIVATE)
        )
        self.clock = clock

    @property
    def telemetry(self) -> Telemetry:
        """The engine's telemetry (none without an engine)."""
        return self.engine.telemetry if self.engine is not None else NO_TELEMETRY

    async def init(self, request: RolloutRequest) -> InitResponse:
        """Accept ``request`` once; a duplicate gets the stored body and starts nothing.

        Raises PayloadTooLarge, ServerUrlRefused, AgentToolsError, IdempotencyConflict,
        DispatchError, StoreError.
        """
        with rollout_scope(request.rollout_id):
            return await self._init(request)

    async def _init(self, request: RolloutRequest) -> InitResponse:
        if isinstance(self.agent_loop, NoV1AgentLoop):
            raise ProtocolNotServed(NOT_V1)
        # The input rules, in order, before anything is stored: metadata size, server_url, tools.
        check_metadata_size(request, self.settings.max_metadata_size_bytes)
        check_server_url(request.server_url, self.outbound)
        tools = self.tools.for_request(request)
        init_response = InitResponse(rollout_id=request.rollout_id, tools=tools)
        now = self.clock()
        record = RolloutRecord.new(
            request,
            init_response,
            now=now,
            ttl_seconds=self.settings.server.record_ttl_seconds,
        )

        def job(claimed: RolloutRecord | None) -> Job:
            return Job(
                request.rollout_id,
                1,
                request.api_key,
                request=request,
                init_response=init_response,
                claimed=claimed,
            )

        created = await self.admit(record, api_key=request.api_key, job=job, now=now)
        if not created.created:
            return await self._duplicate(record, created.record, created.conflict_on, request)
        return init_response

    async def admit(
        self,
        record: RolloutRecord,
        *,
        api_key: str | None,
        job: Callable[[RolloutRecord | None], Job],
        now: float,
    ) -> CreateResult:
        """Store ``record`` (``api_key`` sealed into it where this process keeps keys) and hand
        its job (``job``, given the record when it was created claimed) to a worker, whichever
        protocol it came in on. Not created (a live record holds its slot or id): nothing is
        handed off, and the result says who holds it. A failed hand-off releases the record
        (DispatchError, Overloaded)."""
        vault = self.engine.vault if self.engine is not None else None
        if self.seal_at_init and vault is not None and api_key is not None:
            sealed = await vault.seal(api_key, rollout_id=record.rollout_id)
            record = record.evolve(sealed_key=sealed)
        # A job that will start at once here (a free slot, reserved now) gets its record
        # created claimed: one write instead of a create and then the worker's claim.
        claim = await self._reserve(now)
        try:
            with self.telemetry.span(Span.CLAIM, rollout_id=record.rollout_id):
                created = await self.store.create(
                    record, now=now, slot_expires_at=slot_expiry(now, self.settings), claim=claim
                )
        except BaseException:
            self._unreserve(claim)
            raise
        if not created.created:
            self._unreserve(claim)
            return created
        if claim is not None and self.engine is not None:
            # RUNNING already, before its worker starts: a cancel meanwhile must reach it.
            self.engine.cancels.expect(record.rollout_id)
        try:
            await self._dispatch(job(created.record if claim is not None else None))
        except DispatchError:
            # (A claimed record is not released, being RUNNING: its lease runs out and the
            # recovery ends it with an ERROR that is reported. Only a dispatcher shutting down
            # between the reservation and here refuses a claimed job.)
            # Without a worker the record would wait forever: release it so TrainGate's retry
            # of this init dispatches afresh. A duplicate that has handed the rollout off in
            # the meantime keeps the record (release is conditional on no such hand-off).
            released = await self.store.release(
                record.rollout_id, slot=record.slot, now=self.clock()
            )
            logger.error(
                "hand-off failed",
                extra={"rollout_id": record.rollout_id, "claim_released": released},
            )
            raise
        self.telemetry.count(Metric.ROLLOUTS_ACCEPTED)
        logger.info("rollout accepted", extra={"rollout_id": record.rollout_id})
        return created

    async def _reserve(self, now: float) -> Claim | None:
        """The claim init makes for a job that starts at once here, its slot reserved; None
        when the dispatcher cannot promise that (no free slot, or it runs jobs elsewhere)."""
        worker = self.engine.worker if self.engine is not None else None
        if worker is None or self._reserving is None:
            return None
        if not await self._reserving.reserve():
            return None
        return worker.claim_terms(1, now)

    def _unreserve(self, claim: Claim | None) -> None:
        if claim is not None and self._reserving is not None:
            self._reserving.unreserve()

    async def _dispatch(self, job: Job) -> None:
        try:
            with self.telemetry.span(Span.HAND_OFF, rollout_id=job.rollout_id):
                await self.dispatcher.dispatch(job)
        except DispatchError:
            raise
        except Exception as exc:
            raise DispatchError(f"could not hand the rollout to a worker: {exc}") from exc

    async def _duplicate(
        self,
        incoming: RolloutRecord,
        holder: RolloutRecord,
        conflict_on: str | None,
        request: RolloutRequest,
    ) -> InitResponse:
        if holder.slot == incoming.slot:
            conflict_on = "slot"  # the same slot, whichever item a store found first
        if conflict_on == "slot" and holder.fingerprint == incoming.fingerprint:
            if holder.state == RecordState.ACCEPTED:
                await self._hand_off_again(holder, request)
            return holder.init_response_model()
        if conflict_on == "slot":
            fields = differing_fields(holder.request, incoming.request)
            what = (
                f"idempotency_key {incoming.request.get('idempotency_key')!r}"
                if incoming.slot.startswith("key:")
                else f"rollout_id {incoming.rollout_id!r}"
            )
            fix = (
                "a new rollout needs a new idempotency_key and its own rollout_id"
                if incoming.slot.startswith("key:")
                else "a new rollout needs a rollout_id of its own"
            )
            raise IdempotencyConflict(
                f"{what} was already used by a different request; fields that differ: "
                f"{', '.join(fields)}. Sending the same request again is answered with the "
                f"stored 202; {fix}.",
                fields,
            )
        raise IdempotencyConflict(
            f"rollout_id {incoming.rollout_id!r} is already in use by a rollout under another "
            "idempotency key; each rollout needs its own rollout_id",
            ["rollout_id"],
        )

    async def _hand_off_again(self, holder: RolloutRecord, request: RolloutRequest) -> None:
        """A duplicate of a rollout no worker has claimed yet hands it off too, at most once per
        hand-off lease however many duplicates arrive.

        The first init's hand-off may still fail and release the record after this duplicate
        answered 202, which would lose the rollout. So the duplicate takes the record's hand-off
        lease (which makes the release a no-op), seals the callback key into the record, and
        dispatches the job itself; the worker's claim makes sure only one of the jobs runs. With
        the key sealed, the record is due for the re-drive when that lease runs out, so if this
        hand-off fails too the re-drive hands the rollout off again: this init can answer 202
        either way. Duplicates that find the lease held answer 202 and hand nothing off. A
        rotated callback key travels with the new job.
        """
        now = self.clock()
        if not holder.lease_free(now):
            return  # another duplicate handed it off within this lease
        vault = self.engine.vault if self.engine is not None else None
        sealed = None
        if request.api_key is not None and vault is not None:
            sealed = await vault.seal(request.api_key, rollout_id=holder.rollout_id)
        watched = Leases.watches(holder, sealing=sealed, keyless=request.api_key is None)
        marked = await self.store.mark_handoff(
            holder.rollout_id,
            count=holder.handoffs + 1,
            lease_until=now + float(self.settings.kit.lease_seconds),
            sealed_key=sealed,
            watch=watched,
            now=now,
        )
        if not marked.applied:
            if marked.record is None:
                # The first init's hand-off failed and released the claim: this init did not
                # start the rollout either, and must say so.
                raise DispatchError("the rollout's hand-off failed")
            return  # claimed meanwhile, or another duplicate took the lease first
        try:
            await self._dispatch(Job(request.rollout_id, 1, request.api_key, request=request))
        except DispatchError as exc:
            if not watched:
                raise  # no sealed key: nothing could hand it off later; TrainGate retries
            logger.warning(
                "a duplicate's hand-off failed; the re-drive hands the rollout off again",
                extra={"rollout_id": holder.rollout_id, "error": str(exc)},
            )
            return
        await self.store.handed_off(holder.rollout_id, expires_at=holder.expires_at, now=now)

    # ------------------------------------------------------------------ status and cancel

    async def status(self, rollout_id: str) -> RolloutRecord:
        """The live record; RolloutNotFound when there is none.

        An id no init could have stored (over ``rollout_id``'s limits) is not looked up: it is
        unknown, and a store would refuse its key (DynamoDB's: a 503 that no retry changes)."""
        if not rollout_id_fits(rollout_id):
            raise RolloutNotFound(
                f"no rollout is known under an id of {len(rollout_id)} characters: a rollout_id "
                f"has at most {ROLLOUT_ID_MAX_CHARS} characters and {ROLLOUT_ID_MAX_BYTES} bytes"
            )
        record = await self.store.get(rollout_id, now=self.clock())
        if record is None:
            raise RolloutNotFound(
                f"no rollout {rollout_id!r} is known here (or its record expired)"
            )
        return record

    async def cancel(self, rollout_id: str) -> RolloutRecord:
        """Stop a rollout before its next turn and report it once, as ERROR "cancelled".

        A rollout not started yet is reported without running: at once when this process holds
        its callback key (the local server), else by the worker when it claims it. Raises
        RolloutNotFound, or RolloutAlreadyFinished when it already has its final response.
        """
        record = await self.status(rollout_id)
        if record.state.has_response:
            raise RolloutAlreadyFinished(
                f"rollout {rollout_id!r} already has its final response ({record.state.value}); "
                "there is nothing to cancel"
            )
        now = self.clock()
        marked = await self.store.request_cancel(rollout_id, now=now)
        if not marked.applied or marked.record is None:
            return await self.cancel(rollout_id)  # it moved on meanwhile: answer for its new state
        logger.info("cancel requested", extra={"rollout_id": rollout_id})
        if self.engine is None:
            return marked.record
        # Running in this process: signalled, it stops before its next turn.
        running_here = self.engine.cancels.signal(rollout_id)
        if (
            not running_here
            and marked.record.state == RecordState.ACCEPTED
            and marked.record.sealed_key
        ):
            settled = await self.engine.settlement.settle(
                rollout_id,
                reason="rollout cancelled before it started",
                category=FailureCategory.CANCELLED,
            )
            return settled or marked.record
        return marked.record


def record_status(record: RolloutRecord) -> dict[str, Any]:
    """What ``GET /v1/rollout/{rollout_id}`` answers: the record, minus the request and keys."""
    response = record.response or {}
    return {
        "rollout_id": record.rollout_id,
        "state": record.state.value,
        "status": response.get("status"),
        "finish_reason": response.get("finish_reason"),
        "error_message": response.get("error_message"),
        # An ERROR's category, whether retrying could succeed, and the attempt (docs/operations.md).
        "failure": failure_of(record.response),
        "reward": response.get("reward"),
        "metrics": response.get("metrics"),
        "attempt": record.attempt,
        "cancel_requested": record.cancel_requested,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "finished_at": record.finished_at,
        "expires_at": record.expires_at,
        "delivered": record.state == RecordState.DELIVERED,
        "delivered_at": record.delivered_at,
        "delivery_attempts": record.delivery_attempts,
        "next_attempt_at": record.next_attempt_at,
        "last_error": record.last_error,
        # The rollout's cost so far, on AWS (docs/cost.md, "Per-rollout estimate").
        "cost": record.extra.get("cost"),
    }
