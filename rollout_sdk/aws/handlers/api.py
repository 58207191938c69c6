"""API Gateway (HTTP API, payload 2.0): the app through Mangum.

Init claims the record in DynamoDB and hands the rollout off before answering 202.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rollout_sdk.engine import cost

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from fastapi import FastAPI

    from rollout_sdk.aws.runtime import LambdaRuntime

ApiHandler = Callable[[dict[str, Any], Any], dict[str, Any]]


def adapter(app: FastAPI) -> ApiHandler:
    """Mangum around ``app``, lifespan off: otherwise start-up and shut-down would run on every
    invocation (the runtime builds everything the app needs once, at the cold start)."""
    from mangum import Mangum

    handler: ApiHandler = Mangum(app, lifespan="off")
    return handler


def handle(runtime: LambdaRuntime, event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Answer one HTTP request (Mangum runs the app on the runtime's loop, the current one).

    Metered for the cost estimate: an init's hand-off carries what this invocation used so far
    (its time, the HTTP API request, the claim's write units) to the worker."""
    with runtime.costs.invocation("api", context, seats=1), cost.rollout() as meter:
        if meter is not None:
            meter.add("http_api_request", cost.http_api_requests(event))
        return runtime.api_handler(event, context)
