"""docs/bodies.md, the reference of the request and answer bodies of both protocols, rendered
from the kit's own models (each field's type and default) and the meanings below, whose keys
the tests hold to the models' fields (``tests/unit/test_docs_bodies.py``); ``python -m
bench.wire_docs`` writes the file."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from rollout_sdk.osmosis03.types import (
    CancelRolloutsRequest,
    CancelRolloutsResponse,
    RolloutInitRequest,
    RolloutInitResponse,
    RolloutResultResponse,
)
from rollout_sdk.protocol import InitResponse, RolloutRequest

V1_INIT = {
    "rollout_id": "the rollout's id: one path segment, at most 256 characters and 1 KiB (413)",
    "server_url": "TrainGate's base URL: the kit calls `{server_url}/v1/chat/completions` each "
    "turn and `{server_url}/v1/rollout/completed` once; a host the outbound policy refuses is "
    "a 422 naming it (docs/security.md)",
    "messages": "the conversation so far, OpenAI chat messages",
    "completion_params": "the sampling parameters every chat call sends (`temperature`, "
    "`max_tokens`, ...)",
    "tool_server_url": "v1's field, given to the agent with the request; the kit calls nothing "
    "there",
    "max_turns": "the most chat turns the agent may take",
    "max_tokens_total": "v1's token budget for the rollout, given to the agent",
    "metadata": "free-form, given to the agent (its size bounded: "
    "`OSMOSIS_ROLLOUT_MAX_METADATA_SIZE_BYTES`, 413)",
    "api_key": "the callback key TrainGate wants back on its two endpoints; stored only sealed",
    "idempotency_key": "a retried init with it is one rollout (the stored 202 again); without "
    "it, the `rollout_id` plays that part",
}
V1_INIT_ANSWER = {
    "rollout_id": "the init's",
    "tools": "the agent's tools for this request (OpenAI function schemas), as `get_tools` "
    "returned them",
}
#: ``GET /v1/rollout/{rollout_id}`` (and the cancel's 202): ``record_status``'s keys.
V1_STATUS = {
    "rollout_id": "the rollout's id",
    "state": "the record's state: ACCEPTED, RUNNING, FINISHED (its final response stored, "
    "being sent), DELIVERED, UNDELIVERABLE",
    "status": "the final response's status (COMPLETED, ERROR), once there is one",
    "finish_reason": "the final response's",
    "error_message": "an ERROR's message",
    "failure": "an ERROR's `category`, `retryable` and `attempt` (docs/operations.md)",
    "reward": "the final response's reward",
    "metrics": "the final response's metrics",
    "attempt": "the attempt that runs or ran it (1, or more after a recovery)",
    "cancel_requested": "whether a cancel was asked",
    "created_at": "when the init was accepted (epoch seconds)",
    "updated_at": "the record's last change",
    "finished_at": "when its final response was stored",
    "expires_at": "when the record (and its idempotency) expires",
    "delivered": "whether TrainGate acknowledged the final response",
    "delivered_at": "when it did",
    "delivery_attempts": "callbacks sent so far",
    "next_attempt_at": "a parked response's next try",
    "last_error": "why the last callback failed",
    "cost": "on AWS, the rollout's cost estimate so far (docs/cost.md)",
}
O3_SUBMIT = {
    "initial_messages": "the prompt, OpenAI chat messages",
    "label": "the ground truth the grader compares with",
    "metadata": "free-form, given to the workflow and the grader",
    "rollout_id": "the rollout's id: one path segment; any id a record holds already (v1's "
    "too) is a 409",
    "chat_completions_url": "the model's OpenAI-compatible base URL the workflow calls; "
    "checked as a v1 `server_url` is (422)",
    "llm_api_key": "the model endpoint's key, given to the workflow; stored only sealed",
    "grade": "run the grader after the workflow",
    "agent_timeout_sec": "the workflow's time, counted from the submit (queued time included)",
    "grader_timeout_sec": "the grader's time",
    "extra_fields": "free-form, kept with the request",
}
O3_SUBMIT_ANSWER = {
    "rollout_id": "the submit's",
    "status": "`queued`",
    "polling_lease_token": "the lease's token: every poll sends it as `X-Osmosis-Rollout-Lease`"
    " (403 otherwise); stored only as its digest",
    "result_wait_timeout_sec": "how long a poll waits for a change (20 on Lambda)",
    "polling_lease_timeout_sec": "how long the lease lasts unrenewed: a rollout nobody polls "
    "that long ends `failure` / `lease_expired`",
}
O3_RESULT = {
    "rollout_id": "the rollout's id",
    "status": "`queued`, `running`, `grading` (not on Lambda), then `success`, `failure` or "
    "`cancelled`",
    "sample": "once final: the conversation (`messages`), `label`, `reward` (only for a "
    "success whose sample was not removed) and `remove_sample`; never `trajectory_messages`",
    "err_message": "a failure's message",
    "err_category": "a failure's category: `agent_error`, `timeout`, `validation_error`, "
    "`lease_expired`, `internal_error` (the kit never says `http_error`)",
}
O3_CANCEL = {
    "ids": "these rollouts",
    "prefix": "the rollouts in flight whose ids start with it",
    "all": "every rollout in flight",
}
O3_CANCEL_ANSWER = {
    "dispositions": "each rollout's: `cancelled_queued`, `cancelled_running` or `not_found` "
    "(unknown or final); the same again for a cancel asked already",
}

#: (heading, what it is, the model, its meanings); the status body is no model.
MODELS: list[tuple[str, str, type[BaseModel] | None, dict[str, str]]] = [
    ("v1: `POST /v1/rollout/init`", "the body TrainGate sends", RolloutRequest, V1_INIT),
    ("v1: its 202", "the answer, the same for a retried init", InitResponse, V1_INIT_ANSWER),
    (
        "v1: `GET /v1/rollout/{rollout_id}`, and `POST /v1/rollout/{rollout_id}/cancel`'s 202",
        "the record as the kit holds it (a cancel of a finished rollout is 409, of an unknown "
        "one 404)",
        None,
        V1_STATUS,
    ),
    ("osmosis-ai 0.3.8: `POST /rollout`", "the submit", RolloutInitRequest, O3_SUBMIT),
    ("osmosis-ai 0.3.8: its 202", "", RolloutInitResponse, O3_SUBMIT_ANSWER),
    (
        "osmosis-ai 0.3.8: `GET /rollout/{rollout_id}/result`",
        "a poll's answer, after a change or the wait",
        RolloutResultResponse,
        O3_RESULT,
    ),
    (
        "osmosis-ai 0.3.8: `POST /rollout/cancel`",
        "exactly one of the three (422 otherwise)",
        CancelRolloutsRequest,
        O3_CANCEL,
    ),
    ("osmosis-ai 0.3.8: the cancel's 200", "", CancelRolloutsResponse, O3_CANCEL_ANSWER),
]


def _type(annotation: Any) -> str:
    text = annotation.__name__ if isinstance(annotation, type) else str(annotation)
    for prefix in ("typing.", "rollout_sdk.protocol.", "rollout_sdk.osmosis03.types."):
        text = text.replace(prefix, "")
    return text.replace("|", "or")


def _default(field: Any) -> str:
    if field.is_required():
        return "required"
    if field.default is PydanticUndefined:
        return "empty" if field.default_factory is not None else ""
    return "none" if field.default is None else f"`{field.default!r}`".replace("'", '"')


def render() -> str:
    lines = [
        "# Request and answer bodies",
        "",
        "<!-- Generated by `python -m bench.wire_docs` from the kit's models; do not edit. -->",
        "",
        "Every body is JSON; every route but `/health` needs the server key (`Authorization: "
        "Bearer KEY`, 401). A field that is missing or of the wrong type is FastAPI's 422, "
        "naming it; a field a body does not have is ignored (as v1 and 0.3.8 do).",
        "",
    ]
    for heading, what, model, meanings in MODELS:
        lines += [f"## {heading}", ""]
        if what:
            lines += [what[0].upper() + what[1:] + ".", ""]
        lines += ["| field | type | default | meaning |", "|---|---|---|---|"]
        for name, meaning in meanings.items():
            if model is None:
                lines.append(f"| `{name}` | | | {meaning} |")
                continue
            field = model.model_fields[name]
            lines.append(
                f"| `{name}` | `{_type(field.annotation)}` | {_default(field)} | {meaning} |"
            )
        lines.append("")
    return "\n".join(lines)
