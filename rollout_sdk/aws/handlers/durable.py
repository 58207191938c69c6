"""The durable worker function's invocations (``DurableWorker=true``): each one of a rollout's
durable execution, which the durable execution SDK replays up to where the last one stopped
(:mod:`rollout_sdk.aws.durable`). Its input is the job with the callback key sealed."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from rollout_sdk.aws.durable import DurableWorker
from rollout_sdk.aws.durable_sdk import durable_sdk

if TYPE_CHECKING:
    from rollout_sdk.aws.runtime import InvocationContext, LambdaRuntime

# At the cold start (handler.py imports this module then): the SDK's import is part of the
# init (and of a SnapStart snapshot), and a function without it fails its init with a message
# that names the fix, before any rollout's invocation.
durable_sdk()


def handle(runtime: LambdaRuntime, event: Any, context: InvocationContext | None) -> Any:
    """One invocation of the rollout's execution: the SDK's answer (PENDING while it goes on
    in a later invocation, SUCCEEDED with the worker's summary once it ended)."""
    return durable_worker(runtime).handle(event, context)


@lru_cache(maxsize=4)
def durable_worker(runtime: LambdaRuntime) -> DurableWorker:
    """The durable worker of ``runtime`` (its engine's worker, each rollout one durable
    execution across invocations), built once. Here, not on the runtime, which the durable
    worker uses: the runtime never imports it."""
    return DurableWorker(runtime)
