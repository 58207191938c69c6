"""Helpers of the integration tests: request bodies, a counting agent, a header recorder, the CLI."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.load import REPO_ROOT, subprocess_env
from examples.calculator.agent import CalculatorAgent
from rollout_sdk.local.server import build_local_app
from rollout_sdk.settings import load_settings

if TYPE_CHECKING:
    from fastapi import FastAPI
    from starlette.types import ASGIApp, Receive, Scope, Send

    from rollout_sdk.agent.loop import RolloutAgentLoop, RolloutContext, RolloutResult
    from rollout_sdk.settings import RolloutSettings

SERVER_KEY = "integration-server-key"
AUTH = {"Authorization": f"Bearer {SERVER_KEY}"}
CLI = str(Path(sys.executable).with_name("rollout-sdk"))


def rollout_body(
    rollout_id: str,
    server_url: str,
    *,
    question: str = "What is 6 * 7?",
    ground_truth: str = "42",
    **extra: Any,
) -> dict[str, Any]:
    """An init body for the calculator agent."""
    return {
        "rollout_id": rollout_id,
        "server_url": server_url,
        "messages": [
            {"role": "system", "content": "You are a careful calculator. Use the tools."},
            {"role": "user", "content": question},
        ],
        "completion_params": {"temperature": 0.0, "max_tokens": 128},
        "metadata": {"ground_truth": ground_truth},
        **extra,
    }


def local_app(
    state_dir: Path,
    *,
    agent_loop: RolloutAgentLoop | None = None,
    settings: RolloutSettings | None = None,
) -> FastAPI:
    """The local server's app on SQLite in ``state_dir``, with ``SERVER_KEY``."""
    return build_local_app(
        agent_loop or CalculatorAgent(),
        store="sqlite",
        state_dir=state_dir,
        api_keys=[SERVER_KEY],
        settings=settings or load_settings(),
        docs=False,
    )


class CountingAgent(CalculatorAgent):
    """The calculator agent, counting how many of its runs overlap."""

    def __init__(self) -> None:
        super().__init__()
        self.running = 0
        self.peak = 0
        self.runs = 0

    async def run(self, ctx: RolloutContext) -> RolloutResult:
        # All runs share one event loop, so these counters need no lock.
        self.runs += 1
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            return await super().run(ctx)
        finally:
            self.running -= 1


class HeaderRecorder:
    """ASGI wrapper remembering (path, Authorization header) of every HTTP request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.seen: list[tuple[str, str | None]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            auth = headers.get(b"authorization")
            self.seen.append((scope["path"], auth.decode("latin-1") if auth else None))
        await self.app(scope, receive, send)


async def wait_until(
    predicate: Callable[[], Awaitable[bool]], *, within: float = 10.0, what: str = "condition"
) -> None:
    """Poll ``predicate`` until it holds; AssertionError naming ``what`` after ``within`` s."""
    deadline = time.monotonic() + within
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not hold within {within} s")
        await asyncio.sleep(0.02)


def run_cli(
    *args: str, cwd: Path = REPO_ROOT, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """``rollout-sdk ARGS`` as a subprocess with fake AWS credentials."""
    return subprocess.run(
        [CLI, *args],
        cwd=cwd,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
