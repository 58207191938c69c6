"""The calculator example's tools and reward."""

from __future__ import annotations

import pytest

from examples.calculator.agent import CalculatorAgent, reward, run_tool
from rollout_sdk import ToolExecutionError, validate_agent_loop


@pytest.mark.parametrize(
    ("name", "args", "expected"),
    [
        ("calculate", {"operation": "add", "a": 2, "b": 3}, 5),
        ("calculate", {"operation": "subtract", "a": 2, "b": 3}, -1),
        ("calculate", {"operation": "multiply", "a": "4", "b": 2.5}, 10),
        ("calculate", {"operation": "divide", "a": 9, "b": 3}, 3),
        ("square_root", {"x": 16}, 4),
    ],
)
def test_tools(name: str, args: dict[str, object], expected: float) -> None:
    assert run_tool(name, args) == expected


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("calculate", {"operation": "divide", "a": 1, "b": 0}, "division by zero"),
        ("calculate", {"operation": "modulo", "a": 1, "b": 2}, "unknown operation"),
        ("calculate", {"operation": "add", "a": True, "b": 2}, "'a' must be a number"),
        ("calculate", {"operation": "add", "a": "x", "b": 2}, "'a' must be a number"),
        ("square_root", {"x": -1}, "negative"),
        ("cube_root", {"x": 8}, "unknown tool"),
    ],
)
def test_tool_errors_name_the_problem(name: str, args: dict[str, object], message: str) -> None:
    with pytest.raises(ToolExecutionError, match=message):
        run_tool(name, args)


@pytest.mark.parametrize(
    ("answer", "truth", "expected"),
    [
        ("The answer is 42.", "42", 1.0),
        ("The answer is 41.", "42", 0.0),
        ("It is 2.5", 2.5, 1.0),
        ("no number here", "1", 0.0),
        (None, "1", 0.0),
        ("The answer is 7", None, None),
    ],
)
def test_reward(answer: str | None, truth: object, expected: float | None) -> None:
    assert reward(answer, truth) == expected


def test_the_example_is_a_valid_agent_loop() -> None:
    result = validate_agent_loop(CalculatorAgent())
    assert result.valid, result.errors
    assert result.tool_count == 2
