"""Records for the store contract tests: fixed clock, realistic content (unicode, nesting)."""

from __future__ import annotations

from typing import Any

from rollout_sdk.engine.record import RecordState, RolloutRecord
from rollout_sdk.protocol import (
    InitResponse,
    OpenAIFunctionParametersSchema,
    OpenAIFunctionPropertySchema,
    OpenAIFunctionSchema,
    OpenAIFunctionToolSchema,
    RolloutRequest,
)
from rollout_sdk.store.base import Store

NOW = 1_700_000_000.0
TTL = 600.0

TOOL = OpenAIFunctionToolSchema(
    function=OpenAIFunctionSchema(
        name="lookup",
        description="Look a word up.",
        parameters=OpenAIFunctionParametersSchema(
            properties={"word": OpenAIFunctionPropertySchema(type="string", enum=["a", "b"])},
            required=["word"],
        ),
    )
)


def make_record(
    rollout_id: str = "r-1",
    *,
    key: str | None = None,
    now: float = NOW,
    ttl: float = TTL,
    **fields: Any,
) -> RolloutRecord:
    request = RolloutRequest(
        rollout_id=rollout_id,
        server_url="http://traingate.test",
        messages=[{"role": "user", "content": "héllo ✓"}],
        completion_params={"temperature": 0.5, "stop": ["\n"]},
        metadata={"ground_truth": 4, "nested": {"list": [1, 2.5, None]}},
        idempotency_key=key,
        api_key="never-stored",
        **fields,
    )
    return RolloutRecord.new(
        request, InitResponse(rollout_id=rollout_id, tools=[TOOL]), now=now, ttl_seconds=ttl
    )


async def claim(
    store: Store, rollout_id: str = "r-1", *, attempt: int = 1, now: float = NOW + 1
) -> RolloutRecord:
    moved = await store.transition(
        rollout_id,
        from_states=(RecordState.ACCEPTED,),
        changes={
            "state": RecordState.RUNNING,
            "attempt": attempt,
            "lease_until": now + 60,
            "updated_at": now,
        },
        now=now,
    )
    assert moved.applied
    assert moved.record is not None
    return moved.record
