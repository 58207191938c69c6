"""The durable worker: one rollout as one durable execution, across many Lambda invocations.

With ``DurableWorker=true`` the worker function is created with ``DurableConfig``, and the
dispatcher starts an execution per rollout, named after it (``dispatch.aws_lambda``). Each
invocation runs the handler from the start; the durable execution SDK
(``aws-durable-execution-sdk-python``) returns every operation the execution already finished
from its log instead of doing it again. The rollout's operations, in order:

1. ``claim``: the record ACCEPTED -> RUNNING, once for the execution (its time starts the
   rollout's deadline, which therefore spans invocations).
2. per invocation, not an operation: the lease renewed on this attempt, the sealed callback key
   stored in the record (so that the re-drive can report the rollout if the execution fails or
   stops), the key opened (KMS), then the engine's worker runs the agent with a
   :class:`DurableJournal`.
3. per turn: a ``chat`` step, each ``ctx.step`` (its own name), each batch of tool calls
   (``tools``). Before a new turn the journal decides, and records with it, whether the turn
   starts at all: not when the rollout was cancelled or its deadline passed, and not when the
   invocation is running short (``suspend``: the rest goes on in a fresh invocation, after a
   durable wait of one second, while the lease is held for the gap).
4. the final response stored, then delivered, by the worker as everywhere.

How the SDK's synchronous steps meet the asyncio worker: the agent runs on the runtime's one
event loop (whose connection pool the TrainGate client owns), and each step is made from a
worker thread (``asyncio.to_thread``) whose step function runs the turn back on that loop
(``run_coroutine_threadsafe``). The loop goes on serving the lease's heartbeat, the cancel
signal and the shared connections meanwhile. The other way, the step made on the loop's own
thread (the SDK runs a step's function in the calling thread) with its work on a second loop,
blocks all three for the whole turn. Measured (``python -m bench.durable``, 3 rounds of 200
steps through the testing SDK's runner): 2.66 ms a step this way, 2.49 ms the blocking way,
0.17 ms more a step, against seconds to minutes for a model's turn.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from rollout_sdk.agent.journal import describe_error, fingerprint, rebuild_error, run_work
from rollout_sdk.aws.handlers.preamble import one_rollout, ran, rejected
from rollout_sdk.aws.runtime import DURABLE_RETENTION_DAYS
from rollout_sdk.cost import meter as cost_meter
from rollout_sdk.cost.usage import Usage
from rollout_sdk.dispatch.sealed import sealed_job_from_event
from rollout_sdk.errors import (
    ReplayDiverged,
    RolloutCancelled,
    RolloutDeadlineReached,
    RolloutError,
    RolloutHistoryFull,
)
from rollout_sdk.prices import MONTH_SECONDS
from rollout_sdk.protocol import CompletionsResponse
from rollout_sdk.stack import LambdaFunction
from rollout_sdk.store.record import RecordState
from rollout_sdk.telemetry import Metric

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from aws_durable_execution_sdk_python import DurableContext
    from aws_durable_execution_sdk_python.config import StepConfig
    from aws_durable_execution_sdk_python.serdes import SerDes

    from rollout_sdk.aws.checkpoints import CheckpointSerDes
    from rollout_sdk.aws.runtime import InvocationContext, LambdaRuntime
    from rollout_sdk.cost.meter import RolloutMeter
    from rollout_sdk.dispatch.base import Job
    from rollout_sdk.dispatch.sealed import QueuedJob
    from rollout_sdk.store.record import RolloutRecord

logger = logging.getLogger("rollout_sdk.aws.durable")

#: The durable wait that ends an invocation running short: the shortest Lambda takes.
SUSPEND_WAIT_SECONDS = 1
#: The lease a suspended rollout holds until the next invocation re-claims it: long enough
#: for the wait and a throttled restart, short enough that a stopped execution's rollout is
#: reported by the re-drive within a quarter of an hour.
SUSPENDED_LEASE_SECONDS = 900
#: Time each invocation gets to replay its record up to where the last one stopped, even when
#: the rollout's deadline has passed meanwhile (the journal's own deadline decision, recorded,
#: then ends it).
REPLAY_GRACE_SECONDS = 60
#: Before a new turn, at least this much of the invocation must be left (or twice the longest
#: turn so far, if more), else the invocation suspends and the turn starts in the next.
MIN_TURN_RESERVE_SECONDS = 30

#: Operations a new step must leave room for: itself, then a suspension (its step and its
#: wait), so that the execution can always suspend or end within Lambda's history limit.
STEP_ROOM = 3
#: The operations every execution makes beside its steps and waits: the claim.
FIXED_OPERATIONS = 1

#: The billed operations an execution makes beside its history's: its start.
EXECUTION_START_OPERATIONS = 1


@dataclass(frozen=True)
class ExecutionBill:
    """What a durable execution's own charges are reckoned from: its input's bytes (as the
    dispatcher wrote it), when it started (the claim's time), and how long Lambda keeps its
    history after it ends (``DurableConfig.RetentionPeriodInDays``)."""

    input_bytes: int
    started_at: float
    retention_seconds: float


#: The journal's outcome kinds, as recorded in a step's result.
ASKED, RAISED, SUSPEND, CUT, DEADLINE, CANCELLED, HISTORY_FULL = (
    "asked",
    "raised",
    "suspend",
    "cut",
    "deadline",
    "cancelled",
    "history_full",
)


class DurableJournal:
    """The :class:`~rollout_sdk.agent.journal.Journal` of one invocation of a rollout's
    execution: steps of the SDK's ``ctx``, made from a thread, whose work runs on ``loop``.

    ``invocation_ends_at``: the time (``clock``'s) by which this invocation must have
    suspended: its start plus ``WorkerTimeout`` less ``DeadlineMarginSeconds``; no new turn
    starts within the turn reserve of it, and one still running then is cut (and asked again
    in the next invocation). ``rollout_ends_at``: the rollout's deadline, from its claim.
    ``hold_suspended`` keeps the lease over the gap to the next invocation."""

    def __init__(
        self,
        ctx: DurableContext,
        loop: asyncio.AbstractEventLoop,
        *,
        clock: Callable[[], float],
        invocation_ends_at: float,
        rollout_ends_at: float,
        deadline_seconds: float,
        hold_suspended: Callable[[], Awaitable[None]],
        max_operations: int = 25_000,
        serdes: SerDes[Any] | None = None,
        meter: RolloutMeter | None = None,
        bill: ExecutionBill | None = None,
    ) -> None:
        from aws_durable_execution_sdk_python.config import StepConfig
        from aws_durable_execution_sdk_python.retries import RetryDecision

        self._ctx = ctx
        self._loop = loop
        self._clock = clock
        self.invocation_ends_at = invocation_ends_at
        self.rollout_ends_at = rollout_ends_at
        self.deadline_seconds = deadline_seconds
        self._hold_suspended = hold_suspended
        # No retries: a step's work never raises (its failure is its recorded outcome).
        # ``serdes``: how each result is checkpointed (a large one in the payload bucket:
        # rollout_sdk/aws/checkpoints.py); the SDK's JSON envelope without one.
        self._config: StepConfig = StepConfig(
            retry_strategy=lambda _error, _attempts: RetryDecision.no_retry(), serdes=serdes
        )
        self._cancelled: asyncio.Event | None = None
        self._busy = False
        self._running: asyncio.Task[Any] | None = None
        self._longest_turn = 0.0
        self.ended_by: RolloutError | None = None
        #: Steps done in this invocation, and steps returned from the record.
        self.done_now = 0
        self.replayed = 0
        #: Durable waits met (each suspension's, replayed or new).
        self.waits = 0
        self.max_operations = max_operations
        #: This invocation's cost meter: each suspension records the invocation's own part,
        #: and each later invocation carries every recorded part in as its replay meets it, so
        #: the final estimate covers every invocation that suspended.
        self._meter = meter
        self._serdes = serdes
        self._bill = bill
        if meter is not None and bill is not None:
            meter.execution = self.execution_usage

    def bind(self, cancelled: asyncio.Event) -> None:
        self._cancelled = cancelled

    @property
    def operations(self) -> int:
        """The operations of the execution's history so far: the claim, every step met, every
        wait (the same count in every replay up to the same point)."""
        return FIXED_OPERATIONS + self.replayed + self.done_now + self.waits

    def execution_usage(self) -> Usage:
        """The execution's own charges so far, whole (every invocation replays it, so this one
        knows them all): its operations (its start, and :attr:`operations`), the bytes of its
        input and of every step's checkpoint, and those bytes kept from the start until the
        history's retention ends (an upper bound: a later step's bytes are kept for less)."""
        usage = Usage()
        bill = self._bill
        if bill is None:
            return usage
        written = bill.input_bytes + sum(getattr(self._serdes, "checkpoint_bytes", {}).values())
        kept = max(0.0, self._clock() - bill.started_at) + bill.retention_seconds
        usage.units["lambda_durable_operation"] = EXECUTION_START_OPERATIONS + self.operations
        usage.units["lambda_durable_written_byte"] = written
        usage.units["lambda_durable_retained_byte_month"] = written * kept / MONTH_SECONDS
        return usage

    # ------------------------------------------------------------------ the Journal protocol

    async def chat(
        self, body: dict[str, Any], ask: Callable[[], Awaitable[CompletionsResponse]]
    ) -> tuple[CompletionsResponse, float]:
        asked = fingerprint(body)

        async def turn() -> dict[str, Any]:
            response = await ask()
            return {"value": response.model_dump(mode="json", exclude_unset=True)}

        outcome = await self._record("chat", turn, asked)
        response = CompletionsResponse.model_validate(outcome["value"])
        return response, float(outcome.get("ms", 0.0))

    async def step(self, name: str, work: Callable[[], Any]) -> Any:
        async def run() -> dict[str, Any]:
            return {"value": await run_work(work)}

        return (await self._record(name, run, name))["value"]

    # ------------------------------------------------------------------ recording

    async def _record(
        self, name: str, work: Callable[[], Awaitable[dict[str, Any]]], asked: str
    ) -> dict[str, Any]:
        """The outcome of the step ``name`` whose work is ``work`` (asking ``asked``): the
        recorded one, else ``work``'s now, recorded. Loops over recorded suspensions (each a
        durable wait, after which the same step is asked again)."""
        if self._busy:
            raise RuntimeError(
                "on the durable worker, ctx.chat and ctx.step run one at a time (a replay must "
                "meet them in the order they were recorded): await each before the next"
            )
        self._busy = True
        try:
            while True:
                outcome = await self._step(name, work, asked)
                kind = outcome.get("kind")
                if kind in (ASKED, RAISED) and outcome.get("asked") != asked:
                    self._end(
                        ReplayDiverged(
                            f"the replay diverged at step {name!r}: the agent asked for "
                            "something else than the recorded run did (its code must be "
                            "deterministic outside ctx.chat and ctx.step: docs/aws.md)"
                        )
                    )
                if kind == ASKED:
                    self._longest_turn = max(self._longest_turn, float(outcome.get("took", 0)))
                    return outcome
                if kind == RAISED:
                    raise rebuild_error(outcome["error"])
                if kind == CANCELLED:
                    raise RolloutCancelled("rollout cancelled")
                if kind == HISTORY_FULL:
                    self._end(
                        RolloutHistoryFull(
                            f"the durable execution's history is full: {outcome['operations']} "
                            f"of its {self.max_operations} operations used, and a step needs "
                            f"room for {STEP_ROOM} (Lambda keeps at most 25,000 per execution; "
                            "DURABLE_MAX_OPERATIONS): the rollout ends with what it did"
                        )
                    )
                if kind == DEADLINE:
                    self._end(
                        RolloutDeadlineReached(
                            f"rollout exceeded its deadline of {self.deadline_seconds:g} s "
                            "(OSMOSIS_ROLLOUT_SERVER_REQUEST_TIMEOUT_SECONDS), across invocations"
                        )
                    )
                # SUSPEND or CUT: this invocation ends; the next asks the step again.
                if not outcome["fresh"] and self._meter is not None and outcome.get("usage"):
                    self._meter.carry(outcome["usage"])  # an earlier invocation's part
                await self._suspend(fresh=outcome["fresh"])
        finally:
            self._busy = False

    def _end(self, exc: RolloutError) -> None:
        if self.ended_by is None:
            self.ended_by = exc
        raise exc

    async def _step(
        self, name: str, work: Callable[[], Awaitable[dict[str, Any]]], asked: str
    ) -> dict[str, Any]:
        from aws_durable_execution_sdk_python.exceptions import NonDeterministicExecutionError

        fresh = False

        def produce(_step_context: Any) -> dict[str, Any]:
            # In the SDK's thread (a replay never calls it): the outcome is made on the loop,
            # and recorded as returned.
            nonlocal fresh
            fresh = True
            made = asyncio.run_coroutine_threadsafe(self._decide(work, asked), self._loop)
            return made.result()

        call = self._loop.run_in_executor(None, self._ctx.step, produce, name, self._config)
        try:
            outcome: dict[str, Any] = await asyncio.shield(call)
        except NonDeterministicExecutionError as exc:
            self._end(ReplayDiverged(f"the replay diverged at step {name!r}: {exc}"))
        except asyncio.CancelledError:
            # The rollout's own deadline (the worker's timeout) or a stop: the turn under way
            # is cut, and the SDK's step left to finish recording that before the loop goes on.
            if self._running is not None:
                self._running.cancel()
            await asyncio.wait([call])
            raise
        if fresh:
            self.done_now += 1
        else:
            self.replayed += 1
        return {**outcome, "fresh": fresh}

    async def _decide(
        self, work: Callable[[], Awaitable[dict[str, Any]]], asked: str
    ) -> dict[str, Any]:
        """A new step's outcome (on the loop): whether it starts at all, then its work's
        result or failure. Everything it returns is recorded, so a replay decides the same."""
        now = self._clock()
        base = {"asked": asked}
        if self._cancelled is not None and self._cancelled.is_set():
            return {**base, "kind": CANCELLED}
        if now >= self.rollout_ends_at:
            return {**base, "kind": DEADLINE}
        if self.operations + STEP_ROOM > self.max_operations:
            return {**base, "kind": HISTORY_FULL, "operations": self.operations}
        reserve = max(MIN_TURN_RESERVE_SECONDS, 2 * self._longest_turn)
        if now + reserve > self.invocation_ends_at:
            return {**base, "kind": SUSPEND, **self._own_usage()}
        self._running = asyncio.current_task()
        started, timer = now, time.perf_counter()
        try:
            async with asyncio.timeout(max(0.0, self.invocation_ends_at - now)):
                value = await work()
        except TimeoutError:
            return {**base, "kind": CUT, **self._own_usage()}
        except asyncio.CancelledError:
            return {**base, "kind": CUT, **self._own_usage()}
        except Exception as exc:  # recorded: the replay raises it again
            return {**base, "kind": RAISED, "error": describe_error(exc)}
        finally:
            self._running = None
        return {
            **base,
            **value,
            "kind": ASKED,
            "took": self._clock() - started,
            "ms": (time.perf_counter() - timer) * 1000,
        }

    def _own_usage(self) -> dict[str, Any]:
        """This invocation's own cost so far, recorded with the suspension that ends it."""
        if self._meter is None:
            return {}
        return {"usage": self._meter.own().to_json(compact=True)}

    async def _suspend(self, *, fresh: bool) -> None:
        """The durable wait after a suspension: replayed, it returns at once; new, the SDK
        ends the invocation (its SuspendExecution leaves through the agent and the worker)."""
        from aws_durable_execution_sdk_python.config import Duration

        if fresh:
            await self._hold_suspended()
        self.waits += 1
        await asyncio.to_thread(
            self._ctx.wait, Duration.from_seconds(SUSPEND_WAIT_SECONDS), "suspend"
        )


class DurableWorker:
    """The durable worker function's handler, on the runtime's engine worker."""

    def __init__(self, runtime: LambdaRuntime) -> None:
        self.runtime = runtime
        self._context: InvocationContext | None = None

    @cached_property
    def _handler(self) -> Callable[[Any, Any], Any]:
        from rollout_sdk.aws.durable_sdk import durable_sdk

        durable_sdk()  # refused, naming the fix, where the SDK or its boto3 is missing
        from aws_durable_execution_sdk_python import durable_execution

        return durable_execution(self._execution, boto3_client=self.runtime.clients.lambda_)

    def handle(self, event: Any, context: InvocationContext | None) -> Any:
        """One invocation of a rollout's execution (the SDK's event and answer)."""
        self._context = context
        try:
            return self._handler(event, context)
        finally:
            self._context = None

    def _execution(self, event: Any, ctx: DurableContext) -> dict[str, Any]:
        from aws_durable_execution_sdk_python.config import StepConfig

        runtime = self.runtime
        started = runtime.clock()
        try:
            queued = sealed_job_from_event(event)
        except ValueError as exc:
            return rejected("durable worker input", exc)
        job = queued.job
        serdes = self._serdes(job)
        # The SDK's retries: a store error is retried, durably.
        claim: dict[str, Any] = ctx.step(
            lambda _: runtime.run(self._claim(job)), "claim", StepConfig(serdes=serdes)
        )
        if not claim["claimed"]:
            logger.info("claim lost; nothing to run", extra={"rollout_id": job.rollout_id})
            return {"status": "skipped", "rollout_id": job.rollout_id}
        bill = ExecutionBill(
            input_bytes=len(json.dumps(event).encode()),  # as the dispatcher wrote it
            started_at=float(claim["at"]),
            retention_seconds=DURABLE_RETENTION_DAYS * 86_400,
        )
        with one_rollout(runtime, LambdaFunction.DURABLE_WORKER, self._context, job):
            return runtime.run(self._invocation(ctx, queued, serdes, bill, started))

    def _serdes(self, job: Job) -> CheckpointSerDes:
        from rollout_sdk.aws.checkpoints import CheckpointSerDes

        aws = self.runtime.aws
        return CheckpointSerDes(
            rollout_id=job.rollout_id, s3=lambda: self.runtime.clients.s3, bucket=aws.payload_bucket
        )

    async def _claim(self, job: Job) -> dict[str, Any]:
        worker = self.runtime.worker
        budget = float(self.runtime.settings.server.request_timeout_seconds)
        now = self.runtime.clock()
        terms = worker.claim_terms(job.attempt, now, deadline_seconds=budget)
        claim = await self.runtime.store.claim(
            job.rollout_id,
            attempt=terms.attempt,
            lease_until=terms.lease_until,
            expires_at=terms.expires_at,
            now=now,
        )
        if claim.applied:
            self.runtime.telemetry.count(Metric.ROLLOUTS_STARTED)  # once: a step is not replayed
        return {"claimed": bool(claim.applied), "at": now}

    async def _invocation(
        self,
        ctx: DurableContext,
        queued: QueuedJob,
        serdes: CheckpointSerDes,
        bill: ExecutionBill,
        started: float,
    ) -> dict[str, Any]:
        runtime = self.runtime
        claimed_at = bill.started_at
        job = queued.job
        record = await self._reclaim(job, queued.sealed_api_key)
        if record is None:
            return {"status": "skipped", "rollout_id": job.rollout_id}
        opened = await queued.open(runtime.vault)
        aws = runtime.aws
        budget = float(runtime.settings.server.request_timeout_seconds)
        rollout_ends_at = claimed_at + budget
        journal = DurableJournal(
            ctx,
            runtime.loop,
            clock=runtime.clock,
            invocation_ends_at=started + aws.worker_timeout_seconds - aws.deadline_margin_seconds,
            rollout_ends_at=rollout_ends_at,
            deadline_seconds=budget,
            hold_suspended=lambda: self._hold_suspended(job),
            max_operations=aws.durable_max_operations,
            serdes=serdes,
            meter=cost_meter.current(),  # here, in the rollout's context (steps run elsewhere)
            bill=bill,
        )
        left = max(rollout_ends_at - runtime.clock(), REPLAY_GRACE_SECONDS)
        # The record as re-claimed, but dated from the claim: the rollout's duration (a metric)
        # spans its invocations.
        since_claim = record.evolve(updated_at=claimed_at)
        final = await runtime.worker.run(
            replace(opened, claimed=since_claim), deadline_seconds=left, journal=journal
        )
        logger.info(
            "durable rollout ended",
            extra={
                "rollout_id": job.rollout_id,
                "replayed": journal.replayed,
                "done_now": journal.done_now,
            },
        )
        return ran(job, final)

    async def _reclaim(self, job: Job, sealed_key: str | None) -> RolloutRecord | None:
        """This invocation's hold of the rollout: its lease renewed on the execution's attempt,
        watched by the re-drive, with the sealed callback key stored in the record (so the
        re-drive can report it without this execution). None when the rollout is no longer
        this execution's to run (reported meanwhile, by the re-drive or a cancel's settling)."""
        runtime = self.runtime
        now = runtime.clock()
        renewed = await runtime.store.renew(
            job.rollout_id,
            state=RecordState.RUNNING,
            attempt=job.attempt,
            lease_until=runtime.engine.leases.until(now),
            now=now,
            watch=True,
            sealed_key=sealed_key,
        )
        if renewed.applied and renewed.record is not None:
            return renewed.record
        logger.warning(
            "the rollout is no longer this execution's; nothing to run",
            extra={
                "rollout_id": job.rollout_id,
                "state": renewed.record.state.value if renewed.record else "absent",
            },
        )
        return None

    async def _hold_suspended(self, job: Job) -> None:
        """The lease over the gap between invocations (a failure to renew it is logged: the
        next invocation renews it anyway, and a re-drive in between finds it running)."""
        runtime = self.runtime
        now = runtime.clock()
        try:
            await runtime.store.renew(
                job.rollout_id,
                state=RecordState.RUNNING,
                attempt=job.attempt,
                lease_until=now + SUSPENDED_LEASE_SECONDS,
                now=now,
                watch=True,
            )
        except RolloutError as exc:
            logger.warning(
                "the suspended rollout's lease was not extended",
                extra={"rollout_id": job.rollout_id, "error": str(exc)},
            )
