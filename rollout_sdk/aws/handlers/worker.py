"""The worker function's asynchronous invocation: one rollout per event (``HAND_OFF=direct``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from rollout_sdk.dispatch.aws_lambda import COST_FIELD, job_from_event
from rollout_sdk.engine import cost
from rollout_sdk.engine.telemetry import rollout_scope

if TYPE_CHECKING:
    from rollout_sdk.aws.runtime import InvocationContext, LambdaRuntime

logger = logging.getLogger("rollout_sdk.lambda")


def handle(runtime: LambdaRuntime, event: Any, context: InvocationContext | None) -> dict[str, Any]:
    """Run the rollout ``event`` names, under the invocation's time left; a second delivery of
    the same event runs nothing. A malformed event is answered ``rejected``, not raised."""
    # The event is the kit's own job (dispatch.aws_lambda.job_event), not an AWS event source:
    # no Powertools data class describes it.
    try:
        job = job_from_event(event)
    except ValueError as exc:
        # Retrying a malformed event cannot help: report and return, do not raise.
        logger.error("malformed worker event: %s", exc)
        return {"status": "rejected", "error": str(exc)}
    # Metered: the rollout's cost is this invocation and what the API function's part carried.
    with (
        runtime.costs.invocation("worker", context, seats=1),
        cost.rollout() as meter,
        rollout_scope(job.rollout_id),
    ):
        if meter is not None:
            meter.carry(event.get(COST_FIELD))
        record = runtime.run(runtime.worker.run(job, deadline_seconds=runtime.deadline(context)))
    if record is None:
        return {"status": "skipped", "rollout_id": job.rollout_id}
    return {
        "status": "done",
        "rollout_id": job.rollout_id,
        "state": record.state.value,
        "delivered": record.delivered_at is not None,
    }
