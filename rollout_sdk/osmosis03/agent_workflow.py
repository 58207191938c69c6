"""``AgentWorkflow``: what a 0.3.8 author subclasses to run one rollout (0.3.8's
``osmosis_ai.rollout.agent_workflow``; written for Python 3.11, where 0.3.8's
``class AgentWorkflow[TConfig]`` is ``Generic[TConfig]``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Generic

from rollout_sdk.osmosis03.context import AgentWorkflowContext, TConfig
from rollout_sdk.osmosis03.types import AgentWorkflowOutput, Messages


class AgentWorkflow(ABC, Generic[TConfig]):
    """One rollout's agent: made per rollout with the served configuration, then ``run``."""

    def __init__(self, config: TConfig | None = None):
        self.config = config

    @abstractmethod
    async def run(
        self, ctx: AgentWorkflowContext[TConfig]
    ) -> AgentWorkflowOutput | Messages | None:
        """Run the rollout. Return an ``AgentWorkflowOutput`` or a list of messages (the
        sample's messages), or None to take the sample from the rollout context's sample
        source."""
        raise NotImplementedError
