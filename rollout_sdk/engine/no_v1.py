"""The v1 side of a server that serves only an osmosis-ai 0.3.8 workflow (``rollout-sdk serve
--workflow`` without ``--agent``). A module of its own, light: init checks for it on every v1
init, and the 0.3.8 modules are loaded only where a workflow is served."""

from __future__ import annotations

from rollout_sdk.agent.loop import RolloutAgentLoop, RolloutResult
from rollout_sdk.agent.loop import RolloutContext as V1Context
from rollout_sdk.errors import ProtocolNotServed
from rollout_sdk.protocol import OpenAIFunctionToolSchema, RolloutRequest

#: What a v1 init is answered on a server that serves only a 0.3.8 workflow.
NOT_V1 = (
    "this server serves osmosis-ai 0.3.8 rollouts only (POST /rollout); start it with "
    "--agent MODULE:ATTR beside --workflow to serve v1's /v1/rollout/init too"
)


class NoV1AgentLoop(RolloutAgentLoop):
    """The v1 side of a server that serves only a 0.3.8 workflow (``rollout-sdk serve
    --workflow`` without ``--agent``): its v1 inits are refused, 404 naming the fix."""

    name = "none (osmosis-ai 0.3.8 only)"

    def get_tools(self, request: RolloutRequest) -> list[OpenAIFunctionToolSchema]:
        return []

    async def run(self, ctx: V1Context) -> RolloutResult:
        raise ProtocolNotServed(NOT_V1)
