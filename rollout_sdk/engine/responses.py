"""The final response of a rollout, as the protocol carries it: what an agent's outcome becomes,
and the ERROR responses the kit writes itself."""

from __future__ import annotations

import json
import logging
import math

from rollout_sdk.agent.loop import RolloutResult
from rollout_sdk.protocol import RolloutMetrics, RolloutResponse, RolloutStatus

logger = logging.getLogger("rollout_sdk.engine.responses")


def error_response(
    rollout_id: str,
    message: str,
    *,
    finish_reason: str = "error",
    final_messages: list[dict[str, object]] | None = None,
    metrics: RolloutMetrics | None = None,
) -> RolloutResponse:
    """An ERROR final response."""
    return RolloutResponse(
        rollout_id=rollout_id,
        status=RolloutStatus.ERROR,
        final_messages=final_messages or [],
        finish_reason=finish_reason,
        error_message=message,
        metrics=metrics or RolloutMetrics(),
    )


def agent_failure(
    rollout_id: str, exc: BaseException, final_messages: list[dict[str, object]]
) -> RolloutResponse:
    """The ERROR response for an agent loop that raised ``exc``."""
    logger.warning("agent loop raised", exc_info=exc, extra={"rollout_id": rollout_id})
    return error_response(rollout_id, f"{type(exc).__name__}: {exc}", final_messages=final_messages)


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
) -> RolloutResponse:
    """The wire response for an outcome; ValueError/TypeError when the protocol cannot carry it."""
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
    if response.reward is not None and not math.isfinite(response.reward):
        raise ValueError(f"reward must be a finite number, got {response.reward}")
    for name, value in response.metrics.model_dump().items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"metrics.{name} must be a finite number, got {value}")
    # JSON as TrainGate will get it: fails here, not at the callback, if it cannot be encoded.
    json.dumps(response.model_dump(mode="json"), allow_nan=False)
    return response
