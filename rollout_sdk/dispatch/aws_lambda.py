"""Lambda dispatcher: hands a rollout to the worker function with an asynchronous invoke.

Lambda keeps the event in its own durable queue and retries it; the worker's claim on the record
makes a second delivery of the same event run nothing. The invoke happens before init answers
202, so no work is left pending when the API function's environment freezes.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from rollout_sdk.dispatch.base import CostShare, Job, RemoteDispatcher, job_event
from rollout_sdk.errors import DispatchError

if TYPE_CHECKING:
    from mypy_boto3_lambda import LambdaClient

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
        payload = json.dumps(job_event(self.costed(job))).encode()
        answer = await self.call_aws(
            f"invoke of {self.function_name}",
            lambda: dict(
                self._client.invoke(
                    FunctionName=self.function_name, InvocationType="Event", Payload=payload
                )
            ),
        )
        status = answer.get("StatusCode")
        if status != 202:
            raise DispatchError(f"invoke of {self.function_name} answered {status}, expected 202")
        self._dispatched += 1
