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

import json
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from rollout_sdk.dispatch.base import COST_FIELD, CostShare, Job, RemoteDispatcher, job_from_event
from rollout_sdk.errors import DispatchError, StoreError

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

    from rollout_sdk.vault import KeyVault

#: The body's field holding the sealed callback key (messages sent before sealing carry
#: ``api_key`` instead).
SEALED_KEY_FIELD = "sealed_api_key"


def message_body(job: Job, sealed_api_key: str | None) -> str:
    """A rollout-queue message's body: the job, its callback key sealed (never ``api_key``),
    and the job's ``cost``, what the rollout used so far (the API function's part of its
    estimate)."""
    body: dict[str, Any] = {
        "rollout_id": job.rollout_id,
        "attempt": job.attempt,
        SEALED_KEY_FIELD: sealed_api_key,
    }
    return json.dumps(body if job.cost is None else {**body, COST_FIELD: job.cost})


@dataclass(frozen=True)
class QueuedJob:
    """A job as a rollout-queue message carries it: the callback key still sealed."""

    job: Job
    sealed_api_key: str | None = field(default=None, repr=False)

    @property
    def rollout_id(self) -> str:
        return self.job.rollout_id

    @property
    def cost(self) -> dict[str, Any] | None:
        """What the rollout used before it was queued (the API function's part of its cost)."""
        return self.job.cost

    async def open(self, vault: KeyVault | None) -> Job:
        """The job with its callback key in clear; StoreError when the sealed key cannot be
        opened (KMS refused or failed, it was sealed for another rollout than the job's, or no
        vault is configured)."""
        if self.sealed_api_key is None:
            return self.job
        if vault is None:
            raise StoreError(
                "the message's callback key is sealed, but CALLBACK_KEY_KMS_KEY_ID is not set "
                "(template.yaml sets it)"
            )
        opened = await vault.open(self.sealed_api_key, rollout_id=self.job.rollout_id)
        return replace(self.job, api_key=opened)


def job_from_message(body: str | None) -> QueuedJob:
    """The job in a rollout-queue message's body (as :class:`SqsDispatcher` sends it);
    ValueError saying what is wrong when it is not one (never echoing the body)."""
    try:
        event: Any = json.loads(body or "")
    except (ValueError, TypeError) as exc:
        raise ValueError(f"message body is not a JSON job: {exc}") from exc
    sealed = event.get(SEALED_KEY_FIELD) if isinstance(event, dict) else None
    if sealed is not None and (not isinstance(sealed, str) or not sealed):
        raise ValueError(f"message field {SEALED_KEY_FIELD!r} must be a non-empty string or null")
    # A body with "api_key" in clear was sent by a version of the kit from before sealing: it
    # is still accepted (job_from_event reads it), so the rollouts in flight during an upgrade
    # are not lost. The kit itself never sends one any more.
    job = job_from_event(event)
    if sealed is not None and job.api_key is not None:
        raise ValueError(f"message carries both 'api_key' and {SEALED_KEY_FIELD!r}")
    return QueuedJob(job, sealed)


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
        sealed = None
        if job.api_key is not None:
            try:
                sealed = await self._vault.seal(job.api_key, rollout_id=job.rollout_id)
            except StoreError as exc:
                raise DispatchError(
                    f"sealing the callback key for the rollout queue: {exc}"
                ) from exc
        # After sealing: the Encrypt is the rollout's, and in what the message carries.
        body = message_body(self.costed(job), sealed)
        await self.call_aws(
            "sending to the rollout queue",
            lambda: dict(self._client.send_message(QueueUrl=self.queue_url, MessageBody=body)),
        )
