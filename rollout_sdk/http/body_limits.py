"""What an init body may hold, counted before the app builds it from the body's bytes.

A body within ``ROLLOUT_SDK_MAX_BODY_BYTES`` can still hold millions of tiny values (6 MiB of
``{},`` is two million objects), and parsing and validating them costs seconds of CPU and
hundreds of MiB. So :class:`~rollout_sdk.http.admission.AdmissionMiddleware` hands each init
body to :meth:`InitBodyLimits.check` first:

1. its JSON values and its depth, from the text (:mod:`rollout_sdk.json_scan`, at C speed),
   before any object is built;
2. then, parsed (at most ``max_json_values`` values now), the entries of ``messages`` and of
   ``completion_params.tools``, and the size of ``metadata``, before pydantic copies them; only
   when the body could be over one of those (more values than the smaller count limit, or more
   bytes than the metadata limit), so a real init is parsed once, by the app.

Over a limit: PayloadTooLarge (413) naming it and the variable that raises it. A body that is
not JSON, or not an object, passes: the app answers it, as it always has (422).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rollout_sdk.engine.rules import check_metadata_bytes
from rollout_sdk.errors import PayloadTooLarge
from rollout_sdk.json_scan import Skeleton
from rollout_sdk.protocol import json_size
from rollout_sdk.settings import KIT_PREFIX

if TYPE_CHECKING:
    from rollout_sdk.settings import RolloutSettings

MAX_VALUES = KIT_PREFIX + "MAX_JSON_VALUES"
MAX_DEPTH = KIT_PREFIX + "MAX_JSON_DEPTH"
MAX_MESSAGES = KIT_PREFIX + "MAX_MESSAGES"
MAX_TOOLS = KIT_PREFIX + "MAX_TOOLS"


def _at_most(what: str, count: int, limit: int, unit: str, variable: str) -> None:
    if count > limit:
        raise PayloadTooLarge(
            f"{what} {count} {unit}; the limit is {limit} (raise it with {variable})"
        )


@dataclass(frozen=True)
class InitBodyLimits:
    """The counts an init body is held to (KitSettings' ``max_json_*``, ``max_messages``,
    ``max_tools``, and the metadata limit)."""

    max_json_values: int
    max_json_depth: int
    max_messages: int
    max_tools: int
    max_metadata_bytes: int

    @classmethod
    def from_settings(cls, settings: RolloutSettings) -> InitBodyLimits:
        kit = settings.kit
        return cls(
            max_json_values=kit.max_json_values,
            max_json_depth=kit.max_json_depth,
            max_messages=kit.max_messages,
            max_tools=kit.max_tools,
            max_metadata_bytes=settings.max_metadata_size_bytes,
        )

    def check(self, body: bytes) -> None:
        """Refuse ``body`` when it holds more than a limit allows. Raises PayloadTooLarge."""
        skeleton = Skeleton(body)
        count = skeleton.values()
        values = "JSON values (keys included)"
        _at_most("the body holds", count, self.max_json_values, values, MAX_VALUES)
        levels = "levels deep"
        _at_most(
            "the body nests arrays and objects",
            skeleton.depth(),
            self.max_json_depth,
            levels,
            MAX_DEPTH,
        )
        del skeleton  # before the body is parsed
        if count <= min(self.max_messages, self.max_tools) and len(body) <= (
            self.max_metadata_bytes
        ):
            # No list in it can be over its count, nor metadata over its size: the body is not
            # parsed twice (a real init, of a few dozen values, never is).
            return
        request = _parsed(body)
        if not isinstance(request, dict):
            return
        messages = request.get("messages")
        if isinstance(messages, list):
            _at_most("messages holds", len(messages), self.max_messages, "messages", MAX_MESSAGES)
        params = request.get("completion_params")
        tools = params.get("tools") if isinstance(params, dict) else None
        if isinstance(tools, list):
            _at_most(
                "completion_params.tools holds", len(tools), self.max_tools, "tools", MAX_TOOLS
            )
        metadata = request.get("metadata")
        if isinstance(metadata, dict):
            check_metadata_bytes(json_size(metadata), self.max_metadata_bytes)


def _parsed(body: bytes) -> Any:
    """The body as the app will parse it, or None when it cannot (the app says why)."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None
