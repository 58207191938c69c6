"""Lambda entry points. Wiring only: everything is built once per cold start.

``template.yaml`` points each function at one of these names (``handler.api``,
``handler.worker``, ...); the agent loop is named by the ``AGENT_LOOP`` variable
(``module:attribute``). Each entry point hands its event to the module of
:mod:`rollout_sdk.aws.handlers` for its event source. Only the entry point's own is imported:
at the cold start for the one Lambda runs (it names it in ``_HANDLER``), so its import is part of
the init (and of a SnapStart snapshot), and any other on its first call; the API never loads
the queue's or the worker's, the worker never the API's (``tests/aws/test_entry_imports.py``
holds each entry point to what it must not load).
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.utilities.typing import LambdaContext

from rollout_sdk.aws.runtime import LambdaRuntime
from rollout_sdk.aws.snapstart import register as register_snapstart_hooks
from rollout_sdk.stack import LambdaFunction
from rollout_sdk.telemetry import RolloutLogFilter

Handler = Callable[[dict[str, Any], LambdaContext], dict[str, Any]]
#: The module of :mod:`rollout_sdk.aws.handlers` each entry point hands its event to.
EVENT_SOURCES = {function.names.entry: function.names.events for function in LambdaFunction}

logger = Logger(service="rollout-sdk")
# Every line written inside a rollout carries its rollout_id, from the task's context (a queue
# batch runs many at once in this process); Powertools adds the invocation's X-Ray trace id.
logger.registered_handler.addFilter(RolloutLogFilter())
# The SDK logs through the standard library; give its loggers Powertools' JSON format (and the
# filter above, on the same handler), so every line carries the invocation's keys.
copy_config_to_registered_loggers(source_logger=logger, include={"rollout_sdk"})

runtime = LambdaRuntime.from_environment()
# SnapStart: after a resume from a snapshot, reseed random numbers and drop pooled connections
# (a no-op where snapshot_restore_py is not importable, i.e. off Lambda).
register_snapstart_hooks(runtime)
# Built at the cold start (Metrics at module scope): with the template's Tracing parameter on,
# this is where the X-Ray SDK is imported, once.
telemetry = runtime.telemetry


def entry_point(function: LambdaFunction) -> Callable[[Handler], Handler]:
    """Every entry point's Powertools context and metrics: the invocation's metrics carry
    ``function``'s ``Function`` dimension and are written when it ends. ``log_event`` is pinned
    off whatever POWERTOOLS_LOGGER_LOG_EVENT says: an init request, a direct worker event and a
    failure destination's record all carry the callback key in clear, and logs are for many
    readers."""

    def wrap(handle: Handler) -> Handler:
        @functools.wraps(handle)
        def invoked(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
            with runtime.invocation(function.names.dimension):
                return handle(event, context)

        wrapped: Handler = logger.inject_lambda_context(invoked, clear_state=True, log_event=False)
        return wrapped

    return wrap


@entry_point(LambdaFunction.API)
def api(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """API function: init, health and platform health through Mangum."""
    from rollout_sdk.aws.handlers import api as api_events

    return api_events.handle(runtime, event, context)


@entry_point(LambdaFunction.WORKER)
def worker(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Worker function: run one rollout and call TrainGate back."""
    from rollout_sdk.aws.handlers import worker as worker_events

    return worker_events.handle(runtime, event, context)


@entry_point(LambdaFunction.WORKER_FAILED)
def worker_failed(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """The worker's on-failure destination: report the rollout once."""
    from rollout_sdk.aws.handlers import failure

    return failure.handle(runtime, event, context)


@entry_point(LambdaFunction.REDRIVE)
def redrive(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Scheduled: send undelivered final responses again."""
    from rollout_sdk.aws.handlers import redrive as redrive_schedule

    return redrive_schedule.handle(runtime, event, context)


@entry_point(LambdaFunction.QUEUE_WORKER)
def worker_batch(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Queue hand-off: run a batch of rollouts from SQS together (partial-batch failures)."""
    from rollout_sdk.aws.handlers import queue

    return queue.handle(runtime, event, context)


@entry_point(LambdaFunction.DEAD_LETTERS)
def dead_letters(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Queue hand-off: report rollouts whose messages the queue gave up on."""
    from rollout_sdk.aws.handlers import dead_letter

    return dead_letter.handle(runtime, event, context)


# The entry point this environment runs (Lambda sets _HANDLER to the template's Handler, e.g.
# handler.api): its event source is imported now, at the cold start, like everything else.
_entry = os.environ.get("_HANDLER", "").rpartition(".")[2]
if _entry in EVENT_SOURCES:
    importlib.import_module(f"rollout_sdk.aws.handlers.{EVENT_SOURCES[_entry]}")
