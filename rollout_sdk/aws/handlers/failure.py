"""The worker function's on-failure destination: Lambda gave up on a worker event (its retries
exhausted, or the event aged out in Lambda's queue)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rollout_sdk.aws.handlers.preamble import one_rollout, rejected
from rollout_sdk.dispatch.base import failure_from_event
from rollout_sdk.stack import LambdaFunction

if TYPE_CHECKING:
    from rollout_sdk.aws.runtime import InvocationContext, LambdaRuntime


def handle(runtime: LambdaRuntime, event: Any, context: InvocationContext | None) -> dict[str, Any]:
    """Send the stored response, or an ERROR naming the failure, once; the record says it was
    settled here. A malformed record is answered ``rejected``, not raised."""
    # Powertools has no data class (nor parser model) for an asynchronous invocation's
    # destination record ("requestContext", "requestPayload", "responsePayload"); its only
    # on-failure model is for DynamoDB streams. failure_from_event reads the few fields used
    # (the original event's job, with the API function's part of the cost).
    try:
        job, reason = failure_from_event(event)
    except ValueError as exc:
        return rejected("failure record", exc)
    with one_rollout(runtime, LambdaFunction.WORKER_FAILED, context, job):
        record = runtime.run(runtime.settlement.report_failed_job(job, reason=reason))
    return {
        "status": "settled",
        "rollout_id": job.rollout_id,
        "state": record.state.value if record else "absent",
    }
