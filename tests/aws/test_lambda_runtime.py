"""Start-up checks and server keys of the Lambda wiring."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rollout_sdk.aws.runtime import (
    LambdaRuntime,
    LambdaSettings,
    check_deadlines,
    load_lambda_settings,
    parse_server_keys,
)
from rollout_sdk.errors import ConfigurationError
from rollout_sdk.local.emulator import LocalResources
from rollout_sdk.settings import load_settings


def _lambda_settings(**values: Any) -> LambdaSettings:
    return LambdaSettings.model_validate({"AGENT_LOOP": "m:a", "TABLE_NAME": "t", **values})


def test_a_request_timeout_longer_than_the_worker_allows_is_refused() -> None:
    settings = load_settings(server={"request_timeout_seconds": 895})
    with pytest.raises(ConfigurationError) as caught:
        check_deadlines(settings, _lambda_settings(WORKER_TIMEOUT_SECONDS=900))
    message = str(caught.value)
    assert "OSMOSIS_ROLLOUT_SERVER_REQUEST_TIMEOUT_SECONDS" in message
    assert "WorkerTimeout" in message
    assert "890" in message  # what fits: 900 - the 10 s margin


def test_a_request_timeout_that_fits_is_accepted() -> None:
    settings = load_settings(server={"request_timeout_seconds": 890})
    check_deadlines(settings, _lambda_settings(WORKER_TIMEOUT_SECONDS=900))


def test_a_worker_timeout_over_lambdas_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="900"):
        _lambda_settings(WORKER_TIMEOUT_SECONDS=901)


def test_missing_environment_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENT_LOOP", raising=False)
    monkeypatch.delenv("TABLE_NAME", raising=False)
    with pytest.raises(ConfigurationError) as caught:
        load_lambda_settings()
    assert "AGENT_LOOP" in str(caught.value)
    assert "TABLE_NAME" in str(caught.value)


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
    runtime.lambda_settings = runtime.lambda_settings.model_copy(
        update={"secret_max_age_seconds": 0}
    )
    for key in ("new-key", "local-server-key"):
        event["headers"]["authorization"] = f"Bearer {key}"
        assert invoke(handler, "ApiFunction", event, timeout_seconds=29).result["statusCode"] == 200
    assert len(calls) == 2  # max age 0: read on every request
    runtime.lambda_settings = runtime.lambda_settings.model_copy(
        update={"secret_max_age_seconds": 300}
    )
    calls.clear()
    for _ in range(3):
        assert invoke(handler, "ApiFunction", event, timeout_seconds=29).result["statusCode"] == 200
    assert len(calls) <= 1  # cached by Powertools Parameters


def test_an_empty_secret_fails_closed(handler: Any, resources: LocalResources) -> None:
    from rollout_sdk.local.invoke import invoke, load_event

    from .conftest import ROOT

    runtime: LambdaRuntime = handler.runtime
    runtime.lambda_settings = runtime.lambda_settings.model_copy(
        update={"secret_max_age_seconds": 0}
    )
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
    runtime.lambda_settings = runtime.lambda_settings.model_copy(
        update={"secret_max_age_seconds": 0}
    )
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
