"""Recovery: the restart sweep of a local server, and the re-drive of what waits.

Both find their work through the store's due index (:meth:`Store.due`), never by reading the
whole store, and read each record again, consistently, before acting on it: a listing is a hint.

- :meth:`Recovery.sweep_after_restart`: a local server owns its records (its state folder's lock
  and owner id say so), so at start-up every record of its own still in flight belongs to a
  process that died. Each is reported once, with an ERROR naming the restart, and never run
  again; a FINISHED one is sent as stored; a parked one is left to the re-drive.
- :meth:`Recovery.redrive`: what is due (the re-drive loop of the local server, the scheduled
  function on AWS, and ``rollout-sdk redrive``): a parked response whose next try has come is
  sent again; a watched lease that ran out (its holder died; the record holds the sealed key) is
  settled; a rollout still waiting for its worker whose extra hand-off failed is handed off
  again (at most once per hand-off lease, the lease doubling each time), or reported as an
  ERROR once it is older than ``ROLLOUT_SDK_REDRIVE_MAX_AGE_SECONDS`` or its record is about to
  expire. A pass is exclusive (a
  lease item in the store), starts no new work after ``ROLLOUT_SDK_REDRIVE_PASS_SECONDS``, and
  sends ``ROLLOUT_SDK_REDRIVE_CONCURRENCY`` at once.

Every action goes through a conditional move (settlement's, or the hand-off lease), so concurrent
recoverers are harmless: one of them holds the record and reports, the others find it held.
"""

from __future__ import annotations

import asyncio
import logging
import math
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING

from rollout_sdk.dispatch.base import Job
from rollout_sdk.engine.costs import NO_COSTS, CostLedger
from rollout_sdk.errors import DispatchError, FailureCategory, RolloutError
from rollout_sdk.store.record import RecordState, RolloutRecord
from rollout_sdk.telemetry import NO_TELEMETRY, Metric, rollout_scope

if TYPE_CHECKING:
    from rollout_sdk.engine.settlement import Settlement
    from rollout_sdk.settings import KitSettings
    from rollout_sdk.store.base import DueCursor, Store
    from rollout_sdk.telemetry import Telemetry

logger = logging.getLogger("rollout_sdk.engine.recovery")

RESTART_REASON = (
    "the rollout server stopped while this rollout was in flight; it is reported, not run again"
)
LEASE_REASON = "the worker running this rollout stopped (its lease ran out) before reporting it"
NEVER_STARTED_REASON = (
    "the rollout could not be handed to a worker (every hand-off failed) before the re-drive "
    "gave up on it"
)
#: The lease item that makes re-drive passes exclusive.
PASS_NAME = "redrive"  # noqa: S105 - a lease item's name, not a secret
#: A re-drive's re-hand-off lease doubles each time, up to this many lease periods.
MAX_HANDOFF_BACKOFF = 16

HandOff = Callable[["Job"], Awaitable[None]]


@dataclass
class RecoveryReport:
    """What one pass did, by rollout id."""

    examined: int = 0
    delivered: list[str] = field(default_factory=list)
    parked: list[str] = field(default_factory=list)
    undeliverable: list[str] = field(default_factory=list)
    handed_off: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    #: Another pass held the pass lease: this one did nothing.
    busy: bool = False
    #: The pass stopped at its time budget with due records left for the next one.
    cut_short: bool = False
    #: Seconds since finished_at of the oldest parked response the pass read (0: none).
    oldest_parked_age: float = 0.0

    def add(self, rollout_id: str, outcome: RolloutRecord | None) -> None:
        """Count one rollout by the state this pass left it in; None: this pass did nothing to
        it (final already, or another recoverer held it), so it is skipped."""
        if outcome is None or outcome.state in (RecordState.ACCEPTED, RecordState.RUNNING):
            self.skipped.append(rollout_id)
        elif outcome.state == RecordState.DELIVERED:
            self.delivered.append(rollout_id)
        elif outcome.state == RecordState.UNDELIVERABLE:
            self.undeliverable.append(rollout_id)
        else:
            self.parked.append(rollout_id)

    def summary(self) -> str:
        """One line for logs and the CLI."""
        if self.busy:
            return "another re-drive pass is running; this one did nothing"
        return (
            f"examined {self.examined}: delivered {len(self.delivered)}, parked again "
            f"{len(self.parked)}, undeliverable {len(self.undeliverable)}, handed off again "
            f"{len(self.handed_off)}, skipped {len(self.skipped)}, failed {len(self.failed)}"
            + ("; stopped at the time budget, more is due" if self.cut_short else "")
        )


@dataclass(frozen=True, eq=False, repr=False)
class Recovery:
    """Sweeps and re-drives over one store, through settlement.

    ``hand_off`` (a dispatcher's ``dispatch``) re-hands-off rollouts whose extra hand-off failed;
    without one (``rollout-sdk redrive`` runs no workers) they are left for a recoverer that has
    one, until they are old enough to be reported as never started.
    """

    settlement: Settlement
    _: KW_ONLY
    store: Store
    clock: Callable[[], float]
    page: int = 100
    #: How this recovery hands a rollout off again (given at construction, never after).
    hand_off: HandOff | None = None
    telemetry: Telemetry = NO_TELEMETRY
    #: The cost estimate (on Lambda; nothing on the local server).
    costs: CostLedger = NO_COSTS

    @property
    def _kit(self) -> KitSettings:
        return self.settlement.settings.kit

    # ------------------------------------------------------------------ the restart sweep

    async def sweep_after_restart(self) -> RecoveryReport:
        """Report every rollout of this store's owner that the previous process left in flight
        (a local server, at start-up)."""
        report = RecoveryReport()
        cursor: DueCursor | None = None
        while True:
            page = await self.store.due(
                now=self.clock(), until=math.inf, limit=self.page, after=cursor
            )
            for rollout_id in page.rollout_ids:
                record = await self.store.get(rollout_id, now=self.clock())
                if record is None or record.state in (
                    RecordState.DELIVERED,
                    RecordState.UNDELIVERABLE,
                ):
                    continue
                if record.state == RecordState.FINISHED and record.next_attempt_at is not None:
                    continue  # parked: the re-drive sends it when it is due
                await self._settle(record, RESTART_REASON, report, force=True)
            if page.cursor is None:
                break
            cursor = page.cursor
        if report.examined:
            logger.warning("restart sweep: %s", report.summary())
        return report

    # ------------------------------------------------------------------ the re-drive

    async def redrive(
        self, *, budget_seconds: float | None = None, limit: int | None = None
    ) -> RecoveryReport:
        """One pass over what is due now, alone (the pass lease), within ``budget_seconds``
        (default ``ROLLOUT_SDK_REDRIVE_PASS_SECONDS``), acting on at most ``limit`` records."""
        report = RecoveryReport()
        budget = float(self._kit.redrive_pass_seconds if budget_seconds is None else budget_seconds)
        start = self.clock()
        holder = uuid.uuid4().hex
        # The lease outlives the budget by a lease period: work started just before the budget
        # ends may finish a little after it. A pass that dies holding it blocks others that long.
        lease_until = start + budget + self.settlement.leases.seconds
        if not await self.store.acquire_pass(
            PASS_NAME, holder=holder, until=lease_until, now=start
        ):
            report.busy = True
            logger.info("re-drive: %s", report.summary())
            return report
        try:
            await self._drain(report, start, start + budget, limit)
        finally:
            await self.store.release_pass(PASS_NAME, holder=holder)
        # Every pass that ran, so an alarm on its maximum sees the age fall back to 0.
        self.telemetry.observe(Metric.OLDEST_PARKED_AGE, report.oldest_parked_age)
        if report.examined:
            logger.info("re-drive: %s", report.summary())
        return report

    async def _drain(
        self, report: RecoveryReport, now: float, deadline: float, limit: int | None
    ) -> None:
        gate = asyncio.Semaphore(int(self._kit.redrive_concurrency))
        cursor: DueCursor | None = None
        started = 0
        async with asyncio.TaskGroup() as tasks:
            while True:
                page = await self.store.due(now=now, limit=self.page, after=cursor)
                for rollout_id in page.rollout_ids:
                    if self.clock() >= deadline or (limit is not None and started >= limit):
                        report.cut_short = True
                        return
                    started += 1
                    await gate.acquire()
                    tasks.create_task(self._one(rollout_id, report, gate))
                if page.cursor is None:
                    return
                cursor = page.cursor

    async def _one(self, rollout_id: str, report: RecoveryReport, gate: asyncio.Semaphore) -> None:
        with self.costs.rollout():  # on AWS, the rollout's share of the re-drive's invocation
            await self._one_metered(rollout_id, report, gate)

    async def _one_metered(
        self, rollout_id: str, report: RecoveryReport, gate: asyncio.Semaphore
    ) -> None:
        try:
            with rollout_scope(rollout_id):
                await self._redrive_one(rollout_id, report)
        except RolloutError as exc:
            report.failed[rollout_id] = str(exc)
            logger.error("recovery failed", extra={"rollout_id": rollout_id, "error": str(exc)})
        finally:
            gate.release()

    async def _redrive_one(self, rollout_id: str, report: RecoveryReport) -> None:
        now = self.clock()
        record = await self.store.get(rollout_id, now=now)
        if record is None or record.due_at is None or record.due_at > now:
            return  # the listing was stale: the record moved on
        if record.state == RecordState.FINISHED and record.next_attempt_at is not None:
            parked_since = record.finished_at or record.updated_at
            report.oldest_parked_age = max(report.oldest_parked_age, now - parked_since)
        if record.state == RecordState.ACCEPTED:
            await self._hand_off_again(record, report, now)
            return
        reason = LEASE_REASON if record.state == RecordState.RUNNING else "re-drive"
        sent = await self._settle(record, reason, report, due_only=True)
        if sent and record.state == RecordState.FINISHED:
            self.telemetry.count(Metric.ROLLOUTS_REDRIVEN)  # its stored response, sent again

    async def _settle(
        self,
        record: RolloutRecord,
        reason: str,
        report: RecoveryReport,
        *,
        force: bool = False,
        due_only: bool = False,
        category: FailureCategory = FailureCategory.WORKER_LOST,
    ) -> bool:
        """Settle ``record`` through settlement; whether this pass was the one that sent it."""
        report.examined += 1
        try:
            outcome, acted = await self.settlement.settle_once(
                record.rollout_id,
                reason=reason,
                force=force,
                current=record,
                due_only=due_only,
                category=category,
            )
        except RolloutError as exc:
            report.failed[record.rollout_id] = str(exc)
            logger.error(
                "recovery failed", extra={"rollout_id": record.rollout_id, "error": str(exc)}
            )
            return False
        report.add(record.rollout_id, outcome if acted else None)
        return acted

    async def _hand_off_again(
        self, record: RolloutRecord, report: RecoveryReport, now: float
    ) -> None:
        """A rollout still waiting for its worker after an extra hand-off that may have failed:
        hand it off again under a new hand-off lease (doubling), or report it as never started
        once the re-drive's age limit has passed."""
        leases = self.settlement.leases
        backoff = min(2 ** max(record.handoffs - 1, 0), MAX_HANDOFF_BACKOFF)
        # Never past the record's own expiry: it is reported while it still exists.
        last_chance = record.expires_at - 2 * leases.seconds
        lease_until = min(now + leases.seconds * backoff, last_chance)
        too_old = now - record.created_at >= self._kit.redrive_max_age_seconds
        if too_old or lease_until <= now:
            await self._settle(
                record, NEVER_STARTED_REASON, report, category=FailureCategory.NEVER_STARTED
            )
            return
        report.examined += 1
        if self.hand_off is None:
            report.skipped.append(record.rollout_id)
            logger.warning(
                "a rollout waits for a hand-off and this re-drive has no dispatcher",
                extra={"rollout_id": record.rollout_id},
            )
            return
        # Due for its hand-off, so its lease was watched when it was taken: with no sealed
        # key, the rollout needs none.
        watched = leases.watches(record, keyless=record.sealed_key is None)
        marked = await self.store.mark_handoff(
            record.rollout_id,
            count=record.handoffs + 1,
            lease_until=lease_until,
            now=now,
            watch=watched,
        )
        if not marked.applied or marked.record is None:
            report.skipped.append(record.rollout_id)  # claimed, or another recoverer has it
            return
        api_key = await self.settlement.open_key(marked.record)
        try:
            await self.hand_off(Job(rollout_id=record.rollout_id, attempt=1, api_key=api_key))
        except DispatchError as exc:
            report.failed[record.rollout_id] = str(exc)
            logger.warning(
                "hand-off failed again; the re-drive retries it when its lease runs out",
                extra={"rollout_id": record.rollout_id, "error": str(exc)},
            )
            return
        await self.store.handed_off(record.rollout_id, expires_at=record.expires_at, now=now)
        report.handed_off.append(record.rollout_id)
        self.telemetry.count(Metric.ROLLOUTS_REDRIVEN)

    async def run_forever(self, interval: float) -> None:
        """Re-drive every ``interval`` seconds until cancelled."""
        while True:
            await asyncio.sleep(interval)
            try:
                await self.redrive()
            except RolloutError as exc:
                logger.error("re-drive pass failed: %s", exc)
