"""Start-up checks and server keys of the Lambda wiring."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rollout_sdk.aws.clients import AwsClients
from rollout_sdk.aws.runtime import LambdaRuntime, check_deadlines, required_variables
from rollout_sdk.aws.secrets import SecretServerKeys, parse_server_keys
from rollout_sdk.dispatch.base import Job
from rollout_sdk.errors import ConfigurationError
from rollout_sdk.local.emulator import LocalResources
from rollout_sdk.settings import LambdaSettings, RolloutSettings, load_settings


def _settings(request_timeout: float, **aws: Any) -> RolloutSettings:
    return load_settings(
        server={"request_timeout_seconds": request_timeout},
        aws={"AGENT_LOOP": "m:a", "TABLE_NAME": "t", **aws},
    )


def _secret_keys(runtime: LambdaRuntime) -> SecretServerKeys:
    keys = runtime.server_keys
    assert isinstance(keys, SecretServerKeys)
    return keys


def test_a_request_timeout_longer_than_the_worker_allows_is_refused() -> None:
    with pytest.raises(ConfigurationError) as caught:
        check_deadlines(_settings(895, WORKER_TIMEOUT_SECONDS=900))
    message = str(caught.value)
    assert "OSMOSIS_ROLLOUT_SERVER_REQUEST_TIMEOUT_SECONDS" in message
    assert "WorkerTimeout" in message
    assert "890" in message  # what fits: 900 - the 10 s margin


def test_a_request_timeout_that_fits_is_accepted() -> None:
    check_deadlines(_settings(890, WORKER_TIMEOUT_SECONDS=900))


def test_the_durable_worker_takes_rollouts_of_up_to_a_day() -> None:
    check_deadlines(_settings(86_400, WORKER_TIMEOUT_SECONDS=600, DURABLE_WORKER="true"))
    with pytest.raises(ConfigurationError) as caught:
        check_deadlines(_settings(86_401, WORKER_TIMEOUT_SECONDS=600, DURABLE_WORKER="true"))
    assert "at most 86400 s" in str(caught.value) and "RequestTimeoutSeconds" in str(caught.value)


def test_the_durable_worker_beside_the_queue_is_refused() -> None:
    with pytest.raises(ConfigurationError) as caught:
        check_deadlines(_settings(600, DURABLE_WORKER="true", HAND_OFF="queue"))
    assert "HandOff=direct" in str(caught.value) and "DurableWorker=false" in str(caught.value)


def test_a_request_timeout_too_long_for_the_plain_worker_names_the_durable_one() -> None:
    with pytest.raises(ConfigurationError, match="DurableWorker=true"):
        check_deadlines(_settings(3600, WORKER_TIMEOUT_SECONDS=900))


def test_a_worker_timeout_over_lambdas_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="900"):
        LambdaSettings.model_validate({"WORKER_TIMEOUT_SECONDS": 901})


def test_a_bad_lambda_variable_is_named_by_the_lambda_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_LOOP", "examples.calculator.agent:agent_loop")
    monkeypatch.setenv("TABLE_NAME", "t")
    monkeypatch.setenv("WORKER_TIMEOUT_SECONDS", "901")
    monkeypatch.setenv("HAND_OFF", "sideways")
    with pytest.raises(ConfigurationError) as caught:
        LambdaRuntime.from_environment()
    assert "WORKER_TIMEOUT_SECONDS: Input should be less than or equal to 900" in str(caught.value)
    assert "HAND_OFF" in str(caught.value)


def test_the_local_tools_do_not_fail_on_the_lambda_functions_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Generic names an unrelated environment may hold: only the Lambda functions read them.
    monkeypatch.setenv("WORKER_TIMEOUT_SECONDS", "3600")
    monkeypatch.setenv("HAND_OFF", "sideways")
    settings = load_settings()
    assert settings.aws.worker_timeout_seconds == 900
    assert settings.aws.hand_off == "direct"


def test_the_local_tools_need_no_lambda_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AGENT_LOOP", "TABLE_NAME", "WORKER_FUNCTION_NAME", "SERVER_KEY_SECRET_ARN"):
        monkeypatch.delenv(name, raising=False)
    aws = load_settings().aws
    assert (aws.agent_loop, aws.table_name, aws.hand_off) == (None, None, "direct")


def test_missing_environment_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENT_LOOP", raising=False)
    monkeypatch.delenv("TABLE_NAME", raising=False)
    with pytest.raises(ConfigurationError) as caught:
        LambdaRuntime.from_environment()
    message = str(caught.value)
    assert "AGENT_LOOP: not set" in message
    assert "TABLE_NAME: not set" in message
    assert "template.yaml" in message


def test_one_missing_variable_is_named_alone() -> None:
    with pytest.raises(ConfigurationError) as caught:
        required_variables(LambdaSettings.model_validate({"AGENT_LOOP": "m:a"}))
    assert "TABLE_NAME" in str(caught.value)
    assert "AGENT_LOOP" not in str(caught.value)
    assert required_variables(LambdaSettings(agent_loop="m:a", table_name="t")) == ("m:a", "t")


@pytest.mark.parametrize(
    ("secret", "keys"),
    [
        ("k1", ["k1"]),
        ("  k1\n", ["k1"]),
        (json.dumps(["k1", "k2"]), ["k1", "k2"]),
        (json.dumps({"keys": ["new", "old"]}), ["new", "old"]),
    ],
)
def test_server_keys_from_the_secret(secret: str, keys: list[str]) -> None:
    assert parse_server_keys(secret) == keys


@pytest.mark.parametrize(
    "secret",
    [
        "[1, 2]",
        '{"keys": "k"}',
        "[not json",
        '{"keys": [""]}',
        "[]",
        '{"keys": []}',
        "",
        "  ",
        '[" "]',
    ],
)
def test_a_malformed_secret_is_a_configuration_error(secret: str) -> None:
    with pytest.raises(ConfigurationError):
        parse_server_keys(secret)


def test_rotation_two_keys_valid_at_once_and_the_secret_is_cached(
    handler: Any, resources: LocalResources
) -> None:
    from rollout_sdk.local.invoke import invoke, load_event

    from .conftest import ROOT

    runtime: LambdaRuntime = handler.runtime
    sm = runtime.clients.secretsmanager
    sm.put_secret_value(
        SecretId=resources.secret_arn, SecretString=json.dumps(["new-key", "local-server-key"])
    )
    calls: list[str] = []
    sm.meta.events.register(
        "before-call.secrets-manager.GetSecretValue", lambda **_: calls.append("get")
    )
    event = load_event(ROOT / "events" / "platform-health.json")
    _secret_keys(runtime).max_age_seconds = 0
    for key in ("new-key", "local-server-key"):
        event["headers"]["authorization"] = f"Bearer {key}"
        assert invoke(handler, "ApiFunction", event, timeout_seconds=29).result["statusCode"] == 200
    assert len(calls) == 2  # max age 0: read on every request
    _secret_keys(runtime).max_age_seconds = 300
    calls.clear()
    for _ in range(3):
        assert invoke(handler, "ApiFunction", event, timeout_seconds=29).result["statusCode"] == 200
    assert len(calls) <= 1  # cached by Powertools Parameters


def test_an_empty_secret_fails_closed(handler: Any, resources: LocalResources) -> None:
    from rollout_sdk.local.invoke import invoke, load_event

    from .conftest import ROOT

    runtime: LambdaRuntime = handler.runtime
    _secret_keys(runtime).max_age_seconds = 0
    runtime.clients.secretsmanager.put_secret_value(
        SecretId=resources.secret_arn, SecretString="[]"
    )
    event = load_event(ROOT / "events" / "init.json")
    call = invoke(handler, "ApiFunction", event, timeout_seconds=29)
    assert call.result["statusCode"] == 503
    assert call.dispatched == []
    event["headers"].pop("authorization")
    assert invoke(handler, "ApiFunction", event, timeout_seconds=29).result["statusCode"] == 503


def test_an_unreadable_secret_is_503_with_retry_after(handler: Any) -> None:
    from botocore.exceptions import ClientError

    from rollout_sdk.local.invoke import invoke, load_event

    from .conftest import ROOT

    runtime: LambdaRuntime = handler.runtime
    _secret_keys(runtime).max_age_seconds = 0
    sm = runtime.clients.secretsmanager

    def unavailable(**_: Any) -> None:
        raise ClientError(
            {"Error": {"Code": "InternalServiceError", "Message": "down"}}, "GetSecretValue"
        )

    sm.meta.events.register("before-call.secrets-manager.GetSecretValue", unavailable)
    try:
        call = invoke(
            handler, "ApiFunction", load_event(ROOT / "events" / "init.json"), timeout_seconds=29
        )
    finally:
        sm.meta.events.unregister("before-call.secrets-manager.GetSecretValue", unavailable)
    assert call.result["statusCode"] == 503
    assert call.result["headers"]["retry-after"] == "5"
    assert call.dispatched == []


class _Recording:
    """The template's dispatcher, as the runtime would build it, without AWS."""

    def __init__(self) -> None:
        self.jobs: list[Job] = []

    async def dispatch(self, job: Job) -> None:
        self.jobs.append(job)


def test_the_engines_recovery_hands_off_through_the_templates_dispatcher_from_the_start() -> None:
    from examples.calculator.agent import agent_loop

    settings = load_settings(
        aws={"AGENT_LOOP": "m:a", "TABLE_NAME": "t", "WORKER_FUNCTION_NAME": "worker"}
    )
    runtime = LambdaRuntime(agent_loop, settings=settings, clients=AwsClients())
    try:
        dispatcher = _Recording()
        vars(runtime)["dispatcher"] = dispatcher
        # The engine's recovery as built, never read through runtime.recovery: its hand-off
        # was given when the engine was built, and reaches the dispatcher built on first use.
        hand_off = runtime.engine.recovery.hand_off
        assert hand_off is not None

        async def hand_off_one() -> None:
            await hand_off(Job("r", 1))

        runtime.run(hand_off_one())
        assert dispatcher.jobs == [Job("r", 1)]
        assert "recovery" not in vars(runtime)
        assert runtime.costs.sink is not None  # the metric RolloutCost, given at construction
    finally:
        runtime.close()
