"""The worker's part of an osmosis-ai 0.3.8 rollout: its ``AgentWorkflow``, then its ``Grader``.

The same claim, lease, cancel signal and finish as a v1 rollout (:mod:`rollout_sdk.engine.worker`
calls :meth:`WorkflowRunner.run` where it would run an agent loop); what differs is here:

- the phases: the workflow, under ``agent_timeout_sec`` less the time the rollout spent queued
  (0.3.8's clock starts at submission); then, when ``grade`` and the workflow succeeded, the
  grader under ``grader_timeout_sec`` (a phase of its own), ``grading`` meanwhile. The kit's
  rollout deadline (``OSMOSIS_ROLLOUT_SERVER_REQUEST_TIMEOUT_SECONDS``) bounds both, so a rollout
  sent with no timeout still ends;
- the outcome: 0.3.8's status, sample and error, with 0.3.8's categories, kept in the final
  response's ``extra_fields["rollout_sdk"]["osmosis03"]``, beside the kit's own failure category
  (:mod:`rollout_sdk.engine.osmosis03` renders the result poll's answer from it);
- a workflow is stopped by cancelling its task (a cancel, the polling lease running out, its
  deadline), since it runs its own I/O and never passes through the kit between turns.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import tempfile
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rollout_sdk.engine.responses import failure_fields
from rollout_sdk.errors import FailureCategory
from rollout_sdk.osmosis03.agent_workflow import AgentWorkflow
from rollout_sdk.osmosis03.context import AgentWorkflowContext, GraderContext, RolloutContext
from rollout_sdk.osmosis03.grader import Grader
from rollout_sdk.osmosis03.types import (
    AgentWorkflowConfig,
    GraderConfig,
    RolloutErrorCategory,
    RolloutInitRequest,
    RolloutSample,
    RolloutStatus,
    coerce_output,
)
from rollout_sdk.protocol import EXTRA_KEY, RolloutResponse
from rollout_sdk.protocol import RolloutStatus as KitStatus

if TYPE_CHECKING:
    from rollout_sdk.engine.progress import StatusBoard
    from rollout_sdk.store.record import RolloutRecord

logger = logging.getLogger("rollout_sdk.engine.workflows")

#: The key of the 0.3.8 outcome in a final response's ``extra_fields["rollout_sdk"]``.
OUTCOME_KEY = "osmosis03"
#: How long a cancelled workflow (or grader) is given to finish its cleanup.
STOP_GRACE_SECONDS = 10.0
#: Why a cancel was asked when the polling lease ran out (the record's ``cancel_reason``).
LEASE_EXPIRED = "lease_expired"


@dataclass(frozen=True)
class Workflows:
    """What a server runs for 0.3.8 rollouts: a workflow class, a grader class (optional),
    their configurations, and the names they were given as (``module:attribute``)."""

    workflow: type[AgentWorkflow[Any]]
    grader: type[Grader] | None = None
    workflow_config: AgentWorkflowConfig | None = None
    grader_config: GraderConfig | None = None
    name: str = ""
    grader_name: str | None = None


@dataclass
class Outcome:
    """What a 0.3.8 rollout came to: 0.3.8's status, sample and error, and the kit's category."""

    status: RolloutStatus
    sample: RolloutSample | None = None
    err_message: str | None = None
    err_category: RolloutErrorCategory | None = None
    kit_category: FailureCategory | None = None


class _Stopped(Exception):
    """The phase was stopped: cancelled, or past its deadline (``expired``)."""

    def __init__(self, *, expired: bool) -> None:
        super().__init__("deadline" if expired else "cancelled")
        self.expired = expired


def wire_category(exc: BaseException) -> RolloutErrorCategory:
    """0.3.8's category for an exception a workflow or grader raised: a timeout, a value the
    author's code refused (ValueError, TypeError, AssertionError), or else the agent's own
    error. Never HTTP_ERROR: 0.3.8 keeps that for a sandbox provider's failures, which its
    trainer counts toward stopping the whole run, and the kit runs no sandbox."""
    if isinstance(exc, TimeoutError):
        return RolloutErrorCategory.TIMEOUT
    if isinstance(exc, ValueError | TypeError | AssertionError):
        return RolloutErrorCategory.VALIDATION_ERROR
    return RolloutErrorCategory.AGENT_ERROR


class _Progress:
    """What a workflow's ``RolloutContext.set_status`` reaches: the board's phase."""

    def __init__(self, board: StatusBoard, rollout_id: str) -> None:
        self._board, self._rollout_id = board, rollout_id

    async def set_status(self, status: RolloutStatus) -> None:
        self._board.set_phase(self._rollout_id, RolloutStatus(status).value)


class WorkflowRunner:
    """Runs 0.3.8 rollouts of one workflow (and grader) for the worker."""

    def __init__(
        self,
        workflows: Workflows,
        board: StatusBoard,
        *,
        clock: Callable[[], float] = time.time,
        process_id: str | None = None,
    ) -> None:
        self.workflows = workflows
        self.board = board
        self.clock = clock
        #: The process's id, which every RolloutContext carries (as 0.3.8's does): on the local
        #: server ``/health``'s; on Lambda this function's deployment id (its own version's,
        #: so not the API function's, which ``/health`` answers with).
        self.process_id = process_id
        limit = (
            workflows.workflow_config.concurrency.max_concurrent
            if workflows.workflow_config is not None
            else None
        )
        #: The workflow configuration's own bound, under the server's.
        self._slots = asyncio.Semaphore(limit) if limit else None

    async def run(
        self,
        record: RolloutRecord,
        *,
        api_key: str | None,
        attempt: int,
        budget: float,
        cancelled: asyncio.Event,
        cancel_reason: Callable[[], str | None] = lambda: None,
    ) -> RolloutResponse:
        """The rollout's final response (never raises for what the workflow or grader did).
        ``cancel_reason``: why ``cancelled`` was set, as the record said when it was."""
        request = RolloutInitRequest.model_validate({**record.request, "llm_api_key": api_key})
        self.board.set_phase(record.rollout_id, RolloutStatus.RUNNING.value)
        started = time.monotonic()

        def reason() -> str | None:
            return cancel_reason() or record.cancel_reason

        try:
            if self._slots is not None:
                # The workflow configuration's own bound: waiting for it is queued time, which
                # a cancel or a lease that ran out ends as it ends the workflow.
                await self._slot(cancelled, started + budget)
            try:
                # 0.3.8 counts the time spent queued against the workflow's deadline.
                queued = max(0.0, self.clock() - record.created_at)
                outcome = await self._phases(request, queued, started + budget, cancelled)
            finally:
                if self._slots is not None:
                    self._slots.release()
        except _Stopped as stop:
            outcome = (
                timed_out(
                    "workflow",
                    request.agent_timeout_sec,
                    None,
                    queued=max(0.0, self.clock() - record.created_at),
                )
                if stop.expired
                else cancel_outcome(reason())
            )
        if reason() == LEASE_EXPIRED and outcome.kit_category != FailureCategory.LEASE_EXPIRED:
            # The lease ran out while the rollout ended: nobody was waiting for it any more,
            # and 0.3.8 answers lease_expired then, whatever came after.
            outcome = cancel_outcome(LEASE_EXPIRED, outcome.sample)
        return kit_response(record.rollout_id, outcome, attempt=attempt)

    async def _slot(self, cancelled: asyncio.Event, ends_at: float) -> None:
        """One of the configuration's slots; _Stopped when cancelled or out of time first."""
        assert self._slots is not None
        take = asyncio.create_task(self._slots.acquire())
        stop = asyncio.create_task(cancelled.wait())
        try:
            done, _ = await asyncio.wait(
                {take, stop},
                timeout=max(0.0, ends_at - time.monotonic()),
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            stop.cancel()
        if take in done:
            return
        take.cancel()
        await asyncio.wait({take})
        if take.done() and not take.cancelled():
            self._slots.release()  # taken as it was cancelled: given back
        raise _Stopped(expired=not cancelled.is_set())

    async def _phases(
        self,
        request: RolloutInitRequest,
        queued: float,
        ends_at: float,
        cancelled: asyncio.Event,
    ) -> Outcome:
        workflows = self.workflows
        rollout_id = request.rollout_id
        ctx = RolloutContext(
            chat_completions_url=request.chat_completions_url,
            api_key=request.llm_api_key,
            rollout_id=rollout_id,
            progress=_Progress(self.board, rollout_id),
            process_id=self.process_id,
        )
        with tempfile.TemporaryDirectory(prefix=f"osmosis03-{rollout_id[:40]}-") as folder:
            artifacts = Path(folder)
            config = copy.deepcopy(workflows.workflow_config)
            agent_limit = (
                None
                if request.agent_timeout_sec is None
                else max(request.agent_timeout_sec - queued, 0.0)
            )

            async def workflow() -> RolloutSample | None:
                instance = workflows.workflow(config)
                output = coerce_output(
                    await instance.run(
                        AgentWorkflowContext(
                            prompt=request.initial_messages,
                            config=config,
                            metadata=request.metadata,
                            artifacts_dir=artifacts,
                        )
                    )
                )
                if output is None:
                    return await ctx.get_sample()
                if output.messages is None:
                    return None
                return RolloutSample(
                    messages=output.messages, label=request.label, metrics=dict(output.metrics)
                )

            try:
                sample = await self._phase(workflow, ctx, agent_limit, ends_at, cancelled)
            except _Stopped:
                raise
            except Exception as exc:
                return raised("workflow", exc, None, rollout_id)
            if not request.grade:
                return Outcome(RolloutStatus.SUCCESS, sample)
            if workflows.grader is None or (request.label is None and request.metadata is None):
                why = (
                    "no grader is served (rollout-sdk serve --grader MODULE:ATTR)"
                    if workflows.grader is None
                    else "the request has neither a label nor metadata to grade against"
                )
                return Outcome(
                    RolloutStatus.FAILURE,
                    sample,
                    f"grade is true, but {why}",
                    RolloutErrorCategory.VALIDATION_ERROR,
                    FailureCategory.AGENT_ERROR,
                )
            return await self._grade(request, sample, ctx, artifacts, ends_at, cancelled)

    async def _grade(
        self,
        request: RolloutInitRequest,
        sample: RolloutSample | None,
        ctx: RolloutContext,
        artifacts: Path,
        ends_at: float,
        cancelled: asyncio.Event,
    ) -> Outcome:
        grader_cls = self.workflows.grader
        assert grader_cls is not None
        self.board.set_phase(request.rollout_id, RolloutStatus.GRADING.value)
        grader_ctx = GraderContext(
            label=request.label, sample=sample, metadata=request.metadata, artifacts_dir=artifacts
        )

        async def grade() -> None:
            await grader_cls(copy.deepcopy(self.workflows.grader_config)).grade(grader_ctx)
            graded = grader_ctx.sample
            if graded is None:
                raise ValueError(
                    "no sample to grade: the workflow returned no messages and registered no "
                    "sample source"
                )
            if not graded.remove_sample and graded.reward is None:
                raise ValueError(
                    "the grader set no reward (ctx.set_reward) and did not remove the sample"
                )

        try:
            await self._phase(grade, ctx, request.grader_timeout_sec, ends_at, cancelled)
        except _Stopped as stop:
            if not stop.expired:
                raise  # a cancel: as during the workflow
            return timed_out("grader", request.grader_timeout_sec, sample)
        except Exception as exc:
            return raised("grader", exc, sample, request.rollout_id)
        return Outcome(RolloutStatus.SUCCESS, grader_ctx.sample)

    async def _phase(
        self,
        work: Callable[[], Coroutine[Any, Any, Any]],
        ctx: RolloutContext,
        limit: float | None,
        ends_at: float,
        cancelled: asyncio.Event,
    ) -> Any:
        """``work``'s result, run as a task in ``ctx`` for at most ``limit`` seconds (and never
        past ``ends_at``); _Stopped when cancelled or past its time, the task cancelled then."""
        left = ends_at - time.monotonic()
        timeout = left if limit is None else min(limit, left)
        started = time.monotonic()
        with ctx:
            task: asyncio.Task[Any] = asyncio.create_task(work())  # copies the context: ctx in it
        stop = asyncio.create_task(cancelled.wait())
        try:
            done, _ = await asyncio.wait(
                {task, stop}, timeout=max(0.0, timeout), return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            stop.cancel()
        if task in done:
            if task.cancelled():
                # Cancelled from within (an inner task's cancel let through), not by the kit:
                # the author's code failed, and the rollout must still end.
                raise RuntimeError("the workflow's own code cancelled its task")
            result = task.result()  # raises what the work raised
            if time.monotonic() - started > timeout:
                # Sync code that blocked the loop past the deadline: its result is too late.
                raise _Stopped(expired=True)
            return result
        task.cancel()
        await asyncio.wait({task}, timeout=STOP_GRACE_SECONDS)
        raise _Stopped(expired=not cancelled.is_set())


# ------------------------------------------------------------------------ the final response


_KIT_STATUS_REASON = {
    FailureCategory.TIMEOUT: "timeout",
    FailureCategory.CANCELLED: "cancelled",
}


def _text(value: str | None) -> str | None:
    """``value`` as UTF-8 can carry it (an unpaired surrogate replaced): every poll's answer
    must encode."""
    return None if value is None else value.encode("utf-8", "replace").decode("utf-8")


def kit_response(rollout_id: str, outcome: Outcome, *, attempt: int) -> RolloutResponse:
    """The kit's final response for a 0.3.8 outcome: COMPLETED on success, else ERROR with the
    kit's category; the outcome itself under ``extra_fields["rollout_sdk"]["osmosis03"]``."""
    sample = outcome.sample
    wire_sample: dict[str, Any] | None = None
    if sample is not None:
        safe = sample.json_safe_copy()
        try:
            wire_sample = safe.model_dump(mode="json", exclude={"trajectory_messages"})
            # As the answer will be written: UTF-8, no NaN (a lone surrogate fails here).
            json.dumps(wire_sample, allow_nan=False, ensure_ascii=False).encode("utf-8")
        except (TypeError, ValueError, RecursionError):
            logger.warning(
                "the sample cannot be sent as JSON; keeping its reward only",
                extra={"rollout_id": rollout_id},
            )
            wire_sample = RolloutSample(
                reward=sample.reward,
                label=_text(sample.label),
                remove_sample=sample.remove_sample,
                trajectory_messages=None,
            ).model_dump(mode="json", exclude={"trajectory_messages"})
    kept: dict[str, Any] = {
        OUTCOME_KEY: {
            "status": outcome.status.value,
            "sample": wire_sample,
            "err_message": _text(outcome.err_message),
            "err_category": None if outcome.err_category is None else outcome.err_category.value,
        }
    }
    success = outcome.status is RolloutStatus.SUCCESS
    if not success:
        category = outcome.kit_category or FailureCategory.AGENT_ERROR
        kept.update(failure_fields(category, attempt)[EXTRA_KEY])
    messages = list((wire_sample or {}).get("messages") or [])
    reward = (wire_sample or {}).get("reward")
    removed = bool((wire_sample or {}).get("remove_sample"))
    return RolloutResponse(
        rollout_id=rollout_id,
        status=KitStatus.COMPLETED if success else KitStatus.ERROR,
        final_messages=[m for m in messages if isinstance(m, dict)],
        finish_reason="stop"
        if success
        else _KIT_STATUS_REASON.get(outcome.kit_category or FailureCategory.AGENT_ERROR, "error"),
        error_message=None if success else _text(outcome.err_message),
        reward=reward if success and not removed else None,
        extra_fields={EXTRA_KEY: kept},
    )


def cancel_outcome(reason: str | None, sample: RolloutSample | None = None) -> Outcome:
    """The outcome of a 0.3.8 rollout cancelled, or whose polling lease ran out (``reason``),
    before it ended, started or not (``sample``: what it had made by then)."""
    if reason == LEASE_EXPIRED:
        return Outcome(
            RolloutStatus.FAILURE,
            sample,
            "polling lease expired",
            RolloutErrorCategory.LEASE_EXPIRED,
            FailureCategory.LEASE_EXPIRED,
        )
    return Outcome(RolloutStatus.CANCELLED, sample, "cancelled", None, FailureCategory.CANCELLED)


def raised(phase: str, exc: Exception, sample: RolloutSample | None, rollout_id: str) -> Outcome:
    """The outcome of a ``phase`` (workflow, grader) whose code raised ``exc``: the agent's."""
    logger.warning(f"the {phase} raised", exc_info=exc, extra={"rollout_id": rollout_id})
    return Outcome(
        RolloutStatus.FAILURE,
        sample,
        str(exc) or type(exc).__name__,
        wire_category(exc),
        FailureCategory.AGENT_ERROR,
    )


def timed_out(
    phase: str, limit: float | None, sample: RolloutSample | None, *, queued: float = 0.0
) -> Outcome:
    """The outcome of a ``phase`` (workflow, grader) past its deadline (``limit``, or else the
    rollout's own)."""
    if limit is not None:
        message = f"{phase} exceeded its {limit}s deadline"
    else:
        message = (
            f"{phase} exceeded the rollout's deadline "
            "(OSMOSIS_ROLLOUT_SERVER_REQUEST_TIMEOUT_SECONDS)"
        )
    if queued >= 0.1:
        message += f" ({queued:.1f}s of it spent queued)"
    return Outcome(
        RolloutStatus.FAILURE,
        sample,
        message,
        RolloutErrorCategory.TIMEOUT,
        FailureCategory.TIMEOUT,
    )
