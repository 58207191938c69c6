"""Lambda entry points. Wiring only: everything is built once per cold start.

``template.yaml`` points each function at one of these names (``handler.api``,
``handler.worker``, ...); the agent loop is named by the ``AGENT_LOOP`` variable
(``module:attribute``). Each entry point hands its event to the module of
:mod:`rollout_sdk.aws.handlers` for its event source.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.utilities.typing import LambdaContext

from rollout_sdk.aws.handlers import api as api_events
from rollout_sdk.aws.handlers import dead_letter, failure, queue
from rollout_sdk.aws.handlers import redrive as redrive_schedule
from rollout_sdk.aws.handlers import worker as worker_events
from rollout_sdk.aws.runtime import LambdaRuntime

logger = Logger(service="rollout-sdk")
# The SDK logs through the standard library; give its loggers Powertools' JSON format, so every
# line carries the invocation's keys (and, where one is known, the rollout_id).
copy_config_to_registered_loggers(source_logger=logger, include={"rollout_sdk"})

#: Every entry point's Powertools context. ``log_event`` is pinned off whatever
#: POWERTOOLS_LOGGER_LOG_EVENT says: an init request, a direct worker event and a failure
#: destination's record all carry the callback key in clear, and logs are for many readers.
entry_point = logger.inject_lambda_context(clear_state=True, log_event=False)

runtime = LambdaRuntime.from_environment()


@entry_point
def api(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """API function: init, health and platform health through Mangum."""
    return api_events.handle(runtime, event, context)


@entry_point
def worker(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Worker function: run one rollout and call TrainGate back."""
    if isinstance(event, dict) and isinstance(event.get("rollout_id"), str):
        logger.append_keys(rollout_id=event["rollout_id"])
    return worker_events.handle(runtime, event, context)


@entry_point
def worker_failed(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """The worker's on-failure destination: report the rollout once."""
    payload = event.get("requestPayload") if isinstance(event, dict) else None
    if isinstance(payload, dict) and isinstance(payload.get("rollout_id"), str):
        logger.append_keys(rollout_id=payload["rollout_id"])
    return failure.handle(runtime, event, context)


@entry_point
def redrive(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Scheduled: send undelivered final responses again."""
    return redrive_schedule.handle(runtime, event, context)


@entry_point
def worker_batch(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Queue hand-off: run a batch of rollouts from SQS together (partial-batch failures)."""
    return queue.handle(runtime, event, context)


@entry_point
def dead_letters(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Queue hand-off: report rollouts whose messages the queue gave up on."""
    return dead_letter.handle(runtime, event, context)
