"""InProcessDispatcher: bounded concurrency, shutdown, resilience to failing jobs."""

from __future__ import annotations

import asyncio

import pytest

from rollout_sdk.dispatch.base import Dispatcher, Job
from rollout_sdk.dispatch.inprocess import InProcessDispatcher
from rollout_sdk.errors import DispatchError
from testkit.wait import until_true


class Instrumented:
    """A run_job that measures how many jobs run at the same time."""

    def __init__(
        self, *, hold: float = 0.005, fail: set[str] | None = None, owned_elsewhere: str = "-"
    ) -> None:
        self.hold = hold
        self.fail = fail or set()
        #: Jobs whose rollout another delivery owns: the worker returns None for them.
        self.owned_elsewhere = owned_elsewhere
        self.running = 0
        self.peak = 0
        self.done: list[str] = []
        self.cancelled: list[str] = []
        self.release = asyncio.Event()

    async def __call__(self, job: Job) -> str | None:
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            if self.hold < 0:
                await self.release.wait()
            else:
                await asyncio.sleep(self.hold)
            if job.rollout_id in self.fail:
                raise RuntimeError(f"kit failure on {job.rollout_id}")
            self.done.append(job.rollout_id)
            return None if job.rollout_id.startswith(self.owned_elsewhere) else job.rollout_id
        except asyncio.CancelledError:
            self.cancelled.append(job.rollout_id)
            raise
        finally:
            self.running -= 1


async def _two_holding_slots(jobs: int) -> tuple[Instrumented, InProcessDispatcher]:
    """``jobs`` held jobs (r0, r1, ...) dispatched to two slots, once two of them run."""
    run = Instrumented(hold=-1)
    dispatcher = InProcessDispatcher(run, max_concurrent=2)
    for i in range(jobs):
        await dispatcher.dispatch(Job(f"r{i}"))
    await until_true(lambda: run.running == 2, within=5, what="two jobs running")
    return run, dispatcher


def test_implements_the_dispatcher_port() -> None:
    assert isinstance(InProcessDispatcher(Instrumented(), max_concurrent=1), Dispatcher)


@pytest.mark.parametrize("limit", [1, 3, 8])
async def test_never_more_than_max_concurrent_at_once(limit: int) -> None:
    run = Instrumented()
    dispatcher = InProcessDispatcher(run, max_concurrent=limit)
    for i in range(20):
        await dispatcher.dispatch(Job(f"r{i}"))
    assert dispatcher.active == 20
    assert await dispatcher.drain(within=5)
    assert run.peak == limit  # reached, never exceeded
    assert sorted(run.done) == sorted(f"r{i}" for i in range(20))
    assert dispatcher.completed == 20
    assert dispatcher.active == 0


async def test_active_counts_running_and_queued_jobs() -> None:
    run, dispatcher = await _two_holding_slots(5)
    assert dispatcher.active == 5
    run.release.set()
    assert await dispatcher.drain(within=5)
    assert dispatcher.active == 0
    assert run.running == 0


async def test_dispatch_returns_before_the_job_finishes() -> None:
    run = Instrumented(hold=-1)
    dispatcher = InProcessDispatcher(run, max_concurrent=1)
    await asyncio.wait_for(dispatcher.dispatch(Job("r")), timeout=1)
    assert run.done == []
    run.release.set()
    assert await dispatcher.drain(within=5)
    assert run.done == ["r"]


async def test_drain_times_out_while_jobs_run() -> None:
    run = Instrumented(hold=-1)
    dispatcher = InProcessDispatcher(run, max_concurrent=1)
    await dispatcher.dispatch(Job("r"))
    assert await dispatcher.drain(within=0.01) is False
    await dispatcher.aclose()


async def test_drain_with_nothing_to_do() -> None:
    assert await InProcessDispatcher(Instrumented(), max_concurrent=1).drain(within=0) is True


async def test_aclose_cancels_running_and_queued_jobs() -> None:
    run, dispatcher = await _two_holding_slots(4)
    await asyncio.wait_for(dispatcher.aclose(), timeout=2)
    assert sorted(run.cancelled) == ["r0", "r1"]  # the two that held a slot
    assert run.done == []
    assert run.running == 0
    assert dispatcher.active == 0
    assert dispatcher.completed == 0  # cancelled jobs did not complete


async def test_dispatch_after_aclose_raises_dispatch_error() -> None:
    run = Instrumented()
    dispatcher = InProcessDispatcher(run, max_concurrent=1)
    await dispatcher.aclose()
    with pytest.raises(DispatchError, match="shutting down"):
        await dispatcher.dispatch(Job("late"))
    assert dispatcher.active == 0  # no task was made for it
    assert run.done == []


async def test_a_job_whose_rollout_another_delivery_owns_is_not_a_completed_rollout() -> None:
    # A duplicate's hand-off of a rollout already claimed returns None: one rollout, one count.
    run = Instrumented(owned_elsewhere="dup")
    dispatcher = InProcessDispatcher(run, max_concurrent=4)
    for name in ("r0", "dup-1", "dup-2", "r1"):
        await dispatcher.dispatch(Job(name))
    assert await dispatcher.drain(within=5)
    assert sorted(run.done) == ["dup-1", "dup-2", "r0", "r1"]
    assert dispatcher.completed == 2


async def test_an_exception_in_run_job_does_not_kill_the_dispatcher(
    caplog: pytest.LogCaptureFixture,
) -> None:
    run = Instrumented(fail={"r0", "r2"})
    dispatcher = InProcessDispatcher(run, max_concurrent=1)
    for i in range(4):
        await dispatcher.dispatch(Job(f"r{i}"))
    assert await dispatcher.drain(within=5)
    assert run.done == ["r1", "r3"]
    assert dispatcher.completed == 4
    await dispatcher.dispatch(Job("after"))
    assert await dispatcher.drain(within=5)
    assert run.done[-1] == "after"
    assert any("worker failed" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("limit", [0, -1])
def test_max_concurrent_must_be_positive(limit: int) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        InProcessDispatcher(Instrumented(), max_concurrent=limit)


async def test_past_the_queue_bound_dispatch_is_refused_with_a_retry_after() -> None:
    from rollout_sdk.errors import Overloaded

    run = Instrumented(hold=-1)
    dispatcher = InProcessDispatcher(run, max_concurrent=2, max_queued=3, retry_after=7)
    for i in range(5):
        await dispatcher.dispatch(Job(f"r{i}"))
    with pytest.raises(Overloaded) as refused:
        await dispatcher.dispatch(Job("r5"))
    assert refused.value.retry_after == 7
    assert "ROLLOUT_SDK_MAX_QUEUED_ROLLOUTS=3" in str(refused.value)
    assert dispatcher.active == 5  # memory bounded: the refused job holds nothing
    await dispatcher.aclose()


async def test_a_zero_queue_refuses_at_the_concurrency_limit() -> None:
    from rollout_sdk.errors import Overloaded

    run = Instrumented(hold=-1)
    dispatcher = InProcessDispatcher(run, max_concurrent=1, max_queued=0)
    await dispatcher.dispatch(Job("r0"))
    with pytest.raises(Overloaded):
        await dispatcher.dispatch(Job("r1"))
    await dispatcher.aclose()
