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


def entry_point(function: LambdaFunction) -> Handler:
    """``function``'s entry point: it hands each event to ``handle`` of the module of
    :mod:`rollout_sdk.aws.handlers` for its event source (imported on the first call, unless at
    the cold start below), within the invocation's metrics, which carry ``function``'s
    ``Function`` dimension and are written when it ends, and Powertools' context. ``log_event``
    is pinned off whatever POWERTOOLS_LOGGER_LOG_EVENT says: an init request, a direct worker
    event and a failure destination's record all carry the callback key in clear, and logs are
    for many readers."""
    events = f"rollout_sdk.aws.handlers.{function.names.events}"

    def invoked(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        with runtime.invocation(function.names.dimension):
            answer: dict[str, Any] = importlib.import_module(events).handle(runtime, event, context)
            return answer

    invoked.__name__ = invoked.__qualname__ = function.names.entry
    wrapped: Handler = logger.inject_lambda_context(invoked, clear_state=True, log_event=False)
    return wrapped


#: API function: init, health and platform health through Mangum.
api = entry_point(LambdaFunction.API)
#: Poll function (with a Workflow): osmosis-ai 0.3.8's result polls, the same app.
poll = entry_point(LambdaFunction.POLL)
#: Worker function: run one rollout and call TrainGate back.
worker = entry_point(LambdaFunction.WORKER)
#: Durable worker function (DurableWorker=true): one rollout as a durable execution, across
#: as many invocations as it needs.
durable_worker = entry_point(LambdaFunction.DURABLE_WORKER)
#: The worker's on-failure destination: report the rollout once.
worker_failed = entry_point(LambdaFunction.WORKER_FAILED)
#: Scheduled: send undelivered final responses again.
redrive = entry_point(LambdaFunction.REDRIVE)
#: Queue hand-off: run a batch of rollouts from SQS together (partial-batch failures).
worker_batch = entry_point(LambdaFunction.QUEUE_WORKER)
#: Queue hand-off: report rollouts whose messages the queue gave up on.
dead_letters = entry_point(LambdaFunction.DEAD_LETTERS)


# The entry point this environment runs (Lambda sets _HANDLER to the template's Handler, e.g.
# handler.api): its event source is imported now, at the cold start, like everything else.
_entry = os.environ.get("_HANDLER", "").rpartition(".")[2]
if _entry in EVENT_SOURCES:
    importlib.import_module(f"rollout_sdk.aws.handlers.{EVENT_SOURCES[_entry]}")
