"""The osmosis-ai 0.3.8 routes, on the same app as v1's (where a workflow is served):
``POST /rollout``, ``GET /rollout/{rollout_id}/result`` and ``POST /rollout/cancel``, behind the
same server key. Their work is :class:`~rollout_sdk.engine.osmosis03.Osmosis03Service`'s; their
errors go through the one table (:mod:`rollout_sdk.http.problems`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import FastAPI, Header

from rollout_sdk.osmosis03.types import (
    POLLING_LEASE_HEADER,
    CancelRolloutsRequest,
    CancelRolloutsResponse,
    RolloutInitRequest,
    RolloutInitResponse,
    RolloutResultResponse,
)

if TYPE_CHECKING:
    from rollout_sdk.engine.osmosis03 import Osmosis03Service


def add_osmosis03_routes(app: FastAPI, service: Osmosis03Service) -> None:
    @app.post(
        "/rollout", status_code=202, response_model=RolloutInitResponse, tags=["osmosis-ai 0.3.8"]
    )
    async def submit_rollout(request: RolloutInitRequest) -> RolloutInitResponse:
        """Register and start a rollout; poll its result with the lease token answered."""
        return await service.submit(request)

    @app.get(
        "/rollout/{rollout_id}/result",
        response_model=RolloutResultResponse,
        response_model_exclude={"sample": {"trajectory_messages"}},
        tags=["osmosis-ai 0.3.8"],
    )
    async def rollout_result(
        rollout_id: str,
        lease_token: str = Header(alias=POLLING_LEASE_HEADER, min_length=1),
    ) -> RolloutResultResponse:
        """The status, after a change or the wait timeout; the result once final (renews the
        polling lease)."""
        return await service.result(rollout_id, lease_token)

    @app.post("/rollout/cancel", response_model=CancelRolloutsResponse, tags=["osmosis-ai 0.3.8"])
    async def cancel_rollouts(request: CancelRolloutsRequest) -> CancelRolloutsResponse:
        """Cancel by ``ids``, or this server's 0.3.8 rollouts by ``prefix`` or ``all``."""
        dispositions = await service.cancel(
            ids=request.ids, prefix=request.prefix, every=request.all
        )
        return CancelRolloutsResponse(dispositions=dispositions)
