"""The queue worker (``HAND_OFF=queue``): an SQS batch of rollouts, run together in one
invocation, answered with a partial-batch failure report."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from rollout_sdk.dispatch.sqs import job_from_message

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

    from rollout_sdk.aws.runtime import InvocationContext, LambdaRuntime

logger = logging.getLogger("rollout_sdk.lambda")


def handle(runtime: LambdaRuntime, event: Any, context: InvocationContext | None) -> dict[str, Any]:
    """Run every rollout of the batch concurrently on the runtime's loop.

    A message is reported failed (and redelivered after its visibility timeout) only when the
    kit could not settle its rollout; a redelivery finds the record claimed or finished and does
    nothing twice. A malformed message is logged and dropped: retrying cannot fix it.
    """
    from rollout_sdk.aws.batch import LoopBatchProcessor

    deadline = runtime.deadline(context)

    async def run_one(record: SQSRecord) -> None:
        try:
            job = job_from_message(record.get("body"))
        except ValueError as exc:
            logger.error("malformed queue message %s dropped: %s", record.get("messageId"), exc)
            return
        try:
            await runtime.worker.run(job, deadline_seconds=deadline)
        except (Exception, asyncio.CancelledError) as exc:
            logger.error(
                "rollout not settled; the message will be redelivered",
                extra={"rollout_id": job.rollout_id, "error": str(exc)},
            )
            if isinstance(exc, asyncio.CancelledError):
                # Powertools counts only an Exception as a record's failure.
                raise RuntimeError("the rollout was cancelled") from exc
            raise

    # Not Powertools' async_process_partial_response: it raises on an event without a
    # "Records" list, which the kit has always answered with an empty report.
    records = event.get("Records") if isinstance(event, dict) else None
    processor = LoopBatchProcessor(runtime.loop)
    with processor(records if isinstance(records, list) else [], run_one):
        processor.async_process()
    return dict(processor.response())
