"""rollout_sdk: run remote-rollout agent loops for RL training, locally or on AWS Lambda.

The names below are the v1 Osmosis SDK's agent-author API (``osmosis_ai.rollout``): an agent
written for it runs here after changing only its import line.
"""

from __future__ import annotations

from typing import Any, Protocol

from rollout_sdk.agent.loop import (
    CompletionsResult,
    RolloutAgentLoop,
    RolloutContext,
    RolloutLLMClient,
    RolloutResult,
)
from rollout_sdk.agent.registry import (
    AgentLoopRegistry,
    get_agent_loop,
    list_agent_loops,
    register_agent_loop,
    unregister_agent_loop,
)
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
from rollout_sdk.agent.validation import (
    ValidationError,
    ValidationResult,
    validate_agent_loop,
    validate_and_report,
)
from rollout_sdk.errors import (
    AgentLoopNotFoundError,
    AgentLoopValidationError,
    OsmosisRolloutError,
    OsmosisServerError,
    OsmosisTimeoutError,
    OsmosisTransportError,
    OsmosisValidationError,
    RolloutError,
    ServeError,
    ToolArgumentError,
    ToolExecutionError,
)
from rollout_sdk.http.app import create_app
from rollout_sdk.local.server import DEFAULT_HOST, DEFAULT_PORT, serve_agent_loop
from rollout_sdk.protocol import (
    DEFAULT_MAX_METADATA_SIZE_BYTES,
    CompletionsChoice,
    CompletionsRequest,
    CompletionsResponse,
    CompletionUsage,
    InitResponse,
    OpenAIFunctionCallSchema,
    OpenAIFunctionParametersSchema,
    OpenAIFunctionParsedSchema,
    OpenAIFunctionPropertySchema,
    OpenAIFunctionSchema,
    OpenAIFunctionToolCall,
    OpenAIFunctionToolSchema,
    RolloutMetrics,
    RolloutRequest,
    RolloutResponse,
    RolloutStatus,
    ToolResponse,
)
from rollout_sdk.settings import (
    RolloutClientSettings,
    RolloutServerSettings,
    RolloutSettings,
    configure,
    get_max_metadata_size_bytes,
    get_settings,
    reset_settings,
    set_max_metadata_size_bytes,
)

__version__ = "0.1.0"

MessageDict = dict[str, Any]
SamplingParamsDict = dict[str, Any]

#: The v1 name of the per-rollout LLM client.
OsmosisLLMClient = RolloutLLMClient


class LLMClientProtocol(Protocol):
    """What ``ctx.llm`` offers (v1 API)."""

    async def chat_completions(
        self, messages: list[MessageDict], **params: Any
    ) -> CompletionsResult: ...


__all__ = [
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
