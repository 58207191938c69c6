"""What the handlers of one rollout share: a malformed event answered, not raised; the
invocation metered as its function; the rollout's meter carrying the job's cost in; every log
line naming the rollout."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rollout_sdk.cost import meter as cost_meter
from rollout_sdk.telemetry import rollout_scope

if TYPE_CHECKING:
    from rollout_sdk.aws.runtime import InvocationContext, LambdaRuntime
    from rollout_sdk.dispatch.base import Job
    from rollout_sdk.stack import LambdaFunction
    from rollout_sdk.store.record import RolloutRecord

logger = logging.getLogger("rollout_sdk.lambda")


def rejected(what: str, exc: ValueError) -> dict[str, Any]:
    """The answer to a malformed ``what``: retrying it cannot help, so it is logged and
    answered, never raised (a raise would make Lambda retry it)."""
    logger.error("malformed %s: %s", what, exc)
    return {"status": "rejected", "error": str(exc)}


def ran(job: Job, record: RolloutRecord | None) -> dict[str, Any]:
    """The answer of a function that ran ``job``'s rollout to ``record`` (None: this delivery
    did not own it, so nothing ran)."""
    if record is None:
        return {"status": "skipped", "rollout_id": job.rollout_id}
    return {
        "status": "done",
        "rollout_id": job.rollout_id,
        "state": record.state.value,
        "delivered": record.delivered_at is not None,
    }


@contextmanager
def one_rollout(
    runtime: LambdaRuntime,
    function: LambdaFunction,
    context: InvocationContext | None,
    job: Job,
) -> Iterator[None]:
    """An invocation of ``function`` for ``job``'s rollout alone: its cost is this invocation
    and what the API function's part carried in the job."""
    with (
        runtime.metered(function, context, seats=1),
        cost_meter.rollout() as meter,
        rollout_scope(job.rollout_id),
    ):
        if meter is not None:
            meter.carry(job.cost)
        yield
