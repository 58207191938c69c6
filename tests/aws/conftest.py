"""Fixtures for the AWS path: moto's server on 127.0.0.1, provisioned from template.yaml, and a
TrainGate stand-in; handler.py imported against them."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rollout_sdk.local.emulator import LocalResources, load_template, provision
from rollout_sdk.local.invoke import function_environment, import_handler
from rollout_sdk.store.dynamodb import DynamoDBStore
from rollout_sdk.testing.standin import LOOPBACK_TRAINGATE, TrainGateStandIn
from rollout_sdk.testing.threads import ServerThread

ROOT = Path(__file__).resolve().parents[2]
SERVER_KEY = "local-server-key"  # what events/*.json send
CALLBACK_KEY = "sample-callback-key"


@pytest.fixture(scope="session")
def template() -> dict[str, Any]:
    return load_template(ROOT / "template.yaml")


@pytest.fixture
def resources(moto_endpoint: str, request: pytest.FixtureRequest) -> LocalResources:
    # A fresh table per test: the prefix carries the test's name.
    prefix = "t-" + re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:40].strip("-")
    return provision(
        moto_endpoint,
        template_path=ROOT / "template.yaml",
        agent_loop="examples.calculator.agent:agent_loop",
        server_key=SERVER_KEY,
        prefix=prefix,
    )


@pytest.fixture
def standin() -> Iterator[tuple[TrainGateStandIn, str]]:
    traingate = TrainGateStandIn(callback_key=CALLBACK_KEY)
    with ServerThread(traingate.app) as server:
        yield traingate, server.url


@pytest.fixture
def store(handler: Any) -> DynamoDBStore:
    """The store of :func:`handler`'s runtime: DynamoDB, on the stack's table."""
    store = handler.runtime.store
    assert isinstance(store, DynamoDBStore)
    return store


@pytest.fixture
def handler(
    resources: LocalResources,
    template: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> Iterator[Any]:
    """``handler.py`` after a cold start against the emulator; a test marked
    ``@pytest.mark.parametrize("handler", ["queue"], indirect=True)`` gets that hand-off, and
    one whose parameter is a dict gets those variables on top (``HAND_OFF`` among them).

    Deployed with ``AllowedServerHosts=127.0.0.1``, as an operator names a TrainGate at a
    private address: the stand-in listens there (the template's default calls only public
    addresses; a test of that default passes ``{"ROLLOUT_SDK_ALLOWED_SERVER_HOSTS": ""}``)."""
    env = function_environment(template, "ApiFunction", resources, LOOPBACK_TRAINGATE)
    param = getattr(request, "param", None)
    if isinstance(param, dict):
        env.update(param)
    else:
        env["HAND_OFF"] = param or env.get("HAND_OFF", "direct")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(ROOT)
    module = import_handler(env)
    try:
        yield module
    finally:
        module.runtime.close()
        sys.modules.pop("handler", None)
