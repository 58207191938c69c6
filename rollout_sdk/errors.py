"""The kit's exception tree.

Every exception the kit raises on purpose derives from :class:`RolloutError`. The names of
the v1 Osmosis SDK are kept, with their meaning, so ported agents can keep catching them::

    RolloutError
    ├── OsmosisRolloutError                 (v1 root; everything the agent API raises)
    │   ├── OsmosisTransportError           TrainGate unreachable (connect, read, dropped)
    │   │   └── OutboundRefused             the outbound policy refused the address: nothing sent
    │   ├── OsmosisServerError              TrainGate answered 5xx after every retry
    │   │   └── AnswerTooLarge              an answer passed ROLLOUT_SDK_MAX_ANSWER_BYTES
    │   ├── OsmosisValidationError          TrainGate answered a final 4xx
    │   ├── OsmosisTimeoutError             a TrainGate call or the rollout deadline ran out
    │   ├── AgentLoopNotFoundError          registry look-up of an unknown name
    │   ├── AgentLoopValidationError        validate_agent_loop(...).raise_if_invalid()
    │   ├── RolloutCancelled                ctx.chat after the rollout was cancelled
    │   └── ToolExecutionError              a tool failed (tool_call_id, tool_name)
    │       └── ToolArgumentError           a tool call's arguments are not a JSON object
    ├── ConfigurationError                  a setting is out of range or inconsistent
    │   └── ServerKeyMissing                503: the key source holds no server key
    ├── ServerKeyUnavailable                503: the key source could not be read (Retry-After)
    ├── RequestRejected                     a request the server refuses
    │   ├── Unauthorized                    401: the server key is missing, wrong or malformed
    │   ├── EndpointDisabled                404: /platform/health with no server key configured
    │   ├── UnsupportedMediaType            415: init's body is not JSON
    │   ├── PayloadTooLarge                 413: metadata or body over the configured limit
    │   ├── RecordTooLarge                  413: the store refused the init's record as too large
    │   ├── ServerUrlRefused                422: server_url not allowed (allowlist, link-local)
    │   ├── IdempotencyConflict             409: same key, different request / id in use
    │   ├── RolloutNotFound                 404: status or cancel of an unknown rollout
    │   ├── RolloutAlreadyFinished          409: cancel of a finished rollout
    │   └── AgentToolsError                 500: the agent's get_tools failed or is invalid
    ├── StoreError                          503: the record store failed (I/O, corruption)
    │   ├── ScanDenied                      the role may not scan the table (the backfill)
    │   ├── ValueTooLarge                   a value over a DynamoDB item's inline limit, no
    │   │                                   bucket for it (RecordTooLarge at create)
    │   ├── ConditionFailed                 a conditional write refused (DynamoDB's, answered
    │   │                                   by the store: it never leaves it)
    │   └── TransactionCancelled            a transaction cancelled (likewise)
    ├── DispatchError                       503: the hand-off to a worker failed
    │   └── Overloaded                      429: past the concurrency limit and the queue bound
    ├── ServeError                          the local server could not start
    ├── InstanceThrottled                   start-api: a function runs as many instances as
    │                                       it may (API Gateway answers 500)
    ├── PublicIPDetectionError              detect_public_ip found no public address
    ├── RegisterError                       registering with the platform could not be done
    ├── DatasetError                        the demo's dataset cannot be read or a row is bad
    └── MCPLoadError                        an MCP folder cannot be loaded (v1: an Exception)

The HTTP answer of each (status, headers, body) is one table, :mod:`rollout_sdk.http.problems`,
which the app and the ASGI middlewares both render from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any


class FailureCategory(StrEnum):
    """Why a rollout ended as ERROR, as its final response says (``extra_fields``, under
    ``rollout_sdk.failure``; docs/operations.md has the table). Only ``agent_error`` and
    ``invalid_result`` are the agent's own outcome; every other is the kit's, the platform's, or
    the trainer's, and carries no reward: a trainer drops those instead of training on them."""

    #: The agent raised, or returned an ERROR itself.
    AGENT_ERROR = "agent_error"
    #: The rollout ran past its deadline.
    TIMEOUT = "timeout"
    #: TrainGate (or an operator) cancelled it.
    CANCELLED = "cancelled"
    #: The agent's result cannot be carried by the protocol (a NaN reward, a bad status).
    INVALID_RESULT = "invalid_result"
    #: The kit or the infrastructure failed (the store, TrainGate's chat endpoint, a bug).
    INFRASTRUCTURE = "infrastructure"
    #: The worker running it stopped (a crash, a Lambda timeout, a restart) before reporting.
    WORKER_LOST = "worker_lost"
    #: It never ran: no worker took it (an event aged out, every hand-off failed, dead letters).
    NEVER_STARTED = "never_started"
    #: The outbound policy refused the address ``server_url`` led to when the worker connected
    #: (a name resolving inside the network): nothing was sent, the callback included.
    OUTBOUND_REFUSED = "outbound_refused"
    #: An answer from TrainGate was larger than ``ROLLOUT_SDK_MAX_ANSWER_BYTES``.
    ANSWER_TOO_LARGE = "answer_too_large"
    #: On the durable worker, a replay asked for a different chat call or step than the one
    #: recorded at that position (the agent's code is not deterministic outside its steps, or
    #: changed under an execution in flight): nothing of the diverging turn reached TrainGate.
    REPLAY_DIVERGED = "replay_diverged"
    #: On the durable worker, the execution's history had no room for another turn (Lambda
    #: keeps at most 25,000 operations per execution): the rollout ends with what it did.
    HISTORY_FULL = "history_full"
    #: An osmosis-ai 0.3.8 rollout whose result nobody polled for within its polling lease
    #: (the trainer went away): ended, as 0.3.8 ends it (``err_category`` ``lease_expired``).
    LEASE_EXPIRED = "lease_expired"

    @property
    def retryable(self) -> bool:
        """Running the same rollout again could succeed: the failure was not in the request or
        the agent's answer to it (a cancelled rollout was stopped on purpose)."""
        return self not in (
            FailureCategory.AGENT_ERROR,
            FailureCategory.INVALID_RESULT,
            FailureCategory.CANCELLED,
            # The same request leads to the same address, and the same server's answers.
            FailureCategory.OUTBOUND_REFUSED,
            FailureCategory.ANSWER_TOO_LARGE,
            # The same agent takes as many turns again.
            FailureCategory.HISTORY_FULL,
        )

    @property
    def agents_own(self) -> bool:
        """The agent's own outcome (its reward, if it gave one, stands)."""
        return self in (FailureCategory.AGENT_ERROR, FailureCategory.INVALID_RESULT)


class RolloutError(Exception):
    """Root of every exception raised by the kit. ``category`` is what a rollout that ends on
    it is reported as (the kit's exceptions are the kit's failures unless they say otherwise).
    ``ends_rollout``: met in a chat call, it ends the rollout in its category even when the
    agent catches it."""

    category: FailureCategory = FailureCategory.INFRASTRUCTURE
    ends_rollout: bool = False


class OsmosisRolloutError(RolloutError):
    """Root of the v1 agent-API exceptions."""


class OsmosisTransportError(OsmosisRolloutError):
    """TrainGate could not be reached, or the connection dropped."""


class OutboundRefused(OsmosisTransportError):
    """The outbound policy refused the address a call would have connected to (after
    resolution): nothing was sent. Not retried."""

    category = FailureCategory.OUTBOUND_REFUSED
    ends_rollout = True


class OsmosisServerError(OsmosisRolloutError):
    """TrainGate answered with a server error (5xx) after every retry."""

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class AnswerTooLarge(OsmosisServerError):
    """An answer's body passed ``ROLLOUT_SDK_MAX_ANSWER_BYTES``; the rest was not read. Not
    retried."""

    category = FailureCategory.ANSWER_TOO_LARGE
    ends_rollout = True


class OsmosisValidationError(OsmosisRolloutError):
    """TrainGate rejected the request (a 4xx that retrying cannot fix): what the agent sent."""

    category = FailureCategory.AGENT_ERROR

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class OsmosisTimeoutError(OsmosisRolloutError):
    """A TrainGate call, or the rollout's deadline, ran out of time."""


class AgentLoopNotFoundError(OsmosisRolloutError):
    """No agent loop is registered under the requested name."""

    def __init__(self, name: str, available: list[str] | None = None) -> None:
        listing = ", ".join(available or []) or "none registered"
        super().__init__(f"agent loop {name!r} is not registered (available: {listing})")
        self.name = name
        self.available = list(available or [])


class AgentLoopValidationError(OsmosisRolloutError):
    """An agent loop failed validation; ``errors`` holds each problem."""

    def __init__(self, message: str, errors: Sequence[object] | None = None) -> None:
        super().__init__(message)
        self.errors = list(errors or [])


class RolloutCancelled(OsmosisRolloutError):
    """Raised inside ``ctx.chat`` when the rollout was cancelled; the worker reports it."""

    category = FailureCategory.CANCELLED


class RolloutDeadlineReached(OsmosisTimeoutError):
    """Raised inside ``ctx.chat`` (or ``ctx.step``) on the durable worker when the rollout's
    deadline, which spans invocations, has passed: the worker reports it, with the
    conversation so far, whatever the agent does with it."""

    category = FailureCategory.TIMEOUT
    ends_rollout = True


class ReplayDiverged(OsmosisRolloutError):
    """A replay of a durable rollout asked for another chat call or step than the one recorded
    at the same position; the rollout ends ERROR (``replay_diverged``)."""

    category = FailureCategory.REPLAY_DIVERGED
    ends_rollout = True


class RolloutHistoryFull(OsmosisRolloutError):
    """Raised inside ``ctx.chat`` (or ``ctx.step``) on the durable worker when the execution's
    history has no room left for the step and a suspension after it: the worker reports the
    rollout (``history_full``) with the conversation so far, whatever the agent does with it."""

    category = FailureCategory.HISTORY_FULL
    ends_rollout = True


class CheckpointTooLarge(RolloutError):
    """On the durable worker, a step's result is over the checkpoint limit and no payload
    bucket is configured to keep it (``PAYLOAD_BUCKET``; template.yaml sets it)."""


class ReplayedError(OsmosisRolloutError):
    """On the durable worker, an exception that is not one of the kit's, raised by a recorded
    step's work, as the journal rebuilt it (in the run that recorded it as in every replay):
    its message is the original's, ``type_name`` the original class's qualified name."""

    category = FailureCategory.AGENT_ERROR

    def __init__(self, message: str, type_name: str) -> None:
        super().__init__(message)
        self.type_name = type_name


class ToolExecutionError(OsmosisRolloutError):
    """A tool call failed."""

    category = FailureCategory.AGENT_ERROR

    def __init__(self, message: str, tool_call_id: str = "", tool_name: str = "") -> None:
        super().__init__(message)
        self.tool_call_id = tool_call_id
        self.tool_name = tool_name


class ToolArgumentError(ToolExecutionError):
    """A tool call's arguments are not a JSON object."""


class ConfigurationError(RolloutError):
    """A setting is out of range or settings contradict each other."""


class ServerKeyMissing(ConfigurationError):
    """A server-key source is configured but holds no key: every protected request is refused."""

    def __init__(
        self, message: str = "no server key is configured in the key source; refusing"
    ) -> None:
        super().__init__(message)


class ServerKeyUnavailable(RolloutError):
    """The server-key source (Secrets Manager) could not be read; the request may be retried."""

    def __init__(self, message: str = "the server key could not be read; retry shortly") -> None:
        super().__init__(message)


class RequestRejected(RolloutError):
    """A request the server refuses; each subclass is one HTTP answer (see the table)."""


class Unauthorized(RequestRejected):
    """The server key is missing, wrong or malformed."""

    def __init__(
        self,
        message: str = "Invalid or missing API key: send 'Authorization: Bearer <server key>'",
    ) -> None:
        super().__init__(message)


class MisdirectedRequest(RequestRejected):
    """The request's Host header names a host this server does not answer to (DNS rebinding)."""


class EndpointDisabled(RequestRejected):
    """The endpoint is switched off in this deployment (``/platform/health`` with no key)."""


class UnsupportedMediaType(RequestRejected):
    """Init's body is not declared as JSON."""


class IdempotencyConflict(RequestRejected):
    """The idempotency key or rollout id is already used by a different request."""

    def __init__(self, message: str, fields: list[str] | None = None) -> None:
        super().__init__(message)
        self.fields = list(fields or [])


class PayloadTooLarge(RequestRejected):
    """A request part is larger than the configured limit."""


class RecordTooLarge(RequestRejected):
    """The record store refused to create the init's record because of what it holds (a key or
    the item over DynamoDB's size limits, or a value too large for a deployment without a
    payload bucket): the same init would be refused again, so it is not a 503 to retry."""


class ServerUrlRefused(RequestRejected):
    """``server_url`` (or 0.3.8's ``chat_completions_url``: ``field``) names a host this
    deployment may not call (allowlist, link-local)."""

    def __init__(self, message: str, field: str = "server_url") -> None:
        super().__init__(message)
        self.field = field


class AgentToolsError(RequestRejected):
    """The agent loop's ``get_tools`` raised or returned something invalid."""


class RolloutNotFound(RequestRejected):
    """404: no live record has this rollout id."""


class RolloutAlreadyFinished(RequestRejected):
    """409: the rollout has its final response; it cannot be cancelled."""


class PollLeaseRefused(RequestRejected):
    """403: a 0.3.8 result poll whose ``X-Osmosis-Rollout-Lease`` is not the rollout's."""


class CancelSelectorRefused(RequestRejected):
    """422: a 0.3.8 ``POST /rollout/cancel`` naming not exactly one of ids, prefix and all."""


class ProtocolNotServed(RequestRejected):
    """404: a route of a protocol this server does not run (a v1 init on a server started with
    ``--workflow`` only, or a 0.3.8 route on one with no workflow)."""


class RolloutIdTaken(RequestRejected):
    """409: a 0.3.8 ``POST /rollout`` for a rollout_id already registered (by either
    protocol)."""


class StoreError(RolloutError):
    """The record store failed."""


class ScanDenied(StoreError):
    """DynamoDB refused the due index's backfill its Scan for want of a grant
    (AccessDeniedException): only that one-off after an upgrade scans the table, and
    template.yaml grants it only in a deploy with BackfillDueIndex=true."""


class ValueTooLarge(StoreError):
    """A record's value is over the inline limit of a DynamoDB item compressed, and no S3 bucket
    is configured for large values. At create the store raises RecordTooLarge instead (the
    init's content: no retry changes it)."""


class ConditionFailed(StoreError):
    """A conditional write's condition failed (ConditionalCheckFailedException); ``item`` is the
    item as it was, when DynamoDB returned it. The DynamoDB store answers it (a move not applied,
    a lease not taken); it never leaves the store."""

    def __init__(self, message: str, item: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.item = item


class TransactionCancelled(StoreError):
    """A transaction was cancelled (TransactionCanceledException); ``reasons`` are DynamoDB's,
    one per item, in order. The DynamoDB store answers it (a create that lost a race, a release
    that found the record moved on); it never leaves the store."""

    def __init__(self, message: str, reasons: Sequence[Any] = ()) -> None:
        super().__init__(message)
        self.reasons = list(reasons)


class DispatchError(RolloutError):
    """Handing a rollout to a worker failed."""


class Overloaded(DispatchError):
    """This server holds as many rollouts as it may; TrainGate should retry after a while."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ServeError(RolloutError):
    """The local server could not start."""


class PublicIPDetectionError(RolloutError):
    """``detect_public_ip`` found no public IPv4 address (v1's name)."""


class InstanceThrottled(RolloutError):
    """``rollout-sdk start-api``: the function runs as many instances as it may (Lambda's
    throttle, which API Gateway answers 500)."""


class RegisterError(RolloutError):
    """Registration could not be done; the message says what to fix."""


class DatasetError(RolloutError):
    """The dataset file cannot be read or a row is malformed (the message names file and line)."""


class MCPLoadError(RolloutError):
    """An MCP folder cannot be loaded: no folder, no ``main.py``, FastMCP not installed,
    ``main.py`` failing to import, or no FastMCP instance in it (the message says which, and
    what to do). v1 derived it from ``Exception`` alone, outside its agent-API tree; here it is
    under the kit's root, and still not an ``OsmosisRolloutError``."""
