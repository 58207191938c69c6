"""What a 0.3.8 workflow and grader are given: the rollout's context (its model endpoint and
key, its one sample source), the workflow's context and the grader's.

0.3.8's names and fields (``osmosis_ai.rollout.context``); the kit's own code. A workflow reads
``get_rollout_context()`` for the endpoint to call (``chat_completions_url``, with ``api_key``
as its bearer key): the calls are the workflow's own I/O, which the kit's outbound policy does
not govern (docs/security.md).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from rollout_sdk.osmosis03.types import AgentWorkflowConfig, RolloutSample, RolloutStatus

#: What a container-side runner reads when it is given no context (0.3.8's names).
CHAT_COMPLETIONS_URL_ENV = "OSMOSIS_CHAT_COMPLETIONS_URL"
API_KEY_ENV = "OSMOSIS_API_KEY"
ROLLOUT_ID_ENV = "OSMOSIS_ROLLOUT_ID"

TConfig = TypeVar("TConfig", bound=AgentWorkflowConfig)


class SampleSource(ABC):
    """Makes the rollout's one sample when it is graded (an integration's agent or session
    registers one with :meth:`RolloutContext.set_sample_source`)."""

    @abstractmethod
    async def get_sample(self) -> RolloutSample:
        """The rollout's sample as it stands."""

    async def get_preview(self, max_messages: int) -> RolloutSample | None:
        """A snapshot of the last ``max_messages`` messages for a live preview; none here (the
        kit serves no previews)."""
        return None


rollout_contextvar: ContextVar[RolloutContext | None] = ContextVar(
    "rollout_sdk_osmosis03_rollout", default=None
)


@dataclass
class RolloutContext:
    """The rollout the current code runs for: the model endpoint and its key, the id, and the
    sample source. The kit's worker makes one per rollout; given none, the fields come from
    ``OSMOSIS_CHAT_COMPLETIONS_URL``, ``OSMOSIS_API_KEY`` and ``OSMOSIS_ROLLOUT_ID``."""

    chat_completions_url: str = ""
    api_key: str | None = None
    rollout_id: str = ""
    sample_source: SampleSource | None = None
    #: Where the kit's worker hears of a status change (grading); None: nobody listens.
    progress: Any = None
    process_id: str | None = None
    preview_path: Path | None = None
    preview_enabled: bool = True
    _token: Token[RolloutContext | None] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.chat_completions_url:
            self.chat_completions_url = os.environ.get(CHAT_COMPLETIONS_URL_ENV, "")
        if not self.api_key:
            self.api_key = os.environ.get(API_KEY_ENV)
        if not self.rollout_id:
            self.rollout_id = os.environ.get(ROLLOUT_ID_ENV, "")

    def __enter__(self) -> RolloutContext:
        self._token = rollout_contextvar.set(self)
        return self

    def __exit__(self, *_: Any) -> None:
        if self._token is not None:
            rollout_contextvar.reset(self._token)
            self._token = None
        else:
            rollout_contextvar.set(None)

    def set_sample_source(self, source: SampleSource) -> None:
        """Register the rollout's one sample source; a second raises ValueError (one rollout,
        one sample: build one agent or session per rollout)."""
        if self.sample_source is not None:
            raise ValueError(
                "this rollout already has a sample source: a rollout makes one sample, so build "
                "one agent or session per rollout"
            )
        self.sample_source = source

    async def get_sample(self) -> RolloutSample | None:
        """The sample source's sample, or None when none was registered."""
        if self.sample_source is None:
            return None
        return await self.sample_source.get_sample()

    async def set_status(self, status: RolloutStatus) -> None:
        """Tell whoever runs the rollout that its status changed (the kit's worker: grading)."""
        if self.progress is not None:
            await self.progress.set_status(status)


def get_rollout_context() -> RolloutContext | None:
    """The context of the rollout the current code runs for, or None outside one."""
    return rollout_contextvar.get()


@dataclass
class GraderContext:
    """What ``Grader.grade`` is given: the label, the rollout's sample (to reward with
    :meth:`set_reward`), and the request's metadata."""

    label: str | None = None
    sample: RolloutSample | None = None
    project_path: str | None = None
    metadata: dict[str, Any] | None = None
    artifacts_dir: Path | None = None

    def set_reward(self, reward: float) -> None:
        if self.sample is None:
            raise ValueError("there is no sample to reward: the workflow produced none")
        self.sample.reward = reward


@dataclass
class AgentWorkflowContext(Generic[TConfig]):
    """What ``AgentWorkflow.run`` is given: the prompt (the request's ``initial_messages``), the
    workflow's configuration, the request's metadata, and a folder of its own."""

    prompt: list[dict[str, Any]]
    config: TConfig | None = None
    metadata: dict[str, Any] | None = None
    artifacts_dir: Path | None = None
