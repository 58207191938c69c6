"""In-process dispatcher: runs the worker on this event loop, at most N rollouts at once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from rollout_sdk.dispatch.base import Job
from rollout_sdk.errors import DispatchError, Overloaded

logger = logging.getLogger("rollout_sdk.dispatch")

RunJob = Callable[[Job], Awaitable[object]]


class InProcessDispatcher:
    """Each job becomes a task that waits for one of ``max_concurrent`` slots, then runs.

    Every task is tracked, so shutdown can stop them; every job's record was written before the
    job arrived here, so nothing runs that the store does not know about.
    """

    def __init__(
        self,
        run_job: RunJob,
        *,
        max_concurrent: int,
        max_queued: int | None = None,
        retry_after: int = 2,
    ) -> None:
        if max_concurrent < 1:
            raise ValueError("max_concurrent must be at least 1")
        if max_queued is not None and max_queued < 0:
            raise ValueError("max_queued must be at least 0")
        self._run_job = run_job
        #: Jobs held beyond those running; None is unbounded (the v1 SDK's behaviour).
        self.max_queued = max_queued
        self.retry_after = retry_after
        self._slots = asyncio.Semaphore(max_concurrent)
        self._tasks: set[asyncio.Task[None]] = set()
        self._completed = 0
        self._closed = False
        self.max_concurrent = max_concurrent

    @property
    def active(self) -> int:
        return len(self._tasks)

    @property
    def completed(self) -> int:
        return self._completed

    async def dispatch(self, job: Job) -> None:
        if self._closed:
            raise DispatchError("the server is shutting down; retry against another instance")
        if (
            job.claimed is None  # a claimed job holds a reserved slot: never refused
            and self.max_queued is not None
            and len(self._tasks) >= self.max_concurrent + self.max_queued
        ):
            # Memory stays bounded however many inits arrive: refuse, and say when to retry.
            raise Overloaded(
                f"{len(self._tasks)} rollouts are running or queued here, the most this server "
                f"holds (OSMOSIS_ROLLOUT_SERVER_MAX_CONCURRENT_ROLLOUTS={self.max_concurrent} "
                f"running + ROLLOUT_SDK_MAX_QUEUED_ROLLOUTS={self.max_queued} queued)",
                self.retry_after,
            )
        if job.claimed is not None:
            # Its slot was reserved before its record was created (claimed): it runs at once.
            task = asyncio.create_task(self._reserved(job), name=f"rollout:{job.rollout_id}")
        else:
            task = asyncio.create_task(self._guarded(job), name=f"rollout:{job.rollout_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def reserve(self) -> bool:
        """Take a free slot now for a job init will dispatch claimed; False when every slot is
        taken (or waited for), or the server is shutting down."""
        if self._closed or self._slots.locked():
            return False
        await self._slots.acquire()  # free and nobody waiting: taken without suspending
        return True

    def unreserve(self) -> None:
        """Give back a reserved slot whose job will not be dispatched (a duplicate init)."""
        self._slots.release()

    async def _guarded(self, job: Job) -> None:
        async with self._slots:
            await self._run(job)

    async def _reserved(self, job: Job) -> None:
        try:
            await self._run(job)
        finally:
            self._slots.release()

    async def _run(self, job: Job) -> None:
        try:
            outcome = await self._run_job(job)
        except asyncio.CancelledError:
            raise
        except Exception:
            # The worker records every failure it can; reaching here means the kit itself
            # failed, and the record's recovery rules take over.
            logger.exception("worker failed", extra={"rollout_id": job.rollout_id})
        else:
            if outcome is None:
                return  # another delivery of this job owns the rollout: not one more rollout
        self._completed += 1  # not reached when cancelled: a cancelled job did not complete

    async def drain(self, within: float | None = None) -> bool:
        """Wait until no job is left (True) or ``within`` seconds pass (False)."""
        if not self._tasks:
            return True
        _, pending = await asyncio.wait(set(self._tasks), timeout=within)
        return not pending

    async def aclose(self) -> None:
        self._closed = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
