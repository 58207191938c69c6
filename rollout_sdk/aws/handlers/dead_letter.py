"""The rollout queue's dead-letter queue: messages SQS gave up on, each rollout reported once."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from rollout_sdk.dispatch.sqs import job_from_message

if TYPE_CHECKING:
    from rollout_sdk.aws.runtime import InvocationContext, LambdaRuntime

logger = logging.getLogger("rollout_sdk.lambda")


def handle(runtime: LambdaRuntime, event: Any, context: InvocationContext | None) -> dict[str, Any]:
    """Report each dead letter's rollout once, with its stored response or an ERROR, as the
    on-failure destination does; a malformed message is logged and dropped."""
    from aws_lambda_powertools.utilities.data_classes import SQSEvent

    # One at a time, not a batch processor: nothing is retried from a dead-letter queue, so
    # there is no partial-batch report to make, and each report is one short store write.
    settled: list[dict[str, str]] = []
    if not (isinstance(event, dict) and isinstance(event.get("Records"), list)):
        return {"status": "settled", "rollouts": settled}
    for record in SQSEvent(event).records:
        try:
            job = job_from_message(record.get("body"))
        except ValueError as exc:
            logger.error("malformed dead letter dropped: %s", exc)
            continue
        receives = (record.get("attributes") or {}).get("ApproximateReceiveCount", "?")
        reason = f"the queued rollout failed {receives} times (dead-letter queue)"
        settled_record = runtime.run(runtime.settlement.report_failed_job(job, reason=reason))
        settled.append(
            {
                "rollout_id": job.rollout_id,
                "state": settled_record.state.value if settled_record else "absent",
            }
        )
    return {"status": "settled", "rollouts": settled}
