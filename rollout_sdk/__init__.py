"""rollout_sdk: run remote-rollout agent loops for RL training, locally or on AWS Lambda.

The names below are the v1 Osmosis SDK's agent-author API (``osmosis_ai.rollout``): an agent
written for it runs here after changing only its import line.

Each name is imported from its module on first use (PEP 562), so what an import costs is what
its names need: the agent author's names (the loop, its context and results, tools, validation,
the protocol's models, the errors) load pydantic and the standard library only; ``create_app``
loads FastAPI, ``serve_agent_loop`` the local server, the settings pydantic-settings;
``OsmosisLLMClient`` and ``detect_public_ip`` load the HTTP stack only when called.
``tests/unit/test_imports.py`` holds the author's import to that, and ``make bench`` times it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rollout_sdk._lazy import lazy_exports

if TYPE_CHECKING:
    from rollout_sdk.agent.llm_client import OsmosisLLMClient
    from rollout_sdk.agent.loop import (
        CompletionsResult,
        LLMClientProtocol,
        MessageDict,
        RolloutAgentLoop,
        RolloutContext,
        RolloutLLMClient,
        RolloutResult,
        SamplingParamsDict,
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
        PublicIPDetectionError,
        RolloutError,
        ServeError,
        ToolArgumentError,
        ToolExecutionError,
    )
    from rollout_sdk.http.app import (
        create_app,
    )
    from rollout_sdk.network import (
        detect_public_ip,
        is_private_ip,
        is_valid_hostname_or_ip,
        validate_ipv4,
    )
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
    from rollout_sdk.serving import (
        DEFAULT_HOST,
        DEFAULT_PORT,
        serve_agent_loop,
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

#: The module that defines each public name.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "rollout_sdk.agent.loop": (
        "CompletionsResult",
        "LLMClientProtocol",
        "MessageDict",
        "RolloutAgentLoop",
        "RolloutContext",
        "RolloutLLMClient",
        "RolloutResult",
        "SamplingParamsDict",
    ),
    "rollout_sdk.agent.llm_client": ("OsmosisLLMClient",),
    "rollout_sdk.agent.registry": (
        "AgentLoopRegistry",
        "get_agent_loop",
        "list_agent_loops",
        "register_agent_loop",
        "unregister_agent_loop",
    ),
    "rollout_sdk.agent.tools": (
        "count_messages_by_role",
        "create_tool_error_result",
        "create_tool_result",
        "execute_tool_calls",
        "get_message_content",
        "get_message_role",
        "get_tool_call_info",
        "is_assistant_message",
        "is_tool_message",
        "is_user_message",
        "normalize_stop",
        "parse_tool_arguments",
        "parse_tool_calls",
        "serialize_tool_result",
    ),
    "rollout_sdk.agent.validation": (
        "ValidationError",
        "ValidationResult",
        "validate_agent_loop",
        "validate_and_report",
    ),
    "rollout_sdk.errors": (
        "AgentLoopNotFoundError",
        "AgentLoopValidationError",
        "OsmosisRolloutError",
        "OsmosisServerError",
        "OsmosisTimeoutError",
        "OsmosisTransportError",
        "OsmosisValidationError",
        "PublicIPDetectionError",
        "RolloutError",
        "ServeError",
        "ToolArgumentError",
        "ToolExecutionError",
    ),
    "rollout_sdk.network": (
        "detect_public_ip",
        "is_private_ip",
        "is_valid_hostname_or_ip",
        "validate_ipv4",
    ),
    "rollout_sdk.protocol": (
        "CompletionUsage",
        "CompletionsChoice",
        "CompletionsRequest",
        "CompletionsResponse",
        "DEFAULT_MAX_METADATA_SIZE_BYTES",
        "InitResponse",
        "OpenAIFunctionCallSchema",
        "OpenAIFunctionParametersSchema",
        "OpenAIFunctionParsedSchema",
        "OpenAIFunctionPropertySchema",
        "OpenAIFunctionSchema",
        "OpenAIFunctionToolCall",
        "OpenAIFunctionToolSchema",
        "RolloutMetrics",
        "RolloutRequest",
        "RolloutResponse",
        "RolloutStatus",
        "ToolResponse",
    ),
    "rollout_sdk.settings": (
        "RolloutClientSettings",
        "RolloutServerSettings",
        "RolloutSettings",
        "configure",
        "get_max_metadata_size_bytes",
        "get_settings",
        "reset_settings",
        "set_max_metadata_size_bytes",
    ),
    "rollout_sdk.http.app": ("create_app",),
    "rollout_sdk.serving": ("DEFAULT_HOST", "DEFAULT_PORT", "serve_agent_loop"),
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

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
    "PublicIPDetectionError",
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
    "detect_public_ip",
    "execute_tool_calls",
    "get_agent_loop",
    "get_max_metadata_size_bytes",
    "get_message_content",
    "get_message_role",
    "get_settings",
    "get_tool_call_info",
    "is_assistant_message",
    "is_private_ip",
    "is_tool_message",
    "is_user_message",
    "is_valid_hostname_or_ip",
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
    "validate_ipv4",
]
