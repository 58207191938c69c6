"""Tool-call and message helpers (every name in ``rollout_sdk.agent.tools.__all__``)."""

from __future__ import annotations

import asyncio
import inspect
import json
import types
from typing import Any

import pytest

from rollout_sdk.agent import tools
from rollout_sdk.agent.tools import (
    count_messages_by_role,
    create_tool_error_result,
    create_tool_result,
    execute_tool_calls,
    get_message_content,
    get_message_role,
    get_tool_call_info,
    is_assistant_message,
    is_tool_message,
    is_user_message,
    normalize_stop,
    parse_tool_arguments,
    parse_tool_calls,
    serialize_tool_result,
)
from rollout_sdk.errors import ToolArgumentError, ToolExecutionError
from rollout_sdk.protocol import OpenAIFunctionCallSchema, OpenAIFunctionToolCall


def _names_read(code: types.CodeType) -> set[str]:
    """The global and attribute names ``code`` reads, its nested functions' included."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names_read(const)
    return names


def test_every_exported_helper_is_covered_here() -> None:
    # A helper added to __all__ must get tests in this module: some test here must call it.
    tests = [f for n, f in globals().items() if n.startswith("test_") and inspect.isfunction(f)]
    read = set().union(*(_names_read(test.__code__) for test in tests))
    assert sorted(set(tools.__all__) - read) == []


def call(call_id: str | None, name: str | None, arguments: Any) -> dict[str, Any]:
    function: dict[str, Any] = {"arguments": arguments}
    if name is not None:
        function["name"] = name
    result: dict[str, Any] = {"type": "function", "function": function}
    if call_id is not None:
        result["id"] = call_id
    return result


def test_create_tool_result() -> None:
    assert create_tool_result("call-1", "42") == {
        "role": "tool",
        "content": "42",
        "tool_call_id": "call-1",
    }


def test_create_tool_error_result() -> None:
    assert create_tool_error_result("call-2", "division by zero") == {
        "role": "tool",
        "content": "Error: division by zero",
        "tool_call_id": "call-2",
    }


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, "true"),
        (False, "false"),
        (3, "3"),
        (2.5, "2.5"),
        ("plain text", "plain text"),
        ("", ""),
        ({"a": [1, 2]}, '{"a": [1, 2]}'),
        ([1, "x"], '[1, "x"]'),
        (None, "null"),
    ],
)
def test_serialize_tool_result(value: Any, expected: str) -> None:
    assert serialize_tool_result(value) == expected


def test_serialize_tool_result_falls_back_to_str_for_unknown_objects() -> None:
    assert json.loads(serialize_tool_result({"when": frozenset([3])})) == {"when": "frozenset({3})"}


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"a": 1, "b": "x"}', {"a": 1, "b": "x"}),
        ({"already": "parsed"}, {"already": "parsed"}),
        ("", {}),
        (None, {}),
        ("{}", {}),
    ],
)
def test_parse_tool_arguments(arguments: Any, expected: dict[str, Any]) -> None:
    assert parse_tool_arguments(arguments) == expected


@pytest.mark.parametrize(
    ("arguments", "match"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ('"text"', "JSON object"),
        ("3", "JSON object"),
        (5, "JSON object string"),
    ],
)
def test_parse_tool_arguments_rejects_non_objects(arguments: Any, match: str) -> None:
    with pytest.raises(ToolArgumentError, match=match):
        parse_tool_arguments(arguments)


def test_get_tool_call_info_from_dict_and_model() -> None:
    as_dict = call("c1", "add", '{"a": 1, "b": 2}')
    assert get_tool_call_info(as_dict) == ("c1", "add", {"a": 1, "b": 2})
    model = OpenAIFunctionToolCall(
        id="c2", function=OpenAIFunctionCallSchema(name="mul", arguments={"x": 3})
    )
    assert get_tool_call_info(model) == ("c2", "mul", {"x": 3})


def test_get_tool_call_info_defaults() -> None:
    assert get_tool_call_info(call(None, None, None)) == ("unknown", "", {})
    assert get_tool_call_info({}) == ("unknown", "", {})


def test_get_tool_call_info_bad_arguments_carry_id_and_name() -> None:
    with pytest.raises(ToolArgumentError) as caught:
        get_tool_call_info(call("call-9", "divide", "[1, 2]"))
    assert caught.value.tool_call_id == "call-9"
    assert caught.value.tool_name == "divide"
    assert isinstance(caught.value, ToolExecutionError)


def test_get_tool_call_info_bad_arguments_without_id_say_unknown() -> None:
    with pytest.raises(ToolArgumentError) as caught:
        get_tool_call_info(call(None, "f", "nope"))
    assert caught.value.tool_call_id == "unknown"
    assert caught.value.tool_name == "f"


async def test_execute_tool_calls_keeps_order_when_finishing_out_of_order() -> None:
    calls = [call(f"c{i}", "wait", json.dumps({"delay": d})) for i, d in enumerate([0.03, 0, 0.01])]
    finished: list[str] = []

    async def executor(tool_call: dict[str, Any]) -> str:
        call_id, _, args = get_tool_call_info(tool_call)
        await asyncio.sleep(args["delay"])
        finished.append(call_id)
        return call_id

    assert await execute_tool_calls(calls, executor) == ["c0", "c1", "c2"]
    assert finished == ["c1", "c2", "c0"]


async def test_execute_tool_calls_runs_concurrently() -> None:
    # Each executor waits until all have started: only possible if they run at the same time.
    calls = [call(f"c{i}", "t", "{}") for i in range(5)]
    started = 0
    everyone_in = asyncio.Event()

    async def executor(tool_call: dict[str, Any]) -> int:
        nonlocal started
        started += 1
        if started == len(calls):
            everyone_in.set()
        await everyone_in.wait()
        return started

    results = await asyncio.wait_for(execute_tool_calls(calls, executor), timeout=2)
    assert results == [5] * 5


async def test_execute_tool_calls_propagates_exceptions() -> None:
    async def executor(tool_call: dict[str, Any]) -> str:
        if tool_call["id"] == "bad":
            raise ToolExecutionError("boom", tool_call_id="bad", tool_name="t")
        return "ok"

    with pytest.raises(ToolExecutionError, match="boom"):
        await execute_tool_calls([call("good", "t", "{}"), call("bad", "t", "{}")], executor)


async def test_execute_tool_calls_with_no_calls() -> None:
    async def executor(tool_call: Any) -> str:
        raise AssertionError("never called")

    assert await execute_tool_calls([], executor) == []


def test_parse_tool_calls() -> None:
    calls = [call("c1", "f", "{}")]
    assert parse_tool_calls({"role": "assistant", "tool_calls": calls}) == calls
    assert parse_tool_calls({"role": "assistant", "tool_calls": None}) == []
    assert parse_tool_calls({"role": "assistant", "content": "x"}) == []
    assert parse_tool_calls(None) == []
    assert parse_tool_calls({}) == []


@pytest.mark.parametrize(
    ("stop", "expected"),
    [(None, None), ("END", ["END"]), (["a", "b"], ["a", "b"]), (("x",), ["x"]), ([1], ["1"])],
)
def test_normalize_stop(stop: Any, expected: list[str] | None) -> None:
    assert normalize_stop(stop) == expected


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ({"role": "user", "content": "hello"}, "hello"),
        ({"role": "assistant", "content": None}, ""),
        ({"role": "assistant"}, ""),
        (None, ""),
        ({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}, "ab"),
        ({"content": ["x", {"type": "image_url"}, "y"]}, "xy"),
        ({"content": 7}, "7"),
    ],
)
def test_get_message_content(message: dict[str, Any] | None, expected: str) -> None:
    assert get_message_content(message) == expected


def test_get_message_role_and_predicates() -> None:
    user = {"role": "user", "content": "q"}
    assistant = {"role": "assistant", "content": "a"}
    tool = {"role": "tool", "content": "r", "tool_call_id": "c"}
    assert [get_message_role(m) for m in (user, assistant, tool, {}, None)] == [
        "user",
        "assistant",
        "tool",
        "",
        "",
    ]
    assert [is_user_message(m) for m in (user, assistant, tool, None)] == [
        True,
        False,
        False,
        False,
    ]
    assert [is_assistant_message(m) for m in (user, assistant, tool, None)] == [
        False,
        True,
        False,
        False,
    ]
    assert [is_tool_message(m) for m in (user, assistant, tool, None)] == [
        False,
        False,
        True,
        False,
    ]


def test_count_messages_by_role() -> None:
    messages = [
        {"role": "system", "content": ""},
        {"role": "user", "content": ""},
        {"role": "assistant", "content": ""},
        {"role": "tool", "content": ""},
        {"role": "tool", "content": ""},
        {"content": "no role"},
    ]
    assert count_messages_by_role(messages) == {
        "system": 1,
        "user": 1,
        "assistant": 1,
        "tool": 2,
        "": 1,
    }
    assert count_messages_by_role(iter([])) == {}
