"""A v1-SDK agent, only its import changed, served by plain ``uvicorn module:app``."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import httpx
import pytest

from rollout_sdk.testing.standin import TrainGateStandIn
from rollout_sdk.testing.threads import ServerThread, free_port
from testkit import REPO_ROOT
from testkit.bodies import calculator_body
from testkit.processes import HTTPSubprocess

pytestmark = pytest.mark.integration


async def test_v1_agent_under_plain_uvicorn_completes_a_rollout_with_reward(
    standin: TrainGateStandIn, traingate: ServerThread, tmp_path: Path
) -> None:
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "uvicorn",
        "tests.fixtures.v1_agent.agent:app",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]
    server = HTTPSubprocess(
        argv,
        url=f"http://127.0.0.1:{port}",
        log_path=tmp_path / "uvicorn.log",
        env={"ROLLOUT_API_KEY": "v1-server-key"},
        cwd=REPO_ROOT,
    )
    body = calculator_body("v1-1", traingate.url, question="What is 12 * 12?", truth="144")
    with server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            health = (await client.get("/health")).json()
            refused = await client.post("/v1/rollout/init", json=body)
            accepted = await client.post(
                "/v1/rollout/init", json=body, headers={"Authorization": "Bearer v1-server-key"}
            )
            assert await asyncio.to_thread(standin.wait_for, 1, 20), server.log_tail()
    assert health["agent_loop"] == "v1_arithmetic_agent"
    assert refused.status_code == 401
    assert accepted.status_code == 202
    assert {t["function"]["name"] for t in accepted.json()["tools"]} == {
        "calculate",
        "round_number",
    }
    (result,) = standin.completions["v1-1"]
    assert result["status"] == "COMPLETED", result
    assert result["reward"] == 1.0
    assert result["metrics"]["num_llm_calls"] == 2
    assert result["metrics"]["num_tool_calls"] == 1
