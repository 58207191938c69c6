"""The public names of the package, by the module that defines each.

The one list of them: ``rollout_sdk/__init__.py`` exports them lazily from it (and its ``__all__``
is read from it), and a module that lists its own public names (``rollout_sdk.agent.tools``)
reads them from here. Data only: it imports nothing, so anything may read it.
"""

from __future__ import annotations

#: The module that defines each public name.
EXPORTS: dict[str, tuple[str, ...]] = {
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
