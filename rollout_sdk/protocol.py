"""Wire schemas of the v1 remote-rollout protocol: pure pydantic, no I/O.

Field names, types and defaults follow the protocol (docs: ``protocol.md`` sections 3 to 5), so the
JSON on the wire is the same as the reference SDK's.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from enum import StrEnum
from itertools import islice
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
)

from rollout_sdk.json_scan import Skeleton

Message = dict[str, Any]

#: The one key of a final response's ``extra_fields`` the kit writes under (its failure
#: category, its cost estimate).
EXTRA_KEY = "rollout_sdk"

#: How ``/health``'s ``protocols`` names the wires a server answers (``rollout-sdk register``
#: reads it): v1's remote-rollout protocol, and osmosis-ai 0.3.8's rollout API.
PROTOCOL_NAMES = {"v1": "v1", "osmosis03": "osmosis-ai 0.3.8"}

#: Default limit on ``RolloutRequest.metadata`` (UTF-8 JSON bytes); see settings.
DEFAULT_MAX_METADATA_SIZE_BYTES = 1024 * 1024

#: Deepest nesting of arrays and objects inside one request field: far beyond any conversation
#: or metadata, and well inside what pydantic's and the json module's encoders accept.
MAX_JSON_NESTING = 64

# Keys that fit the store. ``rollout_id`` and ``idempotency_key`` become parts of store keys:
# DynamoDB's ``pk`` is ``rollout#<rollout_id>`` (8 bytes of prefix) for the record and
# ``slot#key:<idempotency_key>`` or ``slot#rid:<rollout_id>`` (9 bytes) for the idempotency slot
# (store/dynamodb.py, store/record.py idempotency_slot). A partition key value is at most
# 2,048 bytes (AWS, "Constraints in Amazon DynamoDB"; a sort key 1,024, but the table's only
# sort key, the due index's due_at, is a number). SQLite's keys are TEXT columns, bounded only by
# SQLITE_MAX_LENGTH (10^9 bytes), and the memory store's by nothing, so DynamoDB's is the bound.
# Limits count UTF-8 bytes, as DynamoDB does: one character takes up to 4.

#: DynamoDB's limit on a partition key value, in bytes.
STORE_KEY_MAX_BYTES = 2048
#: The longest prefix a store puts before a request field in a key: ``slot#key:``/``slot#rid:``.
STORE_KEY_PREFIX_BYTES = len("slot#key:")
ROLLOUT_ID_MAX_CHARS = 256
IDEMPOTENCY_KEY_MAX_CHARS = 1024
#: 2,048 - 9 = 2,039 bytes: the whole key a slot item can take. 1,024 characters fit when most
#: take one byte (ASCII, as TrainGate's keys are); 1,024 four-byte characters (4,096 bytes) do not.
IDEMPOTENCY_KEY_MAX_BYTES = STORE_KEY_MAX_BYTES - STORE_KEY_PREFIX_BYTES
#: 4 x 256 = 1,024 bytes, the most 256 characters take in UTF-8, well inside 2,048 - 9: the
#: character limit meets it first today; stated so that raising that limit cannot outgrow a key.
ROLLOUT_ID_MAX_BYTES = 4 * ROLLOUT_ID_MAX_CHARS
#: ``max_turns`` and ``max_tokens_total``: positive, and at most what a signed 32-bit integer holds
#: (v1 took any int; TrainGate sends small positive ones, and a trainer's int32 must read them).
MAX_COUNT = 2**31 - 1

#: Percent-escapes refused in ``server_url``: control characters (a ``%00`` can end the path early
#: in a server written in C, and the kit's suffix with it), ``?`` and ``#`` (a server or proxy that
#: decodes before routing would read the suffix as a query or fragment), ``\`` (a path separator
#: to some servers), and ``%`` itself (so that none of these hides behind a second decoding).
_REFUSED_ESCAPES = re.compile(r"%(?:[01][0-9a-f]|7f|23|25|3f|5c)", re.IGNORECASE)


def _encodes_as_utf8(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def utf8_size(text: str) -> int:
    """``text``'s size in UTF-8 bytes (an unpaired surrogate counted as 3: it is refused elsewhere)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def rollout_id_fits(rollout_id: str) -> bool:
    """Whether ``rollout_id`` is within the length limits an init's ``rollout_id`` must meet."""
    return len(rollout_id) <= ROLLOUT_ID_MAX_CHARS and utf8_size(rollout_id) <= ROLLOUT_ID_MAX_BYTES


def _render_path(field: str, path: tuple[str | int, ...]) -> str:
    parts = [field]
    for part in path:
        parts.append(f"[{part}]" if isinstance(part, int) else f".{part[:40]}")
    return "".join(parts)


#: Items a failed check walks to name where the problem is; past them it names only the field.
_WALKED_ITEMS = 10_000


def _too_deep(field: str, max_nesting: int) -> str:
    return f"{field} nests arrays and objects deeper than {max_nesting} levels"


def json_problem(field: str, value: Any, *, max_nesting: int = MAX_JSON_NESTING) -> str | None:
    """Why ``value`` cannot be stored and sent on as JSON, naming where in ``field``; else None.

    Python's json module accepts what JSON cannot carry on: an unpaired surrogate escape
    (``"\\ud800"``, which UTF-8 cannot encode), ``NaN`` and ``Infinity`` (``1e400``), and nesting
    that later overflows an encoder. Checked at C speed (the value is encoded, and its text
    measured: :mod:`rollout_sdk.json_scan`); only a value that fails is walked, to say where,
    and only so far (:data:`_WALKED_ITEMS`), so a large value costs no more when it fails.
    """
    if not isinstance(value, dict | list | tuple):
        if isinstance(value, str) and _encodes_as_utf8(value):
            return None
        return _walk(field, value, max_nesting, items=None)
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False).encode()
    except RecursionError:
        return _too_deep(field, max_nesting)
    except UnicodeEncodeError:
        failure = "holds an unpaired surrogate (\\ud800 to \\udfff), which is not valid UTF-8"
    except ValueError:
        failure = "holds NaN or Infinity, which is not a JSON number"
    except TypeError:
        # An object the json module cannot encode (from a Python caller, never from a body):
        # walked whole, as it always was, which lets through what it finds no fault in.
        return _walk(field, value, max_nesting, items=None)
    else:
        # No deeper than the brackets it opens: two counts in C, and the text's skeleton is
        # built only when there are more of them (in strings too) than the limit's levels.
        if text.count(b"[") + text.count(b"{") <= max_nesting:
            return None
        return _too_deep(field, max_nesting) if Skeleton(text).depth() > max_nesting else None
    return _walk(field, value, max_nesting, items=_WALKED_ITEMS) or f"{field} {failure}"


Path = tuple[str | int, ...]


def _depth_first(value: Any) -> Iterator[tuple[Path, Any]]:
    """(path, item) of ``value`` and of everything in it, depth first and lazily: one item per
    step, however long a list or object (a key is the last part of its item's path)."""
    stack: list[Iterator[tuple[Path, Any]]] = [iter([((), value)])]
    while stack:
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
            continue
        yield entry
        path, item = entry
        if isinstance(item, dict | list | tuple):
            stack.append(_children(path, item))


def _children(
    path: Path, item: dict[Any, Any] | list[Any] | tuple[Any, ...]
) -> Iterator[tuple[Path, Any]]:
    if isinstance(item, dict):
        for key, sub in item.items():
            yield (*path, key if isinstance(key, str) else str(key)), sub
    else:
        for i, sub in enumerate(item):
            yield (*path, i), sub


def _walk(field: str, value: Any, max_nesting: int, *, items: int | None) -> str | None:
    """The first item of ``value`` JSON cannot carry, named by its path; None when none is
    found (within ``items`` items, if given). Iterative, so depth cannot overflow here."""
    for path, item in islice(_depth_first(value), items):
        key = path[-1] if path else None
        if isinstance(key, str) and not _encodes_as_utf8(key):
            return (
                f"{_render_path(field, path[:-1])} has a key with an unpaired surrogate, "
                "which is not valid UTF-8"
            )
        if isinstance(item, str):
            if not _encodes_as_utf8(item):
                return (
                    f"{_render_path(field, path)} holds an unpaired surrogate "
                    "(\\ud800 to \\udfff), which is not valid UTF-8"
                )
        elif isinstance(item, float):
            if not math.isfinite(item):
                return f"{_render_path(field, path)} is {item}, which is not a JSON number"
        elif isinstance(item, dict | list | tuple) and len(path) >= max_nesting:
            return _too_deep(field, max_nesting)
    return None


def json_size(value: Any) -> int:
    """Size of ``value`` as compact UTF-8 JSON (an unpaired surrogate, which JSON cannot carry,
    counted as its three bytes)."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return len(text.encode("utf-8", "surrogatepass"))


class _Wire(BaseModel):
    """Base of every schema: unknown fields ignored (forward compatibility).

    Validators are built on first use (``defer_build``): an agent author's import defines the
    models without paying for all of them, and the server builds them all at start-up
    (:func:`build_models`).
    """

    model_config = ConfigDict(extra="ignore", populate_by_name=True, defer_build=True)


def build_models() -> None:
    """Build every wire model's validator now, so what serves requests pays for it once, at
    start-up, not on a first request."""
    pending: list[type[BaseModel]] = [_Wire]
    while pending:
        model = pending.pop()
        pending.extend(model.__subclasses__())
        if model is not _Wire:
            model.model_rebuild(force=True)


# --------------------------------------------------------------------------- tools


def _is_none(value: object) -> bool:
    return value is None


class OpenAIFunctionPropertySchema(_Wire):
    """One parameter of a function tool."""

    # LLM APIs reject ``"enum": null``: an optional field left unset is omitted. Per field, in
    # pydantic-core's own serializer: a wrap serializer rebuilding the dict cost an eighth of
    # init's CPU in the app (every init dumps the tools three times).
    type: str
    description: str | None = Field(default=None, exclude_if=_is_none)
    enum: list[str] | None = Field(default=None, exclude_if=_is_none)


class OpenAIFunctionParametersSchema(_Wire):
    """The JSON-schema object describing a function's parameters."""

    type: str = "object"
    properties: dict[str, OpenAIFunctionPropertySchema] = Field(default_factory=dict)
    required: list[str] = Field(default_factory=list)


class OpenAIFunctionSchema(_Wire):
    """A function's name, description and parameters.

    ``description`` may be left out when constructing (as the v1 SDK allowed), but
    ``validate_agent_loop`` reports it as an error and init refuses such a tool: LLM APIs need it.
    """

    name: str
    description: str | None = None
    parameters: OpenAIFunctionParametersSchema = Field(
        default_factory=OpenAIFunctionParametersSchema
    )
    strict: bool = False


class OpenAIFunctionToolSchema(_Wire):
    """A tool in the OpenAI function-calling shape."""

    type: Literal["function"] = "function"
    function: OpenAIFunctionSchema


class OpenAIFunctionParsedSchema(_Wire):
    """A function call as the model emits it: ``arguments`` is the raw JSON string."""

    name: str
    arguments: str


class OpenAIFunctionCallSchema(_Wire):
    """A function call whose arguments have been decoded into a dict."""

    name: str
    arguments: dict[str, Any]

    @staticmethod
    def from_openai_function_parsed_schema(
        parsed_schema: OpenAIFunctionParsedSchema,
    ) -> tuple[OpenAIFunctionCallSchema, bool]:
        """Decode ``parsed_schema``'s arguments: ``(call, has_decode_error)``; arguments that
        are not a JSON object give ``{}`` and True."""
        try:
            arguments = json.loads(parsed_schema.arguments)
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            return OpenAIFunctionCallSchema(name=parsed_schema.name, arguments={}), True
        return OpenAIFunctionCallSchema(name=parsed_schema.name, arguments=arguments), False


class OpenAIFunctionToolCall(_Wire):
    """A tool call with its arguments decoded."""

    id: str
    type: Literal["function"] = "function"
    function: OpenAIFunctionCallSchema


class ToolResponse(_Wire):
    """The outcome of running one tool: text, and for multimodal tools lists of images and
    videos."""

    text: str | None = None
    image: list[Any] | None = None
    video: list[Any] | None = None
    extra_fields: dict[str, Any] = Field(default_factory=dict)

    @field_validator("image", "video", mode="before")
    @classmethod
    def _a_list(cls, value: Any, info: ValidationInfo) -> Any:
        if value is not None and not isinstance(value, list):
            raise ValueError(
                f"{info.field_name} must be a list (wrap a single item: [item]), "
                f"not {type(value).__name__}"
            )
        return value

    def is_empty(self) -> bool:
        """Whether there is no text, no image and no video."""
        return not self.text and not self.image and not self.video

    def is_text_only(self) -> bool:
        """Whether there is text and neither image nor video."""
        return bool(self.text) and not self.image and not self.video


# --------------------------------------------------------------------------- rollout


class RolloutStatus(StrEnum):
    """Final status of a rollout."""

    COMPLETED = "COMPLETED"
    ERROR = "ERROR"


class RolloutMetrics(_Wire):
    """Per-rollout measurements sent with the result."""

    total_latency_ms: float = 0.0
    llm_latency_ms: float = 0.0
    tool_latency_ms: float = 0.0
    num_llm_calls: int = 0
    num_tool_calls: int = 0
    prompt_tokens: int = 0
    response_tokens: int = 0
    max_context_tokens: int = 0


class RolloutRequest(_Wire):
    """Body of ``POST /v1/rollout/init``."""

    # Built at definition, not deferred: FastAPI wraps the body model in a field of its own
    # (aliased to the parameter's name), and pydantic refuses to build a deferred model there.
    model_config = ConfigDict(defer_build=False)

    rollout_id: str = Field(min_length=1, max_length=ROLLOUT_ID_MAX_CHARS)
    server_url: str
    messages: list[Message]
    completion_params: dict[str, Any]
    #: Stored and handed to the agent as v1 did; the kit itself never contacts it, so the
    #: outbound policy (rollout_sdk/traingate/outbound.py) does not check it: an agent that calls
    #: it uses its own HTTP client.
    tool_server_url: str | None = None
    max_turns: int = Field(10, ge=1, le=MAX_COUNT)
    max_tokens_total: int = Field(8192, ge=1, le=MAX_COUNT)
    metadata: dict[str, Any] = Field(default_factory=dict)
    api_key: str | None = Field(default=None, repr=False)
    idempotency_key: str | None = Field(default=None, max_length=IDEMPOTENCY_KEY_MAX_CHARS)

    @field_validator("rollout_id")
    @classmethod
    def _rollout_id_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("rollout_id must not be blank")
        return value

    @field_validator("idempotency_key")
    @classmethod
    def _blank_key_is_no_key(cls, value: str | None) -> str | None:
        # A blank key would make every keyless-looking rollout collide; treat it as absent.
        return None if value is not None and not value.strip() else value

    @field_validator("rollout_id", "idempotency_key")
    @classmethod
    def _fits_a_store_key(cls, value: str | None, info: ValidationInfo) -> str | None:
        limit = (
            ROLLOUT_ID_MAX_BYTES if info.field_name == "rollout_id" else IDEMPOTENCY_KEY_MAX_BYTES
        )
        size = 0 if value is None else utf8_size(value)
        if size > limit:
            raise ValueError(
                f"{info.field_name} is {size} bytes as UTF-8; the limit is {limit} bytes, so that "
                f"it fits a store key ({STORE_KEY_MAX_BYTES} bytes with the kit's prefix): "
                "use a shorter value (a hash of it, for instance)"
            )
        return value

    @field_validator("server_url")
    @classmethod
    def _server_url_http(cls, value: str) -> str:
        value = value.strip()
        problem = server_url_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value.rstrip("/")

    @field_validator("*")
    @classmethod
    def _json_safe(cls, value: Any, info: ValidationInfo) -> Any:
        # Refused here, as a 422 naming the field, rather than failing later in the store or the
        # worker, where the caller could no longer be told.
        problem = json_problem(info.field_name or "value", value)
        if problem is not None:
            raise ValueError(problem)
        return value

    def metadata_size(self) -> int:
        """Size of ``metadata`` as compact UTF-8 JSON, the measure the limit applies to."""
        return json_size(self.metadata)


def server_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a ``server_url``, naming the fix; None when it can.

    The kit appends its fixed paths (``/v1/chat/completions``, ``/v1/rollout/completed``) to it,
    so it must be a base URL those stay the path of: http(s), a host, no user info, no query and
    no fragment (not even an empty ``?`` or ``#``), no backslash, no control or whitespace
    character (``urlsplit`` drops tabs and newlines silently), no percent-encoded host, and none
    of the percent-escapes :data:`_REFUSED_ESCAPES` names in the path.
    """
    if not url.isprintable() or " " in url:
        at = next(i for i, c in enumerate(url) if c == " " or not c.isprintable())
        return (
            f"server_url holds a control or whitespace character (U+{ord(url[at]):04X} at "
            f"position {at}); send the URL without it"
        )
    for mark, what in (("?", "a query"), ("#", "a fragment")):
        if mark in url:
            return (
                f"server_url must not have {what} ({mark!r}): the kit appends "
                "/v1/chat/completions and /v1/rollout/completed to it, so send the base URL only"
            )
    if "\\" in url:
        return "server_url must not contain a backslash; use '/' in the path"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - urlsplit checks the port only when it is read
    except ValueError as exc:
        return f"server_url is not a valid URL: {exc}"
    if parts.scheme not in ("http", "https"):
        return "server_url must be an http:// or https:// URL"
    if "@" in parts.netloc:
        return (
            "server_url must not carry user info (user:password@): TrainGate is called with "
            "the callback key (api_key) as its credential; remove the part up to '@'"
        )
    if not parts.hostname:
        return "server_url must name a host"
    if "%" in parts.netloc:
        return "server_url's host must not be percent-encoded; write it plainly"
    escape = _REFUSED_ESCAPES.search(parts.path)
    if escape is not None:
        return (
            f"server_url's path holds the escape {escape.group()!r} (a control character, "
            "'?', '#', '\\' or '%' once decoded); send the path without it"
        )
    return None


class InitResponse(_Wire):
    """Body of the 202 answer to init."""

    rollout_id: str
    tools: list[OpenAIFunctionToolSchema] = Field(default_factory=list)


class RolloutResponse(_Wire):
    """Body of ``POST {server_url}/v1/rollout/completed``: the rollout's one final response."""

    rollout_id: str
    status: RolloutStatus
    final_messages: list[Message] = Field(default_factory=list)
    finish_reason: str | None = None
    error_message: str | None = None
    reward: float | None = None
    metrics: RolloutMetrics = Field(default_factory=RolloutMetrics)
    extra_fields: dict[str, Any] = Field(default_factory=dict)


# --------------------------------------------------------------------------- completions


class CompletionsRequest(_Wire):
    """Body of ``POST {server_url}/v1/chat/completions``; extra sampling params pass through."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, defer_build=True)

    model: str = "default"
    messages: list[Message]
    rollout_id: str
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 512
    stop: list[str] | None = None
    logprobs: bool = True

    @field_validator("stop", mode="before")
    @classmethod
    def _wrap_stop(cls, value: Any) -> Any:
        return normalize_stop(value)

    def to_wire(self) -> dict[str, Any]:
        """The JSON body, null fields omitted."""
        return self.model_dump(mode="json", exclude_none=True)


class CompletionUsage(_Wire):
    """Token usage of one completion."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class CompletionsChoice(_Wire):
    """One choice of a completion."""

    index: int = 0
    message: Message = Field(default_factory=dict)
    finish_reason: str | None = "stop"


class CompletionsResponse(_Wire):
    """TrainGate's answer to a chat call (OpenAI chat-completion shape)."""

    id: str = ""
    object: str = "chat.completion"
    created: int = 0
    model: str = "default"
    choices: list[CompletionsChoice] = Field(default_factory=list)
    usage: CompletionUsage | None = None
    token_ids: list[Any] = Field(default_factory=list)
    logprobs: list[Any] = Field(default_factory=list)

    @field_validator("token_ids", "logprobs", mode="before")
    @classmethod
    def _null_as_empty(cls, value: Any) -> Any:
        return [] if value is None else value


def normalize_stop(stop: Any) -> list[str] | None:
    """Return ``stop`` as a list of strings: a single string is wrapped, ``None`` stays ``None``."""
    if stop is None:
        return None
    if isinstance(stop, str):
        return [stop]
    return [str(item) for item in stop]
