"""API Gateway (HTTP API, payload 2.0): the app through Mangum.

Init claims the record in DynamoDB and hands the rollout off before answering 202.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

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
    """Answer one HTTP request (Mangum runs the app on the runtime's loop, the current one)."""
    return runtime.api_handler(event, context)
