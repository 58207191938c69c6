"""Lambda GB-seconds and peak concurrent executions per 1,000 rollouts, for each hand-off mode.

The same worker code runs the same rollouts against a TrainGate stand-in that answers each chat
call after ``--chat-delay`` seconds (a realistic model), in one process:

- direct: one worker invocation per rollout; each run's wall time is what that invocation bills;
- queue: one invocation per batch of ``--batch`` rollouts run concurrently; the batch's wall time
  is what that invocation bills.

All rollouts arrive at once (an RL step starts its rollouts together), so the peak of concurrent
executions is every invocation at once: the rollouts for direct, the batches for queue, capped by
``--max-concurrency`` (the queue's MaximumConcurrency). Durations are measured by running the
invocations in waves (``--wave`` at a time) against a stand-in in its own process, so that this
machine's two cores do not stretch them the way a thousand Lambdas with their own CPUs would not;
they are billed as Lambda does (rounded up to the millisecond), plus a cold start's init for each
concurrent execution environment (``--init-seconds``, from `make package`'s import check).

Usage: python -m bench.handoff [--rollouts 1000] [--chat-delay 2] [--batch 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from examples.calculator.agent import agent_loop
from rollout_sdk.dispatch.base import Job
from rollout_sdk.engine.assembly import Engine
from rollout_sdk.engine.worker import RolloutWorker
from rollout_sdk.protocol import InitResponse, RolloutRequest
from rollout_sdk.settings import RolloutClientSettings, load_settings
from rollout_sdk.store.memory import MemoryStore
from rollout_sdk.store.record import RolloutRecord
from rollout_sdk.traingate.client import TrainGateClient
from testkit.standin_server import standin_process

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass
class ModeResult:
    """One hand-off mode, scaled to 1,000 rollouts."""

    mode: str
    rollouts: int
    invocations: int
    mean_invocation_seconds: float
    p95_invocation_seconds: float
    peak_concurrency: int
    gb_seconds_per_1000: float
    init_gb_seconds_per_1000: float
    invocations_per_1000: float
    reported: int


async def _prepare(
    count: int, url: str, prefix: str
) -> tuple[RolloutWorker, MemoryStore, list[str]]:
    store = MemoryStore()
    settings = load_settings()
    client = TrainGateClient(
        RolloutClientSettings(max_connections=5000, max_keepalive_connections=1000)
    )
    worker = Engine.build(
        store=store, client=client, settings=settings, agent_loop=agent_loop
    ).require_worker()
    now = time.time()
    ids = []
    for i in range(count):
        rid = f"{prefix}-{i}"
        request = RolloutRequest(
            rollout_id=rid,
            server_url=url,
            messages=[{"role": "user", "content": f"What is {i} + 7?"}],
            completion_params={"temperature": 0.7},
            metadata={"ground_truth": str(i + 7)},
        )
        tools = agent_loop.get_tools(request)
        record = RolloutRecord.new(
            request, InitResponse(rollout_id=rid, tools=tools), now=now, ttl_seconds=3600
        )
        await store.create(record, now=now)
        ids.append(rid)
    return worker, store, ids


async def _timed(coro: Any) -> tuple[float, float]:
    start = time.monotonic()
    await coro
    return start, time.monotonic()


def _billed(seconds: float) -> float:
    return math.ceil(seconds * 1000) / 1000


async def run_mode(
    mode: str,
    count: int,
    url: str,
    *,
    batch: int,
    max_concurrency: int,
    memory_gb: float,
    init_seconds: float,
    wave: int,
) -> ModeResult:
    worker, _, ids = await _prepare(count, url, mode)
    groups = (
        [[rid] for rid in ids]
        if mode == "direct"
        else [ids[i : i + batch] for i in range(0, len(ids), batch)]
    )
    per_wave = max(1, wave // len(groups[0]))
    intervals: list[tuple[float, float]] = []
    for first in range(0, len(groups), per_wave):
        intervals += await asyncio.gather(
            *(
                _timed(asyncio.gather(*(worker.run(Job(rid)) for rid in members)))
                for members in groups[first : first + per_wave]
            )
        )
    await worker.client.aclose()
    durations = [end - start for start, end in intervals]
    # All arrive at once: every invocation is open together, up to the queue's cap.
    peak = len(intervals) if mode == "direct" else min(len(intervals), max_concurrency)
    scale = 1000 / count
    gb_seconds = sum(_billed(d) for d in durations) * memory_gb * scale
    # Every concurrent execution environment starts cold once: its init is billed too.
    init_gb_seconds = min(peak, len(intervals)) * init_seconds * memory_gb * scale
    reported = 0
    for rid in ids:
        record = await worker.store.get(rid, now=time.time())
        reported += record is not None and record.delivered_at is not None
    return ModeResult(
        mode=mode,
        rollouts=count,
        invocations=len(intervals),
        mean_invocation_seconds=round(statistics.fmean(durations), 3),
        p95_invocation_seconds=round(sorted(durations)[int(0.95 * (len(durations) - 1))], 3),
        peak_concurrency=peak,
        gb_seconds_per_1000=round(gb_seconds, 1),
        init_gb_seconds_per_1000=round(init_gb_seconds, 1),
        invocations_per_1000=round(len(intervals) * scale, 1),
        reported=reported,
    )


async def main_async(args: argparse.Namespace) -> list[ModeResult]:
    results = []
    log_dir = Path(tempfile.gettempdir()) / "bench-handoff-standin"
    with standin_process(log_dir, chat_delay=args.chat_delay) as server:
        for mode in ("direct", "queue"):
            print(
                f"bench.handoff: {mode}: {args.rollouts} rollouts, chat delay {args.chat_delay:g} s ...",
                file=sys.stderr,
            )
            result = await run_mode(
                mode,
                args.rollouts,
                server.url,
                batch=args.batch,
                max_concurrency=args.max_concurrency,
                memory_gb=args.memory_mb / 1024,
                init_seconds=args.init_seconds,
                wave=args.wave,
            )
            if result.reported != args.rollouts:
                raise SystemExit(
                    f"{mode}: only {result.reported}/{args.rollouts} rollouts reported"
                )
            results.append(result)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=1000)
    parser.add_argument("--chat-delay", type=float, default=2.0)
    parser.add_argument("--batch", type=int, default=10, help="QueueBatchSize")
    parser.add_argument("--max-concurrency", type=int, default=100, help="QueueMaximumConcurrency")
    parser.add_argument("--memory-mb", type=int, default=512)
    parser.add_argument(
        "--init-seconds", type=float, default=0.8, help="cold-start init billed per environment"
    )
    parser.add_argument("--wave", type=int, default=100, help="rollouts measured at once")
    args = parser.parse_args()
    if not 10 <= args.rollouts <= 5000:
        parser.error("--rollouts must be between 10 and 5000")
    started = time.monotonic()
    results = asyncio.run(main_async(args))
    report = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": "python -m bench.handoff " + " ".join(sys.argv[1:]),
        "chat_delay_seconds": args.chat_delay,
        "chat_calls_per_rollout": 2,
        "memory_mb": args.memory_mb,
        "batch": args.batch,
        "max_concurrency": args.max_concurrency,
        "init_seconds": args.init_seconds,
        "wall_seconds": round(time.monotonic() - started, 1),
        "modes": [asdict(r) for r in results],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "handoff-latest.json").write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"{'mode':<8}{'invocations':>12}{'mean s':>8}{'p95 s':>8}{'peak':>6}{'GB-s/1000':>11}{'init GB-s':>10}"
    )
    for r in results:
        print(
            f"{r.mode:<8}{r.invocations_per_1000:>12.0f}{r.mean_invocation_seconds:>8.2f}"
            f"{r.p95_invocation_seconds:>8.2f}{r.peak_concurrency:>6}{r.gb_seconds_per_1000:>11.1f}"
            f"{r.init_gb_seconds_per_1000:>10.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
