"""Telemetry: what the engine tells its observers, as a port (metrics, trace spans, log context).

The engine counts and measures at its real transitions (init accepted a rollout, a worker claimed
it, its final response was fixed, delivered, parked, given up on, re-driven; each callback POST,
each chat call) and opens a span around init's claim and hand-off, each chat call and the
callback. Where that goes is the runtime's choice: embedded-metric-format lines and X-Ray
subsegments on Lambda (:mod:`rollout_sdk.aws.telemetry`), counters and histograms for ``GET
/metrics`` on the local server (:mod:`rollout_sdk.http.prometheus`), nothing by default
(:data:`NO_TELEMETRY`). The metric names are fixed (docs/operations.md names what each means):
:class:`Metric`.

Observing never fails a rollout: an adapter swallows its own failures (:class:`EmitFailures`, which
logs the first one). Values are in seconds; an adapter converts to its backend's unit.

The rollout a line of log belongs to is a context variable (:func:`rollout_scope`), not a
process-wide key: a queue batch runs many rollouts at once on one loop, each in its own task, and
each task sees its own rollout. :class:`RolloutLogFilter` stamps it on every record a handler
writes.
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager, nullcontext
from contextvars import ContextVar
from enum import StrEnum
from typing import Any, Protocol

# The name it logged under before it moved out of engine/, kept for log filters.
logger = logging.getLogger("rollout_sdk.engine.telemetry")


class Metric(StrEnum):
    """Every metric the kit emits, by its CloudWatch name (namespace ``RolloutSDK``)."""

    #: init created a record and handed the rollout off (a 202 that started something)
    ROLLOUTS_ACCEPTED = "RolloutsAccepted"
    #: a worker claimed the rollout (ACCEPTED -> RUNNING)
    ROLLOUTS_STARTED = "RolloutsStarted"
    #: the final response was fixed (``status``, ``category`` dimensions)
    ROLLOUTS_FINISHED = "RolloutsFinished"
    #: TrainGate answered 2xx to the callback, recorded
    ROLLOUTS_DELIVERED = "RolloutsDelivered"
    #: the callback failed for now: parked for the re-drive (counted once per rollout)
    ROLLOUTS_PARKED = "RolloutsParked"
    #: a re-drive pass sent a stored response again, or handed a rollout off again
    ROLLOUTS_REDRIVEN = "RolloutsRedriven"
    #: TrainGate refused the callback for good, or the re-drive gave up
    ROLLOUTS_UNDELIVERABLE = "RolloutsUndeliverable"
    #: each POST to /v1/rollout/completed
    CALLBACK_ATTEMPTS = "CallbackAttempts"
    #: once per execution environment (Lambda only)
    COLD_STARTS = "ColdStarts"
    #: one chat call, retries included (seconds)
    CHAT_CALL_LATENCY = "ChatCallLatency"
    #: claim to final response fixed (seconds)
    ROLLOUT_DURATION = "RolloutDuration"
    #: per re-drive pass: the age since finished_at of the oldest parked response it saw, 0 if
    #: none (seconds)
    OLDEST_PARKED_AGE = "OldestParkedAge"
    #: a rollout's full cost estimate once it is final, after delivery and re-drive (US
    #: dollars; Lambda only: docs/cost.md)
    ROLLOUT_COST = "RolloutCost"
    #: a call the outbound policy refused at connect time (nothing sent; the alarm's metric)
    OUTBOUND_REFUSED = "OutboundRefused"


class Span(StrEnum):
    """The spans (X-Ray subsegments on Lambda) the engine opens, each annotated with the
    rollout_id."""

    CLAIM = "init.claim"
    HAND_OFF = "init.hand_off"
    CHAT = "chat"
    CALLBACK = "callback"


class Telemetry(Protocol):
    """Where the engine's metrics and spans go. Implementations never raise."""

    def count(self, metric: Metric, value: float = 1, /, **dimensions: str) -> None:
        """Add ``value`` to a counter; ``dimensions`` (``status``, ``category``) beyond the
        runtime's own (function, hand-off)."""
        ...

    def observe(self, metric: Metric, value: float, /, **dimensions: str) -> None:
        """Record one value of a distribution (or set a gauge), in seconds for durations."""
        ...

    def span(self, name: Span, *, rollout_id: str) -> AbstractContextManager[None]:
        """A span around the block, annotated with ``rollout_id``; the block's own exceptions
        pass through unchanged."""
        ...


class NoTelemetry:
    """Observes nothing: the default, and what ``create_app`` uses (the local server's metrics
    are Prometheus')."""

    def count(self, metric: Metric, value: float = 1, /, **dimensions: str) -> None:
        """Nothing."""

    def observe(self, metric: Metric, value: float, /, **dimensions: str) -> None:
        """Nothing."""

    def span(self, name: Span, *, rollout_id: str) -> AbstractContextManager[None]:
        """An empty context."""
        return nullcontext()


NO_TELEMETRY: Telemetry = NoTelemetry()


class EmitFailures:
    """Swallows every failure to emit; logs the first one (with its traceback), once.

    A metric or a trace is never worth a rollout: a broken stdout, a closed socket or a bug in an
    adapter must not reach the engine. Logging every failure would flood the logs with the same
    error on every call, so only the first one is logged, naming ``what`` failed.
    """

    def __init__(self, what: str) -> None:
        self.what = what
        self.failures = 0

    # A context manager of its own rather than ``contextlib.contextmanager``: every metric
    # goes through it, and a generator-based one costs a generator and two frames per use.
    def swallowed(self) -> EmitFailures:
        """Run the block; an exception from it is counted, logged the first time, and dropped."""
        return self

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> bool:
        if kind is None or not issubclass(kind, Exception):
            return False
        self.failures += 1
        if self.failures == 1:
            logger.warning(
                "%s failed; the rollout goes on, and further failures are not logged",
                self.what,
                exc_info=exc,
            )
        return True


def finished_dimensions(status: str, category: str | None) -> dict[str, str]:
    """The dimensions of :attr:`Metric.ROLLOUTS_FINISHED`: the status, and the failure category
    (``none`` for COMPLETED)."""
    return {"status": status, "category": category or "none"}


# ---------------------------------------------------------------------- the rollout of a log line

_current_rollout: ContextVar[str | None] = ContextVar("rollout_sdk_rollout_id", default=None)


def current_rollout() -> str | None:
    """The rollout the running task works on, if any."""
    return _current_rollout.get()


class rollout_scope:  # named as the function it was: ``with rollout_scope(rollout_id):``
    """Every log line written inside the block (in this task, and in tasks it starts) carries
    ``rollout_id``; the previous value comes back after it. (A class, not a generator-based
    context manager: the worker and delivery enter one per rollout.)"""

    __slots__ = ("_rollout_id", "_token")

    def __init__(self, rollout_id: str) -> None:
        self._rollout_id = rollout_id

    def __enter__(self) -> None:
        self._token = _current_rollout.set(self._rollout_id)

    def __exit__(self, *_: object) -> None:
        _current_rollout.reset(self._token)


class RolloutLogFilter(logging.Filter):
    """Puts the current rollout's id on each record as ``rollout_id`` (a record that names one
    itself keeps its own). Add it to a handler: it then applies to every logger behind it."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Stamp the record; never drops one."""
        rollout_id = _current_rollout.get()
        if rollout_id is not None and not hasattr(record, "rollout_id"):
            record.rollout_id = rollout_id
        return True
