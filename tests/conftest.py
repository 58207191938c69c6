"""Shared test set-up: no real AWS, no outer configuration, fresh settings for every test."""

from __future__ import annotations

import os

from testkit.aws import SETTINGS_PREFIXES, use_fake_aws

# Before anything imports boto3: fake credentials and a fixed region, so no test can reach real
# AWS whatever the developer's shell or ~/.aws holds.
use_fake_aws()

from collections.abc import Iterator  # noqa: E402 - the environment must be set first

import pytest  # noqa: E402

from rollout_sdk.settings import reset_settings  # noqa: E402

#: The osmosis-ai 0.3.8 suite runs in an environment of its own (Python 3.12 or newer, 0.3.8
#: installed): ``make test-osmosis03``, which ``make test`` runs after this suite.
collect_ignore = ["osmosis03"]


@pytest.fixture(autouse=True)
def _isolated_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Drop every variable of the settings tree from the outer environment (OSMOSIS_ROLLOUT_*,
    ROLLOUT_SDK_*, the CLI's OSMOSIS_PLATFORM_* and OSMOSIS_WORKSPACE_ID) and re-read settings."""
    for name in list(os.environ):
        if name.upper().startswith(SETTINGS_PREFIXES):
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
