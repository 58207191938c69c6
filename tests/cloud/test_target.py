"""How the suite finds a stack: from its outputs and its secret, saying so before any AWS call.

A stack run resolves a real stack (and prints it); this checks the resolution itself in every
``make test``, on moto's server, with the stack's ``ApiUrl`` pointing at the local server.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest

from testkit.aws import FAKE_AWS

from .target import (
    CALLBACK_KEY_VARIABLE,
    STACK_VARIABLE,
    SUITE_AGENT,
    TRAINGATE_VARIABLE,
    CloudSuiteUsageError,
    Target,
    check_stand_in_url,
    requested_stack,
    stack_target,
)

pytestmark = pytest.mark.integration

STAND_IN = {TRAINGATE_VARIABLE: "https://standin.example.com", CALLBACK_KEY_VARIABLE: "cb-key"}


@pytest.fixture
def emulator(target: Target, request: pytest.FixtureRequest) -> Iterator[str]:
    """The session's moto server (tests/conftest.py), else one of this test's own."""
    if target.rig is None:
        pytest.skip(
            "this run resolved a real stack (its 'contacting AWS' line above); this check of "
            "the resolution runs on moto in every make test"
        )
    try:
        yield request.getfixturevalue("moto_endpoint")
    except pytest.FixtureLookupError:
        from rollout_sdk.local.emulator import EmbeddedMoto

        with EmbeddedMoto() as moto:
            yield moto.endpoint_url


def fake_stack(session: Any, name: str, *, api_url: str, server_key: str) -> None:
    """A stack with the kit's outputs and parameters (a queue for a resource) and its secret."""
    secret = session.client("secretsmanager").create_secret(
        Name=f"{name}-key", SecretString=json.dumps({"keys": [server_key, "an-older-key"]})
    )
    template = {
        "Parameters": {
            "AgentLoop": {"Type": "String"},
            "WorkerTimeout": {"Type": "Number", "Default": 900},
            "HandOff": {"Type": "String", "Default": "direct"},
        },
        "Resources": {"Anything": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {
            "ApiUrl": {"Value": api_url},
            "ServerKeySecretArn": {"Value": secret["ARN"]},
        },
    }
    session.client("cloudformation").create_stack(
        StackName=name,
        TemplateBody=json.dumps(template),
        Parameters=[
            {"ParameterKey": "AgentLoop", "ParameterValue": SUITE_AGENT},
            {"ParameterKey": "WorkerTimeout", "ParameterValue": "60"},
        ],
    )


def test_a_stack_resolves_from_its_outputs_and_secret_after_saying_so(
    target: Target, emulator: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", emulator)
    session = boto3.Session()
    sent: list[str] = []
    session.events.register("before-send", lambda request, **_: sent.append(request.url))
    name = f"cloud-suite-{uuid.uuid4().hex[:8]}"
    fake_stack(session, name, api_url=target.base_url + "/", server_key=target.server_key)
    sent.clear()
    said: list[tuple[str, int]] = []
    found = stack_target(
        name, STAND_IN, lambda line: said.append((line, len(sent))), session=session
    )
    try:
        (first, before), (second, _) = said
        assert before == 0, "an AWS call before the announcement"
        assert first.startswith("contacting AWS") and name in first and "us-east-1" in first
        assert "account 123456789012" in second and "WorkerTimeout 60 s" in second
        assert len(sent) == 2 and {urlsplit(url).hostname for url in sent} == {"127.0.0.1"}
        assert (found.kind, found.base_url, found.server_key) == (
            "stack",
            target.base_url,
            target.server_key,
        )
        assert (found.worker_timeout, found.agent) == (60.0, "cloud_suite")
        assert (found.traingate_url, found.callback_key) == (
            "https://standin.example.com",
            "cb-key",
        )
        assert found.http.get("/platform/health").status_code == 200  # the key read works
    finally:
        found.close()


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {TRAINGATE_VARIABLE: "https://standin.example.com"},
        {TRAINGATE_VARIABLE: "http://127.0.0.1:9000", CALLBACK_KEY_VARIABLE: "k"},
        {TRAINGATE_VARIABLE: "http://localhost:9000", CALLBACK_KEY_VARIABLE: "k"},
        {TRAINGATE_VARIABLE: "standin.example.com", CALLBACK_KEY_VARIABLE: "k"},
    ],
    ids=["nothing", "no-key", "loopback", "localhost", "no-scheme"],
)
def test_a_stack_run_refuses_a_stand_in_lambda_could_not_call(environ: dict[str, str]) -> None:
    with pytest.raises(CloudSuiteUsageError, match=TRAINGATE_VARIABLE):
        check_stand_in_url(environ)


def test_a_stand_in_url_is_taken_without_its_trailing_slash() -> None:
    assert check_stand_in_url({**STAND_IN, TRAINGATE_VARIABLE: "https://s.example.com/"}) == (
        "https://s.example.com",
        "cb-key",
    )


def test_the_stack_name_counts_only_outside_a_fake_aws_run() -> None:
    assert requested_stack({}) is None
    assert requested_stack({STACK_VARIABLE: " stack "}) == "stack"
    assert requested_stack({STACK_VARIABLE: "stack", **FAKE_AWS}) is None
