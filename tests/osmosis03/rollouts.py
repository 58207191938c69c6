"""What both 0.3.8 suites (the local server's, test_client.py, and the Lambda path's,
test_lambda.py) do to a server: osmosis-ai 0.3.8's own client, and the raw requests a trainer
that stops polling would make."""

from __future__ import annotations

from typing import Any

import httpx
from osmosis_ai.rollout.client import RolloutClient
from osmosis_ai.rollout.types import RolloutResultResponse

from .conftest import LLM_KEY, SERVER_KEY, Model, Server

AUTH = {"Authorization": f"Bearer {SERVER_KEY}"}


def client(server: Server, **kwargs: Any) -> RolloutClient:
    return RolloutClient(url=server.url, api_key=SERVER_KEY, **kwargs)


async def run(
    server: Server, model: Model, rollout_id: str, *, label: str | None = "42", **kwargs: Any
) -> RolloutResultResponse:
    rollouts = client(server)
    try:
        return await rollouts.run_rollout(
            initial_messages=[{"role": "user", "content": "42"}],
            chat_completions_url=model.url,
            rollout_id=rollout_id,
            llm_api_key=LLM_KEY,
            label=label,
            **kwargs,
        )
    finally:
        await rollouts.aclose()


def submit(server: Server, model: Model, rollout_id: str, **body: Any) -> httpx.Response:
    """A raw POST /rollout (no client polling it afterwards)."""
    payload = {
        "rollout_id": rollout_id,
        "initial_messages": [{"role": "user", "content": "42"}],
        "chat_completions_url": model.url,
        **body,
    }
    return httpx.post(f"{server.url}/rollout", json=payload, headers=AUTH, timeout=40)


def poll(server: Server, rollout_id: str, token: str) -> httpx.Response:
    headers = {**AUTH, "X-Osmosis-Rollout-Lease": token}
    return httpx.get(f"{server.url}/rollout/{rollout_id}/result", headers=headers, timeout=40)


async def idle(server: Server, *, within: float = 60, **kwargs: Any) -> dict[str, Any]:
    """``wait_idle``'s answer: the server has nothing in flight."""
    rollouts = client(server)
    try:
        health: dict[str, Any] = await rollouts.wait_idle(
            timeout_sec=within, poll_interval_sec=0.2, **kwargs
        )
        return health
    finally:
        await rollouts.aclose()
