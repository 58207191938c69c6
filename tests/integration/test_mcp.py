"""MCPAgentLoop through the kit over real HTTP: the local app and ``rollout-sdk serve --mcp``
against the TrainGate stand-in, whose scripted model calls the example server's ``calculate``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from rollout_sdk.mcp import agent_loop_from_folder
from rollout_sdk.testing.standin import TrainGateStandIn
from rollout_sdk.testing.threads import ServerThread, free_port
from testkit import REPO_ROOT
from testkit.bodies import calculator_body, make_questions
from testkit.processes import HTTPSubprocess, default_server_cmd
from testkit.wait import until

from .support import AUTH, SERVER_KEY, init_all, local_app, run_cli

pytestmark = pytest.mark.integration

EXAMPLE = REPO_ROOT / "examples" / "mcp_calculator"


async def test_rollouts_through_the_local_app_run_the_mcp_tools(
    standin: TrainGateStandIn, traingate: ServerThread, tmp_path: Path
) -> None:
    questions = make_questions(8, seed=3)
    ids = [f"mcp-{i}" for i in range(len(questions))]
    app = local_app(tmp_path / "state", agent_loop=agent_loop_from_folder(EXAMPLE))
    with ServerThread(app) as server:
        async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=30) as client:
            answers = await init_all(client, traingate.url, ids, questions)
            assert [r.status_code for r in answers] == [202] * len(ids)
            tools = answers[0].json()["tools"]
            assert [t["function"]["name"] for t in tools] == ["calculate", "square_root"]
            assert await asyncio.to_thread(standin.wait_for, len(ids), 30)
            health = (await client.get("/health")).json()
            assert health["agent_loop"] == "mcp_agent"
    for rid, (_, truth) in zip(ids, questions, strict=True):
        (body,) = standin.completions[rid]
        assert body["status"] == "COMPLETED", body
        assert body["finish_reason"] == "stop"
        tool_message = body["final_messages"][3]
        assert tool_message["role"] == "tool"
        assert tool_message["content"] == truth  # the MCP tool's result, as the model saw it
        assert body["final_messages"][-1]["content"] == f"The answer is {truth}."
        assert body["metrics"]["num_tool_calls"] == 1
        assert body["metrics"]["num_llm_calls"] == 2


async def test_serve_mcp_serves_the_folder_end_to_end(
    standin: TrainGateStandIn, traingate: ServerThread, tmp_path: Path
) -> None:
    port = free_port()
    argv = [
        *default_server_cmd(),
        "serve",
        "--mcp",
        "examples/mcp_calculator",
        "--port",
        str(port),
        "--store",
        "memory",
        "--log-level",
        "warning",
    ]
    with HTTPSubprocess(
        argv,
        url=f"http://127.0.0.1:{port}",
        log_path=tmp_path / "server.log",
        env={"ROLLOUT_SDK_SERVER_KEY": SERVER_KEY},
    ) as server:
        async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=30) as client:
            init = await client.post(
                "/v1/rollout/init",
                json=calculator_body("serve-mcp", traingate.url, question="What is 12 * 12?"),
            )
            assert init.status_code == 202, init.text
            assert {t["function"]["name"] for t in init.json()["tools"]} == {
                "calculate",
                "square_root",
            }
            assert await asyncio.to_thread(standin.wait_for, 1, 30)

            async def counted() -> bool:
                return bool((await client.get("/health")).json()["completed_rollouts"] == 1)

            await until(counted, what="/health counting the rollout")
    (body,) = standin.completions["serve-mcp"]
    assert body["status"] == "COMPLETED", body
    assert body["final_messages"][-1]["content"] == "The answer is 144."
    assert "serving agent loop 'mcp_agent'" in (tmp_path / "server.log").read_text()


def test_serve_mcp_refuses_a_bad_folder_and_agent_with_mcp(tmp_path: Path) -> None:
    (tmp_path / "tools").mkdir()
    no_main = run_cli("serve", "--mcp", "tools", "--port", "1", cwd=tmp_path, timeout=30)
    assert no_main.returncode == 1, no_main.stdout + no_main.stderr
    assert "No main.py found" in no_main.stderr
    assert "Traceback" not in no_main.stderr
    both = run_cli("serve", "--mcp", "tools", "--agent", "a:b", cwd=tmp_path, timeout=30)
    assert both.returncode == 2
    assert "not allowed with argument" in both.stderr
    neither = run_cli("serve", "--port", "1", cwd=tmp_path, timeout=30)
    assert neither.returncode == 2
    assert "say what to serve: --agent MODULE:ATTR, --mcp DIR, or --workflow" in neither.stderr
