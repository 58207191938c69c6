"""Shared test set-up: no real AWS, no outer configuration, fresh settings for every test."""

from __future__ import annotations

import os

# Before anything imports boto3: fake credentials and a fixed region, so no test can reach real
# AWS whatever the developer's shell or ~/.aws holds.
os.environ.update(
    {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_SECURITY_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }
)
for _name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
    os.environ.pop(_name, None)

from collections.abc import Iterator  # noqa: E402 - the environment must be set first

import pytest  # noqa: E402

from rollout_sdk.settings import reset_settings  # noqa: E402

_OURS = ("OSMOSIS_ROLLOUT_", "ROLLOUT_SDK_", "OSMOSIS_PLATFORM_", "OSMOSIS_WORKSPACE_")


@pytest.fixture(autouse=True)
def _isolated_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Drop every variable of the settings tree from the outer environment (OSMOSIS_ROLLOUT_*,
    ROLLOUT_SDK_*, the CLI's OSMOSIS_PLATFORM_* and OSMOSIS_WORKSPACE_ID) and re-read settings."""
    for name in list(os.environ):
        if name.upper().startswith(_OURS):
            monkeypatch.delenv(name)
    reset_settings()
    yield
    reset_settings()


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """moto's server on 127.0.0.1 (a free port) for the whole session: DynamoDB, Lambda, S3,
    Secrets Manager. Tests make their own tables, so they never share records."""
    from rollout_sdk.local.emulator import EmbeddedMoto

    with EmbeddedMoto() as moto:
        yield moto.endpoint_url
