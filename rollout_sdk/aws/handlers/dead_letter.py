"""The rollout queue's dead-letter queue: messages SQS gave up on, each rollout reported once."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from rollout_sdk.aws import metering
from rollout_sdk.cost import meter as cost_meter
from rollout_sdk.dispatch.sealed import job_from_message
from rollout_sdk.errors import StoreError
from rollout_sdk.stack import LambdaFunction
from rollout_sdk.telemetry import rollout_scope

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

    from rollout_sdk.aws.runtime import InvocationContext, LambdaRuntime

logger = logging.getLogger("rollout_sdk.lambda")


def handle(runtime: LambdaRuntime, event: Any, context: InvocationContext | None) -> dict[str, Any]:
    """Report each dead letter's rollout once, with its stored response or an ERROR, as the
    on-failure destination does; a malformed message is logged and dropped.

    A dead letter whose sealed callback key cannot be opened is not reported without it
    (TrainGate would refuse the callback and the rollout would end UNDELIVERABLE, for good):
    once every other message of the batch is settled, the invocation raises, so SQS keeps the
    batch and delivers it again after the dead-letter queue's visibility timeout, until KMS
    opens the key or the message's retention (14 days) runs out. The others, settled already,
    find their records final and send nothing twice.
    """
    # Here: only the dead-letter function loads the data classes, at its first call.
    from aws_lambda_powertools.utilities.data_classes import SQSEvent

    # One at a time, not a batch processor: nothing is retried from a dead-letter queue (but a
    # key that cannot be opened), so there is no partial-batch report to make, and each report
    # is one short store write.
    settled: list[dict[str, str]] = []
    kept: list[str] = []
    if not (isinstance(event, dict) and isinstance(event.get("Records"), list)):
        return {"status": "settled", "rollouts": settled}
    records = list(SQSEvent(event).records)
    # Metered: each dead letter's rollout is charged its share of this invocation.
    with runtime.metered(LambdaFunction.DEAD_LETTERS, context, seats=len(records)):
        for record in records:
            with cost_meter.rollout() as meter:
                _report(runtime, record, meter, settled, kept, batch=len(records))
    if kept:
        raise StoreError(
            f"the callback keys of {len(kept)} dead letters could not be opened (rollouts "
            f"{', '.join(kept)}); SQS delivers them again"
        )
    return {"status": "settled", "rollouts": settled}


def _report(
    runtime: LambdaRuntime,
    record: SQSRecord,
    meter: cost_meter.RolloutMeter | None,
    settled: list[dict[str, str]],
    kept: list[str],
    *,
    batch: int,
) -> None:
    """Report one dead letter's rollout (into ``settled``), or keep it (``kept``)."""
    try:
        queued = job_from_message(record.get("body"))
    except ValueError as exc:
        logger.error("malformed dead letter dropped: %s", exc)
        return
    with rollout_scope(queued.rollout_id):  # every log line of it carries its rollout_id
        if meter is not None:
            meter.carry(queued.cost)  # the API function's part
            metering.queued(meter, batch=batch)
        try:
            job = runtime.run(
                runtime.settlement.open_queued(
                    queued, then="the dead letter is kept and delivered again"
                )
            )
        except StoreError:
            kept.append(queued.rollout_id)
            return
        if job is None:
            return
        receives = (record.get("attributes") or {}).get("ApproximateReceiveCount", "?")
        reason = f"the queued rollout failed {receives} times (dead-letter queue)"
        settled_record = runtime.run(runtime.settlement.report_failed_job(job, reason=reason))
    settled.append(
        {
            "rollout_id": job.rollout_id,
            "state": settled_record.state.value if settled_record else "absent",
        }
    )
