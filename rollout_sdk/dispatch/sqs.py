"""SQS dispatcher: hands rollouts to a queue whose batches one worker invocation runs together.

Each worker invocation is billed for its whole wall-clock time, mostly spent waiting on the model,
and counts against the account's concurrency. Running a batch of rollouts concurrently in one
invocation divides both by the batch size. The record state machine keeps every guarantee: a
redelivered message finds its record already claimed, running or finished.

Anyone the account allows to receive from the queue or its dead-letter queue reads the message
bodies (SQS's own encryption at rest, SSE-SQS, decrypts for every such reader). So the callback
key never travels in clear there: the body carries it sealed with the stack's KMS key, under the
same encryption context as the keys of parked responses (:class:`~rollout_sdk.vault.
KmsVault`): its purpose and the rollout id, so it opens only for the body's own rollout. Only
the functions allowed ``kms:Decrypt`` on that key can open it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rollout_sdk.dispatch.base import CostShare, Job, RemoteDispatcher
from rollout_sdk.dispatch.sealed import message_body, seal_key

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

    from rollout_sdk.vault import KeyVault


class SqsDispatcher(RemoteDispatcher):
    """Seals the callback key with ``vault`` (one KMS ``Encrypt``), then ``SendMessage`` of the
    job to the rollout queue, one message per rollout."""

    def __init__(
        self,
        queue_url: str,
        *,
        client: SQSClient,
        vault: KeyVault,
        cost_share: CostShare | None = None,
    ) -> None:
        super().__init__(cost_share=cost_share)
        self.queue_url = queue_url
        self._client = client
        self._vault = vault

    async def dispatch(self, job: Job) -> None:
        sealed = await seal_key(self._vault, job, for_what="the rollout queue")
        # After sealing: the Encrypt is the rollout's, and in what the message carries.
        body = message_body(self.costed(job), sealed)
        await self.call_aws(
            "sending to the rollout queue",
            lambda: dict(self._client.send_message(QueueUrl=self.queue_url, MessageBody=body)),
        )
