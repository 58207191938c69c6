"""The worker function's asynchronous invocation: one rollout per event (``HAND_OFF=direct``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rollout_sdk.aws.handlers.preamble import one_rollout, ran, rejected
from rollout_sdk.dispatch.base import job_from_event
from rollout_sdk.stack import LambdaFunction

if TYPE_CHECKING:
    from rollout_sdk.aws.runtime import InvocationContext, LambdaRuntime


def handle(runtime: LambdaRuntime, event: Any, context: InvocationContext | None) -> dict[str, Any]:
    """Run the rollout ``event`` names, under the invocation's time left; a second delivery of
    the same event runs nothing. A malformed event is answered ``rejected``, not raised."""
    # The event is the kit's own job (dispatch.base.job_event), not an AWS event source:
    # no Powertools data class describes it.
    try:
        job = job_from_event(event)
    except ValueError as exc:
        return rejected("worker event", exc)
    with one_rollout(runtime, LambdaFunction.WORKER, context, job):
        record = runtime.run(runtime.worker.run(job, deadline_seconds=runtime.deadline(context)))
    return ran(job, record)
