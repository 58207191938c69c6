"""Settle, the restart sweep and the re-drive over MemoryStore and a MockTransport TrainGate."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from rollout_sdk.dispatch.base import Job
from rollout_sdk.engine.assembly import Engine
from rollout_sdk.engine.recovery import RESTART_REASON
from rollout_sdk.protocol import RolloutResponse, RolloutStatus
from rollout_sdk.store.base import TransitionResult
from rollout_sdk.store.memory import MemoryStore
from rollout_sdk.store.record import RecordState, expiry
from rollout_sdk.traingate.client import CHAT_PATH, COMPLETED_PATH
from rollout_sdk.vault import LocalVault
from testkit.records import park_due_now

from .support import EchoAgent, FakeTrainGate, accepted_record, engine_for

KEY = "cb-key"


async def rig(
    *,
    gate: FakeTrainGate | None = None,
    sealed: bool = True,
    ids: tuple[str, ...] = ("r1",),
    owner: str | None = None,
) -> tuple[Engine, MemoryStore, FakeTrainGate, LocalVault]:
    store = MemoryStore(owner=owner)
    gate = gate or FakeTrainGate()
    vault = LocalVault()
    now = time.time()
    for rid in ids:
        record = accepted_record(rid, now=now)
        if sealed:
            record = record.evolve(sealed_key=await vault.seal(KEY, rollout_id=rid))
        assert (await store.create(record, now=now)).created
    engine = engine_for(gate, store=store, vault=vault, agent_loop=EchoAgent())
    return engine, store, gate, vault


# What a worker leaves behind, made with the worker's own moves (attempt 1).


async def _claim(store: MemoryStore, rid: str, *, lease_until: float) -> None:
    now = time.time()
    moved = await store.claim(
        rid, attempt=1, lease_until=lease_until, expires_at=expiry(now, 3600), now=now
    )
    assert moved.applied


async def _renew(store: MemoryStore, rid: str, *, lease_until: float) -> None:
    moved = await store.renew(
        rid, state=RecordState.RUNNING, attempt=1, lease_until=lease_until, now=time.time()
    )
    assert moved.applied


async def _finish(
    store: MemoryStore, rid: str, response: RolloutResponse, *, lease_until: float
) -> None:
    now = time.time()
    moved = await store.finish(
        rid,
        attempt=1,
        response=response,
        lease_until=lease_until,
        expires_at=expiry(now, 3600),
        now=now,
    )
    assert moved.applied


async def _deliver(store: MemoryStore, rid: str) -> None:
    now = time.time()
    moved = await store.deliver(
        rid, attempt=1, delivery_attempts=1, expires_at=expiry(now, 3600), now=now
    )
    assert moved.applied


async def _make_due(store: MemoryStore, rid: str) -> None:
    """Park the record's response again, due for re-drive now."""
    now = time.time()
    parked = await store.get(rid, now=now)
    assert parked is not None and parked.state == RecordState.FINISHED
    moved = await park_due_now(store, parked, now)
    assert moved.applied


async def test_the_restart_sweep_reports_every_rollout_in_flight_once_and_runs_none() -> None:
    # A local server's store: its records carry its owner id, so its sweep finds them.
    engine, store, gate, _ = await rig(
        ids=("queued", "running", "finished", "done"), owner="server-1"
    )
    await _claim(store, "running", lease_until=time.time() + 600)
    stored = RolloutResponse(rollout_id="finished", status=RolloutStatus.COMPLETED, reward=1.0)
    await _claim(store, "finished", lease_until=time.time() + 600)
    await _finish(store, "finished", stored, lease_until=time.time() + 600)
    await _claim(store, "done", lease_until=time.time() + 600)
    await _finish(store, "done", stored, lease_until=time.time() + 600)
    await _deliver(store, "done")

    report = await engine.recovery.sweep_after_restart()

    assert sorted(report.delivered) == ["finished", "queued", "running"]
    assert gate.on(CHAT_PATH) == []  # nothing is run again
    sent = {b["rollout_id"]: b for b in gate.bodies(COMPLETED_PATH)}
    assert sorted(sent) == ["finished", "queued", "running"]
    assert sent["finished"]["status"] == "COMPLETED"  # the stored response, not an ERROR
    for rid in ("queued", "running"):
        assert sent[rid]["status"] == "ERROR"
        assert sent[rid]["error_message"] == RESTART_REASON
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in gate.on(COMPLETED_PATH))
    again = await engine.recovery.sweep_after_restart()
    assert again.examined == 0
    assert len(gate.on(COMPLETED_PATH)) == 3


async def test_a_parked_response_is_redriven_when_due_and_only_then() -> None:
    gate = FakeTrainGate(completed=[httpx.Response(503), httpx.Response(200, json={})])
    engine, store, gate, _ = await rig(gate=gate, sealed=False)
    parked = await engine.require_worker().run(Job("r1", api_key=KEY))
    assert parked is not None and parked.state == RecordState.FINISHED
    assert parked.next_attempt_at is not None and parked.sealed_key is not None  # sealed on parking
    assert (await engine.recovery.redrive()).examined == 0  # not due yet
    await _make_due(store, "r1")
    report = await engine.recovery.redrive()
    assert report.delivered == ["r1"]
    final = await store.get("r1", now=time.time())
    assert final is not None and final.state == RecordState.DELIVERED
    assert final.sealed_key is None
    bodies = gate.bodies(COMPLETED_PATH)
    assert len(bodies) == 2 and bodies[0] == bodies[1]  # the same response, sent again
    assert gate.on(COMPLETED_PATH)[1].headers["authorization"] == f"Bearer {KEY}"


async def test_two_redrive_passes_at_once_run_one_and_send_once() -> None:
    gate = FakeTrainGate(completed=[httpx.Response(503), httpx.Response(200, json={})])
    engine, store, gate, _ = await rig(gate=gate, sealed=False)
    await engine.require_worker().run(Job("r1", api_key=KEY))
    await _make_due(store, "r1")
    first, second = await asyncio.gather(engine.recovery.redrive(), engine.recovery.redrive())
    # The pass lease: one pass ran, the other found it held and did nothing.
    assert sorted([first.busy, second.busy]) == [False, True]
    ran = second if first.busy else first
    assert (ran.examined, ran.delivered) == (1, ["r1"])
    assert len(gate.on(COMPLETED_PATH)) == 2  # the failed first attempt and one re-send
    # Released at the end: the next pass runs (and finds nothing due).
    after = await engine.recovery.redrive()
    assert (after.busy, after.examined) == (False, 0)


async def test_two_recoverers_at_once_count_a_rollout_once_between_them() -> None:
    """Past the pass lease (a pass that outlived it), each settles through a conditional move:
    one takes the record and counts it, the other counts nothing."""
    gate = FakeTrainGate(completed=[httpx.Response(503), httpx.Response(200, json={})])
    engine, store, gate, _ = await rig(gate=gate, sealed=False)
    await engine.require_worker().run(Job("r1", api_key=KEY))
    await _make_due(store, "r1")
    results = await asyncio.gather(
        *(engine.settlement.settle_once("r1", reason="re-drive", due_only=True) for _ in range(2))
    )
    assert sorted(acted for _, acted in results) == [False, True]
    assert len(gate.on(COMPLETED_PATH)) == 2


async def test_the_redrive_gives_up_after_its_max_age() -> None:
    gate = FakeTrainGate(completed=[httpx.Response(503)])
    engine, store, gate, _ = await rig(gate=gate)
    await engine.require_worker().run(Job("r1", api_key=KEY))
    # Finished longer ago than the re-drive's max age: the next re-drive gives up.
    engine.settings.kit.redrive_max_age_seconds = 0
    await _make_due(store, "r1")
    report = await engine.recovery.redrive()
    assert report.undeliverable == ["r1"]
    final = await store.get("r1", now=time.time())
    assert final is not None and final.state == RecordState.UNDELIVERABLE
    assert final.last_error is not None and final.last_error.startswith("gave up")
    assert final.sealed_key is None


async def test_settle_leaves_a_live_lease_alone_and_takes_an_expired_one() -> None:
    engine, store, gate, _ = await rig()
    await _claim(store, "r1", lease_until=time.time() + 60)
    held = await engine.settlement.settle("r1", reason="x")
    assert held is not None and held.state == RecordState.RUNNING
    assert gate.on(COMPLETED_PATH) == []
    await _renew(store, "r1", lease_until=time.time() - 1)
    settled = await engine.settlement.settle("r1", reason="the worker died")
    assert settled is not None and settled.state == RecordState.DELIVERED
    (sent,) = gate.bodies(COMPLETED_PATH)
    assert (sent["status"], sent["error_message"]) == ("ERROR", "the worker died")


async def test_concurrent_recoverers_report_a_rollout_once() -> None:
    engine, store, gate, _ = await rig()
    await _claim(store, "r1", lease_until=time.time() - 1)
    outcomes = await asyncio.gather(
        *(engine.settlement.settle("r1", reason="died") for _ in range(10))
    )
    assert sum(o is not None and o.state == RecordState.DELIVERED for o in outcomes) >= 1
    assert len(gate.on(COMPLETED_PATH)) == 1


async def test_a_kit_failure_inside_the_worker_still_reports_an_error() -> None:
    engine, store, gate, _ = await rig(sealed=False)
    real = store.finish
    calls = 0

    async def broken_once(rollout_id: str, **kwargs: Any) -> TransitionResult:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("disk on fire")
        return await real(rollout_id, **kwargs)

    store.finish = broken_once  # type: ignore[method-assign]
    final = await engine.require_worker().run(Job("r1", api_key=KEY))
    assert final is not None and final.state == RecordState.DELIVERED
    (sent,) = gate.bodies(COMPLETED_PATH)
    assert sent["status"] == "ERROR"
    assert "the worker failed: RuntimeError: disk on fire" in sent["error_message"]


async def test_a_redelivered_job_waits_out_a_live_owner_and_sends_nothing() -> None:
    engine, store, gate, _ = await rig()
    engine.settings.kit.heartbeat_seconds = 1.0
    await _claim(store, "r1", lease_until=time.time() + 0.3)

    async def owner_reports() -> None:
        await asyncio.sleep(0.1)
        done = RolloutResponse(rollout_id="r1", status=RolloutStatus.COMPLETED)
        await _finish(store, "r1", done, lease_until=time.time() + 60)
        await _deliver(store, "r1")

    owner = asyncio.create_task(owner_reports())
    assert await engine.require_worker().run(Job("r1", api_key=KEY)) is None
    await owner
    assert gate.on(COMPLETED_PATH) == []


async def test_a_failed_job_whose_lease_runs_out_while_it_is_settled_is_still_reported() -> None:
    """The on-failure destination reads the record while the dead worker's lease is live, so
    its move is refused; the lease runs out before it looks again: it must settle the rollout
    then, not return it FINISHED for nobody to report (a race make reliability found)."""
    gate = FakeTrainGate(completed=[httpx.Response(503), httpx.Response(200, json={"ok": True})])
    engine, store, gate, _ = await rig(gate=gate)
    await engine.require_worker().run(Job("r1", api_key=KEY))  # FINISHED, the callback failed
    record = await store.get("r1", now=time.time())
    assert record is not None and record.state == RecordState.FINISHED
    lease_until = time.time() + 0.3
    moved = await store.reclaim_delivery(
        "r1", attempt=record.attempt, lease_until=lease_until, now=time.time()
    )
    assert moved.applied  # a delivery holds it, and dies
    real = store.reclaim_delivery
    refused = asyncio.Event()

    async def judged_before_the_lease_ran_out(*args: Any, **kwargs: Any) -> TransitionResult:
        if not refused.is_set():
            refused.set()
            kwargs["now"] = lease_until - 0.01  # the move judged while the lease was live
            result = await real(*args, **kwargs)
            await asyncio.sleep(max(0.0, lease_until - time.time()) + 0.05)  # then it runs out
            return result
        return await real(*args, **kwargs)

    store.reclaim_delivery = judged_before_the_lease_ran_out  # type: ignore[method-assign]
    sent_before = len(gate.on(COMPLETED_PATH))
    final = await engine.settlement.report_failed_job(Job("r1", api_key=KEY), reason="lost")
    assert refused.is_set()
    assert final is not None and final.state == RecordState.DELIVERED
    assert len(gate.on(COMPLETED_PATH)) == sent_before + 1
