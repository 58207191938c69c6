"""SQS dispatcher: hands rollouts to a queue whose batches one worker invocation runs together.

Each worker invocation is billed for its whole wall-clock time, mostly spent waiting on the model,
and counts against the account's concurrency. Running a batch of rollouts concurrently in one
invocation divides both by the batch size. The record state machine keeps every guarantee: a
redelivered message finds its record already claimed, running or finished.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from rollout_sdk.dispatch.aws_lambda import job_event, job_from_event
from rollout_sdk.dispatch.base import Job, RemoteDispatcher

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient


def job_from_message(body: str | None) -> Job:
    """The job in a rollout-queue message's body (as :class:`SqsDispatcher` sends it);
    ValueError saying what is wrong when it is not one."""
    try:
        event = json.loads(body or "")
    except (ValueError, TypeError) as exc:
        raise ValueError(f"message body is not a JSON job: {exc}") from exc
    return job_from_event(event)


class SqsDispatcher(RemoteDispatcher):
    """``SendMessage`` of the job to the rollout queue, one message per rollout."""

    def __init__(self, queue_url: str, *, client: SQSClient) -> None:
        self.queue_url = queue_url
        self._client = client

    async def dispatch(self, job: Job) -> None:
        body = json.dumps(job_event(job))
        await self.call_aws(
            "sending to the rollout queue",
            lambda: dict(self._client.send_message(QueueUrl=self.queue_url, MessageBody=body)),
        )
