"""The public facade: every v1 name resolves, and the agent author's import stays light.

Import checks run in fresh interpreters (this one has loaded everything long ago), each with
probe_import's timeout.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

import rollout_sdk
from rollout_sdk.testing.imports import AUTHOR_IMPORT, SERVER_MODULES, probe_import

#: The facade's names as of the v1 API (and before the facade turned lazy): none may go.
V1_NAMES = [
    "DEFAULT_HOST",
    "DEFAULT_MAX_METADATA_SIZE_BYTES",
    "DEFAULT_PORT",
    "AgentLoopNotFoundError",
    "AgentLoopRegistry",
    "AgentLoopValidationError",
    "CompletionUsage",
    "CompletionsChoice",
    "CompletionsRequest",
    "CompletionsResponse",
    "CompletionsResult",
    "InitResponse",
    "LLMClientProtocol",
    "MessageDict",
    "OpenAIFunctionCallSchema",
    "OpenAIFunctionParametersSchema",
    "OpenAIFunctionParsedSchema",
    "OpenAIFunctionPropertySchema",
    "OpenAIFunctionSchema",
    "OpenAIFunctionToolCall",
    "OpenAIFunctionToolSchema",
    "OsmosisLLMClient",
    "OsmosisRolloutError",
    "OsmosisServerError",
    "OsmosisTimeoutError",
    "OsmosisTransportError",
    "OsmosisValidationError",
    "RolloutAgentLoop",
    "RolloutClientSettings",
    "RolloutContext",
    "RolloutError",
    "RolloutLLMClient",
    "RolloutMetrics",
    "RolloutRequest",
    "RolloutResponse",
    "RolloutResult",
    "RolloutServerSettings",
    "RolloutSettings",
    "RolloutStatus",
    "SamplingParamsDict",
    "ServeError",
    "ToolArgumentError",
    "ToolExecutionError",
    "ToolResponse",
    "ValidationError",
    "ValidationResult",
    "configure",
    "count_messages_by_role",
    "create_app",
    "create_tool_error_result",
    "create_tool_result",
    "execute_tool_calls",
    "get_agent_loop",
    "get_max_metadata_size_bytes",
    "get_message_content",
    "get_message_role",
    "get_settings",
    "get_tool_call_info",
    "is_assistant_message",
    "is_tool_message",
    "is_user_message",
    "list_agent_loops",
    "normalize_stop",
    "parse_tool_arguments",
    "parse_tool_calls",
    "register_agent_loop",
    "reset_settings",
    "serialize_tool_result",
    "serve_agent_loop",
    "set_max_metadata_size_bytes",
    "unregister_agent_loop",
    "validate_agent_loop",
    "validate_and_report",
]


def test_all_is_the_v1_list() -> None:
    assert rollout_sdk.__all__ == V1_NAMES


def test_every_name_resolves_to_its_module_object() -> None:
    from rollout_sdk import errors
    from rollout_sdk.agent import loop, validation

    for name in rollout_sdk.__all__:
        assert getattr(rollout_sdk, name) is not None, name
    assert set(rollout_sdk.__all__) <= set(dir(rollout_sdk))
    assert rollout_sdk.OsmosisLLMClient is loop.RolloutLLMClient
    assert rollout_sdk.ValidationError is validation.ValidationError  # v1's, not pydantic's
    assert rollout_sdk.ServeError is errors.ServeError
    assert rollout_sdk.MessageDict == rollout_sdk.SamplingParamsDict == dict[str, Any]


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = rollout_sdk.no_such_name


def test_the_type_checking_imports_match_the_lazy_map() -> None:
    # What mypy sees (the imports under TYPE_CHECKING) and what runs (_EXPORTS) must agree.
    tree = ast.parse(Path(rollout_sdk.__file__).read_text(encoding="utf-8"))
    seen: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom)
                for alias in statement.names:
                    seen[alias.name] = str(statement.module)
    mapped = {n: m for m, names in rollout_sdk._EXPORTS.items() for n in names}
    assert seen == mapped
    assert sorted(mapped) == sorted(rollout_sdk.__all__)


def test_the_agent_authors_import_loads_no_server_module() -> None:
    probe = probe_import(AUTHOR_IMPORT)
    assert probe.ok, probe.error
    assert probe.loaded(SERVER_MODULES) == []
    assert probe.loaded(["pydantic_settings", "rollout_sdk.local", "rollout_sdk.http"]) == []


def test_importing_the_package_alone_loads_none_of_its_modules() -> None:
    probe = probe_import("import rollout_sdk")
    assert probe.ok, probe.error
    assert probe.loaded(["rollout_sdk"]) == ["rollout_sdk", "rollout_sdk._lazy"]
    assert probe.loaded(["pydantic"]) == []


def test_the_store_port_loads_no_sqlite_and_the_dispatch_port_no_aws() -> None:
    probe = probe_import("import rollout_sdk.store.base, rollout_sdk.dispatch.base")
    assert probe.ok, probe.error
    assert probe.loaded(["sqlite3", "boto3", "botocore"]) == []


def test_a_heavy_name_still_loads_on_use() -> None:
    probe = probe_import("from rollout_sdk import create_app")
    assert probe.ok, probe.error
    assert "fastapi" in probe.loaded(["fastapi"])


def test_a_failing_statement_reports_its_error() -> None:
    probe = probe_import("import rollout_sdk.no_such_module")
    assert not probe.ok
    assert "ModuleNotFoundError" in (probe.error or "")


def test_serve_agent_loop_imports_where_the_local_server_is_absent() -> None:
    # The Lambda artifact leaves rollout_sdk/local out; a v1 agent that imports serve_agent_loop
    # for its __main__ block must still import there, and only calling it may fail, clearly.
    probe = probe_import(
        "import sys; sys.modules['rollout_sdk.local'] = None\n"
        "from rollout_sdk import DEFAULT_PORT, RolloutAgentLoop, ServeError, serve_agent_loop\n"
        "try:\n"
        "    serve_agent_loop(RolloutAgentLoop)\n"
        "except ServeError as exc:\n"
        "    assert 'not part of this deployment' in str(exc), exc\n"
        "else:\n"
        "    raise AssertionError('serve_agent_loop ran without the local server')\n"
    )
    assert probe.ok, probe.error
    assert probe.loaded(["rollout_sdk.local.server", "uvicorn", "fastapi"]) == []
