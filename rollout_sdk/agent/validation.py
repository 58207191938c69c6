"""``validate_agent_loop``: everything wrong with an agent loop, found before it serves.

Error and warning codes are the v1 SDK's. Kit rule: a tool without a description
(``MISSING_FUNCTION_DESCRIPTION``) or of a type other than ``function`` (``UNKNOWN_TOOL_TYPE``) is an
*error*: the reference only warned, and init then failed with a 500.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

from rollout_sdk.errors import AgentLoopValidationError
from rollout_sdk.protocol import OpenAIFunctionToolSchema, RolloutRequest


@dataclass(frozen=True)
class ValidationError:
    """One problem: a stable ``code``, a message that says how to fix it, and where."""

    code: str
    message: str
    field: str | None = None
    details: dict[str, Any] | None = None

    def __str__(self) -> str:
        where = f"{self.field}: " if self.field else ""
        return f"[{self.code}] {where}{self.message}"


@dataclass
class ValidationResult:
    """Outcome of :func:`validate_agent_loop`; truthy when valid."""

    valid: bool
    errors: list[ValidationError] = field(default_factory=list)
    warnings: list[ValidationError] = field(default_factory=list)
    agent_name: str | None = None
    tool_count: int = 0

    def __bool__(self) -> bool:
        return self.valid

    def raise_if_invalid(self) -> None:
        """Raise AgentLoopValidationError listing every error, when there is one."""
        if not self.valid:
            listing = "; ".join(str(e) for e in self.errors)
            raise AgentLoopValidationError(
                f"agent loop {self.agent_name or '?'} is invalid: {listing}", errors=self.errors
            )


def sample_request() -> RolloutRequest:
    """The request ``get_tools`` is called with when no request is given."""
    return RolloutRequest(
        rollout_id="validation-test-rollout",
        server_url="http://localhost:8080",
        messages=[{"role": "user", "content": "Hello"}],
        completion_params={"temperature": 1.0, "max_tokens": 512},
        metadata={"_validation": True},
    )


def check_tool(
    index: int, tool: Any, errors: list[ValidationError], warnings: list[ValidationError]
) -> str | None:
    """Append what is wrong with ``tools[index]`` to ``errors`` and ``warnings``; its function's
    name when that is valid, else None."""
    where = f"tools[{index}]"
    if isinstance(tool, OpenAIFunctionToolSchema):
        tool = tool.model_dump()
    if not isinstance(tool, dict):
        errors.append(
            ValidationError(
                "INVALID_TOOL_TYPE",
                f"a tool must be an OpenAIFunctionToolSchema or a dict, got {type(tool).__name__}",
                where,
            )
        )
        return None
    _check_tool_type(where, tool, errors)
    function = _function_of(where, tool, errors)
    if function is None:
        return None
    name = _function_name(where, function, errors)
    description = function.get("description")
    if not isinstance(description, str) or not description.strip():
        errors.append(
            ValidationError(
                "MISSING_FUNCTION_DESCRIPTION",
                f"tool {name or index!s} has no description; LLM APIs require one "
                "(OpenAIFunctionSchema(description=...))",
                f"{where}.function.description",
            )
        )
    _check_parameters(where, function, errors, warnings)
    return name


def _check_tool_type(where: str, tool: dict[str, Any], errors: list[ValidationError]) -> None:
    if "type" not in tool:
        errors.append(ValidationError("MISSING_TOOL_TYPE", 'add "type": "function"', where))
    elif tool["type"] != "function":
        # Kit rule: an error, where the reference warned; init cannot serve such a tool.
        errors.append(
            ValidationError(
                "UNKNOWN_TOOL_TYPE",
                f"type {tool['type']!r} is not 'function' (the only tool type of the protocol)",
                f"{where}.type",
            )
        )


def _function_of(
    where: str, tool: dict[str, Any], errors: list[ValidationError]
) -> dict[str, Any] | None:
    """The tool's ``function`` object, or None (and the error) when it has none."""
    if "function" not in tool:
        errors.append(ValidationError("MISSING_FUNCTION", 'add a "function" object', where))
        return None
    function = tool["function"]
    if not isinstance(function, dict):
        errors.append(
            ValidationError(
                "INVALID_FUNCTION_TYPE", "function must be an object", f"{where}.function"
            )
        )
        return None
    return function


def _function_name(
    where: str, function: dict[str, Any], errors: list[ValidationError]
) -> str | None:
    """The function's name, or None (and the error) when it is missing or not a name."""
    name = function.get("name")
    if "name" not in function:
        errors.append(
            ValidationError(
                "MISSING_FUNCTION_NAME",
                "every tool function needs a name",
                f"{where}.function.name",
            )
        )
        return None
    if not isinstance(name, str) or not name.strip():
        errors.append(
            ValidationError(
                "INVALID_FUNCTION_NAME",
                "the function name must be a non-empty string",
                f"{where}.function.name",
            )
        )
        return None
    return name


def _check_parameters(
    where: str,
    function: dict[str, Any],
    errors: list[ValidationError],
    warnings: list[ValidationError],
) -> None:
    parameters = function.get("parameters")
    if parameters is None:
        return
    if not isinstance(parameters, dict):
        errors.append(
            ValidationError(
                "INVALID_PARAMETERS_TYPE",
                "parameters must be an object",
                f"{where}.function.parameters",
            )
        )
    elif parameters.get("type", "object") != "object":
        warnings.append(
            ValidationError(
                "PARAMETERS_TYPE_NOT_OBJECT",
                f"parameters type is {parameters.get('type')!r}",
                f"{where}.function.parameters.type",
            )
        )


def tool_errors(index: int, tool: Any) -> list[ValidationError]:
    """The errors :func:`check_tool` finds in ``tools[index]`` (its warnings left out)."""
    errors: list[ValidationError] = []
    check_tool(index, tool, errors, [])
    return errors


def validate_agent_loop(
    agent_loop: Any, *, request: RolloutRequest | None = None
) -> ValidationResult:
    """Check an agent loop's name, tools and ``run``; collect every problem. Never raises."""
    errors: list[ValidationError] = []
    warnings: list[ValidationError] = []
    agent_name = _check_name(agent_loop, errors)
    tools = _tools_of(agent_loop, request, errors)
    if tools is not None:
        _check_tools(tools, errors, warnings)
    _check_run(agent_loop, errors)
    return ValidationResult(
        valid=not errors,
        errors=errors,
        warnings=warnings,
        agent_name=agent_name,
        tool_count=0 if tools is None else len(tools),
    )


def _check_name(agent_loop: Any, errors: list[ValidationError]) -> str | None:
    """The agent loop's name when it is a string (blank included), else None."""
    name = getattr(agent_loop, "name", None)
    if not hasattr(agent_loop, "name"):
        errors.append(
            ValidationError("MISSING_NAME", 'define a class attribute name = "..."', "name")
        )
    elif not isinstance(name, str):
        errors.append(
            ValidationError(
                "INVALID_NAME_TYPE", f"name must be a string, got {type(name).__name__}", "name"
            )
        )
    elif not name.strip():
        errors.append(ValidationError("EMPTY_NAME", "name must not be blank", "name"))
    return name if isinstance(name, str) else None


def _tools_of(
    agent_loop: Any, request: RolloutRequest | None, errors: list[ValidationError]
) -> list[Any] | None:
    """What ``get_tools`` returns for ``request`` (or :func:`sample_request`) when that is a
    list; else None, with the error."""
    get_tools = getattr(agent_loop, "get_tools", None)
    if not callable(get_tools):
        errors.append(
            ValidationError(
                "GET_TOOLS_EXCEPTION",
                "the agent loop has no callable get_tools(request)",
                "get_tools",
            )
        )
        return None
    try:
        tools = get_tools(request or sample_request())
    except Exception as exc:
        errors.append(
            ValidationError(
                "GET_TOOLS_EXCEPTION",
                f"get_tools raised {type(exc).__name__}: {exc}",
                "get_tools",
                {"exception_type": type(exc).__name__, "exception_message": str(exc)},
            )
        )
        return None
    if tools is None:
        errors.append(
            ValidationError(
                "GET_TOOLS_RETURNS_NONE",
                "get_tools must return a list (may be empty)",
                "get_tools",
            )
        )
        return None
    if not isinstance(tools, list):
        errors.append(
            ValidationError(
                "GET_TOOLS_INVALID_TYPE",
                f"get_tools must return a list, got {type(tools).__name__}",
                "get_tools",
            )
        )
        return None
    return tools


def _check_tools(
    tools: list[Any], errors: list[ValidationError], warnings: list[ValidationError]
) -> None:
    """Check each tool (:func:`check_tool`), and that no two share a name."""
    seen: dict[str, int] = {}
    for index, tool in enumerate(tools):
        tool_name = check_tool(index, tool, errors, warnings)
        if tool_name is None:
            continue
        if tool_name in seen:
            errors.append(
                ValidationError(
                    "DUPLICATE_TOOL_NAME",
                    f"tool name {tool_name!r} is also used by tools[{seen[tool_name]}]",
                    f"tools[{index}].function.name",
                )
            )
        seen.setdefault(tool_name, index)


def _check_run(agent_loop: Any, errors: list[ValidationError]) -> None:
    run = getattr(agent_loop, "run", None)
    if run is None:
        errors.append(
            ValidationError("MISSING_RUN_METHOD", "define async def run(self, ctx)", "run")
        )
    elif not callable(run):
        errors.append(ValidationError("RUN_NOT_CALLABLE", "run must be a method", "run"))
    elif not inspect.iscoroutinefunction(run):
        errors.append(
            ValidationError(
                "RUN_NOT_ASYNC", "run must be declared 'async def run(self, ctx)'", "run"
            )
        )


def validate_and_report(agent_loop: Any, *, verbose: bool = False) -> ValidationResult:
    """Validate and print a human-readable report; return the result."""
    result = validate_agent_loop(agent_loop)
    print(format_report(result, verbose=verbose))
    return result


def format_report(result: ValidationResult, *, verbose: bool = False) -> str:
    """The report ``rollout-sdk validate`` prints."""
    head = f"agent loop {result.agent_name or '?'}: {result.tool_count} tool(s)"
    lines = [f"{'valid' if result.valid else 'INVALID'}: {head}"]
    for error in result.errors:
        lines.append(f"  error   {error}")
    for warning in result.warnings:
        lines.append(f"  warning {warning}")
    if verbose and result.valid and not result.warnings:
        lines.append("  no warnings")
    return "\n".join(lines)
