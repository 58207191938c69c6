"""API Gateway's route of osmosis-ai 0.3.8's result polls (``GET /rollout/{id}/result``) with a
Workflow: the same app as the API function's, on a function of its own, sized for waiting (a
poll holds its instance for up to its whole wait: docs/cost.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rollout_sdk.aws.handlers.api import answer
from rollout_sdk.stack import LambdaFunction

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from rollout_sdk.aws.runtime import LambdaRuntime


def handle(runtime: LambdaRuntime, event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """One result poll."""
    return answer(LambdaFunction.POLL, runtime, event, context)
