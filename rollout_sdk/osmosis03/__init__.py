"""The osmosis-ai 0.3.8 author API: ``AgentWorkflow``, ``Grader`` and what they are given.

Its modules mirror those a 0.3.8 workflow imports from ``osmosis_ai.rollout``
(``agent_workflow``, ``grader``, ``context``, ``types``, and this package's names), so a
workflow moves over by replacing ``osmosis_ai.rollout`` with ``rollout_sdk.osmosis03`` in its
imports, and ``rollout-sdk serve --workflow MODULE:ATTR --grader MODULE:ATTR`` serves it on the
0.3.8 wire. Served by the kit's engine, not 0.3.8's ``LocalBackend`` (not here, nor the
execution types only a backend uses): docs/osmosis03.md says what
differs. Pydantic and the standard library only.
"""

from __future__ import annotations

from rollout_sdk.osmosis03.agent_workflow import AgentWorkflow
from rollout_sdk.osmosis03.context import (
    AgentWorkflowContext,
    GraderContext,
    RolloutContext,
    SampleSource,
    get_rollout_context,
)
from rollout_sdk.osmosis03.grader import Grader
from rollout_sdk.osmosis03.types import (
    AgentWorkflowConfig,
    AgentWorkflowOutput,
    BaseConfig,
    ConcurrencyConfig,
    GraderConfig,
    MessageDict,
    RolloutErrorCategory,
    RolloutInitRequest,
    RolloutInitResponse,
    RolloutResultResponse,
    RolloutSample,
    RolloutStatus,
)

__all__ = [
    "AgentWorkflow",
    "AgentWorkflowConfig",
    "AgentWorkflowContext",
    "AgentWorkflowOutput",
    "BaseConfig",
    "ConcurrencyConfig",
    "Grader",
    "GraderConfig",
    "GraderContext",
    "MessageDict",
    "RolloutContext",
    "RolloutErrorCategory",
    "RolloutInitRequest",
    "RolloutInitResponse",
    "RolloutResultResponse",
    "RolloutSample",
    "RolloutStatus",
    "SampleSource",
    "get_rollout_context",
]
