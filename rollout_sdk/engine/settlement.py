"""Settlement: end a rollout whose worker failed or died, once.

The stored response is sent if there is one, else an ERROR naming the failure. Every path goes
through the store's conditional moves, so a rollout gets one final response however many
recoverers race (the worker's own failure path, a redelivered event watching a lease, the
on-failure destination, the dead-letter queue, the restart sweep, the re-drive, a cancel).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rollout_sdk.engine.delivery import Delivery, Wiring
from rollout_sdk.engine.responses import error_response
from rollout_sdk.errors import FailureCategory, StoreError
from rollout_sdk.store.record import RecordState, RolloutRecord, expiry
from rollout_sdk.telemetry import (
    Metric,
    finished_dimensions,
    rollout_scope,
)

if TYPE_CHECKING:
    from rollout_sdk.dispatch.base import Job
    from rollout_sdk.dispatch.sealed import QueuedJob
    from rollout_sdk.settings import RolloutSettings
    from rollout_sdk.store.base import Store

logger = logging.getLogger("rollout_sdk.engine.settlement")

#: Failures of a worker that, on a record no worker claimed, mean the rollout never started.
_LOST = (FailureCategory.WORKER_LOST, FailureCategory.INFRASTRUCTURE)

#: Why a rollout is settled when the delivery that owned it stopped without a word.
OWNER_STOPPED = "the worker that ran this rollout stopped before reporting it"


@dataclass(eq=False, repr=False)
class Settlement(Wiring):
    """Settles rollouts whose worker failed or died; sends what it settles through delivery."""

    store: Store
    delivery: Delivery
    settings: RolloutSettings

    async def open_key(self, record: RolloutRecord) -> str | None:
        """The record's sealed callback key, opened (None when it holds none); StoreError when
        it cannot be opened, a key sealed for another rollout among them."""
        if record.sealed_key is None or self.vault is None:
            return None
        return await self.vault.open(record.sealed_key, rollout_id=record.rollout_id)

    async def open_queued(self, queued: QueuedJob, *, then: str) -> Job | None:
        """A queued job with its callback key opened (one KMS ``Decrypt`` when sealed).

        None when the key cannot be opened but the rollout needs it no more (reported already,
        parked with its own sealed key for the re-drive, or its record gone): the message can
        go, rather than fail until SQS drops it. Otherwise a key that cannot be opened raises
        StoreError, after an error log naming the rollout and ``then`` (what happens next).
        """
        try:
            return await queued.open(self.vault)
        except StoreError as exc:
            record = await self.store.get(queued.rollout_id, now=self.clock())
            final = record is None or record.state in (
                RecordState.DELIVERED,
                RecordState.UNDELIVERABLE,
            )
            parked = (
                record is not None
                and record.state == RecordState.FINISHED
                and record.sealed_key is not None
            )
            if final or parked:
                logger.warning(
                    "callback key cannot be opened, but the rollout needs it no more",
                    extra={"rollout_id": queued.rollout_id, "error": str(exc)},
                )
                return None
            logger.error(
                f"callback key cannot be opened; {then}",
                extra={"rollout_id": queued.rollout_id, "error": str(exc)},
            )
            raise

    async def settle(
        self,
        rollout_id: str,
        *,
        reason: str,
        api_key: str | None = None,
        owner_attempt: int | None = None,
        force: bool = False,
        category: FailureCategory = FailureCategory.WORKER_LOST,
    ) -> RolloutRecord | None:
        """End a rollout whose worker failed or died, once: send its stored response if it has
        one, else fix an ERROR naming ``reason`` and send that.

        A running rollout is taken over only when its lease ran out, or ``force`` (its process
        is known dead), or it is ``owner_attempt``'s own. The callback key is ``api_key`` or the
        record's sealed one. Returns the record as it ends up.
        """
        record, _ = await self.settle_once(
            rollout_id,
            reason=reason,
            api_key=api_key,
            owner_attempt=owner_attempt,
            force=force,
            category=category,
        )
        return record

    async def settle_once(
        self,
        rollout_id: str,
        *,
        reason: str,
        api_key: str | None = None,
        owner_attempt: int | None = None,
        force: bool = False,
        category: FailureCategory = FailureCategory.WORKER_LOST,
        current: RolloutRecord | None = None,
        due_only: bool = False,
    ) -> tuple[RolloutRecord | None, bool]:
        """:meth:`settle`, and whether this call was the one that took the record and sent its
        response (False: it was final already, or someone else holds it). Recovery reports
        count only what they did, so two re-drives at once never both count one rollout.

        ``current`` is the record as the caller just read it (consistently), to save a read;
        ``due_only`` takes a stored response over only while it is due (the re-drive)."""
        with rollout_scope(rollout_id):
            now = self.clock()
            record = current if current is not None else await self.store.get(rollout_id, now=now)
            if record is None:
                logger.error("nothing to settle; no record", extra={"rollout_id": rollout_id})
                return None, False
            if record.state in (RecordState.DELIVERED, RecordState.UNDELIVERABLE):
                return record, False
            key = api_key if api_key is not None else await self.open_key(record)
            if record.state in (RecordState.ACCEPTED, RecordState.RUNNING):
                mine = owner_attempt is not None and record.attempt == owner_attempt
                if record.state == RecordState.ACCEPTED and category in _LOST:
                    category = FailureCategory.NEVER_STARTED  # no worker ever claimed it
                moved = await self.store.settle(
                    rollout_id,
                    attempt=record.attempt,
                    response=self.costs.with_estimate(  # what it cost so far (on AWS)
                        error_response(
                            rollout_id, reason, category=category, attempt=record.attempt
                        )
                    ),
                    lease_until=self.leases.until(now),
                    expires_at=expiry(now, float(self.settings.server.record_ttl_seconds)),
                    now=now,
                    even_if_leased=force or mine,
                    watch=self.leases.watches(record),
                )
                if moved.applied:
                    self.telemetry.count(
                        Metric.ROLLOUTS_FINISHED, **finished_dimensions("ERROR", category.value)
                    )
                    logger.error(
                        "rollout settled as ERROR",
                        extra={"rollout_id": rollout_id, "reason": reason},
                    )
            elif record.state == RecordState.FINISHED:
                moved = await self.store.reclaim_delivery(
                    rollout_id,
                    attempt=record.attempt,
                    lease_until=self.leases.until(now),
                    now=now,
                    even_if_leased=force,
                    watch=self.leases.watches(record),
                    due_by=now if due_only else None,
                )
            else:  # pragma: no cover - every state is handled above
                return record, False
            if not moved.applied or moved.record is None:
                return moved.record, False  # someone else holds it and will report it
            return await self.delivery.deliver(moved.record, api_key=key), True

    async def report_failed_job(self, job: Job, *, reason: str) -> RolloutRecord | None:
        # The worker stopped (or, when the record is still ACCEPTED, never started): the
        # category follows from the record's state in settle_once.
        """A job AWS gave up on (the on-failure destination, the dead-letter queue): settle its
        rollout once, naming ``reason``. When a live lease holds the record (a delivery of the
        job still runs it, or died moments ago), wait for the lease to be renewed or run out
        first. Returns the record as it ends up."""
        record, acted = await self.settle_once(job.rollout_id, reason=reason, api_key=job.api_key)
        held = record is not None and record.state in (RecordState.RUNNING, RecordState.FINISHED)
        if held and not acted:
            # Refused for a lease that was live when the move was judged: it may be live still,
            # or have run out since, and then nobody else would settle it. The watch settles
            # it once the lease is free, or leaves it to an owner that renews it. (A rollout
            # this call delivered, or parked when its callback failed, is left as it is.)
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
        return await self.watch_owner(job, current, reason=reason)

    async def watch_owner(
        self, job: Job, current: RolloutRecord, *, reason: str = OWNER_STOPPED
    ) -> RolloutRecord | None:
        """Wait until the owner reports (None), renews its lease (None: it is alive), or lets the
        lease run out (it died: settle the rollout with this job's callback key)."""
        poll = min(1.0, self.leases.heartbeat_seconds / 4)
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
