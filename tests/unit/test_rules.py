"""Init's input rules: the order they apply in, and the agent's tools validated once per list."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from rollout_sdk.agent.loop import RolloutAgentLoop, RolloutContext, RolloutResult
from rollout_sdk.agent.validation import ValidationError, tool_errors
from rollout_sdk.engine import rules
from rollout_sdk.engine.rules import AgentTools
from rollout_sdk.engine.service import RolloutService
from rollout_sdk.errors import AgentToolsError, PayloadTooLarge, ServerUrlRefused
from rollout_sdk.protocol import OpenAIFunctionToolSchema, RolloutRequest
from rollout_sdk.settings import load_settings
from rollout_sdk.store.memory import MemoryStore

from .support import ADD_TOOL, RecordingDispatcher, make_request


def tool(name: str, description: str = "does a thing") -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description}}


class ScriptedTools(RolloutAgentLoop):
    """``get_tools`` returns ``lists[metadata["tools"]]``, fresh (a deep copy) unless told not to."""

    name = "scripted"

    def __init__(self, lists: dict[str, list[Any]], *, fresh: bool = True) -> None:
        self.lists = lists
        self.fresh = fresh

    def get_tools(self, request: RolloutRequest) -> list[OpenAIFunctionToolSchema]:
        chosen = self.lists[request.metadata.get("tools", "a")]
        return copy.deepcopy(chosen) if self.fresh else chosen

    async def run(self, ctx: RolloutContext) -> RolloutResult:
        return ctx.complete([])


def with_tools(which: str = "a") -> RolloutRequest:
    return make_request(metadata={"tools": which})


@pytest.fixture
def checked(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The index of every tool the per-tool validator is called on, in order."""
    calls: list[int] = []
    real = tool_errors

    def counting(index: int, value: Any) -> list[ValidationError]:
        calls.append(index)
        return real(index, value)

    monkeypatch.setattr(rules, "tool_errors", counting)
    return calls


@pytest.mark.parametrize("fresh", [True, False], ids=["fresh-list-per-call", "same-list"])
def test_a_tool_list_is_validated_once_however_often_it_is_returned(
    checked: list[int], fresh: bool
) -> None:
    tools = AgentTools(ScriptedTools({"a": [tool("x"), ADD_TOOL]}, fresh=fresh))
    answers = [tools.for_request(with_tools()) for _ in range(5)]
    assert checked == [0, 1]
    assert all(a == answers[0] for a in answers)
    assert [t.function.name for t in answers[0]] == ["x", "add"]


def test_each_distinct_list_is_validated_once(checked: list[int]) -> None:
    tools = AgentTools(ScriptedTools({"a": [tool("x")], "b": [tool("x"), tool("y")]}))
    for which in "ababba":
        tools.for_request(with_tools(which))
    assert checked == [0, 0, 1]


def test_a_list_changed_in_place_is_validated_again(checked: list[int]) -> None:
    shared = [tool("x")]
    tools = AgentTools(ScriptedTools({"a": shared}, fresh=False))
    tools.for_request(with_tools())
    shared.append(tool("y"))
    assert [t.function.name for t in tools.for_request(with_tools())] == ["x", "y"]
    shared[0]["function"]["description"] = ""
    with pytest.raises(AgentToolsError, match="MISSING_FUNCTION_DESCRIPTION"):
        tools.for_request(with_tools())
    assert checked == [0, 0, 1, 0]


def test_an_invalid_list_is_refused_on_every_request(checked: list[int]) -> None:
    tools = AgentTools(ScriptedTools({"a": [tool("x", description="")]}))
    for _ in range(3):
        with pytest.raises(AgentToolsError, match=r"tools\[0\]"):
            tools.for_request(with_tools())
    assert checked == [0, 0, 0]


def test_lists_a_json_dump_would_merge_are_told_apart() -> None:
    def with_property(key: object) -> dict[str, Any]:
        listed = tool("x")
        listed["function"]["parameters"] = {"properties": {key: {"type": "string"}}}
        return listed

    # json.dumps writes the key 1 as "1"; the protocol refuses a property named by a number.
    tools = AgentTools(ScriptedTools({"a": [with_property("1")], "b": [with_property(1)]}))
    assert tools.for_request(with_tools("a"))[0].function.parameters.properties
    with pytest.raises(AgentToolsError, match="not a valid tool"):
        tools.for_request(with_tools("b"))


def test_the_cache_is_bounded_and_drops_the_least_recently_used(checked: list[int]) -> None:
    lists = {name: [tool(name)] for name in "abc"}
    tools = AgentTools(ScriptedTools(lists), max_lists=2)
    for which in "abac":  # c pushes out b, the least recently used
        tools.for_request(with_tools(which))
    assert len(checked) == 3
    tools.for_request(with_tools("a"))
    assert len(checked) == 3
    tools.for_request(with_tools("b"))
    assert len(checked) == 4


def test_a_stored_list_is_not_the_agent_s_own_objects() -> None:
    model = ADD_TOOL.model_copy(deep=True)
    agent = ScriptedTools({"a": [model]}, fresh=False)
    tools = AgentTools(agent)
    tools.for_request(with_tools())
    model.function.name = "renamed"  # the agent changes its own model after the first init
    agent.lists["a"] = [ADD_TOOL.model_copy(deep=True)]  # ... and returns the original content
    assert [t.function.name for t in tools.for_request(with_tools())] == ["add"]


async def test_init_checks_metadata_then_server_url_then_tools() -> None:
    class Raising(ScriptedTools):
        def get_tools(self, request: RolloutRequest) -> list[OpenAIFunctionToolSchema]:
            raise RuntimeError("no catalogue")

    store = MemoryStore()
    settings = load_settings(
        max_metadata_size_bytes=1024, kit={"allowed_server_hosts": "allowed.test"}
    )
    service = RolloutService(Raising({}), store, RecordingDispatcher(), settings)
    big = {"blob": "x" * 2048}
    with pytest.raises(PayloadTooLarge):
        await service.init(make_request(metadata=big))
    with pytest.raises(ServerUrlRefused):
        await service.init(make_request(metadata={}))
    with pytest.raises(AgentToolsError, match="no catalogue"):
        await service.init(make_request(metadata={}, server_url="http://allowed.test"))
    assert len(store) == 0


async def test_inits_validate_the_agent_s_tools_once(checked: list[int]) -> None:
    service = RolloutService(
        ScriptedTools({"a": [tool("x"), tool("y")]}),
        MemoryStore(),
        RecordingDispatcher(),
        load_settings(),
    )
    for n in range(3):
        answer = await service.init(make_request(rollout_id=f"r{n}", metadata={"tools": "a"}))
        assert [t.function.name for t in answer.tools] == ["x", "y"]
    assert checked == [0, 1]
