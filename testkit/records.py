"""Record set-ups tests of several tiers share, made with the store's own moves."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rollout_sdk.store.base import Store, TransitionResult
    from rollout_sdk.store.record import RolloutRecord


def park_due_now(
    store: Store, parked: RolloutRecord, now: float
) -> Coroutine[Any, Any, TransitionResult]:
    """Park ``parked``'s response again as it is, due for re-drive at ``now``."""
    return store.park(
        parked.rollout_id,
        attempt=parked.attempt,
        error=parked.last_error,
        next_attempt_at=now - 1,
        delivery_attempts=parked.delivery_attempts,
        expires_at=parked.expires_at,
        now=now,
    )
