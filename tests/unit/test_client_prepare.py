"""A process that runs its own rollouts loads the TrainGate client's HTTP stack at start-up, so
its first rollout does not pay for the import (about 0.3 s of CPU)."""

from __future__ import annotations

import pytest

from rollout_sdk.http.app import create_app
from rollout_sdk.settings import RolloutClientSettings
from rollout_sdk.store.memory import MemoryStore
from rollout_sdk.traingate.client import TrainGateClient
from rollout_sdk.traingate.transport import AiohttpTransport

from .support import EchoAgent

pytestmark = pytest.mark.timeout(30)


async def test_the_local_app_builds_the_transport_at_start_up() -> None:
    client = TrainGateClient(RolloutClientSettings())
    app = create_app(EchoAgent(), store=MemoryStore(), client=client)
    assert not client.prepared  # building the app loads nothing
    async with app.router.lifespan_context(app):
        assert client.prepared
        assert isinstance(client.transport, AiohttpTransport)
        assert not client.transport.is_open  # the pool opens on the first call, in the loop
    assert not client.prepared  # shutdown closed the pool and dropped the transport
