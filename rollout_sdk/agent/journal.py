"""The journal: where a durable worker records each turn, so that a replay returns it.

A plain worker has none: ``ctx.chat`` asks TrainGate and ``ctx.step`` runs its work. The durable
worker (``DurableWorker=true``, :mod:`rollout_sdk.aws.durable`) runs one rollout across many
Lambda invocations, and every invocation runs the agent again from its first line: each
``ctx.chat`` call, each ``ctx.step`` and each batch of tool calls made through
:func:`~rollout_sdk.agent.tools.execute_tool_calls` goes through its :class:`Journal`, which
returns what was recorded at that position instead of doing the work again, and does (and
records) the work only past the end of the record.

What is recorded is compared with what is asked: a chat call's body (its fingerprint), a
step's name. A replay that asks for something else at a recorded position has diverged, and
the rollout ends ERROR ``replay_diverged`` (:class:`~rollout_sdk.errors.ReplayDiverged`).

A failure is recorded as well as an answer, and a replay raises it again: an exception of the
kit's (:mod:`rollout_sdk.errors`) comes back as the same class with the same message, any other
as :class:`~rollout_sdk.errors.ReplayedError`, carrying the original type's name. The first run raises the same
rebuilt exception, so that the agent sees one thing, whichever invocation it runs in.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

from rollout_sdk import errors
from rollout_sdk.errors import ReplayedError, RolloutError

if TYPE_CHECKING:
    import asyncio

    from rollout_sdk.protocol import CompletionsResponse

#: The journal of the rollout the current task runs (None: a plain worker). The worker sets it
#: around the agent's run, so that the tool helpers, which take no context, find it.
current_journal: ContextVar[Journal | None] = ContextVar("rollout_sdk_journal", default=None)


class Journal(Protocol):
    """What the agent API asks of a durable worker's record of one rollout."""

    #: The first failure that ends the rollout whatever the agent makes of it (its deadline,
    #: a diverging replay), raised by the journal itself rather than by a chat call.
    ended_by: RolloutError | None

    def bind(self, cancelled: asyncio.Event) -> None:
        """The rollout's cancel signal: no new turn starts once it is set."""
        ...

    async def chat(
        self, body: dict[str, Any], ask: Callable[[], Awaitable[CompletionsResponse]]
    ) -> tuple[CompletionsResponse, float]:
        """The answer to the chat call ``body`` and its latency in ms: recorded, or asked
        now with ``ask`` and recorded. Raises what the call raised (rebuilt), RolloutCancelled,
        RolloutDeadlineReached or ReplayDiverged."""
        ...

    async def step(self, name: str, work: Callable[[], Any]) -> Any:
        """``work``'s result (sync or async, JSON-serializable): recorded, or run now and
        recorded. Raises what ``work`` raised (rebuilt), RolloutCancelled,
        RolloutDeadlineReached or ReplayDiverged."""
        ...


def fingerprint(body: dict[str, Any]) -> str:
    """A short digest of a chat call's body: what a replay compares with the recorded one."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def describe_error(exc: BaseException) -> dict[str, Any]:
    """An exception as a journal records it (JSON): its class, message and status code."""
    kind = type(exc)
    described: dict[str, Any] = {
        "type": kind.__name__ if kind.__module__ == errors.__name__ else kind.__qualname__,
        "kit": kind.__module__ == errors.__name__,
        "message": str(exc),
    }
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        described["status_code"] = status
    return described


def rebuild_error(described: dict[str, Any]) -> Exception:
    """The exception :func:`describe_error` recorded: the kit's own class again, when it can be
    built from a message (and a status code), else ReplayedError."""
    message = str(described.get("message", ""))
    name = str(described.get("type", "Exception"))
    kind = getattr(errors, name, None) if described.get("kit") else None
    if isinstance(kind, type) and issubclass(kind, RolloutError):
        try:
            if "status_code" in described:
                return kind(message, described["status_code"])
            return kind(message)
        except TypeError:
            pass  # a constructor of another shape: fall through
    return ReplayedError(message, name)


async def run_work(work: Callable[[], Any]) -> Any:
    """Call ``work``; await what it returns when that is awaitable (``ctx.step`` takes either)."""
    value = work()
    if inspect.isawaitable(value):
        value = await value
    return value
