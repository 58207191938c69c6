"""Tool-call and message helpers of the v1 agent API (protocol.md section 6)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

from rollout_sdk._exports import EXPORTS
from rollout_sdk.errors import ToolArgumentError
from rollout_sdk.protocol import Message
from rollout_sdk.protocol import normalize_stop as normalize_stop  # noqa: PLC0414 - re-exported

#: Its public names, as the package lists them (:mod:`rollout_sdk._exports`).
__all__ = list(EXPORTS[__name__])

T = TypeVar("T")


def create_tool_result(tool_call_id: str, content: str) -> Message:
    """A ``role: tool`` message answering one tool call."""
    return {"role": "tool", "content": content, "tool_call_id": tool_call_id}


def create_tool_error_result(tool_call_id: str, error_message: str) -> Message:
    """A ``role: tool`` message reporting a failed tool call as ``Error: <message>``."""
    return create_tool_result(tool_call_id, f"Error: {error_message}")


def serialize_tool_result(result: Any) -> str:
    """Render a tool's return value as message content.

    Booleans as JSON (``true``), numbers through ``str``, strings as they are, anything else as JSON.
    """
    if isinstance(result, bool):
        return json.dumps(result)
    if isinstance(result, int | float):
        return str(result)
    if isinstance(result, str):
        return result
    return json.dumps(result, default=str)


def parse_tool_arguments(arguments: str | dict[str, Any] | None) -> dict[str, Any]:
    """Parse a tool call's ``arguments`` (a JSON string or a dict) into a dict.

    Raises ToolArgumentError when it is not a JSON object.
    """
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, dict):
        return arguments
    if not isinstance(arguments, str):
        raise ToolArgumentError(
            f"tool arguments must be a JSON object string, got {type(arguments).__name__}"
        )
    try:
        parsed = json.loads(arguments)
    except json.JSONDecodeError as exc:
        raise ToolArgumentError(f"tool arguments are not valid JSON: {exc}") from exc
    if not isinstance(parsed, dict):
        raise ToolArgumentError(
            f"tool arguments must be a JSON object, got {type(parsed).__name__}"
        )
    return parsed


def _field(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def get_tool_call_info(tool_call: Any) -> tuple[str, str, dict[str, Any]]:
    """Return ``(id, function name, parsed arguments)`` of a tool call (dict or model).

    The id defaults to ``"unknown"`` and the name to ``""``. Raises ToolArgumentError, carrying the
    call's id and name, when the arguments are not a JSON object.
    """
    call_id = _field(tool_call, "id") or "unknown"
    function = _field(tool_call, "function") or {}
    name = _field(function, "name") or ""
    try:
        args = parse_tool_arguments(_field(function, "arguments"))
    except ToolArgumentError as exc:
        raise ToolArgumentError(str(exc), tool_call_id=call_id, tool_name=name) from exc
    return call_id, name, args


async def execute_tool_calls(
    tool_calls: Sequence[Any], executor: Callable[[Any], Awaitable[T]]
) -> list[T]:
    """Run ``executor`` on every call concurrently; results come back in the calls' order.

    An exception from any executor propagates. On the durable worker the whole batch is one
    step (``tools``): its results (JSON-serializable there, as tool messages are) are recorded,
    and a replay returns them without running the calls again.
    """
    # Imported here: an agent's import need not pay for asyncio (about 35 ms), and by the time a
    # coroutine runs its event loop has loaded it.
    import asyncio

    from rollout_sdk.agent.journal import current_journal

    async def run_all() -> list[T]:
        return list(await asyncio.gather(*(executor(call) for call in tool_calls)))

    journal = current_journal.get()
    if journal is None:
        return await run_all()
    # One step for the batch: its calls run concurrently, so they cannot be steps of their own
    # (a replay must meet the steps in the order they were recorded).
    return list(await journal.step("tools", run_all))


def parse_tool_calls(assistant_message: Message | None) -> list[dict[str, Any]]:
    """The ``tool_calls`` of an assistant message, or an empty list."""
    if not assistant_message:
        return []
    calls = assistant_message.get("tool_calls")
    return list(calls) if calls else []


def get_message_content(message: Message | None) -> str:
    """A message's text content (``""`` when absent); list content parts are joined."""
    if not message:
        return ""
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, list):
        return "".join(
            str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in content
        )
    return str(content)


def get_message_role(message: Message | None) -> str:
    """A message's role, or ``""``."""
    return str((message or {}).get("role") or "")


def is_assistant_message(message: Message | None) -> bool:
    """Whether the message is from the assistant."""
    return get_message_role(message) == "assistant"


def is_tool_message(message: Message | None) -> bool:
    """Whether the message is a tool result."""
    return get_message_role(message) == "tool"


def is_user_message(message: Message | None) -> bool:
    """Whether the message is from the user."""
    return get_message_role(message) == "user"


def count_messages_by_role(messages: Iterable[Message]) -> dict[str, int]:
    """How many messages each role has."""
    counts: dict[str, int] = {}
    for message in messages:
        role = get_message_role(message)
        counts[role] = counts.get(role, 0) + 1
    return counts
