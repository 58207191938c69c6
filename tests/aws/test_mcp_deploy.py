"""An MCP folder deployed: the template's McpFolder parameter sets every function's AGENT_LOOP to
``mcp:FOLDER``, and handler.py, so configured, serves the folder's MCPAgentLoop end to end (the
API function's init and the worker's rollout against the TrainGate stand-in, on the emulator)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rollout_sdk.local.invoke import invoke, load_event
from rollout_sdk.mcp import MCPAgentLoop
from rollout_sdk.testing.standin import TrainGateStandIn

from .conftest import ROOT
from .permissions import stack_named_by_ids as stack
from .test_permissions import translate

FOLDER = "examples/mcp_calculator"


@pytest.fixture(scope="module")
def translated() -> Any:
    return translate()


def variables_of(translated: Any, **parameters: str) -> dict[str, dict[str, Any]]:
    """Every function's environment variables under ``parameters``."""
    resolved = stack(translated, **parameters)
    return {
        logical: resolved.value(resource["Properties"]["Environment"]["Variables"])
        for logical, resource in resolved.resources.items()
        if resource["Type"] == "AWS::Lambda::Function"
    }


def versions_of(translated: Any, **parameters: str) -> dict[str, str]:
    """Every function version's description under ``parameters``."""
    resolved = stack(translated, **parameters)
    return {
        logical: str(resolved.value(resource["Properties"].get("Description", "")))
        for logical, resource in resolved.resources.items()
        if resource["Type"] == "AWS::Lambda::Version"
    }


def test_mcp_folder_names_the_agent_of_every_function(translated: Any) -> None:
    agent = "examples.calculator.agent:agent_loop"
    default = variables_of(translated, AgentLoop=agent, McpFolder="")
    served = variables_of(translated, AgentLoop=agent, McpFolder=FOLDER)
    assert default and set(default) == set(served)
    assert {env["AGENT_LOOP"] for env in default.values()} == {agent}
    assert {env["AGENT_LOOP"] for env in served.values()} == {f"mcp:{FOLDER}"}
    # A deploy that only sets McpFolder publishes new versions (the alias moves to them).
    before = versions_of(translated, AgentLoop=agent, McpFolder="")
    after = versions_of(translated, AgentLoop=agent, McpFolder=FOLDER)
    assert before and all(before[v] != after[v] for v in before)


@pytest.mark.parametrize("handler", [{"AGENT_LOOP": f"mcp:{FOLDER}"}], indirect=True)
def test_the_functions_serve_the_mcp_folder(
    handler: Any, standin: tuple[TrainGateStandIn, str]
) -> None:
    assert isinstance(handler.runtime.agent_loop, MCPAgentLoop)
    traingate, url = standin
    event = load_event(ROOT / "events" / "init.json")
    body = json.loads(event["body"])
    body.update(
        server_url=url,
        rollout_id="mcp-on-lambda",
        messages=[{"role": "user", "content": "What is 21 + 21?"}],
    )
    event["body"] = json.dumps(body)
    accepted = invoke(handler, "ApiFunction", event, timeout_seconds=29)
    assert accepted.result["statusCode"] == 202
    tools = json.loads(accepted.result["body"])["tools"]
    assert [t["function"]["name"] for t in tools] == ["calculate", "square_root"]
    ran = invoke(handler, "WorkerFunction", accepted.dispatched[0], timeout_seconds=900)
    assert ran.result["state"] == "DELIVERED"
    (final,) = traingate.completions["mcp-on-lambda"]
    assert final["status"] == "COMPLETED"
    assert [m["role"] for m in final["final_messages"]][-2:] == ["tool", "assistant"]
    assert final["final_messages"][-1]["content"] == "The answer is 42."
