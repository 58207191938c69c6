"""MCPAgentLoop, load_mcp_server and MCPLoadError on real FastMCP servers, in process.

The chat turns come from the TrainGate stand-in's scripted model (or scripted replies) through
httpx's ASGI transport, so nothing opens a socket; FastMCP's own in-memory client is the
reference for what the server offers.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest

from rollout_sdk.agent.loop import RolloutContext, RolloutLLMClient
from rollout_sdk.agent.validation import validate_agent_loop
from rollout_sdk.errors import MCPLoadError, OsmosisRolloutError, RolloutError
from rollout_sdk.loader import load_agent_loop
from rollout_sdk.mcp import (
    MCPAgentLoop,
    agent_loop_from_folder,
    import_fastmcp,
    load_mcp_server,
    mcp_tool_schema,
)
from rollout_sdk.protocol import RolloutRequest, RolloutStatus
from rollout_sdk.settings import RolloutClientSettings
from rollout_sdk.testing.standin import TrainGateStandIn
from rollout_sdk.traingate.client import TrainGateClient
from testkit import REPO_ROOT
from testkit.bodies import calculator_body
from testkit.imports import AUTHOR_IMPORT, probe_import

from .support import TRAINGATE, FakeSleep, FakeTrainGate, completion

import_fastmcp()  # through the kit first, which keeps FastMCP's import-time warnings quiet

from fastmcp import Client, Context, FastMCP  # noqa: E402
from fastmcp.exceptions import ToolError  # noqa: E402

EXAMPLE = REPO_ROOT / "examples" / "mcp_calculator"


def context(transport: httpx.AsyncBaseTransport, body: dict[str, Any]) -> RolloutContext:
    """A rollout's context whose chat calls go to ``transport``."""
    request = RolloutRequest.model_validate(body)
    client = TrainGateClient(
        RolloutClientSettings(max_retries=0), transport=transport, sleep=FakeSleep()
    )
    llm = RolloutLLMClient(
        client, server_url=request.server_url, rollout_id=request.rollout_id, api_key=None
    )
    return RolloutContext(request, [], llm)


def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def scripted(*replies: dict[str, Any]) -> FakeTrainGate:
    return FakeTrainGate(chat=[httpx.Response(200, json=r) for r in replies])


def write_folder(folder: Path, main: str, **files: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "main.py").write_text(textwrap.dedent(main))
    for name, text in files.items():
        (folder / f"{name}.py").write_text(textwrap.dedent(text))
    return folder


# ---------------------------------------------------------------- tools as OpenAI schemas


async def test_the_tools_are_the_servers_own_as_openai_function_tools() -> None:
    agent = agent_loop_from_folder(EXAMPLE)
    assert isinstance(agent, MCPAgentLoop)
    assert agent.name == "mcp_agent"
    tools = agent.get_tools(RolloutRequest.model_validate(calculator_body("r", TRAINGATE)))
    # What an MCP client of the same server is offered (FastMCP's in-memory transport).
    async with Client(agent.server) as client:
        listed = {tool.name: tool for tool in await client.list_tools()}
    assert [t.function.name for t in tools] == list(listed) == ["calculate", "square_root"]
    for tool in tools:
        reference = listed[tool.function.name]
        assert tool.type == "function"
        assert tool.function.description == reference.description
        params = tool.function.parameters
        assert params.required == reference.inputSchema["required"]
        assert list(params.properties) == list(reference.inputSchema["properties"])
    calculate = tools[0].model_dump()["function"]["parameters"]["properties"]
    assert calculate == {
        "operation": {
            "type": "string",
            "description": "The operation",
            "enum": ["add", "subtract", "multiply", "divide"],
        },
        "a": {"type": "number", "description": "A number"},
        "b": {"type": "number", "description": "A number"},
    }
    assert validate_agent_loop(agent).valid


def test_schema_conversion_follows_refs_unwraps_optionals_and_names_undescribed_tools() -> None:
    schema = mcp_tool_schema(
        "paint",
        "",
        {
            "$defs": {"Color": {"enum": ["red", "blue"], "type": "string"}},
            "type": "object",
            "properties": {
                "color": {"$ref": "#/$defs/Color"},
                "count": {"type": "integer"},
                "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}], "description": "Max"},
                "tag": {"type": ["string", "null"]},
                "level": {"type": "integer", "enum": [1, 2]},
                "items": {"type": "array", "items": {"type": "string"}},
                "nothing": {"anyOf": [{"type": "null"}]},
            },
            "required": ["color"],
        },
    )
    function = schema.model_dump()["function"]
    assert function["description"] == "Tool: paint"
    assert function["parameters"] == {
        "type": "object",
        "properties": {
            "color": {"type": "string", "enum": ["red", "blue"]},
            "count": {"type": "number"},
            "limit": {"type": "number", "description": "Max"},
            "tag": {"type": "string"},
            "level": {"type": "number"},  # an enum of numbers does not fit the protocol's
            "items": {"type": "array"},
            "nothing": {"type": "string"},
        },
        "required": ["color"],
    }


def test_disabled_tools_are_not_offered_and_mounted_ones_are_by_their_prefixed_name() -> None:
    server = FastMCP("outer")
    inner = FastMCP("inner")

    @server.tool(enabled=False)
    def hidden() -> int:
        """Not offered."""
        return 1

    @inner.tool()
    def ping() -> str:
        """Answer pong."""
        return "pong"

    server.mount(inner, prefix="inner")
    agent = MCPAgentLoop(server, agent_name="mounted")
    assert agent.name == "mounted"
    assert [t.function.name for t in agent.get_tools(None)] == ["inner_ping"]  # type: ignore[arg-type]


def test_a_server_of_another_kind_is_refused() -> None:
    with pytest.raises(TypeError, match="load_mcp_server"):
        MCPAgentLoop(object())


# ---------------------------------------------------------------- the loop


async def test_a_rollout_against_the_scripted_model_calls_the_mcp_tool() -> None:
    agent = agent_loop_from_folder(EXAMPLE)
    standin = TrainGateStandIn()
    body = calculator_body("mcp-1", "http://traingate.test", question="What is 6 * 7?")
    ctx = context(httpx.ASGITransport(app=standin.app), body)
    result = await agent.run(ctx)
    assert result.status == RolloutStatus.COMPLETED
    assert result.finish_reason == "stop"
    assert result.reward is None  # v1's MCP loop computes none
    roles = [m["role"] for m in result.final_messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    tool_message = result.final_messages[3]
    assert tool_message["content"] == "42"
    assert tool_message["tool_call_id"] == result.final_messages[2]["tool_calls"][0]["id"]
    assert result.final_messages[-1]["content"] == "The answer is 42."
    assert ctx.metrics.num_llm_calls == 2
    assert ctx.metrics.num_tool_calls == 1


async def test_a_tool_that_raises_becomes_an_error_message_and_the_rollout_goes_on() -> None:
    server = FastMCP("failing")

    @server.tool()
    def explode(reason: str) -> str:
        """Always fails."""
        raise RuntimeError(f"boom: {reason}")

    @server.tool()
    def refuse() -> str:
        """Fails the way FastMCP tools report an error."""
        raise ToolError("not today")

    gate = scripted(
        completion(
            None,
            tool_calls=[
                call("c1", "explode", '{"reason": "testing"}'),
                call("c2", "refuse", "{}"),
                call("c3", "missing", "{}"),
                call("c4", "explode", "not json"),
                call("c5", "explode", '{"because": 1}'),
            ],
            finish_reason="tool_calls",
        ),
        completion("I could not do it."),
    )
    ctx = context(gate.transport, calculator_body("mcp-err", TRAINGATE))
    result = await MCPAgentLoop(server).run(ctx)
    assert result.status == RolloutStatus.COMPLETED
    tools = [m for m in result.final_messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tools] == ["c1", "c2", "c3", "c4", "c5"]
    contents = [m["content"] for m in tools]
    assert contents[0] == "Error: Error calling tool 'explode': boom: testing"
    assert contents[1] == "Error: not today"
    assert contents[2] == "Error: Unknown tool: missing"
    assert contents[3].startswith("Error: ") and "JSON" in contents[3]
    assert contents[4].startswith("Error: ") and "reason" in contents[4]
    assert ctx.metrics.num_tool_calls == 5
    # The second chat call carried every error back to the model.
    second = gate.bodies("/v1/chat/completions")[1]["messages"]
    assert [m["content"] for m in second if m["role"] == "tool"] == contents


async def test_a_model_still_calling_tools_at_max_turns_ends_with_max_turns() -> None:
    gate = scripted(
        completion(
            None,
            tool_calls=[call("c", "calculate", '{"operation": "add", "a": 1, "b": 2}')],
            finish_reason="tool_calls",
        )
    )
    ctx = context(gate.transport, calculator_body("mcp-max", TRAINGATE, max_turns=3))
    result = await agent_loop_from_folder(EXAMPLE).run(ctx)
    assert result.status == RolloutStatus.COMPLETED
    assert result.finish_reason == "max_turns"
    assert ctx.metrics.num_llm_calls == 3
    assert [m["content"] for m in result.final_messages if m["role"] == "tool"] == ["3"] * 3


async def test_structured_and_text_results_are_serialised_as_v1_did() -> None:
    server = FastMCP("values")

    @server.tool()
    def pair() -> dict[str, int]:
        """A dict."""
        return {"key": 1, "other": 2}

    @server.tool()
    def flag() -> bool:
        """A bool."""
        return True

    agent = MCPAgentLoop(server)
    assert await agent.call_tool("pair", {}) == {"key": 1, "other": 2}
    assert await agent.call_tool("flag", {}) is True


async def test_a_tool_taking_fastmcps_context_gets_one_bound_to_its_server() -> None:
    server = FastMCP("named")

    @server.tool()
    async def whoami(ctx: Context) -> str:
        """The server's name."""
        return ctx.fastmcp.name

    assert await MCPAgentLoop(server).call_tool("whoami", {}) == "named"


# ---------------------------------------------------------------- loading a folder


def test_load_errors_name_the_fix(tmp_path: Path) -> None:
    with pytest.raises(MCPLoadError, match="MCP directory does not exist") as missing:
        load_mcp_server(str(tmp_path / "nowhere"))
    assert "main.py" in str(missing.value)

    (tmp_path / "empty").mkdir()
    with pytest.raises(MCPLoadError, match=r"No main\.py found") as no_main:
        load_mcp_server(str(tmp_path / "empty"))
    assert "FastMCP" in str(no_main.value)

    write_folder(tmp_path / "noserver", "TOOLS = []\n")
    with pytest.raises(MCPLoadError, match="No FastMCP instance found") as no_server:
        load_mcp_server(str(tmp_path / "noserver"))
    assert "mcp = FastMCP(" in str(no_server.value)

    write_folder(tmp_path / "broken", "import no_such_module_anywhere\n")
    with pytest.raises(MCPLoadError, match=r"Error importing .*no_such_module_anywhere"):
        load_mcp_server(str(tmp_path / "broken"))


def test_without_fastmcp_the_error_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = write_folder(tmp_path / "tools", "from fastmcp import FastMCP\nmcp = FastMCP('x')\n")
    monkeypatch.setitem(sys.modules, "fastmcp", None)  # import fastmcp now raises ImportError
    with pytest.raises(MCPLoadError, match=r"pip install -c constraints.txt -e '\.\[mcp\]' in "):
        load_mcp_server(str(folder))


def test_mcp_load_error_is_the_kits_and_not_an_agent_api_error() -> None:
    assert issubclass(MCPLoadError, RolloutError)
    assert not issubclass(MCPLoadError, OsmosisRolloutError)


def test_relative_and_sibling_imports_work_and_nothing_leaks(tmp_path: Path) -> None:
    before_path = list(sys.path)
    first = write_folder(
        tmp_path / "first",
        """
        from fastmcp import FastMCP
        import helpers
        from .names import NAME

        mcp = FastMCP(NAME)

        @mcp.tool()
        def hello() -> str:
            '''Say hello.'''
            return helpers.greeting()
        """,
        helpers="def greeting():\n    return 'from first'\n",
        names="NAME = 'first'\n",
    )
    second = write_folder(
        tmp_path / "second",
        """
        from fastmcp import FastMCP
        import helpers

        mcp = FastMCP(helpers.NAME)
        """,
        helpers="NAME = 'second'\n",
    )
    assert load_mcp_server(str(first)).name == "first"
    assert "helpers" not in sys.modules
    assert load_mcp_server(str(second)).name == "second"  # its own helpers, not the first's
    assert sys.path == before_path


async def test_a_failed_load_leaves_no_module_behind(tmp_path: Path) -> None:
    folder = write_folder(
        tmp_path / "half",
        "import helpers\nraise RuntimeError('half way')\n",
        helpers="NAME = 'half'\n",
    )
    with pytest.raises(MCPLoadError, match="RuntimeError: half way"):
        load_mcp_server(str(folder))
    assert "helpers" not in sys.modules
    inside = str(folder) + "/"
    assert not [
        m
        for m in list(sys.modules.values())
        if (getattr(m, "__file__", None) or "").startswith(inside)
    ]
    # The folder fixed, the next load sees the files as they are now.
    write_folder(folder, "from fastmcp import FastMCP\nmcp = FastMCP('fixed')\n")
    assert load_mcp_server(str(folder)).name == "fixed"


def test_an_mcp_spec_loads_the_folders_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO_ROOT)
    agent = load_agent_loop("mcp:examples/mcp_calculator")
    assert isinstance(agent, MCPAgentLoop)
    with pytest.raises(MCPLoadError, match="does not exist"):
        load_agent_loop("mcp:examples/no_such_folder")


def test_a_relative_mcp_folder_is_found_from_outside_the_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From a folder outside the project, ``examples/mcp_calculator`` is the project's own, as
    every relative path the commands take is; one that is nowhere names the folder looked at."""
    monkeypatch.chdir(tmp_path)
    assert isinstance(load_agent_loop("mcp:examples/mcp_calculator"), MCPAgentLoop)
    with pytest.raises(MCPLoadError, match=f"does not exist: {tmp_path}/elsewhere"):
        load_agent_loop("mcp:elsewhere")


# ---------------------------------------------------------------- what imports what


def test_neither_the_kit_nor_the_module_imports_fastmcp_until_a_folder_is_loaded() -> None:
    probe = probe_import(
        f"{AUTHOR_IMPORT}\nimport rollout_sdk\nfrom rollout_sdk.mcp import MCPAgentLoop, "
        "MCPLoadError, load_mcp_server, agent_loop_from_folder"
    )
    assert probe.ok, probe.error
    assert probe.loaded(["fastmcp", "mcp"]) == []


def test_loading_a_folder_prints_no_warning_and_keeps_the_warning_filters() -> None:
    probe = probe_import(
        "import warnings; before = list(warnings.filters)\n"
        "from rollout_sdk.mcp import agent_loop_from_folder\n"
        f"agent_loop_from_folder({str(EXAMPLE)!r})\n"
        "assert warnings.filters == before, warnings.filters[:3]\n",
        flags=["-W", "default"],
    )
    assert probe.ok, probe.error
    assert "Warning" not in probe.stderr, probe.stderr


def test_the_example_and_its_schemas_are_json() -> None:
    tools = agent_loop_from_folder(EXAMPLE).get_tools(None)  # type: ignore[arg-type]
    assert json.loads(json.dumps([t.model_dump() for t in tools]))
