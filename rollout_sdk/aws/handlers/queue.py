"""The queue worker (``HAND_OFF=queue``): an SQS batch of rollouts, run together in one
invocation, answered with a partial-batch failure report."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from rollout_sdk.dispatch.sqs import job_from_message
from rollout_sdk.engine import cost
from rollout_sdk.engine.record import RecordState
from rollout_sdk.engine.telemetry import rollout_scope
from rollout_sdk.errors import StoreError

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

    from rollout_sdk.aws.runtime import InvocationContext, LambdaRuntime
    from rollout_sdk.dispatch.base import Job
    from rollout_sdk.dispatch.sqs import QueuedJob

logger = logging.getLogger("rollout_sdk.lambda")


async def open_job(runtime: LambdaRuntime, queued: QueuedJob, *, then: str) -> Job | None:
    """The message's job with its callback key opened (one KMS ``Decrypt`` when sealed).

    None when the key cannot be opened but the rollout needs it no more (reported already,
    parked with its own sealed key for the re-drive, or its record gone): the message can go,
    rather than fail until SQS drops it. Otherwise a key that cannot be opened raises
    StoreError, after an error log naming the rollout and ``then`` (what happens next).
    """
    try:
        return await queued.open(runtime.vault)
    except StoreError as exc:
        record = await runtime.store.get(queued.rollout_id, now=time.time())
        final = record is None or record.state in (RecordState.DELIVERED, RecordState.UNDELIVERABLE)
        parked = record is not None and record.state == RecordState.FINISHED and record.sealed_key
        if final or parked:
            logger.warning(
                "callback key cannot be opened, but the rollout needs it no more",
                extra={"rollout_id": queued.rollout_id, "error": str(exc)},
            )
            return None
        logger.error(
            f"callback key cannot be opened; {then}",
            extra={"rollout_id": queued.rollout_id, "error": str(exc)},
        )
        raise


def handle(runtime: LambdaRuntime, event: Any, context: InvocationContext | None) -> dict[str, Any]:
    """Run every rollout of the batch concurrently on the runtime's loop.

    A message is reported failed (and redelivered after its visibility timeout) only when the
    kit could not settle its rollout, or could not open its sealed callback key; a redelivery
    finds the record claimed or finished and does nothing twice. A malformed message is logged
    and dropped: retrying cannot fix it.
    """
    from rollout_sdk.aws.batch import LoopBatchProcessor

    deadline = runtime.deadline(context)
    # Not Powertools' async_process_partial_response: it raises on an event without a
    # "Records" list, which the kit has always answered with an empty report.
    records = event.get("Records") if isinstance(event, dict) else None
    batch = records if isinstance(records, list) else []

    async def run_one(record: SQSRecord) -> None:
        with cost.rollout() as meter:  # the rollout's share of the invocation, and its requests
            await run_metered(record, meter)

    async def run_metered(record: SQSRecord, meter: cost.RolloutMeter | None) -> None:
        try:
            queued = job_from_message(record.get("body"))
        except ValueError as exc:
            logger.error("malformed queue message %s dropped: %s", record.get("messageId"), exc)
            return
        if meter is not None:
            meter.carry(queued.cost)  # the API function's part
            cost.queued(meter, batch=len(batch))
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
        job = await open_job(
            runtime,
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
        runtime.costs.invocation("queue-worker", context, seats=len(batch)),
        processor(batch, run_one),
    ):
        processor.async_process()
    return dict(processor.response())
