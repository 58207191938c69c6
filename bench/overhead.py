"""SDK overhead per chat call: ``RolloutLLMClient.chat_completions`` through the shared
``TrainGateClient``, against a raw ``aiohttp.ClientSession.post`` (and ``response.json()``) of
the same body to the same loopback endpoint: the HTTP stack under the SDK's client, so the
difference is what the SDK adds (request building, retries, validation, telemetry).

Both run in this process, one call at a time, interleaved (the order alternates every pair) so
drift hits both alike; the stand-in runs in a process of its own so it never holds this
process's GIL while a call is timed. The overhead is the median of the per-pair differences.
"""

from __future__ import annotations

import asyncio
import secrets
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp

from bench.common import median
from rollout_sdk.agent.loop import RolloutLLMClient
from rollout_sdk.settings import RolloutClientSettings
from rollout_sdk.traingate.client import CHAT_PATH, TrainGateClient
from testkit.bodies import COMPLETION_PARAMS, first_messages
from testkit.standin_server import standin_process


@dataclass
class OverheadRun:
    """One run: per-call medians (µs) and the median paired difference."""

    calls: int
    sdk_us: float
    raw_us: float
    overhead_us: float
    overhead_mean_us: float


async def _measure(url: str, callback_key: str, *, calls: int, warmup: int) -> OverheadRun:
    client = TrainGateClient(RolloutClientSettings())
    llm = RolloutLLMClient(
        client, server_url=url, rollout_id="bench-overhead", api_key=callback_key
    )
    messages = first_messages("What is 12 * 7?")
    body = llm.build_request(messages, **COMPLETION_PARAMS)
    headers = {"Authorization": f"Bearer {callback_key}"}
    try:
        async with aiohttp.ClientSession() as raw:

            async def sdk_call() -> None:
                await llm.chat_completions(messages, **COMPLETION_PARAMS)

            async def raw_call() -> None:
                async with raw.post(url + CHAT_PATH, json=body, headers=headers) as response:
                    response.raise_for_status()
                    await response.json()

            for _ in range(warmup):
                await sdk_call()
                await raw_call()
            sdk_ns: list[int] = []
            raw_ns: list[int] = []
            for i in range(calls):
                pair: tuple[Callable[[], Awaitable[None]], ...] = (
                    (sdk_call, raw_call) if i % 2 == 0 else (raw_call, sdk_call)
                )
                for call in pair:
                    started = time.perf_counter_ns()
                    await call()
                    (sdk_ns if call is sdk_call else raw_ns).append(
                        time.perf_counter_ns() - started
                    )
    finally:
        await client.aclose()
    diffs = [(s - r) / 1000 for s, r in zip(sdk_ns, raw_ns, strict=True)]
    return OverheadRun(
        calls=calls,
        sdk_us=median([v / 1000 for v in sdk_ns]),
        raw_us=median([v / 1000 for v in raw_ns]),
        overhead_us=median(diffs),
        overhead_mean_us=statistics.fmean(diffs),
    )


def run_overhead(*, runs: int, calls: int, warmup: int = 200) -> list[OverheadRun]:
    """``runs`` runs of ``calls`` interleaved pairs against one stand-in process."""
    callback_key = secrets.token_urlsafe(16)
    results = []
    with tempfile.TemporaryDirectory(prefix="rollout-sdk-bench-") as log_dir:
        standin = standin_process(log_dir, callback_key=callback_key)
        try:
            standin.start(timeout=30.0)
            for _ in range(runs):
                results.append(
                    asyncio.run(_measure(standin.url, callback_key, calls=calls, warmup=warmup))
                )
        finally:
            standin.stop()
    return results
