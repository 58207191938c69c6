"""The v1 surface: every name of v1's ``osmosis_ai.rollout.__all__`` is exported, and each public
signature is v1's, or differs in a way listed below with its reason (docs/porting.md says the
same).

Every v1 fact below was read from v1's public source, release 0.2.17: repository
Osmosis-AI/osmosis-sdk-python, commit a0d32c768f61432a526cb263e596e0a6ce788878 (the parent of
7e991087, which removed the v1 API), files under ``osmosis_ai/rollout/``; the file of each entry
is named beside it. The v1 package is not installed: these tables are the reference.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, NamedTuple

import pydantic
import pydantic_settings
import pytest

import rollout_sdk

PO, PK, VP, KW, VK = "positional-only", "positional-or-keyword", "*args", "keyword-only", "**kwargs"
REQ = "required"
#: A class that keeps ``Exception.__init__`` (any positional arguments, the first the message).
EXCEPTION_INIT = "Exception.__init__"


class Factory(NamedTuple):
    """A default made fresh for each instance; ``value`` is what it makes."""

    value: object


# osmosis_ai/rollout/__init__.py
V1_ALL = (
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
)

# Functions, and classes' __init__ (a dataclass's: its fields) and public methods: (name, kind,
# default) per parameter, self left out.
V1_SIGNATURES: dict[str, Any] = {
    "AgentLoopNotFoundError": (("name", PK, REQ), ("available", PK, REQ)),  # core/exceptions.py
    "AgentLoopRegistry": (),  # registry.py
    "AgentLoopRegistry.register": (("loop", PK, REQ),),
    "AgentLoopRegistry.unregister": (("name", PK, REQ),),
    "AgentLoopRegistry.get": (("name", PK, REQ),),
    "AgentLoopRegistry.list_names": (),
    "AgentLoopRegistry.clear": (),
    "AgentLoopValidationError": (("message", PK, REQ), ("errors", PK, None)),  # validator.py
    "CompletionsResult": (
        ("message", PK, REQ),
        ("token_ids", PK, REQ),
        ("logprobs", PK, REQ),
        ("usage", PK, REQ),
        ("finish_reason", PK, REQ),
    ),  # client.py (dataclass fields)
    "LLMClientProtocol.chat_completions": (("messages", PK, REQ), ("kwargs", VK, REQ)),
    "LLMClientProtocol.get_metrics": (),
    "OpenAIFunctionCallSchema.from_openai_function_parsed_schema": (("parsed_schema", PK, REQ),),
    "OsmosisLLMClient": (
        ("server_url", PK, REQ),
        ("rollout_id", PK, REQ),
        ("api_key", PK, None),
        ("timeout_seconds", PK, None),
        ("max_retries", PK, None),
        ("complete_rollout_retries", PK, None),
        ("settings", PK, None),
    ),  # client.py
    "OsmosisLLMClient.close": (),
    "OsmosisLLMClient.chat_completions": (
        ("messages", PK, REQ),
        ("temperature", PK, 1.0),
        ("top_p", PK, 1.0),
        ("max_tokens", PK, 512),
        ("stop", PK, None),
        ("logprobs", PK, True),
        ("kwargs", VK, REQ),
    ),
    "OsmosisLLMClient.complete_rollout": (
        ("status", PK, REQ),
        ("final_messages", PK, REQ),
        ("finish_reason", PK, "stop"),
        ("error_message", PK, None),
        ("metrics", PK, None),
        ("reward", PK, None),
    ),
    "OsmosisLLMClient.get_metrics": (),
    "OsmosisRolloutError": EXCEPTION_INIT,  # core/exceptions.py
    "OsmosisServerError": (("message", PK, REQ), ("status_code", PK, REQ)),  # core/exceptions.py
    "OsmosisTimeoutError": EXCEPTION_INIT,  # core/exceptions.py
    "OsmosisTransportError": EXCEPTION_INIT,  # core/exceptions.py
    "OsmosisValidationError": (
        ("message", PK, REQ),
        ("status_code", PK, REQ),
    ),  # core/exceptions.py
    "PublicIPDetectionError": EXCEPTION_INIT,  # network.py
    "RolloutAgentLoop.get_tools": (("request", PK, REQ),),
    "RolloutAgentLoop.run": (("ctx", PK, REQ),),
    "RolloutAgentLoop.get_default_tools": (),
    "RolloutContext": (
        ("request", PK, REQ),
        ("tools", PK, REQ),
        ("llm", PK, REQ),
        ("_start_time", PK, 0.0),
        ("_tool_latency_ms", PK, 0.0),
        ("_num_tool_calls", PK, 0),
        ("_debug_dir", PK, None),
    ),  # core/base.py (dataclass fields)
    "RolloutContext.chat": (("messages", PK, REQ), ("kwargs", VK, REQ)),
    "RolloutContext.complete": (
        ("final_messages", PK, REQ),
        ("finish_reason", PK, "stop"),
        ("reward", PK, None),
    ),
    "RolloutContext.error": (("error_message", PK, REQ), ("final_messages", PK, None)),
    "RolloutContext.record_tool_call": (("latency_ms", PK, 0.0),),
    "RolloutContext.log_event": (("event_type", PK, REQ), ("data", VK, REQ)),
    "RolloutResult": (
        ("status", PK, REQ),
        ("final_messages", PK, REQ),
        ("finish_reason", PK, REQ),
        ("error_message", PK, None),
        ("metrics", PK, None),
        ("reward", PK, None),
    ),  # core/base.py (dataclass fields)
    "ServeError": EXCEPTION_INIT,  # server/serve.py
    "ToolArgumentError": (
        ("message", PK, REQ),
        ("tool_call_id", PK, ""),
        ("tool_name", PK, ""),
    ),  # core/exceptions.py (ToolExecutionError's)
    "ToolExecutionError": (
        ("message", PK, REQ),
        ("tool_call_id", PK, ""),
        ("tool_name", PK, ""),
    ),  # core/exceptions.py
    "ToolResponse.is_empty": (),
    "ToolResponse.is_text_only": (),
    "ValidationError": (
        ("code", PK, REQ),
        ("message", PK, REQ),
        ("field", PK, None),
        ("details", PK, None),
    ),  # validator.py (dataclass fields)
    "ValidationResult": (
        ("valid", PK, REQ),
        ("errors", PK, Factory([])),
        ("warnings", PK, Factory([])),
        ("agent_name", PK, None),
        ("tool_count", PK, 0),
    ),  # validator.py (dataclass fields)
    "ValidationResult.raise_if_invalid": (),
    "configure": (("settings", PK, REQ),),  # config/settings.py
    "count_messages_by_role": (("messages", PK, REQ),),  # utils.py
    "create_app": (
        ("agent_loop", PK, REQ),
        ("max_concurrent", PK, None),
        ("record_ttl_seconds", PK, None),
        ("settings", PK, None),
        ("credentials", PK, None),
        ("server_host", PK, None),
        ("server_port", PK, None),
        ("api_key", PK, None),
        ("debug_dir", PK, None),
        ("on_startup", PK, None),
        ("on_shutdown", PK, None),
    ),  # server/app.py
    "create_tool_error_result": (("tool_call_id", PK, REQ), ("error_message", PK, REQ)),  # tools.py
    "create_tool_result": (("tool_call_id", PK, REQ), ("content", PK, REQ)),  # tools.py
    "detect_public_ip": (),  # network.py
    "execute_tool_calls": (("tool_calls", PK, REQ), ("executor", PK, REQ)),  # tools.py
    "get_agent_loop": (("name", PK, REQ),),  # registry.py
    "get_max_metadata_size_bytes": (),  # core/schemas.py
    "get_message_content": (("message", PK, REQ),),  # utils.py
    "get_message_role": (("message", PK, REQ),),  # utils.py
    "get_settings": (),  # config/settings.py
    "get_tool_call_info": (("tool_call", PK, REQ),),  # tools.py
    "is_assistant_message": (("message", PK, REQ),),  # utils.py
    "is_private_ip": (("ip", PK, REQ),),  # network.py
    "is_tool_message": (("message", PK, REQ),),  # utils.py
    "is_user_message": (("message", PK, REQ),),  # utils.py
    "is_valid_hostname_or_ip": (("value", PK, REQ),),  # network.py
    "list_agent_loops": (),  # registry.py
    "normalize_stop": (("stop", PK, REQ),),  # utils.py
    "parse_tool_arguments": (("arguments", PK, REQ),),  # tools.py
    "parse_tool_calls": (("assistant_message", PK, REQ),),  # utils.py
    "register_agent_loop": (("loop", PK, REQ),),  # registry.py
    "reset_settings": (),  # config/settings.py
    "serialize_tool_result": (("result", PK, REQ),),  # tools.py
    "serve_agent_loop": (
        ("agent_loop", PK, REQ),
        ("host", KW, "0.0.0.0"),
        ("port", KW, 9000),
        ("validate", KW, True),
        ("log_level", KW, "info"),
        ("reload", KW, False),
        ("settings", KW, None),
        ("skip_register", KW, False),
        ("api_key", KW, None),
        ("local_debug", KW, False),
        ("debug_dir", KW, None),
    ),  # server/serve.py
    "set_max_metadata_size_bytes": (("size_bytes", PK, REQ),),  # core/schemas.py
    "unregister_agent_loop": (("name", PK, REQ),),  # registry.py
    "validate_agent_loop": (("agent_loop", PK, REQ), ("request", KW, None)),  # validator.py
    "validate_and_report": (("agent_loop", PK, REQ), ("verbose", KW, False)),  # server/serve.py
    "validate_ipv4": (("ip", PK, REQ),),  # network.py
}
#: Coroutine functions.
V1_ASYNC = {
    "LLMClientProtocol.chat_completions",
    "OsmosisLLMClient.close",
    "OsmosisLLMClient.chat_completions",
    "OsmosisLLMClient.complete_rollout",
    "RolloutAgentLoop.run",
    "RolloutContext.chat",
    "execute_tool_calls",
}
#: Pydantic models and settings: each field's default (REQ when required).
V1_FIELDS: dict[str, dict[str, Any]] = {
    "CompletionUsage": {
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "total_tokens": 0,
    },  # core/schemas.py
    "CompletionsChoice": {"index": 0, "message": REQ, "finish_reason": "stop"},  # core/schemas.py
    "CompletionsRequest": {
        "model": "default",
        "messages": REQ,
        "rollout_id": REQ,
        "temperature": 1.0,
        "top_p": 1.0,
        "max_tokens": 512,
        "stop": None,
        "logprobs": True,
    },  # core/schemas.py
    "CompletionsResponse": {
        "id": REQ,
        "object": "chat.completion",
        "created": REQ,
        "model": "default",
        "choices": REQ,
        "usage": None,
        "token_ids": None,
        "logprobs": None,
        "prompt_token_ids": None,
    },  # core/schemas.py
    "InitResponse": {"rollout_id": REQ, "tools": Factory([])},  # core/schemas.py
    "OpenAIFunctionCallSchema": {"name": REQ, "arguments": REQ},  # core/schemas.py
    "OpenAIFunctionParametersSchema": {
        "type": REQ,
        "properties": REQ,
        "required": REQ,
    },  # core/schemas.py
    "OpenAIFunctionParsedSchema": {"name": REQ, "arguments": REQ},  # core/schemas.py
    "OpenAIFunctionPropertySchema": {
        "type": REQ,
        "description": None,
        "enum": None,
    },  # core/schemas.py
    "OpenAIFunctionSchema": {
        "name": REQ,
        "description": REQ,
        "parameters": Factory(
            ("OpenAIFunctionParametersSchema", {"type": "object", "properties": {}, "required": []})
        ),
        "strict": False,
    },  # core/schemas.py
    "OpenAIFunctionToolCall": {"id": REQ, "type": "function", "function": REQ},  # core/schemas.py
    "OpenAIFunctionToolSchema": {"type": REQ, "function": REQ},  # core/schemas.py
    "RolloutClientSettings": {
        "timeout_seconds": 300.0,
        "max_retries": 3,
        "complete_rollout_retries": 2,
        "retry_base_delay": 1.0,
        "retry_max_delay": 30.0,
        "max_connections": 100,
        "max_keepalive_connections": 20,
    },  # config/settings.py
    "RolloutMetrics": {
        "total_latency_ms": 0.0,
        "llm_latency_ms": 0.0,
        "tool_latency_ms": 0.0,
        "num_llm_calls": 0,
        "num_tool_calls": 0,
        "prompt_tokens": 0,
        "response_tokens": 0,
        "max_context_tokens": 0,
    },  # core/schemas.py
    "RolloutRequest": {
        "rollout_id": REQ,
        "server_url": REQ,
        "messages": REQ,
        "completion_params": REQ,
        "tool_server_url": None,
        "max_turns": 10,
        "max_tokens_total": 8192,
        "metadata": Factory({}),
        "api_key": None,
        "idempotency_key": None,
    },  # core/schemas.py
    "RolloutResponse": {
        "rollout_id": REQ,
        "status": REQ,
        "final_messages": Factory([]),
        "finish_reason": None,
        "error_message": None,
        "reward": None,
        "metrics": None,
        "extra_fields": Factory({}),
    },  # core/schemas.py
    "RolloutServerSettings": {
        "max_concurrent_rollouts": 100,
        "record_ttl_seconds": 3600.0,
        "cleanup_interval_seconds": 60.0,
        "request_timeout_seconds": 600.0,
        "registration_readiness_timeout_seconds": 10.0,
        "registration_readiness_poll_interval_seconds": 0.2,
        "registration_shutdown_timeout_seconds": 30.0,
    },  # config/settings.py
    "RolloutSettings": {
        "client": Factory("RolloutClientSettings"),
        "server": Factory("RolloutServerSettings"),
        "max_metadata_size_bytes": 1024 * 1024,
    },  # config/settings.py
    "ToolResponse": {"text": None, "image": None, "video": None},  # core/schemas.py
}
V1_PROPERTIES = {
    "CompletionsResult": ("has_tool_calls", "tool_calls", "content"),
    "RolloutContext": ("debug_enabled",),
}
V1_VALUES: dict[str, Any] = {
    "DEFAULT_HOST": "0.0.0.0",  # server/serve.py
    "DEFAULT_MAX_METADATA_SIZE_BYTES": 1 * 1024 * 1024,  # core/schemas.py
    "DEFAULT_PORT": 9000,  # server/serve.py
    "MessageDict": dict[str, Any],  # core/schemas.py
    "SamplingParamsDict": dict[str, Any],  # core/schemas.py
}
V1_ENUMS = {
    "RolloutStatus": {"COMPLETED": "COMPLETED", "ERROR": "ERROR"},
}


# ---------------------------------------------------------------- where the kit differs

#: Signatures the kit widens: every call v1 accepts binds the same way here (checked by
#: ``accepts_every_v1_call``); the reason says what was added.
KIT_ADDITIONS: dict[str, str] = {
    "AgentLoopNotFoundError": "available may be left out (an empty list)",
    "OsmosisServerError": "status_code may be left out: the kit raises it for answers that are not "
    "a chat completion too",
    "OsmosisValidationError": "status_code may be left out, as for OsmosisServerError",
    "CompletionsResult": "token_ids, logprobs, usage default to empty and finish_reason to 'stop', "
    "the defaults v1 applied when reading an answer",
    "RolloutResult": "final_messages defaults to [] and finish_reason to None",
    "OsmosisLLMClient": "keyword-only transport=, an httpx transport (tests give MockTransport)",
    "create_app": "keyword-only deployment options after v1's eleven (server keys, store, "
    "dispatcher, engine, ...); **more takes and warns about unknown v1-era options",
    "detect_public_ip": "keyword-only metadata_url, external_services, timeout (one bound on the "
    "whole detection) and transport: the endpoints are injectable",
}

#: Signatures that differ in a way a v1 call can notice; the reason says how and why.
KIT_CHANGES: dict[str, str] = {
    "RolloutContext": "not a dataclass: after request, tools, llm everything is keyword-only "
    "(debug_dir, cancelled, and v1's _debug_dir, _start_time, kept for tests written against "
    "v1); _tool_latency_ms and _num_tool_calls are gone: the counts live in ctx.metrics",
    "RolloutContext.chat": "messages is positional-only, so completion params that happen to "
    "hold a 'messages' key cannot collide with it; chat(messages=...) with no such param still "
    "works",
    "serve_agent_loop": "validate, reload and skip_register are accepted through **ignored "
    "and do nothing: the loop is always validated, and there is no self-registration "
    "(rollout-sdk register does it); with no key on an address other machines reach it refuses "
    "to start unless allow_unauthenticated=True, and allowed_hosts widens the Host check",
}

#: Model fields that differ ("Model.field"), or that only the kit has.
FIELD_DIFFERENCES: dict[str, str] = {
    "CompletionsChoice.message": "defaults to {}: TrainGate's answer is read leniently",
    "CompletionsResponse.id": "defaults to '': an answer without it is still read",
    "CompletionsResponse.created": "defaults to 0: an answer without it is still read",
    "CompletionsResponse.choices": "defaults to []: an answer with none gives an empty assistant turn",
    "CompletionsResponse.token_ids": "defaults to [], and null is read as []",
    "CompletionsResponse.logprobs": "defaults to [], as token_ids",
    "CompletionsResponse.prompt_token_ids": "not read: TrainGate-internal, no agent uses it "
    "(unknown fields are ignored)",
    "OpenAIFunctionParametersSchema.type": "defaults to 'object', the only type a tool's "
    "parameters can have",
    "OpenAIFunctionParametersSchema.properties": "defaults to {} (a tool with no parameters)",
    "OpenAIFunctionParametersSchema.required": "defaults to [] (no required parameter)",
    "OpenAIFunctionSchema.description": "may be left out when constructing, as v1's examples "
    "did, but validation and init refuse a tool without one (LLM APIs need it)",
    "OpenAIFunctionToolSchema.type": "defaults to 'function', and any other type is refused",
    "RolloutResponse.metrics": "defaults to zero metrics rather than None: every response "
    "carries them",
    "RolloutServerSettings.cleanup_interval_seconds": "absent: records expire in the store, "
    "there is no in-memory cleanup loop; the variable is ignored",
    "RolloutServerSettings.registration_readiness_timeout_seconds": "absent: no "
    "self-registration (rollout-sdk register); ignored",
    "RolloutServerSettings.registration_readiness_poll_interval_seconds": "absent: no self-registration; ignored",
    "RolloutServerSettings.registration_shutdown_timeout_seconds": "absent: no self-registration; ignored",
    "RolloutSettings.kit": "the kit's own settings (ROLLOUT_SDK_*): body limit, queue, leases",
    "RolloutSettings.cli": "the kit's CLI settings (server key, platform token)",
    "RolloutSettings.aws": "the Lambda functions' settings",
    "ToolResponse.extra_fields": "the kit's: anything else a tool wants to return",
}


# ---------------------------------------------------------------- reading the kit's signatures

_KINDS = {
    inspect.Parameter.POSITIONAL_ONLY: PO,
    inspect.Parameter.POSITIONAL_OR_KEYWORD: PK,
    inspect.Parameter.VAR_POSITIONAL: VP,
    inspect.Parameter.KEYWORD_ONLY: KW,
    inspect.Parameter.VAR_KEYWORD: VK,
}


def _value(value: object) -> object:
    """A default as the tables write it: a settings object by its class, a model by its class
    and its fields."""
    if isinstance(value, pydantic_settings.BaseSettings):
        return type(value).__name__
    if isinstance(value, pydantic.BaseModel):
        return (type(value).__name__, value.model_dump())
    return value


def _target(key: str) -> Any:
    name, _, member = key.partition(".")
    obj = getattr(rollout_sdk, name)
    return getattr(obj, member) if member else obj


def kit_signature(key: str) -> Any:
    obj = _target(key)
    if isinstance(obj, type) and issubclass(obj, BaseException):
        own = [c for c in obj.__mro__ if c.__module__ != "builtins" and "__init__" in vars(c)]
        if not own:
            return EXCEPTION_INIT
    fields = {f.name: f for f in dataclasses.fields(obj)} if dataclasses.is_dataclass(obj) else {}
    params = list(inspect.signature(obj).parameters.values())
    if "." in key and params and params[0].name == "self":
        params = params[1:]
    out = []
    for p in params:
        default: object = REQ if p.default is p.empty else p.default
        factory = fields[p.name].default_factory if p.name in fields else dataclasses.MISSING
        if callable(factory):
            default = Factory(factory())
        elif p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            default = REQ
        out.append((p.name, _KINDS[p.kind], _value(default)))
    return tuple(out)


def kit_fields(name: str) -> dict[str, object]:
    model = getattr(rollout_sdk, name)
    out: dict[str, object] = {}
    for field_name, info in model.model_fields.items():
        if info.is_required():
            out[field_name] = REQ
        elif info.default_factory is not None:
            out[field_name] = Factory(_value(info.default_factory()))
        else:
            out[field_name] = _value(info.default)
    return out


def accepts_every_v1_call(v1: tuple[Any, ...], kit: tuple[Any, ...]) -> list[str]:
    """Why some call v1 accepts would bind differently in ``kit`` (empty when none would)."""
    problems = []
    v1_positional = [p for p in v1 if p[1] in (PO, PK)]
    kit_positional = [p for p in kit if p[1] in (PO, PK)]
    by_name = {p[0]: p for p in kit}
    for index, (name, kind, _default) in enumerate(v1_positional):
        if index >= len(kit_positional) or kit_positional[index][0] != name:
            problems.append(f"{name} is not positional parameter {index}")
        elif kind == PK and kit_positional[index][1] == PO:
            problems.append(f"{name} is positional-only")
    for name, kind, default in v1:
        mine = by_name.get(name)
        if kind in (VP, VK):
            if not any(p[1] == kind for p in kit):
                problems.append(f"no {kind}")
            continue
        if mine is None:
            problems.append(f"{name} is missing")
        elif kind == KW and mine[1] not in (PK, KW):
            problems.append(f"{name} cannot be passed by keyword")
        elif default != REQ and mine[2] != default:
            problems.append(f"{name} defaults to {mine[2]!r}, not {default!r}")
    v1_names = {p[0] for p in v1}
    for name, kind, default in kit:
        if name not in v1_names and kind not in (VP, VK) and default == REQ:
            problems.append(f"{name} is required")
    return problems


# ---------------------------------------------------------------- the tests


def test_the_tables_cover_every_v1_name_once() -> None:
    assert len(set(V1_ALL)) == len(V1_ALL) == 76
    covered = (
        {key.partition(".")[0] for key in V1_SIGNATURES}
        | set(V1_FIELDS)
        | set(V1_VALUES)
        | set(V1_ENUMS)
    )
    assert covered == set(V1_ALL)


def test_every_v1_name_is_exported() -> None:
    missing = [name for name in V1_ALL if name not in rollout_sdk.__all__]
    assert missing == []
    for name in V1_ALL:
        assert getattr(rollout_sdk, name) is not None, name


def test_every_listed_difference_names_a_v1_member() -> None:
    assert set(KIT_ADDITIONS) | set(KIT_CHANGES) <= set(V1_SIGNATURES)
    assert not set(KIT_ADDITIONS) & set(KIT_CHANGES)
    for key in FIELD_DIFFERENCES:
        model, _, field_name = key.partition(".")
        assert model in V1_FIELDS and field_name, key
    for reason in [*KIT_ADDITIONS.values(), *KIT_CHANGES.values(), *FIELD_DIFFERENCES.values()]:
        assert len(reason) > 20, reason


@pytest.mark.parametrize("key", sorted(V1_SIGNATURES))
def test_signature_is_v1s_or_a_listed_difference(key: str) -> None:
    v1, kit = V1_SIGNATURES[key], kit_signature(key)
    if key in KIT_ADDITIONS:
        assert kit != v1, f"{key} is v1's again: take it off KIT_ADDITIONS"
        assert accepts_every_v1_call(v1, kit) == []
    elif key in KIT_CHANGES:
        assert kit != v1, f"{key} is v1's again: take it off KIT_CHANGES"
    else:
        assert kit == v1
    assert inspect.iscoroutinefunction(_target(key)) == (key in V1_ASYNC)


@pytest.mark.parametrize("name", sorted(V1_FIELDS))
def test_model_fields_are_v1s_or_listed_differences(name: str) -> None:
    v1, kit = V1_FIELDS[name], kit_fields(name)
    listed = {k.partition(".")[2] for k in FIELD_DIFFERENCES if k.startswith(name + ".")}
    differing = {f for f in v1.keys() | kit.keys() if v1.get(f, "absent") != kit.get(f, "absent")}
    assert differing == listed


@pytest.mark.parametrize("name", sorted(V1_PROPERTIES))
def test_v1s_properties_are_properties(name: str) -> None:
    cls = getattr(rollout_sdk, name)
    for prop in V1_PROPERTIES[name]:
        assert isinstance(inspect.getattr_static(cls, prop), property), prop


def test_values_and_enums_are_v1s() -> None:
    for name, value in V1_VALUES.items():
        assert getattr(rollout_sdk, name) == value, name
    for name, members in V1_ENUMS.items():
        assert {m.name: m.value for m in getattr(rollout_sdk, name)} == members


def test_the_compatibility_check_catches_what_breaks_a_v1_call() -> None:
    v1 = (("a", PK, REQ), ("b", PK, 1), ("c", KW, None), ("kw", VK, REQ))
    assert accepts_every_v1_call(v1, (*v1, ("extra", KW, None))) == []
    assert accepts_every_v1_call(v1, (("b", PK, 1), ("a", PK, REQ), *v1[2:])) != []
    assert accepts_every_v1_call(v1, (("a", PO, REQ), *v1[1:])) != []
    assert accepts_every_v1_call(v1, (("a", PK, REQ), ("b", PK, 2), *v1[2:])) != []
    assert accepts_every_v1_call(v1, v1[:3]) != []
    assert accepts_every_v1_call(v1, (*v1, ("extra", KW, REQ))) != []
    assert accepts_every_v1_call(v1, (("a", PK, REQ), ("b", KW, 1), *v1[2:])) != []


# ---------------------------------------------------------------- v1 behaviour the kit added


def test_get_default_tools_asks_get_tools_with_v1s_placeholder_request() -> None:
    seen: list[rollout_sdk.RolloutRequest] = []

    class Loop(rollout_sdk.RolloutAgentLoop):
        name = "discoverable"

        def get_tools(
            self, request: rollout_sdk.RolloutRequest
        ) -> list[rollout_sdk.OpenAIFunctionToolSchema]:
            seen.append(request)
            return []

        async def run(self, ctx: rollout_sdk.RolloutContext) -> rollout_sdk.RolloutResult:
            return ctx.complete([])

    assert Loop().get_default_tools() == []
    (request,) = seen
    assert (request.rollout_id, request.server_url) == ("discovery", "http://localhost")
    assert (request.messages, request.completion_params) == ([], {})


def test_call_schema_holds_decoded_arguments_and_parsed_schema_the_raw_string() -> None:
    raw = rollout_sdk.OpenAIFunctionParsedSchema(name="add", arguments='{"a": 1}')
    call, failed = rollout_sdk.OpenAIFunctionCallSchema.from_openai_function_parsed_schema(raw)
    assert (call.name, call.arguments, failed) == ("add", {"a": 1}, False)
    for bad in ("{not json", "[1, 2]", '"text"'):
        parsed = rollout_sdk.OpenAIFunctionParsedSchema(name="f", arguments=bad)
        call, failed = rollout_sdk.OpenAIFunctionCallSchema.from_openai_function_parsed_schema(
            parsed
        )
        assert (call.arguments, failed) == ({}, True)
    tool_call = rollout_sdk.OpenAIFunctionToolCall(id="c", function=call)
    assert tool_call.function.arguments == {}
    with pytest.raises(pydantic.ValidationError):
        rollout_sdk.OpenAIFunctionCallSchema(name="f", arguments='{"a": 1}')


def test_tool_response_media_lists_and_checks() -> None:
    assert rollout_sdk.ToolResponse().is_empty()
    assert rollout_sdk.ToolResponse(text="").is_empty()
    text_only = rollout_sdk.ToolResponse(text="42")
    assert text_only.is_text_only() and not text_only.is_empty()
    with_image = rollout_sdk.ToolResponse(text="see", image=["png-bytes"])
    assert not with_image.is_text_only() and not with_image.is_empty()
    assert not rollout_sdk.ToolResponse(video=["v"]).is_empty()
    with pytest.raises(pydantic.ValidationError, match="image must be a list"):
        rollout_sdk.ToolResponse(image="png-bytes")
    with pytest.raises(pydantic.ValidationError, match="video must be a list"):
        rollout_sdk.ToolResponse(video={"v": 1})


def test_the_kits_llm_client_is_an_llm_client_protocol() -> None:
    from rollout_sdk.traingate.client import TrainGateClient

    llm = rollout_sdk.RolloutLLMClient(
        TrainGateClient(), server_url="http://tg", rollout_id="r", api_key=None
    )
    assert isinstance(llm, rollout_sdk.LLMClientProtocol)
    llm.metrics.num_llm_calls = 2
    copy = llm.get_metrics()
    assert copy.num_llm_calls == 2
    copy.num_llm_calls = 5
    assert llm.metrics.num_llm_calls == 2
    assert not isinstance(object(), rollout_sdk.LLMClientProtocol)
