"""Every collaborator is complete when it is built: the app's compositions and the engine's
assembly give each one its wiring at construction, and nothing is set on it afterwards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rollout_sdk.aws.metering import Costs
from rollout_sdk.dispatch.base import Job
from rollout_sdk.dispatch.inprocess import InProcessDispatcher
from rollout_sdk.engine.assembly import Engine
from rollout_sdk.errors import ConfigurationError
from rollout_sdk.http.app import create_app, in_process
from rollout_sdk.http.prometheus import PrometheusTelemetry
from rollout_sdk.local.server import build_local_app
from rollout_sdk.settings import load_settings
from rollout_sdk.store.memory import MemoryStore
from rollout_sdk.telemetry import NO_TELEMETRY
from rollout_sdk.traingate.client import TrainGateClient

from .support import EchoAgent, RecordingDispatcher

pytestmark = pytest.mark.timeout(30)


def _engine(**given: Any) -> Engine:
    return Engine.build(
        store=MemoryStore(), client=TrainGateClient(), settings=load_settings(), **given
    )


async def _nothing(job: Job) -> None:
    return None


def test_the_wiring_of_a_collaborator_cannot_be_set_after_it_is_built() -> None:
    recovery = _engine().recovery
    with pytest.raises(AttributeError):
        recovery.hand_off = _nothing  # type: ignore[misc]
    client = TrainGateClient()
    with pytest.raises(AttributeError):
        client.telemetry = PrometheusTelemetry()  # type: ignore[misc]
    costs = Costs(hand_off="direct")
    with pytest.raises(AttributeError):
        costs.sink = lambda record, estimate: None  # type: ignore[misc]


def test_each_is_given_its_wiring_at_construction() -> None:
    telemetry = PrometheusTelemetry()
    assert TrainGateClient(telemetry=telemetry).telemetry is telemetry

    def sink(record: object, estimate: object) -> None:
        return None

    assert Costs(hand_off="direct", sink=sink).sink is sink
    assert _engine(hand_off=_nothing).recovery.hand_off is _nothing


def test_the_engine_builds_the_dispatcher_that_runs_its_own_worker() -> None:
    engine = _engine(agent_loop=EchoAgent(), dispatcher=in_process(load_settings()))
    assert isinstance(engine.dispatcher, InProcessDispatcher)
    assert engine.recovery.hand_off == engine.dispatcher.dispatch
    with pytest.raises(ValueError, match="not both"):
        _engine(agent_loop=EchoAgent(), dispatcher=in_process(load_settings()), hand_off=_nothing)
    with pytest.raises(ValueError, match="agent_loop"):
        _engine(dispatcher=in_process(load_settings()))


async def test_create_apps_recovery_hands_off_through_the_apps_dispatcher() -> None:
    dispatcher = RecordingDispatcher()
    services = create_app(EchoAgent(), dispatcher=dispatcher).state.services
    assert services.dispatcher is dispatcher
    await services.engine.recovery.hand_off(Job("r", 1))
    assert dispatcher.jobs == [Job("r", 1)]


def test_the_local_server_counts_its_clients_calls_into_the_metrics_it_serves(
    tmp_path: Path,
) -> None:
    services = build_local_app(EchoAgent(), store="memory", state_dir=tmp_path).state.services
    assert isinstance(services.engine.telemetry, PrometheusTelemetry)
    assert services.client.telemetry is services.engine.telemetry
    assert services.engine.recovery.hand_off == services.dispatcher.dispatch
    # create_app keeps v1's behaviour: no metrics.
    plain = create_app(EchoAgent()).state.services
    assert plain.client.telemetry is NO_TELEMETRY is plain.engine.telemetry


def test_an_engine_given_to_create_app_brings_its_dispatcher() -> None:
    with pytest.raises(ConfigurationError, match="dispatcher"):
        create_app(EchoAgent(), engine=_engine(agent_loop=EchoAgent()))
    with pytest.raises(ConfigurationError, match="not both"):
        create_app(EchoAgent(), engine=_engine(agent_loop=EchoAgent()), store=MemoryStore())
