"""Where the durable execution SDK's synchronous steps meet the asyncio worker: each bridge's cost
per step, against the same work done without a step, in the same run (issue 25).

    python -m bench.durable [--steps 200] [--rounds 3]

Each round runs one durable execution of ``--steps`` steps through the testing SDK's runner
(its in-memory checkpoint service, in process: what the service's own latency adds on Lambda is
not in it), one per bridge, and the same work with no step at all:

- ``direct``: the work awaited on the loop (no durability): the baseline;
- ``thread``: the kit's bridge (rollout_sdk/aws/durable.py): the step is made from a worker
  thread (``asyncio.to_thread``), and its function runs the work back on the runtime's loop
  (``run_coroutine_threadsafe``), which keeps serving the lease's heartbeat and the shared
  connection pool meanwhile;
- ``blocking``: the step made on the loop's own thread (the SDK runs a step's function in the
  calling thread), its function running the work on a second loop in a thread of its own: the
  runtime's loop is blocked for the whole step (no heartbeat, no cancel signal) and the work
  cannot use that loop's connections (an ``asyncio.run`` in the step fails: the loop runs).

The work is ``asyncio.sleep(0)``, so what is timed is the bridge and the step's checkpoint. The
report prints each round's milliseconds per step and the median over rounds, and the thread
bridge's cost per step over the blocking one's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from aws_durable_execution_sdk_python import DurableContext, durable_execution
from aws_durable_execution_sdk_python.config import StepConfig
from aws_durable_execution_sdk_python.retries import RetryDecision
from aws_durable_execution_sdk_python_testing.runner import DurableFunctionTestRunner

from testkit.durable import close_runner

CONFIG = StepConfig(retry_strategy=lambda _error, _attempts: RetryDecision.no_retry())


async def work() -> int:
    await asyncio.sleep(0)
    return 1


def bridged(loop: asyncio.AbstractEventLoop, steps: int) -> Callable[[Any, DurableContext], Any]:
    def execution(event: Any, ctx: DurableContext) -> dict[str, Any]:
        async def run() -> float:
            started = time.perf_counter()
            for n in range(steps):

                def produce(_: Any) -> int:
                    return asyncio.run_coroutine_threadsafe(work(), loop).result()

                await asyncio.to_thread(ctx.step, produce, f"s{n}", CONFIG)
            return time.perf_counter() - started

        return {"seconds": loop.run_until_complete(run())}

    return execution


def blocking(loop: asyncio.AbstractEventLoop, steps: int) -> Callable[[Any, DurableContext], Any]:
    second = asyncio.new_event_loop()
    thread = threading.Thread(target=second.run_forever, daemon=True)
    thread.start()

    def execution(event: Any, ctx: DurableContext) -> dict[str, Any]:
        async def run() -> float:
            started = time.perf_counter()
            for n in range(steps):

                def produce(_: Any) -> int:
                    return asyncio.run_coroutine_threadsafe(work(), second).result()

                ctx.step(produce, f"s{n}", CONFIG)
            return time.perf_counter() - started

        try:
            return {"seconds": loop.run_until_complete(run())}
        finally:
            second.call_soon_threadsafe(second.stop)
            thread.join()
            second.close()

    return execution


def direct(loop: asyncio.AbstractEventLoop, steps: int) -> float:
    async def run() -> float:
        started = time.perf_counter()
        for _ in range(steps):
            await work()
        return time.perf_counter() - started

    return loop.run_until_complete(run())


def through_runner(execution: Callable[[Any, DurableContext], Any]) -> float:
    runner = DurableFunctionTestRunner(durable_execution(execution), skip_time=True)
    try:
        result = runner.run(input="{}", execution_timeout=300, execution_name="bench")
    finally:
        close_runner(runner)
    if result.result is None:
        raise SystemExit(f"the execution did not succeed: {result.status} {result.error}")
    seconds: float = json.loads(result.result)["seconds"]
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.durable", description=__doc__)
    parser.add_argument("--steps", type=int, default=200, help="steps per execution")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    args = parser.parse_args(argv)
    loop = asyncio.new_event_loop()
    per_step: dict[str, list[float]] = {"direct": [], "thread": [], "blocking": []}
    try:
        for round_ in range(1, args.rounds + 1):
            print(f"round {round_}/{args.rounds}: {args.steps} steps each", file=sys.stderr)
            per_step["direct"].append(direct(loop, args.steps) * 1000 / args.steps)
            per_step["thread"].append(through_runner(bridged(loop, args.steps)) * 1000 / args.steps)
            per_step["blocking"].append(
                through_runner(blocking(loop, args.steps)) * 1000 / args.steps
            )
    finally:
        loop.close()
    print(f"ms per step over {args.rounds} rounds of {args.steps} steps (testing SDK's runner)")
    for name, values in per_step.items():
        rounds = ", ".join(f"{v:.3f}" for v in values)
        print(f"  {name:<9} median {statistics.median(values):8.3f}   rounds: {rounds}")
    thread, block = statistics.median(per_step["thread"]), statistics.median(per_step["blocking"])
    print(f"  thread bridge over blocking: {thread / block:.2f}x ({thread - block:+.3f} ms a step)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
