"""The local server's DynamoDB store: its own clients, with fake credentials given to them; it
writes nothing to the process's environment and imports nothing of the Lambda runtime."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from rollout_sdk.engine.record import RolloutRecord
from rollout_sdk.local.server import open_dynamodb_store
from rollout_sdk.protocol import InitResponse, RolloutRequest

from .conftest import ROOT

NOW = 1_700_000_000.0
_AWS_VARIABLES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
)


async def test_the_dynamodb_store_needs_no_aws_credentials_and_changes_no_environment(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in _AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    before = dict(os.environ)
    store = open_dynamodb_store(moto_endpoint, template=ROOT / "template.yaml")
    assert dict(os.environ) == before
    request = RolloutRequest(
        rollout_id="local-1", server_url="http://traingate.test", messages=[], completion_params={}
    )
    created = RolloutRecord.new(
        request, InitResponse(rollout_id="local-1"), now=NOW, ttl_seconds=60
    )
    await store.create(created, now=NOW)
    record = await store.get("local-1", now=NOW)
    assert record is not None
    assert record.rollout_id == "local-1"
    assert dict(os.environ) == before


def test_the_local_tools_import_nothing_of_the_lambda_runtime() -> None:
    offenders = []
    for path in sorted((ROOT / "rollout_sdk" / "local").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            offenders += [
                f"{Path(path).name}: {name}" for name in names if name.startswith("rollout_sdk.aws")
            ]
    assert offenders == []


def test_a_local_session_ignores_the_environments_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    from rollout_sdk.local.emulator import LOCAL_REGION, local_session

    for name in _AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    # A profile that does not exist: a session that read the environment's would fail on it.
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile")
    session = local_session()
    client = session.client("dynamodb", endpoint_url="http://127.0.0.1:9")
    assert client.meta.region_name == LOCAL_REGION
    credentials = session.get_credentials()
    assert credentials is not None
    assert credentials.method == "explicit"
