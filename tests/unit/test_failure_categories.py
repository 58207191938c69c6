"""Every final ERROR says why, under ``extra_fields["rollout_sdk"]["failure"]`` (issue 12 item 1):
the category comes from where the failure happened, never from message text; ``reward`` is null
for every failure that is not the agent's own; a success carries no failure."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from rollout_sdk.agent.loop import RolloutContext, RolloutResult
from rollout_sdk.dispatch.base import Job
from rollout_sdk.engine.responses import failure_of
from rollout_sdk.engine.service import record_status
from rollout_sdk.errors import (
    FailureCategory,
    OsmosisTransportError,
    RolloutCancelled,
    StoreError,
)
from rollout_sdk.protocol import EXTRA_KEY
from rollout_sdk.store.memory import MemoryStore
from rollout_sdk.store.record import RecordState, expiry
from rollout_sdk.traingate.client import COMPLETED_PATH

from .support import EchoAgent, FakeTrainGate
from .test_worker import JOB, ErrorResultAgent, RaisingAgent, SlowAgent, make_rig


def _failure(sent: dict[str, Any]) -> dict[str, Any]:
    return dict(sent["extra_fields"][EXTRA_KEY]["failure"])


class TrainGateDownAgent(EchoAgent):
    """The agent's chat call fails because TrainGate is unreachable: not the agent's fault."""

    name = "traingate-down"

    async def run(self, ctx: RolloutContext) -> RolloutResult:
        raise OsmosisTransportError("TrainGate unreachable: connection refused")


class NanRewardAgent(EchoAgent):
    name = "nan-reward"

    async def run(self, ctx: RolloutContext) -> RolloutResult:
        return RolloutResult(status="COMPLETED", reward=float("nan"))


class RewardedErrorAgent(EchoAgent):
    name = "rewarded-error"

    async def run(self, ctx: RolloutContext) -> RolloutResult:
        return RolloutResult(status="ERROR", error_message="wrong answer", reward=-1.0)


class CancelledAgent(EchoAgent):
    """Its chat call finds the rollout cancelled (what ``ctx.chat`` raises then)."""

    name = "cancelled"

    async def run(self, ctx: RolloutContext) -> RolloutResult:
        raise RolloutCancelled("rollout cancelled")


@pytest.mark.parametrize(
    ("agent", "category", "retryable"),
    [
        (RaisingAgent(), FailureCategory.AGENT_ERROR, False),
        (ErrorResultAgent(), FailureCategory.AGENT_ERROR, False),
        (TrainGateDownAgent(), FailureCategory.INFRASTRUCTURE, True),
        (NanRewardAgent(), FailureCategory.INVALID_RESULT, False),
        (CancelledAgent(), FailureCategory.CANCELLED, False),
    ],
    ids=lambda v: getattr(v, "name", str(v)),
)
async def test_the_workers_errors_carry_their_category(
    agent: EchoAgent, category: FailureCategory, retryable: bool
) -> None:
    rig = await make_rig(agent)
    final = await rig.worker.run(JOB)
    assert final is not None and final.state == RecordState.DELIVERED
    (sent,) = rig.gate.bodies(COMPLETED_PATH)
    assert sent["status"] == "ERROR"
    assert _failure(sent) == {"category": category.value, "retryable": retryable, "attempt": 1}
    assert sent["reward"] is None
    # The status endpoint shows it too.
    assert record_status(final)["failure"] == _failure(sent)


async def test_a_deadline_is_a_timeout_with_finish_reason_timeout() -> None:
    rig = await make_rig(SlowAgent())
    await rig.worker.run(JOB, deadline_seconds=0.2)
    (sent,) = rig.gate.bodies(COMPLETED_PATH)
    assert (sent["finish_reason"], _failure(sent)["category"]) == ("timeout", "timeout")
    assert _failure(sent)["retryable"] is True


async def test_an_agents_own_error_keeps_its_reward() -> None:
    rig = await make_rig(RewardedErrorAgent())
    await rig.worker.run(JOB)
    (sent,) = rig.gate.bodies(COMPLETED_PATH)
    assert sent["reward"] == -1.0
    assert _failure(sent)["category"] == "agent_error"


async def test_a_success_carries_no_failure() -> None:
    rig = await make_rig()
    await rig.worker.run(JOB)
    (sent,) = rig.gate.bodies(COMPLETED_PATH)
    assert sent["status"] == "COMPLETED"
    assert failure_of(sent) is None


async def test_a_store_that_cannot_keep_the_response_is_an_infrastructure_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rig = await make_rig()
    real_finish = MemoryStore.finish
    calls = 0

    async def finish_once_failing(self: MemoryStore, *args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise StoreError("DynamoDB update failed: ValidationException: item too large")
        return await real_finish(self, *args, **kwargs)

    monkeypatch.setattr(MemoryStore, "finish", finish_once_failing)
    await rig.worker.run(JOB)
    (sent,) = rig.gate.bodies(COMPLETED_PATH)
    assert _failure(sent) == {"category": "infrastructure", "retryable": True, "attempt": 1}
    assert sent["reward"] is None


async def test_a_lost_worker_and_a_never_started_rollout_are_told_apart() -> None:
    rig = await make_rig(gate=FakeTrainGate(completed=[httpx.Response(200, json={})]))
    engine_settlement = rig.worker.settlement
    now = time.time()
    # Claimed, then its worker died: the lease runs out.
    claimed = await rig.store.claim(
        "rollout-1", attempt=1, lease_until=now - 1, expires_at=expiry(now, 3600), now=now
    )
    assert claimed.applied
    lost = await engine_settlement.settle("rollout-1", reason="the worker stopped", api_key="k")
    assert lost is not None
    assert failure_of(lost.response) == {"category": "worker_lost", "retryable": True, "attempt": 1}
    # Another rollout no worker ever claimed: the same settle says it never started.
    rig2 = await make_rig()
    never = await rig2.worker.settlement.settle(
        "rollout-1", reason="the event aged out", api_key="k"
    )
    assert never is not None
    assert failure_of(never.response) == {
        "category": "never_started",
        "retryable": True,
        "attempt": 0,
    }


async def test_a_job_handed_over_after_cancel_is_reported_cancelled() -> None:
    rig = await make_rig()
    await rig.store.request_cancel("rollout-1", now=time.time())
    await rig.worker.run(Job(rollout_id="rollout-1", attempt=1, api_key="cb-key"))
    (sent,) = rig.gate.bodies(COMPLETED_PATH)
    assert (sent["finish_reason"], _failure(sent)["category"]) == ("cancelled", "cancelled")
