"""The outside load: ``rollout-sdk serve`` as a subprocess, driven over loopback.

It starts ``rollout-sdk serve`` on a free 127.0.0.1 port with a fresh state folder, runs a
TrainGate stand-in in this process on another loopback port, posts N inits with at most C in
flight, waits until every rollout has called back, and checks that each was called back exactly
once, COMPLETED, with the right answer. The server subprocess is terminated in every case.
``python -m bench.load`` is its command line; the integration tests run it small.
"""

from __future__ import annotations

import asyncio
import secrets
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TextIO

import httpx

from rollout_sdk.local.progress import Progress
from rollout_sdk.local.report import percentile
from rollout_sdk.testing.standin import TrainGateStandIn
from rollout_sdk.testing.threads import ServerThread
from testkit.bodies import calculator_body, make_questions
from testkit.processes import DEFAULT_AGENT, ServerProcess

MAX_ROLLOUTS = 20_000
MAX_CONCURRENCY = 1_000


@dataclass
class LoadReport:
    """What a load run measured and which checks failed (``ok`` when none did)."""

    rollouts: int
    concurrency: int
    store: str
    deadline: float
    total_seconds: float = 0.0
    wall_seconds: float = 0.0
    init_ms: list[float] = field(default_factory=list)
    init_failures: Counter[str] = field(default_factory=Counter)
    statuses: Counter[str] = field(default_factory=Counter)
    duplicates: int = 0
    unexpected: int = 0
    wrong_rewards: int = 0
    peak_inits_in_flight: int = 0
    peak_server_active: int = 0
    timed_out: bool = False
    server_died: bool = False
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def rate(self) -> float:
        """Rollouts called back per second of the load phase."""
        done = self.rollouts - self.statuses["missing"]
        return done / self.wall_seconds if self.wall_seconds > 0 else 0.0

    def check(self) -> None:
        """Fill ``failures`` from the counts."""
        failures = []
        if self.init_failures:
            failures.append(
                "inits not accepted: "
                + ", ".join(f"{n} x {s}" for s, n in sorted(self.init_failures.items()))
            )
        if self.statuses["missing"]:
            failures.append(f"{self.statuses['missing']} rollouts never called back")
        if self.duplicates:
            failures.append(f"{self.duplicates} duplicate callbacks")
        others = {s: n for s, n in self.statuses.items() if s not in ("COMPLETED", "missing")}
        if others:
            failures.append(
                "not COMPLETED: " + ", ".join(f"{n} x {s}" for s, n in sorted(others.items()))
            )
        if self.wrong_rewards:
            failures.append(f"{self.wrong_rewards} COMPLETED rollouts without reward 1.0")
        if self.unexpected:
            failures.append(f"{self.unexpected} callbacks for rollouts never started")
        if self.server_died:
            failures.append("the server process exited during the run")
        if self.timed_out or self.total_seconds > self.deadline:
            failures.append(f"took {self.total_seconds:.1f} s; the deadline is {self.deadline:g} s")
        self.failures = failures

    def summary(self) -> str:
        """A human-readable summary of figures and checks."""
        p = [percentile(self.init_ms, q) for q in (50, 95, 99)]
        lines = [
            f"bench.load: {self.rollouts} rollouts, {self.concurrency} concurrent, "
            f"store {self.store}",
            f"  COMPLETED                   {self.statuses['COMPLETED']}/{self.rollouts}",
            f"  wall time (load phase)      {self.wall_seconds:.2f} s",
            f"  total (with server start)   {self.total_seconds:.2f} s (deadline {self.deadline:g} s)",
            f"  throughput                  {self.rate:.1f} rollouts/s",
            f"  init ms p50/p95/p99         {p[0]:.1f} / {p[1]:.1f} / {p[2]:.1f}",
            f"  peak inits in flight        {self.peak_inits_in_flight}",
            f"  peak active on server       {self.peak_server_active} (running + queued, sampled from /health)",
        ]
        if self.ok:
            once = self.rollouts - self.statuses["missing"]
            lines.append(
                f"PASS: {once}/{self.rollouts} called back once each, "
                f"{self.statuses['COMPLETED']} COMPLETED, {self.duplicates} duplicates"
            )
        else:
            lines += ["FAIL:", *(f"  - {f}" for f in self.failures)]
        return "\n".join(lines)


async def _drive(
    report: LoadReport,
    *,
    standin: TrainGateStandIn,
    server: ServerProcess,
    traingate_url: str,
    callback_key: str,
    deadline_at: float,
    progress: Progress,
) -> None:
    tag = secrets.token_hex(4)
    questions = make_questions(report.rollouts)
    expected = [f"load-{tag}-{i:05d}" for i in range(report.rollouts)]
    truth = {rid: answer for rid, (_, answer) in zip(expected, questions, strict=True)}
    headers = {"Authorization": f"Bearer {server.server_key}"} if server.server_key else {}
    limits = httpx.Limits(
        max_connections=report.concurrency + 2, max_keepalive_connections=report.concurrency + 2
    )
    slots = asyncio.Semaphore(report.concurrency)
    in_flight = 0
    accepted = 0

    async with httpx.AsyncClient(
        base_url=server.url, headers=headers, timeout=60.0, limits=limits
    ) as client:

        async def init(rollout_id: str, question: str) -> None:
            nonlocal in_flight, accepted
            body = calculator_body(
                rollout_id,
                traingate_url,
                question=question,
                truth=truth[rollout_id],
                callback_key=callback_key,
            )
            async with slots:
                in_flight += 1
                report.peak_inits_in_flight = max(report.peak_inits_in_flight, in_flight)
                started = time.perf_counter()
                try:
                    response = await client.post("/v1/rollout/init", json=body)
                    status = str(response.status_code)
                except httpx.HTTPError as exc:
                    status = type(exc).__name__
                finally:
                    in_flight -= 1
                report.init_ms.append((time.perf_counter() - started) * 1000)
            if status == "202":
                accepted += 1
            else:
                report.init_failures[status] += 1

        async def sample_health() -> None:
            while True:
                try:
                    health = (await client.get("/health")).json()
                    active = int(health.get("active_rollouts", 0))
                    report.peak_server_active = max(report.peak_server_active, active)
                except (httpx.HTTPError, ValueError):
                    pass
                await asyncio.sleep(0.05)

        started = time.perf_counter()
        sampler = asyncio.create_task(sample_health())
        posting = asyncio.gather(
            *(init(r, q) for r, (q, _) in zip(expected, questions, strict=True))
        )
        try:
            while True:
                progress.update(standin.reported())
                if posting.done() and standin.reported() >= accepted:
                    break
                if time.monotonic() >= deadline_at or not server.alive:
                    report.timed_out = server.alive
                    report.server_died = not server.alive
                    break
                await asyncio.sleep(0.05)
            report.wall_seconds = time.perf_counter() - started
            # A lost acknowledgement would show up as a late duplicate: give it a moment.
            await asyncio.sleep(0.25)
            progress.update(standin.reported())
        finally:
            progress.finish()
            sampler.cancel()
            if not posting.done():
                posting.cancel()
            await asyncio.gather(sampler, posting, return_exceptions=True)

    callbacks = {k: list(v) for k, v in list(standin.completions.items())}
    for rollout_id in expected:
        bodies = callbacks.get(rollout_id, [])
        if not bodies:
            report.statuses["missing"] += 1
            continue
        report.duplicates += len(bodies) - 1
        first = bodies[0]
        report.statuses[str(first.get("status"))] += 1
        if first.get("status") == "COMPLETED" and first.get("reward") != 1.0:
            report.wrong_rewards += 1
    report.unexpected = len(set(callbacks) - set(expected))


def run_load(
    *,
    rollouts: int,
    concurrency: int,
    store: str = "sqlite",
    deadline: float = 240.0,
    server_cmd: list[str] | None = None,
    agent: str = DEFAULT_AGENT,
    progress_stream: TextIO | None = None,
) -> LoadReport:
    """Run one load against a fresh ``rollout-sdk serve`` subprocess and check the outcome.

    Raises ValueError for out-of-range numbers, ServerStartError when the server does not start.
    """
    if not 1 <= rollouts <= MAX_ROLLOUTS:
        raise ValueError(f"rollouts must be between 1 and {MAX_ROLLOUTS}")
    if not 1 <= concurrency <= MAX_CONCURRENCY:
        raise ValueError(f"concurrency must be between 1 and {MAX_CONCURRENCY}")
    if not deadline > 0:
        raise ValueError("deadline must be positive")
    began = time.monotonic()
    report = LoadReport(rollouts=rollouts, concurrency=concurrency, store=store, deadline=deadline)
    callback_key = secrets.token_urlsafe(24)
    standin = TrainGateStandIn(callback_key=callback_key)
    with tempfile.TemporaryDirectory(prefix="rollout-sdk-load-") as state_dir:
        server = ServerProcess(
            agent=agent,
            store=store,
            state_dir=state_dir,
            server_cmd=server_cmd,
            server_key=secrets.token_urlsafe(24),
        )
        traingate = ServerThread(standin.app)
        try:
            traingate.start()
            server.start(timeout=min(30.0, deadline))
            asyncio.run(
                _drive(
                    report,
                    standin=standin,
                    server=server,
                    traingate_url=traingate.url,
                    callback_key=callback_key,
                    deadline_at=began + deadline,
                    progress=Progress(rollouts, label="called back", stream=progress_stream),
                )
            )
            report.total_seconds = time.monotonic() - began
        finally:
            server.stop()
            traingate.stop()
    report.check()
    return report
