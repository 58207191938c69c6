"""Recovery: the restart sweep of the local server and the re-drive of undelivered responses.

- :meth:`Recovery.sweep_after_restart`: the local server owns its state folder alone (a lock file
  says so), so at start-up every record still ACCEPTED or RUNNING belongs to a process that died.
  Each is reported once, with an ERROR naming the restart, and never run again; a FINISHED one is
  sent as stored.
- :meth:`Recovery.redrive`: every FINISHED response parked after failed callbacks, once its
  ``next_attempt_at`` has come, is sent again (the re-drive loop of the local server, the
  scheduled function on AWS, and ``rollout-sdk redrive``). Running rollouts whose lease ran out
  and whose callback key is sealed in the record (the local server's) are settled too.

Every action goes through :meth:`Settlement.settle`, whose conditional moves make concurrent
recoverers harmless: one of them holds the lease and reports, the others find it held.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rollout_sdk.engine.record import RecordState, RolloutRecord
from rollout_sdk.errors import RolloutError

if TYPE_CHECKING:
    from rollout_sdk.engine.settlement import Settlement
    from rollout_sdk.store.base import Store

logger = logging.getLogger("rollout_sdk.engine.recovery")

RESTART_REASON = (
    "the rollout server stopped while this rollout was in flight; it is reported, not run again"
)
LEASE_REASON = "the worker running this rollout stopped (its lease ran out) before reporting it"


@dataclass
class RecoveryReport:
    """What one pass did, by rollout id."""

    examined: int = 0
    delivered: list[str] = field(default_factory=list)
    parked: list[str] = field(default_factory=list)
    undeliverable: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)

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
        return (
            f"examined {self.examined}: delivered {len(self.delivered)}, parked again "
            f"{len(self.parked)}, undeliverable {len(self.undeliverable)}, skipped "
            f"{len(self.skipped)}, failed {len(self.failed)}"
        )


class Recovery:
    """Sweeps and re-drives over one store, through settlement."""

    def __init__(
        self,
        settlement: Settlement,
        *,
        store: Store,
        clock: Callable[[], float],
        page: int = 200,
    ) -> None:
        self.settlement = settlement
        self.store = store
        self.clock = clock
        self.page = page

    async def _settle_all(
        self, records: list[RolloutRecord], reason: str, *, force: bool, report: RecoveryReport
    ) -> None:
        for record in records:
            report.examined += 1
            try:
                outcome, acted = await self.settlement.settle_once(
                    record.rollout_id, reason=reason, force=force
                )
            except RolloutError as exc:
                report.failed[record.rollout_id] = str(exc)
                logger.error(
                    "recovery failed", extra={"rollout_id": record.rollout_id, "error": str(exc)}
                )
                continue
            report.add(record.rollout_id, outcome if acted else None)

    async def sweep_after_restart(self) -> RecoveryReport:
        """Report every rollout the previous process left in flight (local server only)."""
        report = RecoveryReport()
        seen: set[str] = set()
        while True:
            batch = [
                r
                for r in await self.store.scan(
                    (RecordState.ACCEPTED, RecordState.RUNNING, RecordState.FINISHED),
                    now=self.clock(),
                    limit=self.page,
                )
                if r.rollout_id not in seen
                and (r.state != RecordState.FINISHED or r.next_attempt_at is None)
            ]
            if not batch:
                break
            seen.update(r.rollout_id for r in batch)
            await self._settle_all(batch, RESTART_REASON, force=True, report=report)
        if report.examined:
            logger.warning("restart sweep: %s", report.summary())
        return report

    async def redrive(self, *, limit: int = 100) -> RecoveryReport:
        """Send again what is due: parked responses, and runs whose lease ran out (when the
        record holds the sealed callback key to report them with)."""
        report = RecoveryReport()
        now = self.clock()
        candidates = await self.store.scan(
            (RecordState.FINISHED, RecordState.RUNNING), now=now, limit=max(limit * 4, limit)
        )
        due = [
            r
            for r in candidates
            if (
                r.state == RecordState.FINISHED
                and r.next_attempt_at is not None
                and r.next_attempt_at <= now
            )
            or (r.state == RecordState.RUNNING and r.sealed_key is not None and r.lease_free(now))
        ][:limit]
        parked = [r for r in due if r.state == RecordState.FINISHED]
        stalled = [r for r in due if r.state == RecordState.RUNNING]
        await self._settle_all(parked, "re-drive", force=False, report=report)
        await self._settle_all(stalled, LEASE_REASON, force=False, report=report)
        if report.examined:
            logger.info("re-drive: %s", report.summary())
        return report

    async def run_forever(self, interval: float) -> None:
        """Re-drive every ``interval`` seconds until cancelled."""
        while True:
            await asyncio.sleep(interval)
            try:
                await self.redrive()
            except RolloutError as exc:
                logger.error("re-drive pass failed: %s", exc)
