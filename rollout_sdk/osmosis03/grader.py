"""``Grader``: what a 0.3.8 author subclasses to reward a rollout's sample (0.3.8's
``osmosis_ai.rollout.grader``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from rollout_sdk.osmosis03.context import GraderContext
from rollout_sdk.osmosis03.types import GraderConfig


class Grader(ABC):
    """Made per rollout with the served configuration; ``grade`` sets the reward with
    ``ctx.set_reward`` (or marks the sample removed)."""

    def __init__(self, config: GraderConfig | None = None):
        self.config = config

    @abstractmethod
    async def grade(self, ctx: GraderContext) -> Any:
        raise NotImplementedError
