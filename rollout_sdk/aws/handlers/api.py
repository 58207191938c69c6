"""API Gateway (HTTP API, payload 2.0): the app through Mangum.

Init claims the record in DynamoDB and hands the rollout off before answering 202.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from rollout_sdk.aws import metering
from rollout_sdk.cost import meter as cost_meter
from rollout_sdk.stack import LambdaFunction

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from fastapi import FastAPI

    from rollout_sdk.aws.runtime import LambdaRuntime

ApiHandler = Callable[[dict[str, Any], Any], dict[str, Any]]

#: Each runtime's adapter, built on its first request (or by a warm-up) and kept as long as it.
_ADAPTERS: WeakKeyDictionary[LambdaRuntime, ApiHandler] = WeakKeyDictionary()


def adapter(app: FastAPI) -> ApiHandler:
    """Mangum around ``app``, lifespan off: otherwise start-up and shut-down would run on every
    invocation (the runtime builds everything the app needs once, at the cold start)."""
    # Here: only the API function loads Mangum (handlers/__init__.py: each pays for its own).
    from mangum import Mangum

    handler: ApiHandler = Mangum(app, lifespan="off")
    return handler


def adapter_for(runtime: LambdaRuntime) -> ApiHandler:
    """The adapter around ``runtime``'s app, built once per runtime."""
    handler = _ADAPTERS.get(runtime)
    if handler is None:
        handler = _ADAPTERS[runtime] = adapter(runtime.app)
    return handler


def answer(
    function: LambdaFunction,
    runtime: LambdaRuntime,
    event: dict[str, Any],
    context: LambdaContext,
) -> dict[str, Any]:
    """Answer one HTTP request as ``function`` (Mangum runs the app on the runtime's loop, the
    current one).

    Metered for the cost estimate: an init's hand-off carries what this invocation used so far
    (its time, the HTTP API request, the claim's write units) to the worker."""
    with runtime.metered(function, context, seats=1), cost_meter.rollout() as meter:
        if meter is not None:
            meter.add("http_api_request", metering.http_api_requests(event))
        return adapter_for(runtime)(event, context)


def handle(runtime: LambdaRuntime, event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """The API function's request."""
    return answer(LambdaFunction.API, runtime, event, context)
