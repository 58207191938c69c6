"""The data an osmosis-ai 0.3.8 workflow and grader see, and the 0.3.8 wire's models.

The names, fields and defaults are 0.3.8's (``osmosis_ai.rollout.types``: its ``config``,
``output``, ``protocol`` and ``sample`` modules, read from the 0.3.8 wheel), so that a workflow
that imports them from ``osmosis_ai.rollout.types`` runs unchanged here; the code is the kit's
own. ``tests/osmosis03/test_surface.py`` compares them with 0.3.8's, in an environment that has
it. Pydantic only: light to import.
"""

from __future__ import annotations

import copy
import logging
import math
import numbers
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

logger = logging.getLogger("rollout_sdk.osmosis03")

MessageDict = dict[str, Any]
SampleMessage = Mapping[str, Any]
#: A workflow's bare return value: its messages.
Messages = list[dict[str, Any]]

#: The header a result poll carries its polling lease in.
POLLING_LEASE_HEADER = "X-Osmosis-Rollout-Lease"


# ---------------------------------------------------------------------------- configuration


class ConcurrencyConfig(BaseModel):
    """How many rollouts of a workflow (or grader) may run at once; None: no bound of its own."""

    max_concurrent: int | None = Field(default=None, ge=1)


class BaseConfig(BaseModel):
    """A workflow's or grader's configuration: a name, and any fields the author adds."""

    model_config: ClassVar[ConfigDict] = ConfigDict(
        extra="allow", validate_assignment=True, arbitrary_types_allowed=True
    )

    name: str
    description: str | None = None


class AgentWorkflowConfig(BaseConfig):
    concurrency: ConcurrencyConfig = Field(default_factory=ConcurrencyConfig)


class GraderConfig(BaseConfig):
    concurrency: ConcurrencyConfig = Field(default_factory=ConcurrencyConfig)


# ---------------------------------------------------------------------------- statuses


class RolloutStatus(StrEnum):
    """A rollout's status: in flight (queued, running, grading) or final."""

    QUEUED = "queued"
    RUNNING = "running"
    GRADING = "grading"
    SUCCESS = "success"
    FAILURE = "failure"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"


#: The statuses a rollout ends with.
FINAL_STATUSES = frozenset({RolloutStatus.SUCCESS, RolloutStatus.FAILURE, RolloutStatus.CANCELLED})


class RolloutErrorCategory(StrEnum):
    """0.3.8's closed set of failure categories (the kit's own, finer, stay in
    ``sample.extra_fields``)."""

    TIMEOUT = "timeout"
    LEASE_EXPIRED = "lease_expired"
    VALIDATION_ERROR = "validation_error"
    HTTP_ERROR = "http_error"
    AGENT_ERROR = "agent_error"
    INTERNAL_ERROR = "internal_error"


# ---------------------------------------------------------------------------- the sample


class RolloutSample(BaseModel):
    """What one rollout produced: its messages, and what grading made of them.

    ``trajectory_messages`` defaults to a copy of ``messages`` (pass None to keep none); the
    reward sent is null unless the rollout succeeded and the sample is not removed.
    """

    # A grader sets the reward by assignment (GraderContext.set_reward): validated there too,
    # so a NaN reward fails in the grader, not on the wire.
    model_config: ClassVar[ConfigDict] = ConfigDict(allow_inf_nan=False, validate_assignment=True)

    messages: Sequence[SampleMessage] = Field(default_factory=list)
    trajectory_messages: Sequence[SampleMessage] | None = None
    label: str | None = None
    reward: float | None = None
    remove_sample: bool = False
    metrics: dict[str, Any] = Field(default_factory=dict)
    extra_fields: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _trajectory_defaults_to_messages(self) -> Self:
        if "trajectory_messages" not in self.model_fields_set:
            try:
                self.trajectory_messages = copy.deepcopy(list(self.messages))
            except Exception:  # a message that cannot be copied keeps no trajectory
                logger.warning("the sample's messages could not be copied as its trajectory")
                self.trajectory_messages = None
        return self

    def json_safe_copy(self) -> Self:
        """A copy whose ``metrics`` and ``extra_fields`` encode as JSON: numbers of other types
        (NumPy's) made plain, values JSON cannot hold (non-finite numbers, objects) left out,
        and said once in a warning."""
        left_out: list[str] = []
        metrics = _plain(self.metrics, left_out)
        extra = _plain(self.extra_fields, left_out)
        if metrics == self.metrics and extra == self.extra_fields and not left_out:
            return self
        if left_out:
            logger.warning(
                "left out of the sample's metrics and extra_fields (no JSON for them): %s",
                ", ".join(sorted(set(left_out))),
            )
        return self.model_copy(update={"metrics": metrics, "extra_fields": extra})


_GONE = object()


def _plain(value: Any, left_out: list[str]) -> Any:
    """``value`` as plain JSON data, or ``_GONE`` (its type named in ``left_out``)."""
    if value is None or isinstance(value, bool | str) or type(value) is int:
        return value
    if type(value) is float:
        if math.isfinite(value):
            return value
        left_out.append("non-finite float")
        return _GONE
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        if math.isfinite(number):
            return number
        left_out.append(f"non-finite {type(value).__name__}")
        return _GONE
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if isinstance(key, bool) or not isinstance(key, str | numbers.Real):
                left_out.append(f"key of type {type(key).__name__}")
                continue
            name = key if isinstance(key, str) else _plain(key, left_out)
            if name is _GONE:
                continue
            kept = _plain(item, left_out)
            if kept is not _GONE:
                out[str(name)] = kept
        return out
    if isinstance(value, list | tuple):
        return [kept for item in value if (kept := _plain(item, left_out)) is not _GONE]
    left_out.append(type(value).__name__)
    return _GONE


class AgentWorkflowOutput(BaseModel):
    """What ``AgentWorkflow.run`` may return: the rollout's messages, and measurements."""

    model_config: ClassVar[ConfigDict] = ConfigDict(
        extra="forbid", allow_inf_nan=False, revalidate_instances="always"
    )

    messages: Messages | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    info: dict[str, Any] = Field(default_factory=dict)


def coerce_output(value: Any) -> AgentWorkflowOutput | None:
    """``run()``'s return value as an output (a message list becomes its ``messages``); None:
    the sample comes from the rollout context's sample source. TypeError for anything else."""
    if value is None:
        return None
    if isinstance(value, AgentWorkflowOutput):
        return AgentWorkflowOutput.model_validate(value)
    if isinstance(value, list):
        return AgentWorkflowOutput(messages=value)
    raise TypeError(
        "AgentWorkflow.run() must return an AgentWorkflowOutput, a list of messages, or None; "
        f"it returned a {type(value).__name__}"
    )


# ---------------------------------------------------------------------------- the wire


def single_path_segment(value: str, *, label: str) -> str:
    """``value`` when it is one path segment (no ``/`` or ``\\``, no NUL, not ``.`` or
    ``..``, not empty); ValueError naming ``label`` otherwise."""
    if not value or value in (".", "..") or "\x00" in value or "/" in value or "\\" in value:
        raise ValueError(
            f"{label} must be a single path segment (no path separators, and not '.' or '..')"
        )
    return value


def _finite_or_none(value: float | None) -> float | None:
    if value is not None and not math.isfinite(value):
        raise ValueError("timeout must be finite; omit it to run unbounded")
    return value


class RolloutInitRequest(BaseModel):
    """``POST /rollout``'s body."""

    initial_messages: list[MessageDict]
    label: str | None = None
    metadata: dict[str, Any] | None = None
    rollout_id: str
    chat_completions_url: str
    llm_api_key: str | None = None
    grade: bool = True
    agent_timeout_sec: float | None = None
    grader_timeout_sec: float | None = None
    extra_fields: dict[str, Any] | None = None

    @field_validator("rollout_id")
    @classmethod
    def _one_segment(cls, value: str) -> str:
        return single_path_segment(value, label="rollout_id")

    @field_validator("llm_api_key")
    @classmethod
    def _key_not_empty(cls, value: str | None) -> str | None:
        if value == "":
            raise ValueError("llm_api_key must be omitted or a non-empty string")
        return value

    @field_validator("agent_timeout_sec", "grader_timeout_sec")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        return _finite_or_none(value)


class RolloutInitResponse(BaseModel):
    """``POST /rollout``'s 202 body."""

    rollout_id: str
    status: RolloutStatus
    polling_lease_token: str = Field(min_length=1)
    result_wait_timeout_sec: float
    polling_lease_timeout_sec: float

    @model_validator(mode="after")
    def _lease_outlasts_the_wait(self) -> Self:
        wait, lease = self.result_wait_timeout_sec, self.polling_lease_timeout_sec
        if not math.isfinite(wait) or wait <= 0:
            raise ValueError("result_wait_timeout_sec must be positive and finite")
        if not math.isfinite(lease) or lease <= wait:
            raise ValueError(
                "polling_lease_timeout_sec must be finite and exceed result_wait_timeout_sec"
            )
        return self


class RolloutResultResponse(BaseModel):
    """``GET /rollout/{rollout_id}/result``'s body: the status, and once final the sample and
    what went wrong."""

    rollout_id: str
    status: RolloutStatus
    sample: RolloutSample | None = None
    err_message: str | None = None
    err_category: RolloutErrorCategory | None = None


class CancelRolloutsRequest(BaseModel):
    """``POST /rollout/cancel``'s body: exactly one of ``ids``, ``prefix`` and ``all``."""

    ids: list[str] | None = None
    prefix: str | None = None
    all: bool = False


class CancelRolloutsResponse(BaseModel):
    """Each rollout's disposition: ``cancelled_queued``, ``cancelled_running`` or
    ``not_found`` (unknown or already final: cancelling is idempotent)."""

    dispositions: dict[str, str]


class RolloutLifecycle(BaseModel):
    """``/health``'s ``lifecycle``: whether the server takes rollouts, and how many run."""

    accepting_rollouts: bool
    active_rollouts: int = Field(ge=0)
