"""An agent loop with no user code: its tools come from a FastMCP server in a folder.

The v1 SDK's ``osmosis_ai.rollout.mcp`` under the same names: :func:`load_mcp_server` imports a
folder's ``main.py`` and returns the FastMCP server it defines, :class:`MCPAgentLoop` offers that
server's ``@mcp.tool()`` functions to the model as OpenAI function tools and runs the calls the
model makes, turn by turn, until the model answers without one or ``max_turns`` is reached.

FastMCP is the optional extra ``mcp``. This module imports it only when a folder is
loaded or a loop is built, so the kit's own imports never pay for it; without it,
:func:`load_mcp_server` raises :class:`MCPLoadError` naming the install command.

Tools are called in this process, on the server object itself (as v1 did), not over an MCP
session: an in-memory session costs milliseconds of CPU per call (the client validates every
result against the tool's output schema) where calling the tool costs microseconds. A tool that
takes FastMCP's ``Context`` gets one bound to its server; there is no client on the other side,
so what needs a session (logging to the client, progress, sampling) is not available. A
synchronous tool runs on the event loop, as in FastMCP, so a slow one holds up every rollout of
the process: write slow tools ``async``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.util
import logging
import os
import sys
import time
import types
import warnings
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from rollout_sdk.agent.loop import RolloutAgentLoop, RolloutContext, RolloutResult
from rollout_sdk.agent.tools import (
    create_tool_error_result,
    create_tool_result,
    get_tool_call_info,
    serialize_tool_result,
)
from rollout_sdk.errors import MCPLoadError
from rollout_sdk.project import install_hint, project_path
from rollout_sdk.protocol import (
    OpenAIFunctionParametersSchema,
    OpenAIFunctionPropertySchema,
    OpenAIFunctionSchema,
    OpenAIFunctionToolSchema,
    RolloutRequest,
)

if TYPE_CHECKING:
    from fastmcp.tools import Tool

__all__ = ["MCPAgentLoop", "MCPLoadError", "agent_loop_from_folder", "load_mcp_server"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: The prefix of an agent spec naming an MCP folder instead of ``module:attribute``.
SPEC_PREFIX = "mcp:"


def import_fastmcp() -> types.ModuleType:
    """``fastmcp``, imported without printing or keeping what its import does to warnings
    (FastMCP 2 turns DeprecationWarnings on for the whole process; the Authlib it imports sets
    its own warnings to "always" and then warns of its own deprecations): they are recorded and
    dropped, and the filters restored. MCPLoadError naming the extra when it is not installed."""
    try:
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("ignore")
            # Here: fastmcp is the optional mcp extra; this says which extra when it is missing.
            import fastmcp
    except ImportError as exc:
        raise MCPLoadError(
            f"MCP support needs FastMCP, which is not installed ({exc}): {install_hint('mcp')} "
            "(on Lambda: build with MCP_FOLDER set, e.g. make build-lambda "
            "MCP_FOLDER=examples/mcp_calculator; docs/aws.md)"
        ) from exc
    return fastmcp


# ---------------------------------------------------------------- loading a folder


def _forget_modules(prefix: str) -> None:
    """Drop ``prefix`` and its submodules from ``sys.modules``."""
    for name in [n for n in sys.modules if n == prefix or n.startswith(prefix + ".")]:
        del sys.modules[name]


def _forget_folder_imports(before: set[str], package: str, folder: str) -> None:
    """Drop the modules imported from ``folder`` under their own top-level names (``import
    helpers`` beside ``main.py``) since ``before``: left in ``sys.modules``, a second folder's
    ``import helpers`` would get the first folder's module."""
    inside = folder + os.sep
    for name in set(sys.modules) - before:
        if name == package or name.startswith(package + "."):
            continue
        module_file = getattr(sys.modules[name], "__file__", None) or ""
        if module_file.startswith(inside):
            del sys.modules[name]


@contextlib.contextmanager
def _first_on_path(folder: str) -> Iterator[None]:
    """``folder`` first on ``sys.path`` for the block; the path exactly as it was after."""
    saved = list(sys.path)
    sys.path[:] = [folder, *(p for p in saved if p != folder)]
    try:
        yield
    finally:
        sys.path[:] = saved


def load_mcp_server(mcp_path: str) -> Any:
    """Import ``main.py`` of the folder ``mcp_path`` and return the FastMCP server it defines.

    Importing ``main.py`` runs its ``@mcp.tool()`` registrations. It is imported as a module of
    a package private to the folder, so ``from .tools import x`` works, and the folder is first
    on ``sys.path`` while it runs, so ``import tools`` does too; neither leaks into later loads.
    The server is the first FastMCP instance among ``main.py``'s names, in ``dir()`` order.

    Raises MCPLoadError, saying what to fix, when the folder or its ``main.py`` is missing,
    FastMCP is not installed, ``main.py`` fails to import, or it defines no FastMCP instance.
    """
    folder = os.path.abspath(project_path(mcp_path))  # from here, else the project's root
    if not os.path.isdir(folder):
        raise MCPLoadError(
            f"MCP directory does not exist: {folder}. Pass the folder that holds the server's "
            "main.py (a relative path is taken from the current directory)."
        )
    main_py = os.path.join(folder, "main.py")
    if not os.path.isfile(main_py):
        raise MCPLoadError(
            f"No main.py found in MCP directory: {folder}. The MCP folder must contain a main.py "
            "that creates a FastMCP instance (mcp = FastMCP('tools')) and its @mcp.tool() functions."
        )
    fastmcp = import_fastmcp()

    package = "_rollout_sdk_mcp_" + hashlib.sha256(folder.encode()).hexdigest()[:12]
    module_name = f"{package}.main"
    _forget_modules(package)  # a reload sees the files as they are now
    parent = types.ModuleType(package)
    parent.__path__ = [folder]
    parent.__package__ = package
    parent.__file__ = os.path.join(folder, "__init__.py")
    sys.modules[package] = parent
    spec = importlib.util.spec_from_file_location(module_name, main_py)
    if spec is None or spec.loader is None:  # pragma: no cover - a .py file always has one
        _forget_modules(package)
        raise MCPLoadError(f"cannot import {main_py}: Python made no module spec for it")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    before = set(sys.modules)
    try:
        with _first_on_path(folder):
            spec.loader.exec_module(module)
    except Exception as exc:
        _forget_modules(package)
        raise MCPLoadError(f"Error importing {main_py}: {type(exc).__name__}: {exc}") from exc
    finally:
        _forget_folder_imports(before, package, folder)

    for attribute in dir(module):
        candidate = getattr(module, attribute)
        if isinstance(candidate, fastmcp.FastMCP):
            return candidate
    raise MCPLoadError(
        f"No FastMCP instance found in {main_py}. Create one at module level, e.g.:\n"
        "  from fastmcp import FastMCP\n"
        "  mcp = FastMCP('my_tools')\n"
        "and register tools on it with @mcp.tool()."
    )


# ---------------------------------------------------------------- MCP tools as OpenAI tools


def _resolve_ref(ref: str, defs: dict[str, Any]) -> dict[str, Any]:
    """The schema a local ``$ref`` (``#/$defs/Name``) points at."""
    node: Any = {"$defs": defs}
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return dict(node)


def _property(schema: dict[str, Any], defs: dict[str, Any]) -> OpenAIFunctionPropertySchema:
    """One JSON-schema property as the protocol's flat property: its type, description and
    enum, as v1 did. ``$ref`` is followed; ``Optional[X]`` (``anyOf`` with null, or a type
    list) becomes ``X``; ``integer`` becomes ``number``; arrays and objects keep their top-level
    type only. An enum of anything but strings is left out (the protocol's enums are strings)."""
    if "$ref" in schema:
        schema = _resolve_ref(str(schema["$ref"]), defs)
    if "anyOf" in schema:
        options = [s for s in schema["anyOf"] if isinstance(s, dict) and s.get("type") != "null"]
        if not options:
            return OpenAIFunctionPropertySchema(type="string")
        resolved = _property(options[0], defs)
        if resolved.description is None and isinstance(schema.get("description"), str):
            resolved.description = schema["description"]
        return resolved
    raw = schema.get("type", "string")
    if isinstance(raw, list):
        raw = next((t for t in raw if isinstance(t, str) and t != "null"), "string")
    kind = raw if isinstance(raw, str) else "string"
    enum = schema.get("enum")
    strings = isinstance(enum, list) and all(isinstance(v, str) for v in enum)
    description = schema.get("description")
    return OpenAIFunctionPropertySchema(
        type="number" if kind == "integer" else kind,
        description=description if isinstance(description, str) else None,
        enum=list(enum) if strings and enum is not None else None,
    )


def mcp_tool_schema(
    name: str, description: str, parameters: dict[str, Any]
) -> OpenAIFunctionToolSchema:
    """An MCP tool (its name, description and JSON-schema parameters) as an OpenAI function
    tool; a tool without a description gets ``"Tool: <name>"``, as in v1 (LLM APIs need one)."""
    defs = parameters.get("$defs") or {}
    properties = parameters.get("properties") or {}
    return OpenAIFunctionToolSchema(
        function=OpenAIFunctionSchema(
            name=name,
            description=description or f"Tool: {name}",
            parameters=OpenAIFunctionParametersSchema(
                properties={key: _property(value, defs) for key, value in properties.items()},
                required=list(parameters.get("required") or []),
            ),
        )
    )


def _tool_value(result: Any) -> Any:
    """What a FastMCP tool returned: its structured content (a lone ``result`` key unwrapped:
    FastMCP wraps a plain return value so), else the text of its content blocks joined by
    newlines, else ``""``."""
    structured = getattr(result, "structured_content", None)
    if structured is not None:
        if isinstance(structured, dict) and list(structured) == ["result"]:
            return structured["result"]
        return structured
    texts = [
        text
        for block in getattr(result, "content", None) or []
        if (text := getattr(block, "text", None))
    ]
    return "\n".join(texts)


def _blocking(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to its end from synchronous code, also when this thread is running an
    event loop already (then in a thread of its own, on a loop of its own)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="rollout-sdk-mcp") as pool:
        return pool.submit(asyncio.run, coroutine).result()


# ---------------------------------------------------------------- the loop


class MCPAgentLoop(RolloutAgentLoop):
    """The agent loop of an MCP server: every turn, the model sees the server's tools; each
    tool call it makes is run on the server and its result appended as a ``tool`` message.

    It stops at the first answer without tool calls (COMPLETED, ``finish_reason`` ``"stop"``)
    or after ``max_turns`` chat turns (COMPLETED, ``"max_turns"``). A tool that raises, an
    unknown tool and arguments that are not a JSON object or do not fit the tool's parameters
    become an ``Error: ...`` tool message the model can react to, not a failed rollout. No
    reward is computed: the result's ``reward`` is None.
    """

    name = "mcp_agent"

    def __init__(self, mcp_server: Any, agent_name: str = "mcp_agent") -> None:
        fastmcp = import_fastmcp()
        if not isinstance(mcp_server, fastmcp.FastMCP):
            raise TypeError(
                f"MCPAgentLoop needs a FastMCP server, got {type(mcp_server).__name__} "
                "(load one with load_mcp_server(folder))"
            )
        # v1 named the instance; the base class declares ``name`` on the class.
        self.name = agent_name  # type: ignore[misc]
        self.server = mcp_server
        tools: dict[str, Tool] = _blocking(mcp_server.get_tools())
        #: The server's enabled tools by the name the model calls them by (mounted servers'
        #: tools under their prefixed names).
        self._tools = {key: tool for key, tool in tools.items() if tool.enabled}
        self._schemas = [
            mcp_tool_schema(key, tool.description or "", dict(tool.parameters))
            for key, tool in self._tools.items()
        ]

    def get_tools(self, request: RolloutRequest) -> list[OpenAIFunctionToolSchema]:
        return list(self._schemas)

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        """Run one tool of the server; return its value (see ``_tool_value``). Raises the tool's
        error: FastMCP's ``ToolError`` and argument validation errors as they are, anything
        else as ``ToolError("Error calling tool 'name': ...")``, as FastMCP's own call does."""
        fastmcp = import_fastmcp()
        # Here: the mcp extra, loaded with the server (import_fastmcp).
        from fastmcp.exceptions import FastMCPError, NotFoundError, ToolError
        from pydantic import ValidationError

        tool = self._tools.get(name)
        if tool is None:
            raise NotFoundError(f"Unknown tool: {name}")
        try:
            async with fastmcp.Context(fastmcp=self.server):
                result = await tool.run(arguments)
        except (FastMCPError, ValidationError):
            raise
        except Exception as exc:
            raise ToolError(f"Error calling tool {name!r}: {exc}") from exc
        return _tool_value(result)

    async def _tool_content(self, name: str, arguments: dict[str, Any]) -> str:
        # One tool call's message content: what the durable worker records (a step per call).
        return serialize_tool_result(await self.call_tool(name, arguments))

    async def run(self, ctx: RolloutContext) -> RolloutResult:
        messages = list(ctx.request.messages)
        for _ in range(ctx.request.max_turns):
            turn = await ctx.chat(messages, **ctx.request.completion_params)
            messages.append(turn.message)
            if not turn.has_tool_calls:
                return ctx.complete(messages)
            for call in turn.tool_calls:
                started = time.perf_counter()
                try:
                    call_id, name, arguments = get_tool_call_info(call)
                    content = await ctx.step(
                        f"tool:{name}", partial(self._tool_content, name, arguments)
                    )
                    messages.append(create_tool_result(call_id, content))
                except Exception as exc:
                    call_id = str(call.get("id") or "unknown")
                    logger.warning("tool call %s failed: %s", call_id, exc)
                    messages.append(create_tool_error_result(call_id, str(exc)))
                finally:
                    ctx.record_tool_call(latency_ms=(time.perf_counter() - started) * 1000)
        return ctx.complete(messages, finish_reason="max_turns")


def agent_loop_from_folder(path: str | Path) -> RolloutAgentLoop:
    """The :class:`MCPAgentLoop` of the MCP folder ``path`` (what ``--mcp DIR`` serves).
    Raises MCPLoadError naming what to fix."""
    return MCPAgentLoop(load_mcp_server(str(path)))
