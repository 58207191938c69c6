"""SQS dispatcher: hands rollouts to a queue whose batches one worker invocation runs together.

Each worker invocation is billed for its whole wall-clock time, mostly spent waiting on the model,
and counts against the account's concurrency. Running a batch of rollouts concurrently in one
invocation divides both by the batch size. The record state machine keeps every guarantee: a
redelivered message finds its record already claimed, running or finished.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from ..errors import DispatchError
from .aws_lambda import job_event
from .base import Job

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient


class SqsDispatcher:
    """``SendMessage`` of the job to the rollout queue, one message per rollout."""

    def __init__(self, queue_url: str, *, client: SQSClient) -> None:
        self.queue_url = queue_url
        self._client = client

    @property
    def active(self) -> int:
        # The API function runs no rollouts itself; the store knows what is in flight.
        return 0

    @property
    def completed(self) -> int:
        return 0

    async def dispatch(self, job: Job) -> None:
        body = json.dumps(job_event(job))

        def send() -> dict[str, Any]:
            return dict(self._client.send_message(QueueUrl=self.queue_url, MessageBody=body))

        try:
            await asyncio.to_thread(send)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            raise DispatchError(
                f"sending to the rollout queue failed: {error.get('Code')}: {error.get('Message')}"
            ) from exc
        except BotoCoreError as exc:
            raise DispatchError(f"sending to the rollout queue failed: {exc}") from exc

    async def aclose(self) -> None:
        """Nothing to stop: SQS holds the messages."""
