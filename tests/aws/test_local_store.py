"""The local server's DynamoDB store: its own clients, with fake credentials given to them; it
writes nothing to the process's environment and imports nothing of the Lambda runtime."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rollout_sdk.local.emulator import EmbeddedMoto, local_client
from rollout_sdk.local.server import open_dynamodb_store
from rollout_sdk.protocol import InitResponse, RolloutRequest
from rollout_sdk.store.record import RolloutRecord
from testkit.wait import wait_until

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


def test_the_embedded_emulator_ignores_the_callers_aws_profile_and_keeps_its_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # moto reads the environment of the process it runs in; a profile this machine lacks made
    # every answer a 500 when it ran in the caller's process.
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile-here")
    before = dict(os.environ)
    with EmbeddedMoto() as moto:
        tables = local_client("dynamodb", moto.endpoint_url).list_tables()
    assert tables["TableNames"] == []
    assert dict(os.environ) == before


def test_the_embedded_emulator_stops_when_its_parent_is_killed() -> None:
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from rollout_sdk.local.emulator import EmbeddedMoto\n"
            "moto = EmbeddedMoto().start()\n"
            "print(moto.pid, flush=True)\n"
            "sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert _alive(child)
        parent.kill()  # SIGKILL: no cleanup runs in the parent
        parent.wait(timeout=30)
        wait_until(lambda: not _alive(child), within=30, what="the emulator's exit")
    finally:
        parent.kill()
        parent.wait(timeout=30)
        for stream in (parent.stdin, parent.stdout):
            if stream is not None:
                stream.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by init) counts as gone.
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "\nState:\tZ" in status.read_text())


def test_the_embedded_emulator_lets_one_of_concurrent_conditional_writes_win(
    moto_endpoint: str,
) -> None:
    # moto alone checks a condition and writes as two steps; DynamoDB (and so the emulator the
    # kit runs) applies a conditional write to an item atomically.
    client = local_client("dynamodb", moto_endpoint, max_pool_connections=16)
    table = f"race-{os.getpid()}"
    client.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    rounds: list[int] = []
    for _ in range(20):
        client.put_item(TableName=table, Item={"pk": {"S": "x"}, "s": {"S": "A"}})
        start = threading.Barrier(16)

        def claim(i: int, start: threading.Barrier = start) -> int:
            start.wait(timeout=30)
            try:
                client.update_item(
                    TableName=table,
                    Key={"pk": {"S": "x"}},
                    UpdateExpression="SET s = :b, w = :w",
                    ConditionExpression="s = :a",
                    ExpressionAttributeValues={
                        ":a": {"S": "A"},
                        ":b": {"S": "B"},
                        ":w": {"N": str(i)},
                    },
                )
            except client.exceptions.ConditionalCheckFailedException:
                return 0
            return 1

        with ThreadPoolExecutor(16) as pool:
            rounds.append(sum(pool.map(claim, range(16))))
    assert rounds == [1] * 20
