"""Helpers of the integration tests: the local app, a counting agent, a header recorder, the CLI
(request bodies and waits are :mod:`testkit.bodies` and :mod:`testkit.wait`)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from examples.calculator.agent import CalculatorAgent
from rollout_sdk.local.server import build_local_app
from rollout_sdk.settings import load_settings
from testkit import REPO_ROOT
from testkit.aws import fake_aws_env
from testkit.bodies import calculator_body
from testkit.wait import until

if TYPE_CHECKING:
    from fastapi import FastAPI
    from starlette.types import ASGIApp, Receive, Scope, Send

    from rollout_sdk.agent.loop import RolloutAgentLoop, RolloutContext, RolloutResult
    from rollout_sdk.settings import RolloutSettings

SERVER_KEY = "integration-server-key"
AUTH = {"Authorization": f"Bearer {SERVER_KEY}"}
CLI = str(Path(sys.executable).with_name("rollout-sdk"))


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


async def init_all(
    client: httpx.AsyncClient, traingate_url: str, ids: list[str], questions: list[tuple[str, str]]
) -> list[httpx.Response]:
    """One calculator init per rollout id, all at once: the i-th asks the i-th question (and
    carries its answer as the truth)."""
    return await asyncio.gather(
        *(
            client.post(
                "/v1/rollout/init",
                json=calculator_body(rid, traingate_url, question=q, truth=a),
            )
            for rid, (q, a) in zip(ids, questions, strict=True)
        )
    )


async def idle(client: httpx.AsyncClient) -> None:
    """Until the server runs and queues no job (``/health``'s ``active_rollouts`` is 0): a job
    an init had started would be counted from its 202 on, so after this it has ended."""

    async def none_active() -> bool:
        return int((await client.get("/health")).json()["active_rollouts"]) == 0

    await until(none_active, within=20, what="every job ended")


def run_cli(
    *args: str, cwd: Path = REPO_ROOT, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """``rollout-sdk ARGS`` as a subprocess with fake AWS credentials."""
    return subprocess.run(
        [CLI, *args],
        cwd=cwd,
        env=fake_aws_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
