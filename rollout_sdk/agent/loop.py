"""The agent-author API of the v1 SDK: the loop base class, the per-rollout context and results."""

from __future__ import annotations

import abc
import hashlib
import json
import logging
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from rollout_sdk.agent.journal import run_work
from rollout_sdk.agent.tools import get_message_content, parse_tool_calls
from rollout_sdk.errors import (
    ReplayDiverged,
    RolloutCancelled,
    RolloutDeadlineReached,
    RolloutError,
    RolloutHistoryFull,
)
from rollout_sdk.protocol import (
    CompletionsResponse,
    Message,
    OpenAIFunctionToolSchema,
    RolloutMetrics,
    RolloutRequest,
    RolloutStatus,
)

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable

    from rollout_sdk.agent.journal import Journal
    from rollout_sdk.traingate.client import TrainGateClient

logger = logging.getLogger(__name__)


@dataclass
class RolloutResult:
    """What an agent loop's ``run`` returns."""

    status: RolloutStatus | str
    final_messages: list[Message] = field(default_factory=list)
    finish_reason: str | None = None
    error_message: str | None = None
    metrics: RolloutMetrics | None = None
    reward: float | None = None


@dataclass
class CompletionsResult:
    """One chat turn: the assistant message and what TrainGate recorded for it."""

    message: Message
    token_ids: list[Any] = field(default_factory=list)
    logprobs: list[Any] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)
    finish_reason: str = "stop"

    @property
    def has_tool_calls(self) -> bool:
        """Whether the assistant asked for tool calls."""
        return bool(self.message.get("tool_calls"))

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        """The assistant's tool calls (empty when none)."""
        return parse_tool_calls(self.message)

    @property
    def content(self) -> str | None:
        """The assistant's text, or None."""
        content = self.message.get("content")
        return None if content is None else get_message_content(self.message)


#: What a journal raises instead of asking (the rollout was cancelled, its deadline passed, a
#: replay diverged, the execution's history is full): not counted as a chat call.
_NOT_ASKED = (RolloutCancelled, RolloutDeadlineReached, ReplayDiverged, RolloutHistoryFull)


class RolloutLLMClient:
    """Chat calls of one rollout, through the process's shared TrainGate client; fills metrics."""

    def __init__(
        self,
        client: TrainGateClient,
        *,
        server_url: str,
        rollout_id: str,
        api_key: str | None,
        metrics: RolloutMetrics | None = None,
        journal: Journal | None = None,
    ) -> None:
        self._client = client
        #: The durable worker's record of the rollout (None on a plain worker): each chat call
        #: goes through it (rollout_sdk.agent.journal).
        self.journal = journal
        self.server_url = server_url
        self.rollout_id = rollout_id
        self._api_key = api_key
        self.metrics = metrics or RolloutMetrics()
        #: The first failure of a chat call that ends the rollout whatever the agent does with
        #: it (the outbound policy refused the address, an answer was too large): the worker
        #: reports the rollout in its category.
        self.ended_by: RolloutError | None = None

    def build_request(self, messages: list[Message], /, **params: Any) -> dict[str, Any]:
        """The chat-completion body: protocol defaults, then the caller's params, nulls omitted.

        ``rollout_id`` and ``messages`` always come from the rollout, even when the params carry
        keys of those names; any other sampling param (``seed``, ``presence_penalty``...) is sent.
        """
        body: dict[str, Any] = {
            "model": "default",
            "temperature": 1.0,
            "top_p": 1.0,
            "max_tokens": 512,
            "logprobs": True,
        }
        for key, value in params.items():
            if key in ("rollout_id", "messages"):
                continue
            body[key] = value
        if "stop" in body:
            stop = body["stop"]
            body["stop"] = [stop] if isinstance(stop, str) else stop
        body["messages"] = messages
        body["rollout_id"] = self.rollout_id
        return {key: value for key, value in body.items() if value is not None}

    async def chat_completions(
        self, messages: list[Message], /, **params: Any
    ) -> CompletionsResult:
        """Send the full conversation; return the next assistant turn."""
        body = self.build_request(messages, **params)
        started = time.perf_counter()
        recorded_ms: float | None = None
        asked = True
        try:
            if self.journal is None:
                response = await self._client.chat(self.server_url, body, api_key=self._api_key)
            else:
                response, recorded_ms = await self.journal.chat(
                    body, lambda: self._client.chat(self.server_url, body, api_key=self._api_key)
                )
        except RolloutError as exc:
            # Raised by the journal before anything was asked: not a call.
            asked = not isinstance(exc, _NOT_ASKED)
            if exc.ends_rollout and self.ended_by is None:
                self.ended_by = exc
            raise
        finally:
            if asked:
                elapsed = (time.perf_counter() - started) * 1000
                self.metrics.llm_latency_ms += elapsed if recorded_ms is None else recorded_ms
                self.metrics.num_llm_calls += 1
        return self._record(response)

    def get_metrics(self) -> RolloutMetrics:
        """A copy of the metrics so far (v1's ``LLMClientProtocol``)."""
        return self.metrics.model_copy()

    def _record(self, response: CompletionsResponse) -> CompletionsResult:
        choice = response.choices[0] if response.choices else None
        message = dict(choice.message) if choice else {"role": "assistant", "content": ""}
        message.setdefault("role", "assistant")
        usage = response.usage
        usage_dict: dict[str, Any] = {}
        if usage is not None:
            usage_dict = usage.model_dump()
            m = self.metrics
            m.prompt_tokens += usage.prompt_tokens
            m.response_tokens += usage.completion_tokens
            context = usage.total_tokens or (usage.prompt_tokens + usage.completion_tokens)
            m.max_context_tokens = max(m.max_context_tokens, context)
        return CompletionsResult(
            message=message,
            token_ids=list(response.token_ids),
            logprobs=list(response.logprobs),
            usage=usage_dict,
            finish_reason=(choice.finish_reason if choice and choice.finish_reason else "stop"),
        )


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
#: An id used as its own file name, as v1 did: the portable file-name characters, not starting
#: with a dot, at most 128 of them, and not ending like a hashed name (below), so the two kinds
#: of name never meet.
_SAFE_ID = re.compile(r"(?!\.)[A-Za-z0-9._-]{1,128}")
_HASHED = re.compile(r".*-[0-9a-f]{12}")


def debug_trace_path(debug_dir: str | Path, rollout_id: str) -> Path:
    """Where a rollout's debug trace goes: always a plain file name inside ``debug_dir``.

    v1's ``{rollout_id}.jsonl`` when the id is a safe file name. v1 joined any id into the
    path, so ``../`` escaped the directory; any other id gets its unsafe characters replaced and
    a short hash of the whole id, which keeps distinct ids apart.
    """
    if _SAFE_ID.fullmatch(rollout_id) and not _HASHED.fullmatch(rollout_id):
        return Path(debug_dir) / f"{rollout_id}.jsonl"
    cleaned = _UNSAFE.sub("_", rollout_id)[:80].lstrip(".") or "rollout"
    digest = hashlib.sha256(rollout_id.encode()).hexdigest()[:12]
    return Path(debug_dir) / f"{cleaned}-{digest}.jsonl"


class RolloutContext:
    """Everything one rollout's ``run`` needs: the request, the tools, the LLM client."""

    def __init__(
        self,
        request: RolloutRequest,
        tools: list[OpenAIFunctionToolSchema],
        llm: RolloutLLMClient,
        *,
        debug_dir: str | Path | None = None,
        cancelled: asyncio.Event | None = None,
        journal: Journal | None = None,
        _debug_dir: str | Path | None = None,
        _start_time: float | None = None,
    ) -> None:
        # ``_debug_dir`` and ``_start_time`` are the v1 constructor's spellings, kept for tests
        # written against it.
        debug_dir = debug_dir if debug_dir is not None else _debug_dir
        self.request = request
        self.tools = tools
        self.llm = llm
        self._debug_dir = Path(debug_dir) if debug_dir else None
        self._cancelled = cancelled
        #: The durable worker's record of the rollout (None on a plain worker): ``step`` goes
        #: through it, and it decides whether a cancelled rollout starts another turn.
        self.journal = journal
        self._started = _start_time if _start_time is not None else time.perf_counter()
        self._tool_counts = RolloutMetrics()  # used when ``llm`` keeps no metrics of its own
        #: The conversation as of the last completed turn (what a deadline reports).
        self.last_messages: list[Message] = list(request.messages)

    @property
    def metrics(self) -> RolloutMetrics:
        """The rollout's metrics so far.

        Any other v1 ``LLMClientProtocol`` client (a test double, say; ``llm`` is typed as the
        kit's client, which the kit's code relies on) gives its figures through
        ``get_metrics()``, and the context keeps the tool counts, as v1's context did.
        """
        if isinstance(self.llm, RolloutLLMClient):
            return self.llm.metrics
        llm: LLMClientProtocol = self.llm
        return llm.get_metrics().model_copy(
            update={
                "num_tool_calls": self._tool_counts.num_tool_calls,
                "tool_latency_ms": self._tool_counts.tool_latency_ms,
            }
        )

    @property
    def debug_enabled(self) -> bool:
        """Whether ``log_event`` writes anything."""
        return self._debug_dir is not None

    async def chat(
        self, messages: list[Message] | None = None, /, **kwargs: Any
    ) -> CompletionsResult:
        """One LLM turn. Completion params are not applied for you: pass
        ``**ctx.request.completion_params``.

        Raises RolloutCancelled when the rollout was cancelled, and the client's errors.
        """
        # Positional-only, so completion params carrying a "messages" key cannot collide with
        # the conversation; ``chat(messages=...)`` (no params of that name) still works.
        if messages is None:
            if "messages" not in kwargs:
                raise TypeError("chat() needs the conversation: ctx.chat(messages, **params)")
            messages = kwargs.pop("messages")
        if self.journal is None and self._cancelled is not None and self._cancelled.is_set():
            # (A journal decides this itself: a replayed turn is returned even when the
            # rollout was cancelled since, and only a new one is refused.)
            raise RolloutCancelled("rollout cancelled")
        result = await self.llm.chat_completions(messages, **kwargs)
        self.last_messages = [*messages, result.message]
        return result

    async def step(self, name: str, work: Callable[[], Any], /) -> Any:
        """Run ``work`` (a function, sync or async, taking no arguments) and return its result.

        On the plain worker it just runs. On the durable worker it is a checkpoint: its result
        (which must be JSON-serializable) is recorded, and a replay returns the recorded result
        without running ``work`` again; an exception it raised is raised again. Put here any
        work whose result can change from one run to the next (a clock, a random number, a
        request, a tool with effects): docs/aws.md, "Rollouts longer than 15 minutes".
        ``name`` names the step in the execution's history (the same name at the same
        position on every replay).
        """
        if not isinstance(name, str) or not name:
            raise TypeError("step() needs a name: ctx.step('fetch-page', work)")
        if self.journal is None:
            return await run_work(work)
        return await self.journal.step(name, work)

    def complete(
        self,
        final_messages: list[Message],
        finish_reason: str = "stop",
        reward: float | None = None,
    ) -> RolloutResult:
        """A COMPLETED result."""
        return RolloutResult(
            status=RolloutStatus.COMPLETED,
            final_messages=final_messages,
            finish_reason=finish_reason,
            reward=reward,
            metrics=self.metrics,
        )

    def error(
        self, error_message: str, final_messages: list[Message] | None = None
    ) -> RolloutResult:
        """An ERROR result."""
        return RolloutResult(
            status=RolloutStatus.ERROR,
            final_messages=list(final_messages) if final_messages is not None else [],
            finish_reason="error",
            error_message=error_message,
            metrics=self.metrics,
        )

    def record_tool_call(self, latency_ms: float = 0.0) -> None:
        """Count one tool call and its latency in the rollout's metrics."""
        counts = self.llm.metrics if isinstance(self.llm, RolloutLLMClient) else self._tool_counts
        counts.num_tool_calls += 1
        counts.tool_latency_ms += latency_ms

    def log_event(self, event_type: str, **data: Any) -> None:
        """Append one JSON line to the rollout's debug trace; a no-op unless debugging is on.

        A trace that cannot be written is logged as a warning, never raised (as in v1).
        """
        if self._debug_dir is None:
            return
        path = debug_trace_path(self._debug_dir, self.request.rollout_id)
        line = {
            "event": event_type,
            "rollout_id": self.request.rollout_id,
            "elapsed_ms": round((time.perf_counter() - self._started) * 1000, 3),
            **data,
        }
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(line, default=str) + "\n")
        except OSError as exc:
            logger.warning("could not write the debug trace %s: %s", path, exc)


_ABSTRACT = ("get_tools", "run")


class RolloutAgentLoop(abc.ABC):
    """Base class of an agent loop: a ``name``, ``get_tools`` and ``async run``."""

    name: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # ABCMeta computes __abstractmethods__ only after this hook runs, so look for ourselves.
        if any(getattr(getattr(cls, m, None), "__isabstractmethod__", False) for m in _ABSTRACT):
            return  # still abstract: its concrete subclasses are checked
        name = cls.__dict__.get("name", getattr(cls, "name", None))
        if not isinstance(name, str) or not name.strip():
            raise TypeError(
                f"{cls.__name__} must define a non-empty class attribute 'name' "
                f'(for example: name = "{cls.__name__.lower()}")'
            )

    @abc.abstractmethod
    def get_tools(self, request: RolloutRequest) -> list[OpenAIFunctionToolSchema]:
        """The tools offered to the model for this rollout."""

    @abc.abstractmethod
    async def run(self, ctx: RolloutContext) -> RolloutResult:
        """Run the rollout; an exception becomes an ERROR result."""

    def get_default_tools(self) -> list[OpenAIFunctionToolSchema]:
        """The tools for a placeholder request, for discovery and validation (v1's)."""
        return self.get_tools(
            RolloutRequest(
                rollout_id="discovery",
                server_url="http://localhost",
                messages=[],
                completion_params={},
            )
        )


# ---------------------------------------------------------------- v1 names

MessageDict = dict[str, Any]
SamplingParamsDict = dict[str, Any]


@runtime_checkable
class LLMClientProtocol(Protocol):
    """What ``ctx.llm`` offers (v1 API)."""

    async def chat_completions(
        self, messages: list[MessageDict], **kwargs: Any
    ) -> CompletionsResult: ...

    def get_metrics(self) -> RolloutMetrics: ...
