"""validate_agent_loop: every error and warning code, and raise_if_invalid."""

from __future__ import annotations

from typing import Any

import pytest

from rollout_sdk.agent.validation import format_report, validate_agent_loop
from rollout_sdk.errors import AgentLoopValidationError
from rollout_sdk.protocol import OpenAIFunctionSchema, OpenAIFunctionToolSchema, RolloutRequest

from .support import ADD_TOOL, EchoAgent, make_request


def tool(name: Any = "t", description: Any = "does t", **function: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"description": description, **function}
    if name is not None:
        spec["name"] = name
    return {"type": "function", "function": spec}


class Loop:
    """A duck-typed agent loop: validate_agent_loop accepts any object (the v1 behaviour)."""

    name: Any = "loop"

    def __init__(self, tools: Any = None, **attrs: Any) -> None:
        self._tools = [tool()] if tools is None else tools
        for key, value in attrs.items():
            setattr(self, key, value)

    def get_tools(self, request: RolloutRequest) -> Any:
        return self._tools

    async def run(self, ctx: Any) -> Any:
        return None


class NoName:
    def get_tools(self, request: RolloutRequest) -> list[Any]:
        return []

    async def run(self, ctx: Any) -> Any:
        return None


class RaisingTools(Loop):
    def get_tools(self, request: RolloutRequest) -> Any:
        raise KeyError("catalogue")


class SyncRun(Loop):
    def run(self, ctx: Any) -> Any:  # sync on purpose: RUN_NOT_ASYNC
        return None


class NoRun:
    name = "norun"

    def get_tools(self, request: RolloutRequest) -> list[Any]:
        return []


class NoGetTools:
    name = "nogettools"

    async def run(self, ctx: Any) -> Any:
        return None


def codes(agent: Any) -> list[str]:
    return [e.code for e in validate_agent_loop(agent).errors]


def warning_codes(agent: Any) -> list[str]:
    return [w.code for w in validate_agent_loop(agent).warnings]


def test_a_valid_agent_loop() -> None:
    result = validate_agent_loop(EchoAgent())
    assert result.valid is True
    assert bool(result) is True
    assert result.errors == []
    assert result.warnings == []
    assert result.agent_name == "echo"
    assert result.tool_count == 1
    result.raise_if_invalid()  # does not raise


def test_tools_given_as_dicts_are_valid() -> None:
    assert validate_agent_loop(Loop([tool("a"), tool("b", parameters={"type": "object"})])).valid


@pytest.mark.parametrize(
    ("agent", "code"),
    [
        (NoName(), "MISSING_NAME"),
        (Loop(name=""), "EMPTY_NAME"),
        (Loop(name="   "), "EMPTY_NAME"),
        (Loop(name=42), "INVALID_NAME_TYPE"),
        (Loop(name=None), "INVALID_NAME_TYPE"),
        (RaisingTools(), "GET_TOOLS_EXCEPTION"),
        (NoGetTools(), "GET_TOOLS_EXCEPTION"),
        (Loop(get_tools=None), "GET_TOOLS_EXCEPTION"),
        (Loop(get_tools=lambda request: None), "GET_TOOLS_RETURNS_NONE"),
        (Loop(tools=(tool(),)), "GET_TOOLS_INVALID_TYPE"),
        (Loop(tools={"t": tool()}), "GET_TOOLS_INVALID_TYPE"),
        (Loop([tool(name=None)]), "MISSING_FUNCTION_NAME"),
        (Loop([tool(name="")]), "INVALID_FUNCTION_NAME"),
        (Loop([tool(name=5)]), "INVALID_FUNCTION_NAME"),
        (Loop([tool(description=None)]), "MISSING_FUNCTION_DESCRIPTION"),
        (Loop([tool(description="  ")]), "MISSING_FUNCTION_DESCRIPTION"),
        (Loop([tool("dup"), tool("other"), tool("dup")]), "DUPLICATE_TOOL_NAME"),
        (SyncRun(), "RUN_NOT_ASYNC"),
        (NoRun(), "MISSING_RUN_METHOD"),
        (Loop(run=5), "RUN_NOT_CALLABLE"),
        (Loop(["not a tool"]), "INVALID_TOOL_TYPE"),
        (Loop([{"function": {"name": "t", "description": "d"}}]), "MISSING_TOOL_TYPE"),
        (Loop([{"type": "function"}]), "MISSING_FUNCTION"),
        (Loop([{"type": "function", "function": "t"}]), "INVALID_FUNCTION_TYPE"),
        (Loop([tool(parameters=[1])]), "INVALID_PARAMETERS_TYPE"),
    ],
)
def test_error_code(agent: Any, code: str) -> None:
    result = validate_agent_loop(agent)
    assert result.valid is False
    assert bool(result) is False
    assert code in [e.code for e in result.errors]
    with pytest.raises(AgentLoopValidationError) as caught:
        result.raise_if_invalid()
    assert code in str(caught.value)
    assert caught.value.errors == result.errors


def test_missing_description_on_a_schema_tool_is_an_error_not_a_warning() -> None:
    undocumented = OpenAIFunctionToolSchema(function=OpenAIFunctionSchema(name="silent"))
    result = validate_agent_loop(Loop([ADD_TOOL, undocumented]))
    assert [e.code for e in result.errors] == ["MISSING_FUNCTION_DESCRIPTION"]
    assert "MISSING_FUNCTION_DESCRIPTION" not in [w.code for w in result.warnings]
    assert result.errors[0].field == "tools[1].function.description"
    assert "silent" in result.errors[0].message


def test_get_tools_exception_details() -> None:
    (error,) = validate_agent_loop(RaisingTools()).errors
    assert error.code == "GET_TOOLS_EXCEPTION"
    assert "KeyError" in error.message
    assert error.details == {"exception_type": "KeyError", "exception_message": "'catalogue'"}


def test_duplicate_tool_name_points_at_both() -> None:
    (error,) = validate_agent_loop(Loop([tool("dup"), tool("x"), tool("dup")])).errors
    assert error.field == "tools[2].function.name"
    assert "tools[0]" in error.message


def test_a_tool_type_other_than_function_is_an_error() -> None:
    # Kit rule: the reference only warned, and init then failed with a 500.
    result = validate_agent_loop(
        Loop([{"type": "retrieval", "function": {"name": "t", "description": "d"}}])
    )
    assert result.valid is False
    (error,) = result.errors
    assert (error.code, error.field) == ("UNKNOWN_TOOL_TYPE", "tools[0].type")


@pytest.mark.parametrize(
    ("tools", "code"),
    [
        ([tool(parameters={"type": "array"})], "PARAMETERS_TYPE_NOT_OBJECT"),
    ],
)
def test_warning_codes_do_not_invalidate(tools: list[Any], code: str) -> None:
    result = validate_agent_loop(Loop(tools))
    assert result.valid is True
    assert [w.code for w in result.warnings] == [code]


def test_every_problem_is_collected() -> None:
    class Everything:
        name = ""

        def get_tools(self, request: RolloutRequest) -> list[Any]:
            return [tool("u", description=None), tool("t")]

        def run(self, ctx: Any) -> None:
            return None

    assert codes(Everything()) == ["EMPTY_NAME", "MISSING_FUNCTION_DESCRIPTION", "RUN_NOT_ASYNC"]


def test_tool_count_and_agent_name_on_invalid_loop() -> None:
    result = validate_agent_loop(Loop([tool("a"), tool("b", description=None)]))
    assert result.tool_count == 2
    assert result.agent_name == "loop"
    assert validate_agent_loop(Loop(name=3)).agent_name is None


def test_get_tools_receives_the_given_request() -> None:
    seen: list[RolloutRequest] = []

    def get_tools(request: RolloutRequest) -> list[Any]:
        seen.append(request)
        return []

    request = make_request(rollout_id="given")
    validate_agent_loop(Loop(get_tools=get_tools), request=request)
    validate_agent_loop(Loop(get_tools=get_tools))
    assert seen[0] is request
    assert seen[1].rollout_id == "validation-test-rollout"


def test_raise_if_invalid_lists_every_error() -> None:
    with pytest.raises(AgentLoopValidationError) as caught:
        validate_agent_loop(Loop([tool(name=None)], name="")).raise_if_invalid()
    message = str(caught.value)
    assert "EMPTY_NAME" in message
    assert "MISSING_FUNCTION_NAME" in message
    assert len(caught.value.errors) == 2


def test_format_report() -> None:
    good = format_report(validate_agent_loop(EchoAgent()), verbose=True)
    assert good.startswith("valid: agent loop echo: 1 tool(s)")
    assert "no warnings" in good
    bad = format_report(validate_agent_loop(Loop([tool("t", parameters={"type": "array"}), 1])))
    assert bad.startswith("INVALID")
    assert "error   [INVALID_TOOL_TYPE]" in bad
    assert "warning [PARAMETERS_TYPE_NOT_OBJECT]" in bad
    assert warning_codes(Loop([tool(parameters={"type": "array"})])) == [
        "PARAMETERS_TYPE_NOT_OBJECT"
    ]
