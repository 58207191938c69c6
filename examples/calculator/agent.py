"""Calculator agent: the model answers arithmetic questions with the help of calculator tools.

Reward: 1.0 when the last number in the final answer equals ``metadata.ground_truth``, else 0.0
(no reward when the dataset row has no ground truth).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from typing import Any

from rollout_sdk import (
    OpenAIFunctionParametersSchema,
    OpenAIFunctionPropertySchema,
    OpenAIFunctionSchema,
    OpenAIFunctionToolSchema,
    RolloutAgentLoop,
    RolloutContext,
    RolloutRequest,
    RolloutResult,
    ToolExecutionError,
    create_tool_error_result,
    create_tool_result,
    execute_tool_calls,
    get_tool_call_info,
    serialize_tool_result,
)

_NUMBER = OpenAIFunctionPropertySchema(type="number", description="A number")

OPERATIONS: dict[str, Callable[[float, float], float]] = {
    "add": lambda a, b: a + b,
    "subtract": lambda a, b: a - b,
    "multiply": lambda a, b: a * b,
    "divide": lambda a, b: a / b,
}


def _tool(
    name: str, description: str, **properties: OpenAIFunctionPropertySchema
) -> OpenAIFunctionToolSchema:
    return OpenAIFunctionToolSchema(
        function=OpenAIFunctionSchema(
            name=name,
            description=description,
            parameters=OpenAIFunctionParametersSchema(
                properties=properties, required=list(properties)
            ),
        )
    )


TOOLS = [
    _tool(
        "calculate",
        "Apply one arithmetic operation to two numbers.",
        operation=OpenAIFunctionPropertySchema(
            type="string", description="The operation", enum=list(OPERATIONS)
        ),
        a=_NUMBER,
        b=_NUMBER,
    ),
    _tool("square_root", "The square root of a non-negative number.", x=_NUMBER),
]


def _number(args: dict[str, Any], key: str) -> float:
    value = args.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ToolExecutionError(f"argument {key!r} must be a number")
    try:
        return float(value)
    except ValueError as exc:
        raise ToolExecutionError(f"argument {key!r} must be a number, got {value!r}") from exc


def run_tool(name: str, args: dict[str, Any]) -> float:
    """Evaluate one calculator tool call; ToolExecutionError on bad input."""
    if name == "calculate":
        operation = args.get("operation")
        if operation not in OPERATIONS:
            raise ToolExecutionError(
                f"unknown operation {operation!r}; use one of {list(OPERATIONS)}"
            )
        a, b = _number(args, "a"), _number(args, "b")
        if operation == "divide" and b == 0:
            raise ToolExecutionError("division by zero")
        return OPERATIONS[operation](a, b)
    if name == "square_root":
        x = _number(args, "x")
        if x < 0:
            raise ToolExecutionError("square root of a negative number")
        return math.sqrt(x)
    raise ToolExecutionError(f"unknown tool {name!r}")


def _tidy(value: float) -> int | float:
    return int(value) if float(value).is_integer() else round(value, 6)


_LAST_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def reward(answer: str | None, ground_truth: Any) -> float | None:
    """1.0 when the answer's last number equals the ground truth, 0.0 otherwise."""
    if ground_truth is None:
        return None
    numbers = _LAST_NUMBER.findall(answer or "")
    if not numbers:
        return 0.0
    try:
        return 1.0 if math.isclose(float(numbers[-1]), float(ground_truth), abs_tol=1e-6) else 0.0
    except ValueError:
        return 0.0


class CalculatorAgent(RolloutAgentLoop):
    """Asks the model, runs the calculator calls it makes, stops at the first plain answer."""

    name = "calculator"

    def get_tools(self, request: RolloutRequest) -> list[OpenAIFunctionToolSchema]:
        return TOOLS

    async def run(self, ctx: RolloutContext) -> RolloutResult:
        messages = list(ctx.request.messages)
        for _ in range(ctx.request.max_turns):
            turn = await ctx.chat(messages, **ctx.request.completion_params)
            messages.append(turn.message)
            if not turn.has_tool_calls:
                score = reward(turn.content, ctx.request.metadata.get("ground_truth"))
                return ctx.complete(messages, finish_reason=turn.finish_reason, reward=score)

            async def execute(call: dict[str, Any]) -> dict[str, Any]:
                started = time.perf_counter()
                call_id, name, args = get_tool_call_info(call)
                try:
                    result = create_tool_result(
                        call_id, serialize_tool_result(_tidy(run_tool(name, args)))
                    )
                except ToolExecutionError as exc:
                    result = create_tool_error_result(call_id, str(exc))
                ctx.record_tool_call(latency_ms=(time.perf_counter() - started) * 1000)
                return result

            messages.extend(await execute_tool_calls(turn.tool_calls, execute))
        return ctx.complete(messages, finish_reason="max_turns", reward=0.0)


agent_loop = CalculatorAgent()
