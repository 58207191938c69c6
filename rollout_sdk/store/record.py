"""The rollout record: the source of truth of one rollout, and its state machine (design.md).

::

    ACCEPTED --claim(attempt)--> RUNNING --finish(attempt)--> FINISHED --2xx--> DELIVERED
                                                                  |
                                                                  +--final 4xx--> UNDELIVERABLE

Every move is a conditional write on the state it expects; whoever wins does the work. The final
response is written once (FINISHED) before any callback, so a re-send can never differ.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from rollout_sdk.protocol import InitResponse, RolloutRequest, RolloutResponse


class RecordState(StrEnum):
    """Where a rollout is in its life."""

    ACCEPTED = "ACCEPTED"
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    DELIVERED = "DELIVERED"
    UNDELIVERABLE = "UNDELIVERABLE"

    @property
    def is_active(self) -> bool:
        """Accepted or running: the rollout has no final response yet."""
        return self in (RecordState.ACCEPTED, RecordState.RUNNING)

    @property
    def has_response(self) -> bool:
        """The final response is fixed."""
        return not self.is_active


#: The wire a rollout came in on: v1's (a callback delivers its response) or osmosis-ai 0.3.8's
#: (its result is polled: rollout_sdk/engine/osmosis03.py). Both share the rollout_id space.
PROTOCOL_V1 = "v1"
PROTOCOL_OSMOSIS03 = "osmosis03"

#: Fields that do not make two inits different requests (a retry may rotate the callback key).
_NOT_COMPARED = frozenset({"api_key"})


def idempotency_slot(request: RolloutRequest) -> str:
    """The key the init is deduplicated under. Explicit keys and rollout ids live in separate
    name spaces, so one rollout's id never collides with another rollout's explicit key."""
    if request.idempotency_key is not None:
        return "key:" + request.idempotency_key
    return idempotency_slot_for(request.rollout_id)


def idempotency_slot_for(rollout_id: str) -> str:
    """The slot of a rollout known by its id alone (a v1 init without a key, every 0.3.8 one):
    the same name space, so both protocols share the rollout_id space."""
    return "rid:" + rollout_id


def comparable_request(request: RolloutRequest) -> dict[str, Any]:
    """The request as compared for "same request": every field but the callback key."""
    return request.model_dump(mode="json", exclude=set(_NOT_COMPARED))


def request_fingerprint(comparable: dict[str, Any]) -> str:
    """A stable hash of a :func:`comparable_request` result."""
    canonical = json.dumps(comparable, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def differing_fields(stored: dict[str, Any], incoming: dict[str, Any]) -> list[str]:
    """Top-level fields whose values differ between two comparable requests."""
    keys = sorted(set(stored) | set(incoming))
    return [key for key in keys if stored.get(key) != incoming.get(key)]


#: The longest a hand-off may wait for its worker: Lambda's MaximumEventAgeInSeconds and the
#: rollout queue's MessageRetentionPeriod in template.yaml (tests/aws/test_table_ttl.py).
MAX_HANDOFF_WAIT_SECONDS = 21600


def expiry(now: float, ttl_seconds: float) -> int:
    """``expires_at`` for a record changed at ``now``: whole epoch seconds, as DynamoDB's TTL
    wants them, rounded up so a record never expires early."""
    return math.ceil(now + ttl_seconds)


@dataclass(frozen=True)
class RolloutRecord:
    """One rollout's durable state. Immutable: stores write new versions."""

    rollout_id: str
    slot: str
    fingerprint: str
    request: dict[str, Any]
    init_response: dict[str, Any]
    state: RecordState = RecordState.ACCEPTED
    attempt: int = 0
    lease_until: float | None = None
    response: dict[str, Any] | None = None
    cancel_requested: bool = False
    created_at: float = 0.0
    updated_at: float = 0.0
    expires_at: int = 0
    finished_at: float | None = None
    delivered_at: float | None = None
    delivery_attempts: int = 0
    next_attempt_at: float | None = None
    last_error: str | None = None
    handoffs: int = 0
    #: When a recoverer must look at the record (the due index): a parked response's next try,
    #: a watched lease's end, a duplicate's hand-off lease; None keeps it out of the index.
    due_at: float | None = None
    #: The callback key, sealed by a KeyVault; only while a report may still need it (a 0.3.8
    #: rollout's: its ``llm_api_key``).
    sealed_key: str | None = field(default=None, repr=False)
    extra: dict[str, Any] = field(default_factory=dict)
    #: :data:`PROTOCOL_V1` or :data:`PROTOCOL_OSMOSIS03`.
    protocol: str = PROTOCOL_V1
    #: A 0.3.8 rollout's polling lease: the digest of its token, and until when the last poll
    #: holds it (each poll renews it; one not renewed in time ends the rollout).
    poll_digest: str | None = field(default=None, repr=False)
    poll_until: float | None = None
    #: The status its polls were last answered (None: none yet, the 202's ``queued``).
    poll_seen: str | None = None
    #: Why a cancel was asked, when not by a cancel request (``lease_expired``).
    cancel_reason: str | None = None

    @classmethod
    def new(
        cls,
        request: RolloutRequest,
        init_response: InitResponse,
        *,
        now: float,
        ttl_seconds: float,
    ) -> RolloutRecord:
        """An ACCEPTED record for a fresh init (the callback key is never stored here)."""
        comparable = comparable_request(request)
        return cls(
            rollout_id=request.rollout_id,
            slot=idempotency_slot(request),
            fingerprint=request_fingerprint(comparable),
            request=comparable,
            init_response=init_response.model_dump(mode="json"),
            created_at=now,
            updated_at=now,
            expires_at=expiry(now, ttl_seconds),
        )

    def evolve(self, **changes: Any) -> RolloutRecord:
        """A copy with ``changes`` applied (TypeError for a name that is no field)."""
        if not changes.keys() <= self.__dataclass_fields__.keys():
            return replace(self, **changes)  # raises the TypeError naming the field
        # Copied through its __dict__ rather than by dataclasses.replace: every move of every
        # rollout makes one, and replace (fields(), then __init__ with all the fields) costs
        # about 10 us against 1. The same result: the record has no __post_init__ and its
        # __init__ converts nothing (tests/unit/test_record_copy.py compares the two).
        copy = object.__new__(type(self))
        values = copy.__dict__
        values.update(self.__dict__)
        values.update(changes)
        return copy

    def lease_free(self, now: float) -> bool:
        """Nobody holds the record's lease (running or delivering) at ``now``."""
        return self.lease_until is None or self.lease_until < now

    def is_expired(self, now: float) -> bool:
        """TTL has passed; reads treat the record as absent."""
        return self.expires_at <= now

    def rollout_request(self, api_key: str | None = None) -> RolloutRequest:
        """The stored request, with the callback key put back."""
        return RolloutRequest.model_validate({**self.request, "api_key": api_key})

    def init_response_model(self) -> InitResponse:
        """The stored 202 body."""
        return InitResponse.model_validate(self.init_response)

    def response_model(self) -> RolloutResponse | None:
        """The stored final response, once FINISHED."""
        return None if self.response is None else RolloutResponse.model_validate(self.response)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the stores' serialised form)."""
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        data["state"] = self.state.value
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RolloutRecord:
        """Inverse of :meth:`to_dict`."""
        values = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        values["state"] = RecordState(values["state"])
        return cls(**values)
