"""The queue worker (``HAND_OFF=queue``): an SQS batch of rollouts, run together in one
invocation, answered with a partial-batch failure report."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from rollout_sdk.aws import metering
from rollout_sdk.cost import meter as cost_meter
from rollout_sdk.dispatch.sealed import job_from_message
from rollout_sdk.stack import LambdaFunction
from rollout_sdk.telemetry import rollout_scope

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

    from rollout_sdk.aws.runtime import InvocationContext, LambdaRuntime
    from rollout_sdk.dispatch.sealed import QueuedJob

logger = logging.getLogger("rollout_sdk.lambda")


def handle(runtime: LambdaRuntime, event: Any, context: InvocationContext | None) -> dict[str, Any]:
    """Run every rollout of the batch concurrently on the runtime's loop.

    A message is reported failed (and redelivered after its visibility timeout) only when the
    kit could not settle its rollout, or could not open its sealed callback key; a redelivery
    finds the record claimed or finished and does nothing twice. A malformed message is logged
    and dropped: retrying cannot fix it.
    """
    # Here: Powertools' batch processing is the queue worker's alone (its cold start).
    from rollout_sdk.aws.batch import LoopBatchProcessor

    deadline = runtime.deadline(context)
    # Not Powertools' async_process_partial_response: it raises on an event without a
    # "Records" list, which the kit has always answered with an empty report.
    records = event.get("Records") if isinstance(event, dict) else None
    batch = records if isinstance(records, list) else []

    async def run_one(record: SQSRecord) -> None:
        with (
            cost_meter.rollout() as meter
        ):  # the rollout's share of the invocation, and its requests
            await run_metered(record, meter)

    async def run_metered(record: SQSRecord, meter: cost_meter.RolloutMeter | None) -> None:
        try:
            queued = job_from_message(record.get("body"))
        except ValueError as exc:
            logger.error("malformed queue message %s dropped: %s", record.get("messageId"), exc)
            return
        if meter is not None:
            meter.carry(queued.cost)  # the API function's part
            metering.queued(meter, batch=len(batch))
        # Each record runs in its own task (the processor gathers them): this rollout's lines
        # carry its id, whatever the batch's other rollouts log meanwhile.
        with rollout_scope(queued.rollout_id):
            await run_queued(queued)

    async def run_queued(queued: QueuedJob) -> None:
        # A sealed key that cannot be opened (KMS throttled or unreachable, the key disabled,
        # the function's kms:Decrypt removed) is not run without it: the agent's chat calls and
        # the final callback both need the key, and TrainGate would refuse them, leaving the
        # rollout UNDELIVERABLE for good. The message is reported failed instead, so SQS
        # delivers it again (a passing KMS fault heals), and after its last receive the
        # dead-letter function reports the rollout, or keeps it until the key opens.
        job = await runtime.settlement.open_queued(
            queued,
            then="the message will be redelivered, then reported from the dead-letter queue",
        )
        if job is None:
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

    processor = LoopBatchProcessor(runtime.loop)
    with (
        runtime.metered(LambdaFunction.QUEUE_WORKER, context, seats=len(batch)),
        processor(batch, run_one),
    ):
        processor.async_process()
    return dict(processor.response())
