"""Lambda dispatcher: hands a rollout to the worker function with an asynchronous invoke.

Lambda keeps the event in its own durable queue and retries it; the worker's claim on the record
makes a second delivery of the same event run nothing. The invoke happens before init answers
202, so no work is left pending when the API function's environment freezes.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from rollout_sdk.dispatch.base import Job, RemoteDispatcher
from rollout_sdk.errors import DispatchError

if TYPE_CHECKING:
    from mypy_boto3_lambda import LambdaClient

#: Asynchronous invocation payloads are limited to 1 MB; the job is a few hundred bytes.
MAX_EVENT_BYTES = 1024 * 1024
#: The job's field carrying the API function's part of the rollout's cost estimate.
COST_FIELD = "cost"


def job_event(job: Job, *, cost: dict[str, Any] | None = None) -> dict[str, Any]:
    """The worker's event: small on purpose; the worker reads the request from the store.
    ``cost``: what the rollout used so far (the API function's part of its cost estimate)."""
    event = {"rollout_id": job.rollout_id, "attempt": job.attempt, "api_key": job.api_key}
    return event if cost is None else {**event, COST_FIELD: cost}


def job_from_event(event: Any) -> Job:
    """Parse a worker event; ValueError naming the field when it is malformed."""
    if not isinstance(event, dict):
        raise ValueError(f"worker event must be a JSON object, got {type(event).__name__}")
    rollout_id = event.get("rollout_id")
    if not isinstance(rollout_id, str) or not rollout_id:
        raise ValueError("worker event field 'rollout_id' must be a non-empty string")
    attempt = event.get("attempt", 1)
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1:
        raise ValueError("worker event field 'attempt' must be a positive integer")
    api_key = event.get("api_key")
    if api_key is not None and not isinstance(api_key, str):
        raise ValueError("worker event field 'api_key' must be a string or null")
    return Job(rollout_id=rollout_id, attempt=attempt, api_key=api_key)


def failure_from_event(event: Any) -> tuple[Job, str]:
    """The job and a reason from an on-failure destination record (``requestPayload`` is the
    original worker event); ValueError naming the field when it is not one."""
    if not isinstance(event, dict):
        raise ValueError(f"failure record must be a JSON object, got {type(event).__name__}")
    job = job_from_event(event.get("requestPayload"))
    context = event.get("requestContext") or {}
    condition = context.get("condition", "unknown condition") if isinstance(context, dict) else "?"
    response = event.get("responsePayload") or {}
    detail = ""
    if isinstance(response, dict) and (response.get("errorType") or response.get("errorMessage")):
        detail = f": {response.get('errorType', 'Error')}: {response.get('errorMessage', '')}"
    attempts = context.get("approximateInvokeCount") if isinstance(context, dict) else None
    tries = f" after {attempts} attempts" if attempts else ""
    return job, f"the worker function failed ({condition}{tries}){detail}"


class LambdaDispatcher(RemoteDispatcher):
    """``Invoke(InvocationType="Event")`` of the worker function, one per rollout."""

    def __init__(self, function_name: str, *, client: LambdaClient) -> None:
        self.function_name = function_name
        self._client = client
        self._dispatched = 0

    @property
    def dispatched(self) -> int:
        """Invokes this execution environment has made."""
        return self._dispatched

    async def dispatch(self, job: Job) -> None:
        from rollout_sdk.engine.cost import carried

        payload = json.dumps(job_event(job, cost=carried())).encode()
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
