"""Memory per rollout in flight: the server's peak RSS with ``in_flight`` rollouts held in
flight (the stand-in holds every chat call until all the rollouts are in one, then for
``chat_delay`` seconds more) minus its idle RSS, divided by ``in_flight``.

Idle is read after a few sequential warm-up rollouts (so imports and first-use caches are not
charged to rollouts); the peak is the larger of ``VmHWM`` (reset to the idle RSS through
``/proc/<pid>/clear_refs`` where the kernel allows) and ``VmRSS`` sampled every 10 ms.
"""

from __future__ import annotations

import asyncio
import math
import secrets
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.common import MIB, StandinProbe, peak_rss, reset_peak_rss, rss
from bench.throughput import standin_thread
from rollout_sdk.testing.standin import TrainGateStandIn
from testkit.bodies import calculator_body, make_questions
from testkit.processes import ServerProcess


@dataclass
class MemoryRun:
    in_flight: int
    idle_mib: float = math.nan
    peak_mib: float = math.nan
    peak_chats_in_flight: int = 0
    failures: list[str] = field(default_factory=list)

    @property
    def per_rollout_mib(self) -> float:
        return (self.peak_mib - self.idle_mib) / self.in_flight

    def to_json(self) -> dict[str, Any]:
        return {
            "idle_rss_mib": round(self.idle_mib, 3),
            "peak_rss_mib": round(self.peak_mib, 3),
            "per_rollout_mib": round(self.per_rollout_mib, 4),
            "peak_chat_calls_in_flight": self.peak_chats_in_flight,
            "failures": self.failures,
        }


async def _drive(
    run: MemoryRun,
    *,
    server: ServerProcess,
    standin: TrainGateStandIn,
    probe: StandinProbe,
    url: str,
    callback_key: str,
    chat_delay: float,
    warmup: int,
    deadline: float,
) -> None:
    pid = server.process.pid if server.process else 0
    tag = secrets.token_hex(4)
    total = warmup + run.in_flight
    questions = make_questions(total)
    headers = {"Authorization": f"Bearer {server.server_key}"}
    limits = httpx.Limits(max_connections=total + 2, max_keepalive_connections=total + 2)
    async with httpx.AsyncClient(
        base_url=server.url, headers=headers, timeout=60.0, limits=limits
    ) as client:

        async def init(i: int) -> None:
            question, answer = questions[i]
            body = calculator_body(
                f"bench-mem-{tag}-{i:05d}",
                url,
                question=question,
                truth=answer,
                callback_key=callback_key,
            )
            response = await client.post("/v1/rollout/init", json=body)
            if response.status_code != 202:
                run.failures.append(f"init answered {response.status_code}")

        async def reported(count: int, until: float) -> bool:
            while standin.reported() < count:
                if time.monotonic() > until:
                    return False
                await asyncio.sleep(0.01)
            return True

        end = time.monotonic() + deadline
        for i in range(warmup):  # one at a time: imports and first-use caches, not rollouts
            await init(i)
            if not await reported(i + 1, end):
                run.failures.append("a warm-up rollout never called back")
                return
        await asyncio.sleep(0.3)
        idle = rss(pid)
        reset = reset_peak_rss(pid)
        # Every chat call is held until all the rollouts are in one (however long their inits
        # take on a loaded machine), then for ``chat_delay`` more seconds, then released.
        standin.chat_delay = deadline
        posting = asyncio.gather(*(init(i) for i in range(warmup, total)))
        peak = idle
        release_at: float | None = None
        try:
            while standin.reported() < total and time.monotonic() < end and server.alive:
                peak = max(peak, rss(pid))
                run.peak_chats_in_flight = max(run.peak_chats_in_flight, probe.chats_in_progress())
                if release_at is None and run.peak_chats_in_flight >= run.in_flight:
                    release_at = time.monotonic() + chat_delay
                if release_at is not None and time.monotonic() >= release_at:
                    standin.release()
                await asyncio.sleep(0.01)
            if server.alive:
                peak = max(peak, peak_rss(pid) if reset else 0)
        finally:
            standin.chat_delay = 0.0
            standin.release()
            await posting
    if standin.reported() < total:
        run.failures.append(f"{total - standin.reported()} rollouts never called back")
    if run.peak_chats_in_flight < run.in_flight:
        run.failures.append(
            f"only {run.peak_chats_in_flight} chat calls were in flight at once, "
            f"not {run.in_flight}"
        )
    statuses = [bodies[0].get("status") for bodies in list(standin.completions.values())]
    if any(s != "COMPLETED" for s in statuses):
        run.failures.append("some rollouts did not complete")
    run.idle_mib = idle / MIB
    run.peak_mib = peak / MIB


def run_memory(
    *,
    in_flight: int = 100,
    chat_delay: float = 2.0,
    store: str = "sqlite",
    warmup: int = 3,
    deadline: float = 60.0,
) -> MemoryRun:
    """One run on a fresh server and stand-in, both stopped in every case."""
    run = MemoryRun(in_flight)
    callback_key = secrets.token_urlsafe(16)
    with (
        tempfile.TemporaryDirectory(prefix="rollout-sdk-bench-") as state_dir,
        standin_thread(callback_key) as (standin, probe, url),
    ):
        server = ServerProcess(
            store=store, state_dir=state_dir, server_key=secrets.token_urlsafe(16)
        )
        try:
            server.start(timeout=60.0)
            asyncio.run(
                _drive(
                    run,
                    server=server,
                    standin=standin,
                    probe=probe,
                    url=url,
                    callback_key=callback_key,
                    chat_delay=chat_delay,
                    warmup=warmup,
                    deadline=deadline,
                )
            )
        finally:
            server.stop()
    return run
