"""Delivery: send a rollout's stored final response to TrainGate, and record how it went.

The response is fixed (FINISHED) before the first attempt, so every attempt sends the same body.
The sender holds the record's lease; the outcome is written conditionally on that holding:
DELIVERED on a 2xx, UNDELIVERABLE on a final 4xx (or when the re-drive gives up), else parked
for the re-drive (FINISHED with ``next_attempt_at``, the callback key sealed). It needs only the
store, the TrainGate client and the vault: ``rollout-sdk redrive`` uses it with no agent loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rollout_sdk.engine.costs import NO_COSTS, CostLedger, extra_of
from rollout_sdk.engine.responses import failure_of
from rollout_sdk.errors import FailureCategory
from rollout_sdk.store.record import PROTOCOL_OSMOSIS03, RecordState, RolloutRecord, expiry
from rollout_sdk.telemetry import NO_TELEMETRY, Metric, rollout_scope
from rollout_sdk.traingate.client import DeliveryResult

if TYPE_CHECKING:
    from rollout_sdk.engine.lease import Leases
    from rollout_sdk.engine.progress import StatusBoard
    from rollout_sdk.settings import RolloutSettings
    from rollout_sdk.store.base import Store, TransitionResult
    from rollout_sdk.telemetry import Telemetry
    from rollout_sdk.traingate.client import TrainGateClient
    from rollout_sdk.vault import KeyVault

logger = logging.getLogger("rollout_sdk.engine.delivery")


@dataclass(eq=False, repr=False, kw_only=True)
class Wiring:
    """What delivery and settlement are given by keyword, after their positional three: the
    runtime's leases, vault, clock, telemetry and cost estimate."""

    leases: Leases
    vault: KeyVault | None = None
    clock: Callable[[], float]
    telemetry: Telemetry = NO_TELEMETRY
    #: The cost estimate (on Lambda; nothing on the local server).
    costs: CostLedger = NO_COSTS
    #: Where a pulled (0.3.8) rollout's final record is announced to the polls waiting here.
    board: StatusBoard | None = None


@dataclass(eq=False, repr=False)
class Delivery(Wiring):
    """Sends stored final responses until a 2xx, and never after one."""

    store: Store
    client: TrainGateClient
    settings: RolloutSettings

    @property
    def _ttl(self) -> float:
        return float(self.settings.server.record_ttl_seconds)

    async def deliver(
        self, record: RolloutRecord, *, api_key: str | None, body: bytes | None = None
    ) -> RolloutRecord:
        """Send the stored final response, holding the record's lease; record the outcome.

        Never sends after a 2xx: the caller holds the lease (from finishing, or from claiming the
        delivery), and every outcome is written conditionally on that holding. ``body`` is the
        stored response's encoding, when the caller made it (the worker, as it finishes).
        """
        response = record.response
        if response is None or record.state != RecordState.FINISHED:
            return record
        if record.protocol == PROTOCOL_OSMOSIS03:
            # Pulled, not called back: published for its polls by the move that makes it final
            # (DELIVERED), kept until the record expires (0.3.8's retention).
            published = await self._record(record, DeliveryResult(True, True, 0), api_key)
            if self.board is not None:
                self.board.done(record.rollout_id)
            return published
        server_url = str(record.request["server_url"])
        with rollout_scope(record.rollout_id):
            failure = failure_of(response)
            if failure is not None and failure.get("category") == FailureCategory.OUTBOUND_REFUSED:
                # The callback would go where the chat call was refused: send nothing, even if
                # the name resolves elsewhere now. Final, as the policy's refusal is.
                not_sent = DeliveryResult(
                    False,
                    True,
                    0,
                    error="not sent: the outbound policy refused server_url's address",
                )
                return await self._record(record, not_sent, api_key)
            async with self.leases.holding(
                record.rollout_id,
                record.attempt,
                RecordState.FINISHED,
                watch=self.leases.watches(record),
            ):
                # The stored dump is sent as it is: it is what finish wrote from the validated
                # response, so validating and dumping it again (once per rollout) would only
                # rebuild the same JSON; and its encoding, if the worker made it, as that is.
                result = await self.client.complete_rollout(
                    server_url, response, api_key=api_key, body=body
                )
            return await self._record(record, result, api_key)

    async def _record(
        self, record: RolloutRecord, result: DeliveryResult, api_key: str | None
    ) -> RolloutRecord:
        now = self.clock()
        attempts = record.delivery_attempts + result.attempts
        finished_at = record.finished_at or record.updated_at
        gave_up = now - finished_at >= self.settings.kit.redrive_max_age_seconds
        rollout_id, attempt = record.rollout_id, record.attempt
        ledger = self.costs.entry(
            record
        )  # the rollout's cost so far, written by the move (AWS only)
        if result.delivered:
            pulled = record.protocol == PROTOCOL_OSMOSIS03
            logger.info(
                "result published for polls" if pulled else "callback delivered",
                extra={"rollout_id": rollout_id},
            )
            moved = await self.store.deliver(
                rollout_id,
                attempt=attempt,
                delivery_attempts=attempts,
                expires_at=expiry(now, self._ttl),
                now=now,
                extra=extra_of(ledger),
            )
            if moved.applied:
                self.telemetry.count(Metric.ROLLOUTS_DELIVERED)
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
                expires_at=expiry(now, self._ttl),
                now=now,
                extra=extra_of(ledger),
            )
            if moved.applied:
                self.telemetry.count(Metric.ROLLOUTS_UNDELIVERABLE)
        else:
            logger.warning(
                "callback failed; parked for re-drive",
                extra={"rollout_id": rollout_id, "error": result.error},
            )
            moved = await self._park(record, now, result.error, api_key, attempts)
            if moved.applied and record.next_attempt_at is None:
                # Once per rollout: parked again by the re-drive, it is counted there (re-driven).
                self.telemetry.count(Metric.ROLLOUTS_PARKED)
        self.costs.recorded(
            ledger, moved
        )  # once final, the full figure goes to the sink (RolloutCost)
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
            sealed_key = await self.vault.seal(api_key, rollout_id=record.rollout_id)
        ledger = self.costs.entry(record)  # after sealing: its KMS request is the rollout's too
        return await self.store.park(
            record.rollout_id,
            attempt=record.attempt,
            error=error,
            next_attempt_at=now + float(self.settings.kit.redrive_interval_seconds),
            delivery_attempts=delivery_attempts,
            expires_at=expiry(
                record.finished_at or now, self._ttl + self.settings.kit.redrive_max_age_seconds
            ),
            now=now,
            sealed_key=sealed_key,
            extra=extra_of(ledger),
        )
