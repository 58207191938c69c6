"""Records for the store contract tests: fixed clock, realistic content (unicode, nesting)."""

from __future__ import annotations

from typing import Any

from rollout_sdk.protocol import (
    InitResponse,
    OpenAIFunctionParametersSchema,
    OpenAIFunctionPropertySchema,
    OpenAIFunctionSchema,
    OpenAIFunctionToolSchema,
    RolloutRequest,
    RolloutResponse,
    RolloutStatus,
)
from rollout_sdk.store.base import Store
from rollout_sdk.store.record import RecordState, RolloutRecord, expiry

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


SEALED = "c2VhbGVk"
RESPONSE = RolloutResponse(
    rollout_id="r-1",
    status=RolloutStatus.COMPLETED,
    final_messages=[{"role": "assistant", "content": "4 ✓", "tool_calls": None}],
    reward=1.0,
)


async def claim(
    store: Store, rollout_id: str = "r-1", *, attempt: int = 1, now: float = NOW + 1
) -> RolloutRecord:
    moved = await store.claim(
        rollout_id, attempt=attempt, lease_until=now + 60, expires_at=expiry(now, TTL), now=now
    )
    assert moved.applied
    assert moved.record is not None
    return moved.record


async def reach(store: Store, state: RecordState, rollout_id: str = "r-1") -> RolloutRecord:
    """A record (its callback key sealed) brought to ``state`` by the worker's own moves, on
    attempt 1; every lease it took has run out by ``NOW + 100``."""
    await store.create(make_record(rollout_id).evolve(sealed_key=SEALED), now=NOW)
    if state != RecordState.ACCEPTED:
        await claim(store, rollout_id)
    if state.has_response:
        finished = await store.finish(
            rollout_id,
            attempt=1,
            response=RESPONSE,
            lease_until=NOW + 62,
            expires_at=expiry(NOW + 2, TTL),
            now=NOW + 2,
        )
        assert finished.applied
    keep = expiry(NOW + 3, TTL)
    if state == RecordState.DELIVERED:
        delivered = await store.deliver(
            rollout_id, attempt=1, delivery_attempts=1, expires_at=keep, now=NOW + 3
        )
        assert delivered.applied
    if state == RecordState.UNDELIVERABLE:
        given_up = await store.mark_undeliverable(
            rollout_id, attempt=1, error="400", delivery_attempts=1, expires_at=keep, now=NOW + 3
        )
        assert given_up.applied
    record = await store.get(rollout_id, now=NOW + 3)
    assert record is not None and record.state == state
    return record
