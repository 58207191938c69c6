"""osmosis-ai 0.3.8's rollout API on the kit's engine: submit, poll for the result, cancel.

The same records, stores, hand-off, worker, leases and restart sweep as v1's rollouts; what
differs is how the result leaves: a v1 rollout's response is called back to TrainGate, a 0.3.8
rollout's is polled for. So its record (``protocol`` ``osmosis03``) is published by the move
that makes it final (DELIVERED, no callback: :mod:`rollout_sdk.engine.delivery`), and kept until
the record expires (0.3.8's result retention is the record's TTL). The rest, in order:

- **submit** (``POST /rollout``): the record is created with the rollout's polling lease (the
  token's digest; the token itself is only in the 202) and the ``llm_api_key`` sealed as a
  callback key is; an id any record holds, v1's or 0.3.8's, is refused (409, 0.3.8 refuses every
  duplicate); a full server answers 429 with ``Retry-After``, one shutting down 503 (the
  hand-off's own answers, the record released);
- **poll** (``GET /rollout/{id}/result``): the lease is checked (403) and renewed (a store move,
  ``renew_poll``, which also records the status answered, ``poll_seen``); a poll whose rollout
  has changed since the last answer answers at once, else it waits up to the wait timeout for a
  change, woken by the worker's phases and the final move where they run in this process
  (:class:`~rollout_sdk.engine.progress.StatusBoard`) and reading the record again every
  ``recheck_seconds`` (on Lambda, where nothing wakes it, that bounds its reads: one read and one
  renewal, then one read per recheck);
- **the polling lease**: one not renewed in time ends the rollout ``failure`` /
  ``lease_expired`` once: found by the next poll, and by :meth:`Osmosis03Service.check_leases`
  (the local server's watch every second, the re-drive's pass on Lambda), which reads the
  store's live index of leases that ran out; the worker stops the workflow (a cancel with a
  reason), and a rollout still queued is settled at once;
- **cancel** (``POST /rollout/cancel``): by ids, or by prefix or all over the live index (the
  0.3.8 rollouts in flight, never a v1 one, never a read of the table); ``cancelled_queued``,
  ``cancelled_running`` or ``not_found``, the same again for a cancel already asked;
- **the answer** is rendered from the record: its state while in flight, and 0.3.8's outcome
  from the final response (:mod:`rollout_sdk.engine.workflows`), or, for an ERROR the kit wrote
  itself (a worker lost, a restart), the kit's category mapped onto 0.3.8's six.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from rollout_sdk.dispatch.base import Job
from rollout_sdk.engine.progress import RECHECK_SECONDS
from rollout_sdk.engine.responses import failure_of
from rollout_sdk.engine.rules import check_server_url
from rollout_sdk.engine.workflows import LEASE_EXPIRED, OUTCOME_KEY
from rollout_sdk.errors import (
    CancelSelectorRefused,
    FailureCategory,
    Overloaded,
    PayloadTooLarge,
    PollLeaseRefused,
    RolloutIdTaken,
    RolloutNotFound,
)
from rollout_sdk.osmosis03.types import (
    FINAL_STATUSES,
    RolloutErrorCategory,
    RolloutInitRequest,
    RolloutInitResponse,
    RolloutResultResponse,
    RolloutSample,
    RolloutStatus,
)
from rollout_sdk.protocol import (
    EXTRA_KEY,
    ROLLOUT_ID_MAX_BYTES,
    ROLLOUT_ID_MAX_CHARS,
    rollout_id_fits,
)
from rollout_sdk.store.record import (
    PROTOCOL_OSMOSIS03,
    RecordState,
    RolloutRecord,
    expiry,
    idempotency_slot_for,
    request_fingerprint,
)

if TYPE_CHECKING:
    from rollout_sdk.engine.assembly import Engine
    from rollout_sdk.engine.service import RolloutService
    from rollout_sdk.store.base import Store

logger = logging.getLogger("rollout_sdk.engine.osmosis03")

#: 0.3.8's defaults: how long a poll waits for a change, and how long a lease lasts unrenewed.
RESULT_WAIT_SECONDS = 30.0
POLLING_LEASE_SECONDS = 120.0
#: How often the lease watch looks for leases that ran out.
LEASE_CHECK_SECONDS = 1.0

#: The kit's categories as 0.3.8's closed set has them (the kit's own stays in extra_fields).
WIRE_CATEGORIES: dict[FailureCategory, RolloutErrorCategory] = {
    FailureCategory.AGENT_ERROR: RolloutErrorCategory.AGENT_ERROR,
    FailureCategory.TIMEOUT: RolloutErrorCategory.TIMEOUT,
    FailureCategory.INVALID_RESULT: RolloutErrorCategory.VALIDATION_ERROR,
    FailureCategory.LEASE_EXPIRED: RolloutErrorCategory.LEASE_EXPIRED,
    # The trainer's run-wide breaker counts HTTP_ERROR (0.3.8 gives it to a sandbox provider's
    # failures only): a refused address or an oversized answer is one task's, the agent's.
    FailureCategory.OUTBOUND_REFUSED: RolloutErrorCategory.AGENT_ERROR,
    FailureCategory.ANSWER_TOO_LARGE: RolloutErrorCategory.AGENT_ERROR,
    FailureCategory.INFRASTRUCTURE: RolloutErrorCategory.INTERNAL_ERROR,
    FailureCategory.WORKER_LOST: RolloutErrorCategory.INTERNAL_ERROR,
    FailureCategory.NEVER_STARTED: RolloutErrorCategory.INTERNAL_ERROR,
    FailureCategory.REPLAY_DIVERGED: RolloutErrorCategory.INTERNAL_ERROR,
    FailureCategory.HISTORY_FULL: RolloutErrorCategory.INTERNAL_ERROR,
}


def lease_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def result_of(record: RolloutRecord, phase: str | None = None) -> RolloutResultResponse:
    """What a poll answers for ``record``: its status while in flight (``phase``: the one its
    worker here set), and once final 0.3.8's outcome, the reward withheld unless the rollout
    succeeded and its sample was not removed; never the trajectory."""
    rollout_id = record.rollout_id
    if record.state == RecordState.ACCEPTED:
        return RolloutResultResponse(rollout_id=rollout_id, status=RolloutStatus.QUEUED)
    if record.state == RecordState.RUNNING:
        status = RolloutStatus(phase) if phase else RolloutStatus.RUNNING
        return RolloutResultResponse(rollout_id=rollout_id, status=status)
    response = record.response or {}
    kit = (response.get("extra_fields") or {}).get(EXTRA_KEY) or {}
    outcome = kit.get(OUTCOME_KEY) if isinstance(kit, dict) else None
    if isinstance(outcome, dict):
        status = RolloutStatus(outcome["status"])
        sample = outcome.get("sample")
        category = outcome.get("err_category")
        message = outcome.get("err_message")
    else:
        # An ERROR the kit wrote itself: a worker lost or a restart, a cancel or a lease that ran
        # out before the rollout started, its deadline.
        failure = failure_of(response) or {}
        kit_category = FailureCategory(failure.get("category", FailureCategory.INFRASTRUCTURE))
        cancelled = kit_category == FailureCategory.CANCELLED
        status = RolloutStatus.CANCELLED if cancelled else RolloutStatus.FAILURE
        mapped = None if cancelled else WIRE_CATEGORIES.get(kit_category)
        category = None if mapped is None else mapped.value
        message = response.get("error_message")
        messages = response.get("final_messages") or []
        sample = {"messages": messages, "trajectory_messages": None} if messages else None
    model = None
    if sample is not None:
        model = RolloutSample.model_validate({**sample, "trajectory_messages": None})
        if status is not RolloutStatus.SUCCESS or model.remove_sample:
            model = model.model_copy(update={"reward": None})
    return RolloutResultResponse(
        rollout_id=rollout_id,
        status=status,
        sample=model,
        err_message=message,
        err_category=None if category is None else RolloutErrorCategory(category),
    )


class PollingLeases:
    """The 0.3.8 rollouts' polling leases as the store's live index holds them: a lease that
    ran out ends its rollout, once (:meth:`check_leases`: the local server's watch, the
    re-drive's pass on Lambda), and a rollout asked to stop is signalled or settled
    (:meth:`stop`, cancel's too). No submit or poll here: the re-drive builds it alone."""

    def __init__(self, engine: Engine, *, clock: Callable[[], float] = time.time) -> None:
        self.engine = engine
        self.clock = clock

    @property
    def store(self) -> Store:
        return self.engine.store

    async def expire(self, record: RolloutRecord) -> RolloutRecord:
        """End a rollout whose polling lease ran out: ``failure`` / ``lease_expired``, once."""
        logger.warning("polling lease expired", extra={"rollout_id": record.rollout_id})
        return await self.stop(record, reason=LEASE_EXPIRED)

    async def stop(self, record: RolloutRecord, *, reason: str | None) -> RolloutRecord:
        """Ask the rollout to stop (a cancel, or its lease): signalled where it runs here,
        settled at once when it is still queued, else left to its worker's heartbeat."""
        engine = self.engine
        now = self.clock()
        marked = await self.store.request_cancel(record.rollout_id, now=now, reason=reason)
        if not marked.applied or marked.record is None:
            return marked.record or record
        if engine.cancels.signal(record.rollout_id, reason):
            return marked.record
        if marked.record.state == RecordState.ACCEPTED:
            expired = reason == LEASE_EXPIRED
            settled = await engine.settlement.settle(
                record.rollout_id,
                reason="polling lease expired" if expired else "cancelled",
                category=FailureCategory.LEASE_EXPIRED if expired else FailureCategory.CANCELLED,
            )
            return settled or marked.record
        return marked.record

    async def watch_leases(self, every: float = LEASE_CHECK_SECONDS) -> None:
        """Forever: end each live rollout whose polling lease ran out (within ``every``
        seconds of its end)."""
        while True:
            await asyncio.sleep(every)
            try:
                await self.check_leases()
            except Exception:  # a store that fails now may not later: the watch goes on
                logger.exception("the polling lease watch failed; trying again")

    async def check_leases(self) -> int:
        """One look at the live index's leases that ran out; how many rollouts were ended."""
        now = self.clock()
        ended = 0
        async for rollout_id in self.listed(ended_by=now):
            try:
                ended += await self._check(rollout_id, now)
            except Exception:  # one record's failure must not stop the others' leases
                logger.exception(
                    "a polling lease was not checked", extra={"rollout_id": rollout_id}
                )
        return ended

    async def listed(
        self, *, ended_by: float | None = None, prefix: str = ""
    ) -> AsyncIterator[str]:
        """Every id the live index lists (a hint: each is read again before a move)."""
        after = None
        while True:
            page = await self.store.polled(
                now=self.clock(), ended_by=ended_by, prefix=prefix, after=after
            )
            for rollout_id in page.rollout_ids:
                yield rollout_id
            if page.cursor is None:
                return
            after = page.cursor

    async def _check(self, rollout_id: str, now: float) -> int:
        """One rollout the index lists past its lease's end: ended (1), or left (0) when it is
        final, renewed meanwhile, or already asked to stop."""
        record = await self.store.get(rollout_id, now=now)
        if record is None or not record.state.is_active or record.cancel_requested:
            return 0
        if record.poll_until is not None and record.poll_until >= now:
            return 0  # renewed since the index was written (it is eventually consistent)
        await self.expire(record)
        return 1


class Osmosis03Service:
    """The 0.3.8 routes' work, over init's :class:`RolloutService` and the engine.

    ``max_live``: the most 0.3.8 rollouts in flight (the live index's count) a submit may find;
    at it, 429 with ``Retry-After`` (0: no limit)."""

    def __init__(
        self,
        service: RolloutService,
        engine: Engine,
        *,
        wait_seconds: float = RESULT_WAIT_SECONDS,
        lease_seconds: float = POLLING_LEASE_SECONDS,
        recheck_seconds: float = RECHECK_SECONDS,
        max_live: int = 0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not 0 < wait_seconds < lease_seconds:
            raise ValueError("the polling lease must outlast the result wait, which is positive")
        self.service = service
        self.engine = engine
        self.wait_seconds = wait_seconds
        self.lease_seconds = lease_seconds
        self.recheck_seconds = recheck_seconds
        self.max_live = max_live
        self.clock = clock
        self.leases = PollingLeases(engine, clock=clock)

    @classmethod
    def for_engine(
        cls, service: RolloutService, engine: Engine, *, recheck_seconds: float = RECHECK_SECONDS
    ) -> Osmosis03Service:
        """The service on ``engine``'s settings; ``recheck_seconds``: how often a waiting poll
        reads the record (where nothing wakes it sooner, a composition says less often)."""
        kit = engine.settings.kit
        return cls(
            service,
            engine,
            wait_seconds=kit.osmosis03_result_wait_seconds,
            lease_seconds=kit.osmosis03_polling_lease_seconds,
            recheck_seconds=recheck_seconds,
            max_live=kit.osmosis03_max_live_rollouts,
            clock=engine.clock,
        )

    @property
    def store(self) -> Store:
        return self.engine.store

    async def active(self) -> int:
        """The 0.3.8 rollouts in flight (the live index's count: ``/health``'s lifecycle)."""
        return await self.store.count_polled(now=self.clock())

    # ------------------------------------------------------------------ submit

    async def submit(self, request: RolloutInitRequest) -> RolloutInitResponse:
        """Register and start a rollout. Raises ServerUrlRefused (422), RolloutIdTaken (409),
        PayloadTooLarge (413), Overloaded (429), DispatchError (503), StoreError (503)."""
        rollout_id = request.rollout_id
        if not rollout_id_fits(rollout_id):
            raise PayloadTooLarge(
                f"rollout_id has {len(rollout_id)} characters: at most {ROLLOUT_ID_MAX_CHARS} "
                f"characters and {ROLLOUT_ID_MAX_BYTES} bytes"
            )
        # What v1's init does with server_url: the workflow calls this URL (with a client of its
        # own, so a name is not checked again at each connection, as the kit's client does).
        check_server_url(
            request.chat_completions_url, self.service.outbound, "chat_completions_url"
        )
        if self.max_live and await self.active() >= self.max_live:
            raise Overloaded(
                f"{self.max_live} osmosis-ai 0.3.8 rollouts are in flight, the most this "
                "deployment takes (ROLLOUT_SDK_OSMOSIS03_MAX_LIVE_ROLLOUTS, the template's "
                "MaxLiveRollouts)",
                retry_after=self.engine.settings.kit.retry_after_seconds,
            )
        token = secrets.token_urlsafe(32)
        now = self.clock()
        comparable = request.model_dump(mode="json", exclude={"llm_api_key"})
        answer = {
            "rollout_id": rollout_id,
            "status": RolloutStatus.QUEUED.value,
            "result_wait_timeout_sec": self.wait_seconds,
            "polling_lease_timeout_sec": self.lease_seconds,
        }
        record = RolloutRecord(
            rollout_id=rollout_id,
            slot=idempotency_slot_for(rollout_id),
            fingerprint=request_fingerprint(comparable),
            request=comparable,
            init_response=answer,
            created_at=now,
            updated_at=now,
            expires_at=expiry(now, self.engine.settings.server.record_ttl_seconds),
            protocol=PROTOCOL_OSMOSIS03,
            poll_digest=lease_digest(token),
            poll_until=now + self.lease_seconds,
        )

        def job(claimed: RolloutRecord | None) -> Job:
            return Job(rollout_id, 1, request.llm_api_key, claimed=claimed)

        created = await self.service.admit(record, api_key=request.llm_api_key, job=job, now=now)
        if not created.created:
            raise RolloutIdTaken("rollout_id is already registered")
        return RolloutInitResponse.model_validate({**answer, "polling_lease_token": token})

    # ------------------------------------------------------------------ poll

    async def _record(self, rollout_id: str) -> RolloutRecord:
        record = (
            await self.store.get(rollout_id, now=self.clock())
            if rollout_id_fits(rollout_id)
            else None
        )
        if record is None or record.protocol != PROTOCOL_OSMOSIS03:
            raise RolloutNotFound("unknown rollout_id")
        return record

    def status_of(self, record: RolloutRecord) -> RolloutResultResponse:
        return result_of(record, self.engine.board.phase(record.rollout_id))

    async def result(self, rollout_id: str, token: str) -> RolloutResultResponse:
        """The rollout's result once it changes (or after the wait timeout, its status then).
        Raises RolloutNotFound (404), PollLeaseRefused (403)."""
        record = await self._record(rollout_id)
        if record.poll_digest is None or not secrets.compare_digest(
            lease_digest(token), record.poll_digest
        ):
            raise PollLeaseRefused("invalid polling lease")
        answer = self.status_of(record)
        if not record.state.is_active:
            return answer
        # A change is one from what this rollout's polls were last answered (the 202's
        # ``queued`` at first): a status reached meanwhile is answered at once, and recorded
        # with the renewal, so that the next poll, wherever it lands, waits for the next one.
        seen = record.poll_seen or RolloutStatus.QUEUED.value
        changed = answer.status.value != seen
        record = await self._renew(record, seen=answer.status.value if changed else None)
        if not record.state.is_active:
            return self.status_of(record)  # its lease ran out and it ended at once
        if changed:
            return answer
        waited = await self._wait_for_change(rollout_id, answer)
        if waited.status != answer.status and waited.status not in FINAL_STATUSES:
            # A new status in flight (queued to running): the next poll waits for a change
            # from it, wherever it lands. (A final one is the record's own: nothing to keep.)
            now = self.clock()
            await self.store.renew_poll(
                rollout_id, until=now + self.lease_seconds, now=now, seen=waited.status.value
            )
        return waited

    async def _wait_for_change(
        self, rollout_id: str, answer: RolloutResultResponse
    ) -> RolloutResultResponse:
        """The rollout's answer once its status is another than ``answer``'s, or ``answer``
        after the wait timeout."""
        ends = time.monotonic() + self.wait_seconds
        # (A remainder under a millisecond is no wait: asyncio may wake a timeout that much
        # early, and a read for it would be one more than a read per recheck.)
        while (left := ends - time.monotonic()) > 0.001:
            await self.engine.board.wait(rollout_id, min(left, self.recheck_seconds))
            current = await self.store.get(rollout_id, now=self.clock())
            if current is None:  # expired meanwhile: unknown now, as for any later poll
                raise RolloutNotFound("unknown rollout_id")
            now = self.status_of(current)
            if now.status != answer.status:
                return now
        return answer

    async def _renew(self, record: RolloutRecord, *, seen: str | None) -> RolloutRecord:
        """The lease renewed by this poll (``seen``: the status it answers, when new); one
        that ran out ends the rollout instead."""
        now = self.clock()
        renewed = await self.store.renew_poll(
            record.rollout_id, until=now + self.lease_seconds, now=now, seen=seen
        )
        if renewed.applied and renewed.record is not None:
            return renewed.record
        current = renewed.record or record
        if current.state.is_active and not current.cancel_requested:
            return await self.leases.expire(current)
        return current

    # ------------------------------------------------------------------ cancel

    async def cancel(
        self, *, ids: list[str] | None, prefix: str | None, every: bool
    ) -> dict[str, str]:
        """Each selected rollout's disposition. Raises CancelSelectorRefused (422) unless
        exactly one of ``ids``, ``prefix`` and ``every`` (0.3.8's ``all``) is given."""
        if (ids is not None) + (prefix is not None) + bool(every) != 1:
            raise CancelSelectorRefused("pass exactly one selector: ids, prefix, or all")
        if ids is not None:
            selected = list(dict.fromkeys(ids))
        else:
            listed = self.leases.listed(prefix="" if every else prefix or "")
            selected = [rollout_id async for rollout_id in listed]
        dispositions: dict[str, str] = {}
        for rollout_id in selected:
            dispositions[rollout_id] = await self._cancel_one(rollout_id)
        logger.info(
            "cancel",
            extra={"cancelled": sum(d != "not_found" for d in dispositions.values())},
        )
        return dispositions

    async def _cancel_one(self, rollout_id: str) -> str:
        try:
            record = await self._record(rollout_id)
        except RolloutNotFound:
            return "not_found"
        if not record.state.is_active:
            return "not_found"
        disposition = (
            "cancelled_queued" if record.state == RecordState.ACCEPTED else "cancelled_running"
        )
        if record.cancel_requested:
            return disposition  # asked already: the same answer again
        stopped = await self.leases.stop(record, reason=None)
        if stopped.cancel_requested or stopped.state.has_response:
            return disposition
        return "not_found"
