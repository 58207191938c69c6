"""Lambda dispatchers: hand a rollout to the worker function with an asynchronous invoke.

Lambda keeps the event in its own durable queue and retries it; the worker's claim on the record
makes a second delivery of the same event run nothing. The invoke happens before init answers
202, so no work is left pending when the API function's environment freezes.

The durable worker (``DurableWorker=true``) is started the same way, as a durable execution
named after the rollout (:func:`execution_name`): Lambda starts one execution per name, so a
repeated hand-off (a duplicate init, the re-drive's) cannot start a second one.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import TYPE_CHECKING, Any

from rollout_sdk.dispatch.base import CostShare, Job, RemoteDispatcher, job_event
from rollout_sdk.dispatch.sealed import seal_key, sealed_event
from rollout_sdk.errors import DispatchError

if TYPE_CHECKING:
    from mypy_boto3_lambda import LambdaClient

    from rollout_sdk.vault import KeyVault

#: Asynchronous invocation payloads are limited to 1 MB; the job is a few hundred bytes.
MAX_EVENT_BYTES = 1024 * 1024


class LambdaDispatcher(RemoteDispatcher):
    """``Invoke(InvocationType="Event")`` of the worker function, one per rollout."""

    def __init__(
        self, function_name: str, *, client: LambdaClient, cost_share: CostShare | None = None
    ) -> None:
        super().__init__(cost_share=cost_share)
        self.function_name = function_name
        self._client = client
        self._dispatched = 0

    @property
    def dispatched(self) -> int:
        """Invokes this execution environment has made."""
        return self._dispatched

    async def dispatch(self, job: Job) -> None:
        await self._invoke(job_event(self.costed(job)))

    async def _invoke(self, event: dict[str, Any], *, execution: str | None = None) -> None:
        """The invoke of ``event``; as the durable execution named ``execution`` when given
        (one that already exists is the rollout's: a hand-off made)."""
        payload = json.dumps(event).encode()

        named = {} if execution is None else {"DurableExecutionName": execution}

        def invoke() -> dict[str, Any]:
            from botocore.exceptions import ClientError  # here: only AWS dispatchers need it

            try:
                return dict(
                    self._client.invoke(
                        FunctionName=self.function_name,
                        InvocationType="Event",
                        Payload=payload,
                        **named,  # type: ignore[arg-type]  # DurableExecutionName
                    )
                )
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code")
                if execution is None or code != _ALREADY_STARTED:
                    raise
                return {"StatusCode": 202}

        answer = await self.call_aws(f"invoke of {self.function_name}", invoke)
        status = answer.get("StatusCode")
        if status != 202:
            raise DispatchError(f"invoke of {self.function_name} answered {status}, expected 202")
        self._dispatched += 1


#: Lambda's answer to a start of a durable execution whose name exists, with another input.
_ALREADY_STARTED = "DurableExecutionAlreadyStartedException"
#: What Lambda takes as a durable execution's name.
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: The shape of a name made from a digest (below), which a rollout id used as it is never has.
_DIGESTED = re.compile(r".*-h[0-9a-f]{20}")


def execution_name(rollout_id: str) -> str:
    """The durable execution's name for ``rollout_id``: the id itself when Lambda takes it as
    a name (1 to 64 of ``A-Za-z0-9_-``), else its safe characters (at most 40) and a digest of
    the whole id, so distinct ids keep distinct names."""
    if _NAME.fullmatch(rollout_id) and not _DIGESTED.fullmatch(rollout_id):
        return rollout_id
    cleaned = re.sub(r"[^A-Za-z0-9_-]", "_", rollout_id)[:40]
    return f"{cleaned}-h{hashlib.sha256(rollout_id.encode()).hexdigest()[:20]}"


class DurableLambdaDispatcher(LambdaDispatcher):
    """Starts the durable worker's execution for the rollout: an asynchronous invoke named
    :func:`execution_name`, whose input carries the callback key sealed with ``vault`` (an
    execution's input stays in its history, readable for the retention period).

    Lambda answers a second start of a name with the existing execution, or, when the input
    differs (a key sealed again differs), ``DurableExecutionAlreadyStartedException``: either
    way the rollout's one execution has it, so both are a hand-off made."""

    def __init__(
        self,
        function_name: str,
        *,
        client: LambdaClient,
        vault: KeyVault,
        cost_share: CostShare | None = None,
    ) -> None:
        super().__init__(function_name, client=client, cost_share=cost_share)
        self._vault = vault

    async def dispatch(self, job: Job) -> None:
        sealed = await seal_key(self._vault, job, for_what="the durable worker's input")
        event = sealed_event(self.costed(job), sealed)
        await self._invoke(event, execution=execution_name(job.rollout_id))
