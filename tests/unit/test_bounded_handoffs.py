"""Bounded hand-offs (issue 10 item 2), under injected hand-off faults.

However many duplicates of a rollout still waiting for its worker arrive, at most one extra
hand-off happens per lease; a duplicate answered 202 never loses the rollout, even when every
hand-off fails for a while: the duplicate sealed the key into the record, so the re-drive hands
it off again once the lease runs out, and the rollout runs and is reported once.
"""

from __future__ import annotations

import asyncio

import pytest

from rollout_sdk.dispatch.base import Job
from rollout_sdk.engine.assembly import Engine
from rollout_sdk.engine.service import RolloutService
from rollout_sdk.errors import DispatchError
from rollout_sdk.http.prometheus import PrometheusTelemetry
from rollout_sdk.protocol import InitResponse
from rollout_sdk.store.record import RecordState
from rollout_sdk.traingate.client import COMPLETED_PATH
from rollout_sdk.vault import LocalVault

from .support import (
    EchoAgent,
    FakeTrainGate,
    RecordingDispatcher,
    engine_for,
    make_request,
)

KEY = "callback-key"
START = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


class FaultyDispatcher(RecordingDispatcher):
    """Fails every hand-off while ``failing``, and the first ``fail_first`` in any case; the
    first one waits for ``release`` first, so duplicates arrive while it is in flight. Keeps
    every job it accepted."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = True
        self.fail_first = 1
        self.calls = 0
        self.first_in_flight = asyncio.Event()
        self.release = asyncio.Event()

    async def dispatch(self, job: Job) -> None:
        self.calls += 1
        index = self.calls
        if index == 1:
            self.first_in_flight.set()
            await self.release.wait()
        if self.failing or index <= self.fail_first:
            raise DispatchError("Lambda answered TooManyRequestsException")
        self.jobs.append(job)


def _counted(engine: Engine) -> str:
    """The engine's metrics, as the local server's /metrics would answer them."""
    assert isinstance(engine.telemetry, PrometheusTelemetry)
    return engine.telemetry.exposition()


def _rig() -> tuple[Engine, RolloutService, FaultyDispatcher, FakeTrainGate, Clock]:
    clock = Clock()
    gate = FakeTrainGate()
    dispatcher = FaultyDispatcher()
    engine = engine_for(
        gate,
        vault=LocalVault(),
        agent_loop=EchoAgent(),
        clock=clock,
        telemetry=PrometheusTelemetry(),
        hand_off=dispatcher.dispatch,
    )
    service = RolloutService(
        EchoAgent(), engine.store, dispatcher, engine.settings, engine=engine, clock=clock
    )
    return engine, service, dispatcher, gate, clock


async def _first_init_with_duplicates(
    service: RolloutService, dispatcher: FaultyDispatcher, duplicates: int
) -> tuple[BaseException | InitResponse, list[InitResponse | BaseException]]:
    """The first init's hand-off in flight while ``duplicates`` arrive at once; then it fails."""
    first = asyncio.create_task(service.init(make_request(api_key=KEY)))
    await dispatcher.first_in_flight.wait()
    answers = await asyncio.gather(
        *(service.init(make_request(api_key=KEY)) for _ in range(duplicates)),
        return_exceptions=True,
    )
    dispatcher.release.set()
    first_answer: BaseException | InitResponse
    try:
        first_answer = await first
    except DispatchError as exc:
        first_answer = exc
    return first_answer, answers


async def _run_jobs(engine: Engine, dispatcher: FaultyDispatcher) -> None:
    for job in dispatcher.jobs:
        await engine.require_worker().run(job)


@pytest.mark.parametrize("extra_fails", [False, True])
async def test_twenty_duplicates_while_the_first_hand_off_fails_make_one_extra(
    extra_fails: bool,
) -> None:
    engine, service, dispatcher, gate, clock = _rig()
    # The first hand-off fails; the duplicate's succeeds, or fails too (then the re-drive
    # hands the rollout off).
    dispatcher.failing = False
    dispatcher.fail_first = 2 if extra_fails else 1
    first, answers = await _first_init_with_duplicates(service, dispatcher, 20)

    assert isinstance(first, DispatchError)  # the first init's own hand-off failed
    assert all(isinstance(a, InitResponse) for a in answers)  # all 20 answered 202
    assert dispatcher.calls == 2  # the first, and one duplicate's: one extra in the lease
    record = await engine.store.get("rollout-1", now=clock())
    assert record is not None and record.state == RecordState.ACCEPTED
    assert record.sealed_key is not None  # sealed, never in clear
    assert await engine.vault.open(record.sealed_key, rollout_id="rollout-1") == KEY  # type: ignore[union-attr]
    if extra_fails:
        # Due when the hand-off lease runs out; not before.
        assert record.due_at == pytest.approx(clock() + engine.leases.seconds)
        assert (await engine.recovery.redrive()).handed_off == []
        clock.now += engine.leases.seconds + 1
        report = await engine.recovery.redrive()
        assert report.handed_off == ["rollout-1"]
        assert dispatcher.calls == 3
        assert "rollout_sdk_rollouts_redriven_total 1.0\n" in _counted(engine)
    else:
        assert record.due_at is None  # handed off: out of the due index
    assert [job.api_key for job in dispatcher.jobs] == [KEY]
    await _run_jobs(engine, dispatcher)
    final = await engine.store.get("rollout-1", now=clock())
    assert final is not None and final.state == RecordState.DELIVERED
    assert len(gate.on(COMPLETED_PATH)) == 1
    # Nothing is due any more: later passes hand off nothing.
    clock.now += 10 * engine.leases.seconds
    assert (await engine.recovery.redrive()).examined == 0
    assert dispatcher.calls == (3 if extra_fails else 2)


async def test_every_hand_off_failing_for_a_while_then_recovering_runs_the_rollout_once() -> None:
    engine, service, dispatcher, gate, clock = _rig()
    first, answers = await _first_init_with_duplicates(service, dispatcher, 3)
    assert isinstance(first, DispatchError)
    assert all(isinstance(a, InitResponse) for a in answers)
    lease = engine.leases.seconds
    calls_before = dispatcher.calls
    # TrainGate keeps retrying the init every few seconds while every hand-off fails.
    for _ in range(10):
        clock.now += lease / 4
        assert isinstance(await service.init(make_request(api_key=KEY)), InitResponse)
    # ... and the re-drive runs every lease period; each due hand-off fails, its lease doubling.
    passes = 0
    for _ in range(8):
        clock.now += lease
        await engine.recovery.redrive()
        passes += 1
    hand_offs = dispatcher.calls - calls_before
    # At most one per lease period (duplicates and re-drive together), fewer as the lease grows.
    elapsed_leases = (10 * lease / 4 + passes * lease) / lease
    assert 2 <= hand_offs <= elapsed_leases
    record = await engine.store.get("rollout-1", now=clock())
    assert record is not None and record.state == RecordState.ACCEPTED  # never lost
    assert dispatcher.jobs == []
    # The hand-off recovers: the next pass once the record is due hands it off, and it runs.
    dispatcher.failing = False
    assert record.due_at is not None
    clock.now = record.due_at + 1
    report = await engine.recovery.redrive()
    assert report.handed_off == ["rollout-1"]
    await _run_jobs(engine, dispatcher)
    final = await engine.store.get("rollout-1", now=clock())
    assert final is not None and final.state == RecordState.DELIVERED
    assert len(gate.on(COMPLETED_PATH)) == 1
    assert len(dispatcher.jobs) == 1


async def test_a_hand_off_that_never_recovers_is_reported_as_never_started() -> None:
    engine, service, dispatcher, gate, clock = _rig()
    await _first_init_with_duplicates(service, dispatcher, 1)
    # Every pass's hand-off fails until the record is about to expire: then it is reported.
    for _ in range(200):
        record = await engine.store.get("rollout-1", now=clock())
        assert record is not None and record.state == RecordState.ACCEPTED
        assert record.due_at is not None
        clock.now = record.due_at + 1
        report = await engine.recovery.redrive()
        if report.delivered:
            break
    assert dispatcher.calls < 30  # the hand-off lease doubled each time
    assert report.delivered == ["rollout-1"]
    (sent,) = gate.bodies(COMPLETED_PATH)
    assert sent["status"] == "ERROR"
    assert "could not be handed to a worker" in sent["error_message"]
    assert (
        'rollout_sdk_rollouts_finished_total{status="ERROR",category="never_started"} 1.0\n'
        in _counted(engine)
    )
    assert "rollout_sdk_rollouts_started_total 0.0\n" in _counted(engine)
    # Reported with the callback key the duplicate sealed.
    assert gate.on(COMPLETED_PATH)[0].headers["authorization"] == f"Bearer {KEY}"
