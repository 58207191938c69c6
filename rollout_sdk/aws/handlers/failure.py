"""The worker function's on-failure destination: Lambda gave up on a worker event (its retries
exhausted, or the event aged out in Lambda's queue)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from rollout_sdk.dispatch.aws_lambda import COST_FIELD, failure_from_event
from rollout_sdk.engine import cost
from rollout_sdk.engine.telemetry import rollout_scope

if TYPE_CHECKING:
    from rollout_sdk.aws.runtime import InvocationContext, LambdaRuntime

logger = logging.getLogger("rollout_sdk.lambda")


def handle(runtime: LambdaRuntime, event: Any, context: InvocationContext | None) -> dict[str, Any]:
    """Send the stored response, or an ERROR naming the failure, once; the record says it was
    settled here. A malformed record is answered ``rejected``, not raised."""
    # Powertools has no data class (nor parser model) for an asynchronous invocation's
    # destination record ("requestContext", "requestPayload", "responsePayload"); its only
    # on-failure model is for DynamoDB streams. failure_from_event reads the few fields used.
    try:
        job, reason = failure_from_event(event)
    except ValueError as exc:
        logger.error("malformed failure record: %s", exc)
        return {"status": "rejected", "error": str(exc)}
    with (
        runtime.costs.invocation("worker-failed", context, seats=1),
        cost.rollout() as meter,
        rollout_scope(job.rollout_id),
    ):
        if meter is not None:  # the API function's part, in the original event
            meter.carry((event.get("requestPayload") or {}).get(COST_FIELD))
        record = runtime.run(runtime.settlement.report_failed_job(job, reason=reason))
    return {
        "status": "settled",
        "rollout_id": job.rollout_id,
        "state": record.state.value if record else "absent",
    }
