"""rollout_sdk: run remote-rollout agent loops for RL training, locally or on AWS Lambda.

The names below are the v1 Osmosis SDK's agent-author API (``osmosis_ai.rollout``): an agent
written for it runs here after changing only its import line.

Each name is imported from its module on first use (PEP 562), so what an import costs is what
its names need: the agent author's names (the loop, its context and results, tools, validation,
the protocol's models, the errors) load pydantic and the standard library only; ``create_app``
loads FastAPI, ``serve_agent_loop`` the local server, the settings pydantic-settings;
``OsmosisLLMClient`` and ``detect_public_ip`` load the HTTP stack only when called.
``tests/unit/test_imports.py`` holds the author's import to that, and ``make bench`` times it.

The names are listed once, by module, in :mod:`rollout_sdk._exports` (``__all__`` is read from
it); type checkers read them from the imports under ``TYPE_CHECKING`` below, each re-exported by
its own ``as`` (``tests/unit/test_imports.py`` holds the two to the same names).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rollout_sdk._exports import EXPORTS as _EXPORTS
from rollout_sdk._lazy import lazy_exports

if TYPE_CHECKING:
    from rollout_sdk.agent.llm_client import OsmosisLLMClient as OsmosisLLMClient
    from rollout_sdk.agent.loop import CompletionsResult as CompletionsResult
    from rollout_sdk.agent.loop import LLMClientProtocol as LLMClientProtocol
    from rollout_sdk.agent.loop import MessageDict as MessageDict
    from rollout_sdk.agent.loop import RolloutAgentLoop as RolloutAgentLoop
    from rollout_sdk.agent.loop import RolloutContext as RolloutContext
    from rollout_sdk.agent.loop import RolloutLLMClient as RolloutLLMClient
    from rollout_sdk.agent.loop import RolloutResult as RolloutResult
    from rollout_sdk.agent.loop import SamplingParamsDict as SamplingParamsDict
    from rollout_sdk.agent.registry import AgentLoopRegistry as AgentLoopRegistry
    from rollout_sdk.agent.registry import get_agent_loop as get_agent_loop
    from rollout_sdk.agent.registry import list_agent_loops as list_agent_loops
    from rollout_sdk.agent.registry import register_agent_loop as register_agent_loop
    from rollout_sdk.agent.registry import unregister_agent_loop as unregister_agent_loop
    from rollout_sdk.agent.tools import count_messages_by_role as count_messages_by_role
    from rollout_sdk.agent.tools import create_tool_error_result as create_tool_error_result
    from rollout_sdk.agent.tools import create_tool_result as create_tool_result
    from rollout_sdk.agent.tools import execute_tool_calls as execute_tool_calls
    from rollout_sdk.agent.tools import get_message_content as get_message_content
    from rollout_sdk.agent.tools import get_message_role as get_message_role
    from rollout_sdk.agent.tools import get_tool_call_info as get_tool_call_info
    from rollout_sdk.agent.tools import is_assistant_message as is_assistant_message
    from rollout_sdk.agent.tools import is_tool_message as is_tool_message
    from rollout_sdk.agent.tools import is_user_message as is_user_message
    from rollout_sdk.agent.tools import normalize_stop as normalize_stop
    from rollout_sdk.agent.tools import parse_tool_arguments as parse_tool_arguments
    from rollout_sdk.agent.tools import parse_tool_calls as parse_tool_calls
    from rollout_sdk.agent.tools import serialize_tool_result as serialize_tool_result
    from rollout_sdk.agent.validation import ValidationError as ValidationError
    from rollout_sdk.agent.validation import ValidationResult as ValidationResult
    from rollout_sdk.agent.validation import validate_agent_loop as validate_agent_loop
    from rollout_sdk.agent.validation import validate_and_report as validate_and_report
    from rollout_sdk.errors import AgentLoopNotFoundError as AgentLoopNotFoundError
    from rollout_sdk.errors import AgentLoopValidationError as AgentLoopValidationError
    from rollout_sdk.errors import OsmosisRolloutError as OsmosisRolloutError
    from rollout_sdk.errors import OsmosisServerError as OsmosisServerError
    from rollout_sdk.errors import OsmosisTimeoutError as OsmosisTimeoutError
    from rollout_sdk.errors import OsmosisTransportError as OsmosisTransportError
    from rollout_sdk.errors import OsmosisValidationError as OsmosisValidationError
    from rollout_sdk.errors import PublicIPDetectionError as PublicIPDetectionError
    from rollout_sdk.errors import RolloutError as RolloutError
    from rollout_sdk.errors import ServeError as ServeError
    from rollout_sdk.errors import ToolArgumentError as ToolArgumentError
    from rollout_sdk.errors import ToolExecutionError as ToolExecutionError
    from rollout_sdk.http.app import create_app as create_app
    from rollout_sdk.network import detect_public_ip as detect_public_ip
    from rollout_sdk.network import is_private_ip as is_private_ip
    from rollout_sdk.network import is_valid_hostname_or_ip as is_valid_hostname_or_ip
    from rollout_sdk.network import validate_ipv4 as validate_ipv4
    from rollout_sdk.protocol import (
        DEFAULT_MAX_METADATA_SIZE_BYTES as DEFAULT_MAX_METADATA_SIZE_BYTES,
    )
    from rollout_sdk.protocol import CompletionsChoice as CompletionsChoice
    from rollout_sdk.protocol import CompletionsRequest as CompletionsRequest
    from rollout_sdk.protocol import CompletionsResponse as CompletionsResponse
    from rollout_sdk.protocol import CompletionUsage as CompletionUsage
    from rollout_sdk.protocol import InitResponse as InitResponse
    from rollout_sdk.protocol import OpenAIFunctionCallSchema as OpenAIFunctionCallSchema
    from rollout_sdk.protocol import (
        OpenAIFunctionParametersSchema as OpenAIFunctionParametersSchema,
    )
    from rollout_sdk.protocol import OpenAIFunctionParsedSchema as OpenAIFunctionParsedSchema
    from rollout_sdk.protocol import OpenAIFunctionPropertySchema as OpenAIFunctionPropertySchema
    from rollout_sdk.protocol import OpenAIFunctionSchema as OpenAIFunctionSchema
    from rollout_sdk.protocol import OpenAIFunctionToolCall as OpenAIFunctionToolCall
    from rollout_sdk.protocol import OpenAIFunctionToolSchema as OpenAIFunctionToolSchema
    from rollout_sdk.protocol import RolloutMetrics as RolloutMetrics
    from rollout_sdk.protocol import RolloutRequest as RolloutRequest
    from rollout_sdk.protocol import RolloutResponse as RolloutResponse
    from rollout_sdk.protocol import RolloutStatus as RolloutStatus
    from rollout_sdk.protocol import ToolResponse as ToolResponse
    from rollout_sdk.serving import DEFAULT_HOST as DEFAULT_HOST
    from rollout_sdk.serving import DEFAULT_PORT as DEFAULT_PORT
    from rollout_sdk.serving import serve_agent_loop as serve_agent_loop
    from rollout_sdk.settings import RolloutClientSettings as RolloutClientSettings
    from rollout_sdk.settings import RolloutServerSettings as RolloutServerSettings
    from rollout_sdk.settings import RolloutSettings as RolloutSettings
    from rollout_sdk.settings import configure as configure
    from rollout_sdk.settings import get_max_metadata_size_bytes as get_max_metadata_size_bytes
    from rollout_sdk.settings import get_settings as get_settings
    from rollout_sdk.settings import reset_settings as reset_settings
    from rollout_sdk.settings import set_max_metadata_size_bytes as set_max_metadata_size_bytes

__version__ = "0.1.0"

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = [name for names in _EXPORTS.values() for name in names]
