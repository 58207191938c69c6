"""Init's input rules, in the order init applies them: metadata size, ``server_url``, the agent's tools.

Each refuses with the :class:`~rollout_sdk.errors.RequestRejected` subclass the HTTP table
(:mod:`rollout_sdk.http.problems`) answers: PayloadTooLarge (413), ServerUrlRefused (422),
AgentToolsError (500). They run before any record is written, so a refused init stores nothing.
The body's size and type are the HTTP layer's (:mod:`rollout_sdk.http.admission`): they are
checked before the body is parsed.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from pydantic import BaseModel

from rollout_sdk.agent.validation import tool_errors
from rollout_sdk.errors import AgentToolsError, PayloadTooLarge, ServerUrlRefused
from rollout_sdk.protocol import OpenAIFunctionToolSchema

if TYPE_CHECKING:
    from rollout_sdk.agent.loop import RolloutAgentLoop
    from rollout_sdk.protocol import RolloutRequest
    from rollout_sdk.traingate.outbound import OutboundPolicy

MAX_METADATA_VARIABLE = "OSMOSIS_ROLLOUT_MAX_METADATA_SIZE_BYTES"


# --------------------------------------------------------------------------- metadata


def check_metadata_size(request: RolloutRequest, limit: int) -> None:
    """Refuse metadata over ``limit`` bytes as UTF-8 JSON. Raises PayloadTooLarge."""
    check_metadata_bytes(request.metadata_size(), limit)


def check_metadata_bytes(size: int, limit: int) -> None:
    """Refuse metadata of ``size`` bytes as UTF-8 JSON when over ``limit``. Raises
    PayloadTooLarge."""
    if size > limit:
        raise PayloadTooLarge(
            f"metadata is {size} bytes as UTF-8 JSON; the limit is {limit} bytes "
            f"(raise it with {MAX_METADATA_VARIABLE})"
        )


# --------------------------------------------------------------------------- server_url


def check_server_url(server_url: str, policy: OutboundPolicy, field: str = "server_url") -> None:
    """Refuse a ``server_url`` this deployment may not call, without resolving anything.

    The host must be on a non-empty allowlist (``ROLLOUT_SDK_ALLOWED_SERVER_HOSTS``, ``host`` or
    ``host:port``), and a literal address (in any spelling a resolver accepts) or ``localhost``
    must be one the outbound policy lets the kit call (:mod:`rollout_sdk.traingate.outbound`). A
    name is checked when the worker connects, at every address it resolves to: resolving it
    here would not help, since it may resolve differently then.

    Raises ServerUrlRefused naming ``field`` (the body's field that holds the URL) and the
    setting that would allow the URL.
    """
    parts = urlsplit(server_url)
    raw_host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    refusal = policy.host_refusal(raw_host, port)
    if refusal is not None:
        raise ServerUrlRefused(f"{field} host {raw_host[:256]!r} {refusal}", field)


# --------------------------------------------------------------------------- tools


class AgentTools:
    """The agent's tools for a request, each distinct list validated once.

    ``get_tools`` runs on every init (the tools may depend on the request); what it returns is
    checked with :func:`~rollout_sdk.agent.validation.tool_errors` (the per-tool rules
    ``rollout-sdk validate`` uses) and the protocol model only the first time that list is seen.

    The cache is keyed by the list's ``repr`` (a protocol model in it by its class and its JSON:
    :func:`_content_key`), not by the identity of the objects returned.
    Identity would miss every time for the common ``return [{...}, ...]`` (a fresh list per
    call), and worse, would hit for a list the agent mutated in place since. The ``repr`` of the
    values tools are made of (dicts, lists, strings, numbers, the protocol models) is exact:
    ``1``, ``1.0``, ``"1"`` and ``True`` differ, as they do to validation, where a JSON dump would
    merge some of them. It is one call per init, in C for dicts and lists, against a Python walk
    of every tool plus a model validation. A value whose ``repr`` fails is validated uncached.
    Only valid lists are stored, so an invalid one is refused (500) on every request; the
    validated models are copies, so the agent mutating its own objects cannot change a stored
    entry. ``max_lists`` bounds the cache (least recently used go first), for agents whose tools
    vary per request.
    """

    def __init__(self, agent_loop: RolloutAgentLoop, *, max_lists: int = 64) -> None:
        self.agent_loop = agent_loop
        self.max_lists = max_lists
        self._valid: OrderedDict[str, list[OpenAIFunctionToolSchema]] = OrderedDict()

    def for_request(self, request: RolloutRequest) -> list[OpenAIFunctionToolSchema]:
        """The validated tools ``get_tools(request)`` returns. Raises AgentToolsError."""
        try:
            raw = self.agent_loop.get_tools(request)
        except Exception as exc:
            raise AgentToolsError(
                f"{type(self.agent_loop).__name__}.get_tools raised {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(raw, list):
            raise AgentToolsError(f"get_tools returned {type(raw).__name__}, expected a list")
        try:
            key: str | None = _content_key(raw)
        except Exception:
            key = None
        if key is not None and key in self._valid:
            self._valid.move_to_end(key)
            return list(self._valid[key])
        tools = validated(raw)
        if key is not None:
            self._valid[key] = [tool.model_copy(deep=True) for tool in tools]
            if len(self._valid) > self.max_lists:
                self._valid.popitem(last=False)
        return tools


def _content_key(raw: Sequence[object]) -> str:
    """The ``repr`` of ``raw`` with each pydantic model replaced by its class and its JSON:
    the same content as the model's own ``repr`` (JSON keeps ``1``, ``1.0`` and ``true``
    apart), written by pydantic-core in one call, where a model's ``repr`` walks its fields in
    Python (measured: 100 us against 17 us for the calculator's one tool, on every init)."""
    return repr(
        [
            (type(item).__qualname__, item.model_dump_json())
            if isinstance(item, BaseModel)
            else item
            for item in raw
        ]
    )


def validated(raw: Sequence[object]) -> list[OpenAIFunctionToolSchema]:
    """``raw`` as protocol tools; AgentToolsError naming the first tool that is not one."""
    tools = []
    for index, tool in enumerate(raw):
        problems = tool_errors(index, tool)
        if problems:
            raise AgentToolsError("; ".join(str(p) for p in problems))
        try:
            tools.append(OpenAIFunctionToolSchema.model_validate(tool))
        except ValueError as exc:
            raise AgentToolsError(f"tools[{index}] is not a valid tool: {exc}") from exc
    return tools
