"""The ``Dispatcher`` port: hands an accepted rollout to a worker before init answers 202."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from rollout_sdk.errors import DispatchError

if TYPE_CHECKING:
    from rollout_sdk.protocol import InitResponse, RolloutRequest


@dataclass(frozen=True)
class Job:
    """What a worker needs beyond the record: the id, the attempt, and the callback key.

    The callback key travels with the job, never in the record (protocol.md section 3).
    ``request`` and ``init_response`` are init's validated request and 202 body, when the job
    stays in this process (the local server's in-process dispatcher): the worker then uses them
    rather than validating the stored copies again. ``cost`` is what the rollout used before the
    hand-off (on Lambda, the API function's part of its cost estimate, :mod:`rollout_sdk.cost`),
    for the worker to carry on. Dispatchers that send the job elsewhere carry all but
    ``request`` and ``init_response``.
    """

    rollout_id: str
    attempt: int = 1
    api_key: str | None = field(default=None, repr=False)
    request: RolloutRequest | None = field(default=None, repr=False, compare=False)
    init_response: InitResponse | None = field(default=None, repr=False, compare=False)
    #: The record (a ``RolloutRecord``: typed ``object`` because the dispatchers know nothing of
    #: the store, pyproject.toml's import contracts) as init created it, already claimed for
    #: this job (RUNNING on its attempt), when the job starts at once in this process (a slot
    #: was reserved for it: :class:`Reserving`); the worker then makes no claim move. Never
    #: sent elsewhere.
    claimed: object | None = field(default=None, repr=False, compare=False)
    cost: dict[str, Any] | None = field(default=None, repr=False, compare=False)


#: What a remote dispatcher asks, at each hand-off, for the rollout's usage so far (the cost
#: meter's share to carry, None when nothing is metered); given to it like telemetry is.
CostShare = Callable[[], "dict[str, Any] | None"]

# ------------------------------------------------------------------- the job on the wire
# The worker event (an asynchronous invoke's payload), the body of a rollout-queue message
# (dispatch/sqs.py adds the sealed key) and an on-failure record's ``requestPayload``. The shape
# has not changed since the ``cost`` field was added, so events and messages in flight when a
# stack is updated parse as before; one without ``cost`` (sent before it was added) carries none.

#: The job's field carrying the API function's part of the rollout's cost estimate.
COST_FIELD = "cost"


def job_event(job: Job) -> dict[str, Any]:
    """The worker's event: small on purpose; the worker reads the request from the store."""
    event = {"rollout_id": job.rollout_id, "attempt": job.attempt, "api_key": job.api_key}
    return event if job.cost is None else {**event, COST_FIELD: job.cost}


def job_from_event(event: Any) -> Job:
    """Parse a worker event; ValueError naming the field when it is malformed. A ``cost``
    that is not an object is left out (the estimate then lacks the API function's part)."""
    if not isinstance(event, dict):
        raise ValueError(f"worker event must be a JSON object, got {type(event).__name__}")
    rollout_id = event.get("rollout_id")
    if not isinstance(rollout_id, str) or not rollout_id:
        raise ValueError("worker event field 'rollout_id' must be a non-empty string")
    attempt = event.get("attempt", 1)
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1:
        raise ValueError("worker event field 'attempt' must be a positive integer")
    api_key = event.get("api_key")
    if api_key is not None and not isinstance(api_key, str):
        raise ValueError("worker event field 'api_key' must be a string or null")
    carried = event.get(COST_FIELD)
    return Job(
        rollout_id=rollout_id,
        attempt=attempt,
        api_key=api_key,
        cost=carried if isinstance(carried, dict) else None,
    )


def failure_from_event(event: Any) -> tuple[Job, str]:
    """The job and a reason from an on-failure destination record (``requestPayload`` is the
    original worker event); ValueError naming the field when it is not one."""
    if not isinstance(event, dict):
        raise ValueError(f"failure record must be a JSON object, got {type(event).__name__}")
    job = job_from_event(event.get("requestPayload"))
    context = event.get("requestContext") or {}
    condition = context.get("condition", "unknown condition") if isinstance(context, dict) else "?"
    response = event.get("responsePayload") or {}
    detail = ""
    if isinstance(response, dict) and (response.get("errorType") or response.get("errorMessage")):
        detail = f": {response.get('errorType', 'Error')}: {response.get('errorMessage', '')}"
    attempts = context.get("approximateInvokeCount") if isinstance(context, dict) else None
    tries = f" after {attempts} attempts" if attempts else ""
    return job, f"the worker function failed ({condition}{tries}){detail}"


@runtime_checkable
class Dispatcher(Protocol):
    """Starts workers. ``dispatch`` returns once the hand-off is durable or running."""

    async def dispatch(self, job: Job) -> None:
        """Hand ``job`` to a worker; raise DispatchError when that is impossible."""
        ...

    @property
    def active(self) -> int:
        """Rollouts this process is running or holding (for /health)."""
        ...

    @property
    def completed(self) -> int:
        """Rollouts this process has finished since it started (for /health); a job that found
        its rollout owned by another delivery (a duplicate's hand-off) is not one."""
        ...

    async def aclose(self) -> None:
        """Stop; rollouts still running are left to the record's recovery rules."""
        ...


@runtime_checkable
class Reserving(Protocol):
    """A dispatcher that can promise, before the record exists, that a job will start at once
    (the local server's in-process one, with a free slot): init then creates the record
    already claimed (:meth:`~rollout_sdk.store.base.Store.create` with a claim), one write
    instead of two, and dispatches the job carrying it (``Job.claimed``)."""

    async def reserve(self) -> bool:
        """Take a slot for one job now, without waiting; False when none is free."""
        ...

    def unreserve(self) -> None:
        """Give back a slot :meth:`reserve` took, for a job that will not be dispatched."""
        ...


def _nothing_metered() -> dict[str, Any] | None:
    return None


class RemoteDispatcher:
    """Base of the dispatchers that hand rollouts to AWS (an invoke, a queue message).

    The API function runs no rollouts itself, so it counts none (the store knows what is in
    flight); there is nothing to stop; an AWS call runs in a worker thread and its botocore
    errors become DispatchError naming ``what`` failed. ``cost_share`` (the composition root
    passes the cost meter's) is asked at each hand-off what the job carries as ``cost``.
    """

    def __init__(self, *, cost_share: CostShare | None = None) -> None:
        self._cost_share = cost_share or _nothing_metered

    def costed(self, job: Job) -> Job:
        """``job`` carrying the rollout's usage so far: asked when the hand-off is made, after
        any request made for it (a seal), so that request is in it."""
        share = self._cost_share()
        return job if share is None else replace(job, cost=share)

    @property
    def active(self) -> int:
        return 0

    @property
    def completed(self) -> int:
        return 0

    async def aclose(self) -> None:
        """Nothing to stop: AWS holds what was handed off."""

    @staticmethod
    async def call_aws(what: str, call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Run ``call`` in a thread; DispatchError naming ``what`` on a botocore error."""
        # Here: only the remote dispatchers (AWS) need botocore; the local server never loads it.
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return await asyncio.to_thread(call)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            raise DispatchError(
                f"{what} failed: {error.get('Code')}: {error.get('Message')}"
            ) from exc
        except BotoCoreError as exc:
            raise DispatchError(f"{what} failed: {exc}") from exc
