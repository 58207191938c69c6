"""Outside load driver: the real ``rollout-sdk serve`` as a subprocess, driven over loopback.

    python -m bench.load --rollouts 300 --concurrency 50 --store sqlite

It starts ``rollout-sdk serve`` on a free 127.0.0.1 port with a fresh state folder, runs a
TrainGate stand-in in this process on another loopback port, posts N inits with at most C in
flight, waits until every rollout has called back, and checks that each was called back exactly
once, COMPLETED, with the right answer. Exit 0 only if every check passes within ``--deadline``.
The server subprocess is terminated in every case. ``run_load`` does the same for tests.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import secrets
import shlex
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Self, TextIO

import httpx

from rollout_sdk.local.demo import Progress, percentile
from rollout_sdk.testing.lifecycle import StartStop
from rollout_sdk.testing.standin import TrainGateStandIn
from rollout_sdk.testing.threads import ServerThread, free_port

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_AGENT = "examples.calculator.agent:agent_loop"
MAX_ROLLOUTS = 20_000
MAX_CONCURRENCY = 1_000
FAKE_AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def subprocess_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment with fake AWS credentials, so no child can reach real AWS."""
    env = {k: v for k, v in os.environ.items() if k not in ("AWS_PROFILE", "AWS_REGION")}
    env.update(FAKE_AWS)
    env.update(extra or {})
    return env


def default_server_cmd() -> list[str]:
    """The ``rollout-sdk`` script beside this interpreter, else ``python -m rollout_sdk``."""
    script = Path(sys.executable).with_name("rollout-sdk")
    return [str(script)] if script.exists() else [sys.executable, "-m", "rollout_sdk"]


class ServerStartError(RuntimeError):
    """The server subprocess exited or did not answer /health in time (message has its log)."""


class HTTPSubprocess(StartStop):
    """A server subprocess answering ``GET {url}{health_path}``, until ``stop``.

    ``with HTTPSubprocess(argv, ...) as server: server.url`` — stopped (terminate, then kill)
    on exit. Its output goes to ``log_path``, so a full pipe can never block it.
    """

    def __init__(
        self,
        argv: list[str],
        *,
        url: str,
        log_path: str | Path,
        env: dict[str, str] | None = None,
        cwd: str | Path = REPO_ROOT,
        health_path: str = "/health",
    ) -> None:
        self.argv = argv
        self.url = url
        self.log_path = Path(log_path)
        self.env = subprocess_env(env)
        self.cwd = Path(cwd)
        self.health_path = health_path
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self, timeout: float = 30.0) -> Self:
        """Start and wait for the health path to answer 200; ServerStartError otherwise."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(  # noqa: S603 - a fixed argv list, no shell
            self.argv, cwd=self.cwd, env=self.env, stdout=self._log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=2.0) as client:
            while True:
                if self.process.poll() is not None:
                    self.stop()
                    raise ServerStartError(
                        f"{shlex.join(self.argv)} exited with {self.process.returncode}:\n"
                        f"{self.log_tail()}"
                    )
                try:
                    if client.get(self.url + self.health_path).status_code == 200:
                        return self
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise ServerStartError(
                        f"{shlex.join(self.argv)} did not answer {self.health_path} within "
                        f"{timeout:g} s:\n{self.log_tail()}"
                    )
                time.sleep(0.05)

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 10.0) -> int | None:
        """Terminate, then kill after ``timeout``; returns the exit code (None if never started)."""
        code: int | None = None
        if self.process is not None:
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(timeout)
            code = self.process.returncode
        if self._log is not None:
            self._log.close()
            self._log = None
        return code

    def log_tail(self, lines: int = 40) -> str:
        """The last lines the server printed."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


class ServerProcess(HTTPSubprocess):
    """``rollout-sdk serve`` on a free loopback port with its state in ``state_dir``."""

    def __init__(
        self,
        *,
        agent: str = DEFAULT_AGENT,
        store: str = "sqlite",
        state_dir: str | Path,
        server_cmd: list[str] | None = None,
        server_key: str | None = None,
        env: dict[str, str] | None = None,
        cwd: str | Path = REPO_ROOT,
        log_level: str = "warning",
    ) -> None:
        port = free_port()
        argv = [
            *(server_cmd or default_server_cmd()),
            "serve",
            "--agent",
            agent,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--store",
            store,
            "--state-dir",
            str(state_dir),
            "--log-level",
            log_level,
        ]
        # The key goes through the environment, not argv, so `ps` does not show it.
        extra = {"ROLLOUT_SDK_SERVER_KEY": server_key} if server_key else {}
        super().__init__(
            argv,
            url=f"http://127.0.0.1:{port}",
            log_path=Path(state_dir) / "server.log",
            env={**extra, **(env or {})},
            cwd=cwd,
        )
        self.port = port
        self.server_key = server_key


def make_questions(count: int, *, seed: int = 7) -> list[tuple[str, str]]:
    """``count`` (question, ground truth) pairs the scripted model and calculator can solve."""
    rng = random.Random(seed)
    questions = []
    for _ in range(count):
        op = rng.choice("+-*/")
        b = rng.randint(1, 99)
        if op == "/":
            answer = rng.randint(1, 99)
            a = answer * b
        else:
            a = rng.randint(1, 999)
            answer = {"+": a + b, "-": a - b, "*": a * b}[op]
        questions.append((f"What is {a} {op} {b}?", str(answer)))
    return questions


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
            lines.append("PASS: every rollout called back exactly once, all COMPLETED")
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
            body = {
                "rollout_id": rollout_id,
                "server_url": traingate_url,
                "messages": [
                    {"role": "system", "content": "You are a careful calculator. Use the tools."},
                    {"role": "user", "content": question},
                ],
                "completion_params": {"temperature": 0.0, "max_tokens": 128},
                "metadata": {"ground_truth": truth[rollout_id]},
                "api_key": callback_key,
            }
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.load",
        description="Drive a real `rollout-sdk serve` subprocess over loopback with N rollouts, "
        "C in flight, and check every rollout is called back exactly once, COMPLETED.",
    )
    parser.add_argument("--rollouts", type=int, default=300, help="rollouts to run (default 300)")
    parser.add_argument("--concurrency", type=int, default=50, help="inits in flight (default 50)")
    parser.add_argument("--store", choices=("sqlite", "memory", "dynamodb"), default="sqlite")
    parser.add_argument(
        "--deadline",
        type=float,
        default=240.0,
        help="fail when the whole run takes longer, server start included (default 240 s)",
    )
    parser.add_argument(
        "--server-cmd",
        metavar="CMD",
        help="command that runs the rollout-sdk CLI, before its 'serve ...' arguments "
        "(default: the rollout-sdk script beside this Python)",
    )
    parser.add_argument("--agent", default=DEFAULT_AGENT, metavar="MODULE:ATTR")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        report = run_load(
            rollouts=args.rollouts,
            concurrency=args.concurrency,
            store=args.store,
            deadline=args.deadline,
            server_cmd=shlex.split(args.server_cmd) if args.server_cmd else None,
            agent=args.agent,
        )
    except (ValueError, ServerStartError) as exc:
        print(f"bench.load: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("bench.load: interrupted", file=sys.stderr)
        return 130
    print(report.summary())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
