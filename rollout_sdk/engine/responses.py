"""The final response of a rollout, as the protocol carries it: what an agent's outcome becomes,
and the ERROR responses the kit writes itself.

Every ERROR carries its failure in ``extra_fields`` under one key, v1's wire shape unchanged::

    "extra_fields": {"rollout_sdk": {"failure": {"category": "worker_lost",
                                                 "retryable": true, "attempt": 1}}}

The category comes from where the failure happened (the kit's exceptions carry theirs:
:class:`~rollout_sdk.errors.FailureCategory`), never from message text. ``reward`` is null for
every failure that is not the agent's own. On AWS, every final response also carries its cost
estimate there, as ``cost`` (:mod:`rollout_sdk.cost`).
"""

from __future__ import annotations

import contextlib
import logging
import math
from typing import Any, NamedTuple

from rollout_sdk.agent.loop import RolloutResult
from rollout_sdk.errors import FailureCategory, RolloutError
from rollout_sdk.protocol import EXTRA_KEY, RolloutMetrics, RolloutResponse, RolloutStatus
from rollout_sdk.traingate.client import encode_json

logger = logging.getLogger("rollout_sdk.engine.responses")


#: The finish_reason of an ERROR by its category (v1's values: error, timeout, cancelled).
_FINISH_REASONS = {FailureCategory.TIMEOUT: "timeout", FailureCategory.CANCELLED: "cancelled"}


class FinalResponse(NamedTuple):
    """A final response in the two forms it travels in, each made once: the JSON-ready dump the
    record stores (the outbox) and, for the callback, its encoding as the TrainGate client posts
    it. Made where the worker checks that JSON can carry the response, so neither finish nor the
    callback dumps or encodes it again, where the store's move returns the record holding that
    very dump (memory, SQLite; DynamoDB returns the item read back, whose dump the callback
    encodes again). A NamedTuple: one per rollout, nothing to validate."""

    model: RolloutResponse
    #: ``model.model_dump(mode="json")``.
    dump: dict[str, Any]
    #: :func:`~rollout_sdk.traingate.client.encode_json` of ``dump``; None when JSON cannot
    #: carry it (a NaN the agent put in a message: the callback then fails as final, saying so)
    #: or when no callback would post it as it is (:func:`final_form`'s ``encoded``).
    body: bytes | None


def final_form(response: RolloutResponse, *, encoded: bool = True) -> FinalResponse:
    """``response``'s dump and, if JSON can carry it, its encoding; none when not ``encoded``
    (what no callback will post as it is: a 0.3.8 rollout's, published for its polls; a metered
    response re-formed with its estimate on AWS, whose record DynamoDB returns as a copy)."""
    dump = response.model_dump(mode="json")
    body: bytes | None = None
    if encoded:
        with contextlib.suppress(ValueError, TypeError):
            body = encode_json(dump)
    return FinalResponse(response, dump, body)


def failure_fields(category: FailureCategory, attempt: int) -> dict[str, Any]:
    """``extra_fields`` of an ERROR in ``category`` on ``attempt``."""
    return {
        EXTRA_KEY: {
            "failure": {
                "category": category.value,
                "retryable": category.retryable,
                "attempt": attempt,
            }
        }
    }


def failure_of(response: dict[str, Any] | None) -> dict[str, Any] | None:
    """The failure a stored response carries (category, retryable, attempt), if any."""
    extra = (response or {}).get("extra_fields") or {}
    failure = (extra.get(EXTRA_KEY) or {}).get("failure") if isinstance(extra, dict) else None
    return failure if isinstance(failure, dict) else None


def error_response(
    rollout_id: str,
    message: str,
    *,
    category: FailureCategory,
    attempt: int,
    final_messages: list[dict[str, object]] | None = None,
    metrics: RolloutMetrics | None = None,
) -> RolloutResponse:
    """An ERROR final response the kit writes: no reward, its failure in ``extra_fields``."""
    return RolloutResponse(
        rollout_id=rollout_id,
        status=RolloutStatus.ERROR,
        final_messages=final_messages or [],
        finish_reason=_FINISH_REASONS.get(category, "error"),
        error_message=message,
        metrics=metrics or RolloutMetrics(),
        extra_fields=failure_fields(category, attempt),
    )


def category_of(exc: BaseException) -> FailureCategory:
    """What a rollout that ended on ``exc`` is reported as: the kit's exceptions say (a
    TrainGate outage inside the agent's chat call is infrastructure); any other exception an
    agent raised is its own error."""
    return exc.category if isinstance(exc, RolloutError) else FailureCategory.AGENT_ERROR


def agent_failure(
    rollout_id: str, exc: BaseException, final_messages: list[dict[str, object]], *, attempt: int
) -> RolloutResponse:
    """The ERROR response for an agent loop that raised ``exc``: the agent's own error is
    logged with its traceback (its author needs it); one the kit raised inside the agent's call
    (TrainGate unreachable, a refused address, a deadline) is one line with its category, the
    traceback only at DEBUG."""
    category = category_of(exc)
    if category == FailureCategory.AGENT_ERROR:
        logger.warning("agent loop raised", exc_info=exc, extra={"rollout_id": rollout_id})
    else:
        logger.error(
            "rollout failed",
            exc_info=exc if logger.isEnabledFor(logging.DEBUG) else None,
            extra={
                "rollout_id": rollout_id,
                "category": category.value,
                "error": f"{type(exc).__name__}: {exc}",
            },
        )
    return error_response(
        rollout_id,
        f"{type(exc).__name__}: {exc}",
        category=category,
        attempt=attempt,
        final_messages=final_messages,
    )


def messages_or_empty(messages: object) -> list[dict[str, object]]:
    """``messages`` when the protocol can carry it (a list of objects), else an empty list."""
    if isinstance(messages, list) and all(isinstance(m, dict) for m in messages):
        return list(messages)
    return []


def to_response(
    rollout_id: str,
    outcome: RolloutResult | RolloutResponse,
    ctx_metrics: RolloutMetrics,
    elapsed_ms: float,
    *,
    attempt: int,
) -> FinalResponse:
    """The wire response for an outcome, dumped and encoded; ValueError/TypeError when the
    protocol cannot carry it."""
    # The kit's own ERROR responses carry the context's metrics; an agent's result may carry its
    # own RolloutMetrics.
    metrics: RolloutMetrics | None = None
    if isinstance(outcome, RolloutResult) and outcome.metrics is not None:
        if not isinstance(outcome.metrics, RolloutMetrics):
            raise TypeError(f"metrics must be RolloutMetrics, got {type(outcome.metrics).__name__}")
        metrics = outcome.metrics
    metrics = (metrics or ctx_metrics).model_copy(update={"total_latency_ms": elapsed_ms})
    if isinstance(outcome, RolloutResponse):
        response = outcome.model_copy(update={"metrics": metrics})
    else:
        response = RolloutResponse.model_validate(
            {
                "rollout_id": rollout_id,
                "status": outcome.status,
                "final_messages": outcome.final_messages,
                "finish_reason": outcome.finish_reason,
                "error_message": outcome.error_message,
                "reward": outcome.reward,
                "metrics": metrics,
            }
        )
        if response.status == RolloutStatus.ERROR:
            # The agent's own ERROR (ctx.error(...)): its reward, if any, stands.
            failure = failure_fields(FailureCategory.AGENT_ERROR, attempt)
            response = response.model_copy(update={"extra_fields": failure})
    if response.reward is not None and not math.isfinite(response.reward):
        raise ValueError(f"reward must be a finite number, got {response.reward}")
    for name, value in response.metrics.model_dump().items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"metrics.{name} must be a finite number, got {value}")
    # JSON as TrainGate will get it: fails here, not at the callback, if it cannot be encoded;
    # the encoding made for the check is the one the callback posts.
    dump = response.model_dump(mode="json")
    return FinalResponse(response, dump, encode_json(dump))
