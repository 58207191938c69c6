"""An osmosis-ai 0.3.8 workflow and grader, moved over by their imports: where 0.3.8 has
``from osmosis_ai.rollout import ...``, this has ``from rollout_sdk.osmosis03 import ...``.

``AnswerWorkflow`` asks the model once, at the endpoint the trainer sent
(``chat_completions_url``, with ``llm_api_key`` as its bearer key), and returns the
conversation; ``ContainsLabel`` rewards 1.0 when the answer contains the label. Serve them::

    rollout-sdk serve --workflow examples.osmosis03.workflow:AnswerWorkflow \\
        --grader examples.osmosis03.workflow:ContainsLabel

The model call is the workflow's own I/O (httpx here; any client does): the kit's outbound
policy governs what the kit sends, not this (docs/security.md).
"""

from __future__ import annotations

from typing import Any

import httpx

from rollout_sdk.osmosis03 import (
    AgentWorkflow,
    AgentWorkflowConfig,
    AgentWorkflowContext,
    Grader,
    GraderContext,
    get_rollout_context,
)


class AnswerWorkflow(AgentWorkflow[AgentWorkflowConfig]):
    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> list[dict[str, Any]]:
        rollout = get_rollout_context()
        assert rollout is not None, "the server runs every workflow in a rollout context"
        headers = {"Authorization": f"Bearer {rollout.api_key}"} if rollout.api_key else {}
        async with httpx.AsyncClient(timeout=60) as http:
            answer = await http.post(
                rollout.chat_completions_url.rstrip("/") + "/chat/completions",
                json={"model": "default", "messages": ctx.prompt},
                headers=headers,
            )
        answer.raise_for_status()
        return [*ctx.prompt, answer.json()["choices"][0]["message"]]


class ContainsLabel(Grader):
    async def grade(self, ctx: GraderContext) -> None:
        assert ctx.sample is not None
        last = ctx.sample.messages[-1] if ctx.sample.messages else {}
        text = str(last.get("content") or "")
        ctx.set_reward(1.0 if ctx.label and ctx.label in text else 0.0)
