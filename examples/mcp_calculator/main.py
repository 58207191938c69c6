"""The calculator's tools as a FastMCP server, for the kit's MCPAgentLoop (no agent code).

``rollout-sdk serve --mcp examples/mcp_calculator`` offers these ``@mcp.tool()`` functions to
the model; their type hints and docstrings become the tools' OpenAI schemas. Needs the
``rollout-sdk[mcp]`` extra.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from fastmcp import FastMCP
from fastmcp.exceptions import ToolError
from pydantic import Field

mcp = FastMCP("calculator")

Number = Annotated[float, Field(description="A number")]


@mcp.tool()
def calculate(
    operation: Annotated[
        Literal["add", "subtract", "multiply", "divide"], Field(description="The operation")
    ],
    a: Number,
    b: Number,
) -> float:
    """Apply one arithmetic operation to two numbers."""
    if operation == "divide" and b == 0:
        raise ToolError("division by zero")
    result = {"add": a + b, "subtract": a - b, "multiply": a * b, "divide": a / b}[operation]
    return int(result) if result.is_integer() else round(result, 6)


@mcp.tool()
def square_root(x: Number) -> float:
    """The square root of a non-negative number."""
    if x < 0:
        raise ToolError("square root of a negative number")
    return math.sqrt(x)
