"""Settings: defaults, every environment variable, errors that name the variable."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from rollout_sdk.errors import ConfigurationError
from rollout_sdk.settings import (
    RolloutSettings,
    configure,
    get_max_metadata_size_bytes,
    get_settings,
    load_settings,
    reset_settings,
    set_max_metadata_size_bytes,
)

Getter = Callable[[RolloutSettings], Any]


def test_defaults() -> None:
    s = load_settings()
    assert s.client.timeout_seconds == 300
    assert s.client.max_retries == 3
    assert s.client.complete_rollout_retries == 2
    assert s.client.retry_base_delay == 1
    assert s.client.retry_max_delay == 30
    assert s.client.max_connections == 100
    assert s.client.max_keepalive_connections == 20
    assert s.server.max_concurrent_rollouts == 100
    assert s.server.record_ttl_seconds == 3600
    assert s.server.request_timeout_seconds == 600
    assert s.max_metadata_size_bytes == 1048576


ENV_CASES: list[tuple[str, str, Getter, Any]] = [
    ("OSMOSIS_ROLLOUT_CLIENT_TIMEOUT_SECONDS", "12.5", lambda s: s.client.timeout_seconds, 12.5),
    ("OSMOSIS_ROLLOUT_CLIENT_MAX_RETRIES", "7", lambda s: s.client.max_retries, 7),
    (
        "OSMOSIS_ROLLOUT_CLIENT_COMPLETE_ROLLOUT_RETRIES",
        "5",
        lambda s: s.client.complete_rollout_retries,
        5,
    ),
    ("OSMOSIS_ROLLOUT_CLIENT_RETRY_BASE_DELAY", "0.25", lambda s: s.client.retry_base_delay, 0.25),
    ("OSMOSIS_ROLLOUT_CLIENT_RETRY_MAX_DELAY", "90", lambda s: s.client.retry_max_delay, 90.0),
    ("OSMOSIS_ROLLOUT_CLIENT_MAX_CONNECTIONS", "250", lambda s: s.client.max_connections, 250),
    (
        "OSMOSIS_ROLLOUT_CLIENT_MAX_KEEPALIVE_CONNECTIONS",
        "4",
        lambda s: s.client.max_keepalive_connections,
        4,
    ),
    (
        "OSMOSIS_ROLLOUT_SERVER_MAX_CONCURRENT_ROLLOUTS",
        "8",
        lambda s: s.server.max_concurrent_rollouts,
        8,
    ),
    (
        "OSMOSIS_ROLLOUT_SERVER_RECORD_TTL_SECONDS",
        "120",
        lambda s: s.server.record_ttl_seconds,
        120,
    ),
    (
        "OSMOSIS_ROLLOUT_SERVER_REQUEST_TIMEOUT_SECONDS",
        "45",
        lambda s: s.server.request_timeout_seconds,
        45.0,
    ),
    ("OSMOSIS_ROLLOUT_MAX_METADATA_SIZE_BYTES", "4096", lambda s: s.max_metadata_size_bytes, 4096),
]


@pytest.mark.parametrize(
    ("name", "value", "get", "expected"), ENV_CASES, ids=[c[0] for c in ENV_CASES]
)
def test_each_environment_variable_takes_effect(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, get: Getter, expected: Any
) -> None:
    assert get(load_settings()) != expected
    monkeypatch.setenv(name, value)
    assert get(load_settings()) == expected
    reset_settings()
    assert get(get_settings()) == expected


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("OSMOSIS_ROLLOUT_SERVER_MAX_CONCURRENT_ROLLOUTS", "0"),
        ("OSMOSIS_ROLLOUT_SERVER_RECORD_TTL_SECONDS", "5"),
        ("OSMOSIS_ROLLOUT_SERVER_REQUEST_TIMEOUT_SECONDS", "0"),
        ("OSMOSIS_ROLLOUT_CLIENT_TIMEOUT_SECONDS", "-1"),
        ("OSMOSIS_ROLLOUT_CLIENT_MAX_RETRIES", "-1"),
        ("OSMOSIS_ROLLOUT_CLIENT_MAX_RETRIES", "three"),
        ("OSMOSIS_ROLLOUT_CLIENT_COMPLETE_ROLLOUT_RETRIES", "100"),
        ("OSMOSIS_ROLLOUT_CLIENT_MAX_CONNECTIONS", "0"),
        ("OSMOSIS_ROLLOUT_MAX_METADATA_SIZE_BYTES", "1"),
        ("OSMOSIS_ROLLOUT_MAX_METADATA_SIZE_BYTES", "lots"),
    ],
)
def test_out_of_range_value_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError) as caught:
        load_settings()
    message = str(caught.value)
    assert f"{name}:" in message
    assert repr(value) in message  # the offending value is shown
    reset_settings()
    with pytest.raises(ConfigurationError, match=name):
        get_settings()


@pytest.mark.parametrize(
    ("variables", "named"),
    [
        pytest.param(
            {
                "OSMOSIS_ROLLOUT_CLIENT_TIMEOUT_SECONDS": "0",
                "OSMOSIS_ROLLOUT_CLIENT_MAX_RETRIES": "-2",
            },
            ["OSMOSIS_ROLLOUT_CLIENT_TIMEOUT_SECONDS", "OSMOSIS_ROLLOUT_CLIENT_MAX_RETRIES"],
            id="several-bad-variables-are-all-named",
        ),
        pytest.param(
            {
                "OSMOSIS_ROLLOUT_CLIENT_RETRY_BASE_DELAY": "10",
                "OSMOSIS_ROLLOUT_CLIENT_RETRY_MAX_DELAY": "5",
            },
            [
                "OSMOSIS_ROLLOUT_CLIENT_RETRY_MAX_DELAY (5.0)",
                "OSMOSIS_ROLLOUT_CLIENT_RETRY_BASE_DELAY (10.0)",
            ],
            id="max-delay-below-base-delay",
        ),
        pytest.param(
            {
                "OSMOSIS_ROLLOUT_CLIENT_MAX_CONNECTIONS": "10",
                "OSMOSIS_ROLLOUT_CLIENT_MAX_KEEPALIVE_CONNECTIONS": "11",
            },
            [
                "OSMOSIS_ROLLOUT_CLIENT_MAX_KEEPALIVE_CONNECTIONS (11)",
                "OSMOSIS_ROLLOUT_CLIENT_MAX_CONNECTIONS (10)",
            ],
            id="keepalive-above-max-connections",
        ),
    ],
)
def test_a_bad_combination_of_variables_names_each_in_the_error(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], named: list[str]
) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError) as caught:
        load_settings()
    message = str(caught.value)
    for part in named:
        assert part in message


def test_load_settings_overrides_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OSMOSIS_ROLLOUT_CLIENT_MAX_RETRIES", "9")
    s = load_settings(client={"max_retries": 1}, max_metadata_size_bytes=2048)
    assert s.client.max_retries == 1
    assert s.max_metadata_size_bytes == 2048


def test_get_settings_is_read_once_until_reset(monkeypatch: pytest.MonkeyPatch) -> None:
    first = get_settings()
    monkeypatch.setenv("OSMOSIS_ROLLOUT_SERVER_MAX_CONCURRENT_ROLLOUTS", "3")
    assert get_settings() is first
    reset_settings()
    assert get_settings().server.max_concurrent_rollouts == 3


def test_configure_and_reset() -> None:
    custom = load_settings(server={"max_concurrent_rollouts": 2})
    configure(custom)
    assert get_settings() is custom
    reset_settings()
    assert get_settings().server.max_concurrent_rollouts == 100


def test_metadata_limit_v1_api() -> None:
    assert get_max_metadata_size_bytes() == 1048576
    set_max_metadata_size_bytes(4096)
    assert get_max_metadata_size_bytes() == 4096
    assert get_settings().max_metadata_size_bytes == 4096
    with pytest.raises(ConfigurationError, match="OSMOSIS_ROLLOUT_MAX_METADATA_SIZE_BYTES"):
        set_max_metadata_size_bytes(1)
    assert get_max_metadata_size_bytes() == 4096


def test_every_bad_variable_is_named_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OSMOSIS_ROLLOUT_CLIENT_TIMEOUT_SECONDS", "-1")
    monkeypatch.setenv("OSMOSIS_ROLLOUT_SERVER_MAX_CONCURRENT_ROLLOUTS", "0")
    monkeypatch.setenv("OSMOSIS_ROLLOUT_MAX_METADATA_SIZE_BYTES", "1")
    with pytest.raises(ConfigurationError) as caught:
        load_settings()
    message = str(caught.value)
    for name in (
        "OSMOSIS_ROLLOUT_CLIENT_TIMEOUT_SECONDS",
        "OSMOSIS_ROLLOUT_SERVER_MAX_CONCURRENT_ROLLOUTS",
        "OSMOSIS_ROLLOUT_MAX_METADATA_SIZE_BYTES",
    ):
        assert name in message


def test_the_cli_variables_are_in_the_tree_and_the_keys_are_never_printed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert load_settings().cli.platform_url == "https://platform.osmosis.ai"
    assert load_settings().cli.server_key is None
    monkeypatch.setenv("ROLLOUT_SDK_SERVER_KEY", "server-secret")
    monkeypatch.setenv("OSMOSIS_PLATFORM_TOKEN", "token-secret")
    monkeypatch.setenv("OSMOSIS_WORKSPACE_ID", "ws-1")
    monkeypatch.setenv("OSMOSIS_PLATFORM_URL", "http://platform.test")
    cli = load_settings().cli
    assert cli.server_key is not None and cli.server_key.get_secret_value() == "server-secret"
    assert cli.platform_token is not None
    assert cli.platform_token.get_secret_value() == "token-secret"
    assert (cli.workspace_id, cli.platform_url) == ("ws-1", "http://platform.test")
    for shown in (repr(load_settings()), str(cli), load_settings().model_dump_json()):
        assert "server-secret" not in shown and "token-secret" not in shown
    set_max_metadata_size_bytes(4096)  # rebuilt from a dump: the keys survive it
    assert get_settings().cli.server_key == cli.server_key
