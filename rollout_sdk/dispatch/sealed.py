"""A job whose callback key travels sealed: a rollout-queue message's body, and the durable
worker's execution input.

Both are kept where many can read them: a queue's messages by everyone the account lets
receive from the queue or its dead-letter queue, a durable execution's input in its history
for the retention period (``GetDurableExecutionHistory``). So the callback key is never in
them in clear: it is sealed with the stack's KMS key (:class:`~rollout_sdk.vault.KmsVault`),
under an encryption context naming its purpose and the rollout, so it opens only for the
job's own rollout, and only in the functions allowed ``kms:Decrypt`` on that key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from rollout_sdk.dispatch.base import Job, job_event, job_from_event
from rollout_sdk.errors import DispatchError, StoreError

if TYPE_CHECKING:
    from rollout_sdk.vault import KeyVault

#: The field holding the sealed callback key (queue messages sent before sealing carry
#: ``api_key`` instead).
SEALED_KEY_FIELD = "sealed_api_key"


def sealed_event(job: Job, sealed_api_key: str | None) -> dict[str, Any]:
    """The job as a dict with its callback key sealed (never ``api_key``), and the job's
    ``cost``, what the rollout used so far (the API function's part of its estimate)."""
    event = job_event(job)
    del event["api_key"]
    return {**event, SEALED_KEY_FIELD: sealed_api_key}


def message_body(job: Job, sealed_api_key: str | None) -> str:
    """A rollout-queue message's body: :func:`sealed_event` as JSON."""
    return json.dumps(sealed_event(job, sealed_api_key))


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
    """The job in a rollout-queue message's body (as the SQS dispatcher sends it);
    ValueError saying what is wrong when it is not one (never echoing the body)."""
    try:
        event: Any = json.loads(body or "")
    except (ValueError, TypeError) as exc:
        raise ValueError(f"message body is not a JSON job: {exc}") from exc
    return _sealed_job(event)


def sealed_job_from_event(event: Any) -> QueuedJob:
    """The job in a durable worker's execution input (as the durable dispatcher sends it);
    ValueError naming the field when it is not one. Unlike a queue message, which may date
    from before sealing, an input with ``api_key`` in clear is refused: the kit never sent one,
    and its key would sit in the execution's history."""
    if isinstance(event, dict) and event.get("api_key") is not None:
        raise ValueError(
            "durable worker input field 'api_key' must be absent: the callback key travels "
            f"sealed, in {SEALED_KEY_FIELD!r}"
        )
    return _sealed_job(event)


def _sealed_job(event: Any) -> QueuedJob:
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


async def seal_key(vault: KeyVault, job: Job, *, for_what: str) -> str | None:
    """``job``'s callback key sealed for its rollout (one KMS ``Encrypt``), None when it has
    none; DispatchError naming ``for_what`` when sealing fails."""
    if job.api_key is None:
        return None
    try:
        return await vault.seal(job.api_key, rollout_id=job.rollout_id)
    except StoreError as exc:
        raise DispatchError(f"sealing the callback key for {for_what}: {exc}") from exc
