"""The ``store`` fixture: every contract test runs once per ``Store`` implementation.

To add an implementation, write one async factory ``(request, tmp_path, owner=None) -> Store``
and add it to
``STORE_FACTORIES``. A factory that needs a server (for example DynamoDB on moto's server at
127.0.0.1) takes it from a fixture with ``request.getfixturevalue("moto_server")`` and creates a
fresh table per call, so tests never share records. The fixture closes every store it opened.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from rollout_sdk.store.base import Store
from rollout_sdk.store.memory import MemoryStore
from rollout_sdk.store.sqlite import SQLiteStore

StoreFactory = Callable[..., Awaitable[Store]]


async def memory_store(
    request: pytest.FixtureRequest, tmp_path: Path, owner: str | None = None
) -> Store:
    return MemoryStore(owner=owner)


async def sqlite_store(
    request: pytest.FixtureRequest, tmp_path: Path, owner: str | None = None
) -> Store:
    return SQLiteStore(tmp_path / "state" / "rollouts.sqlite3", owner=owner)


_TABLES = itertools.count()


async def dynamodb_store(
    request: pytest.FixtureRequest, tmp_path: Path, owner: str | None = None
) -> Store:
    """DynamoDBStore over HTTP to moto's server, on a fresh table made from template.yaml."""
    from rollout_sdk.aws.clients import AwsClients
    from rollout_sdk.local.emulator import load_template, table_definition
    from rollout_sdk.store.dynamodb import DynamoDBStore

    endpoint: str = request.getfixturevalue("moto_endpoint")
    clients = AwsClients(endpoint_url=endpoint, max_pool_connections=50)
    table = f"contract-{next(_TABLES)}"
    template = load_template(Path(__file__).resolve().parents[2] / "template.yaml")
    clients.dynamodb.create_table(**table_definition(template, table))
    bucket = f"contract-payloads-{table}"
    clients.s3.create_bucket(Bucket=bucket)
    return DynamoDBStore(table, client=clients.dynamodb, s3=clients.s3, bucket=bucket, owner=owner)


STORE_FACTORIES: dict[str, StoreFactory] = {
    "memory": memory_store,
    "sqlite": sqlite_store,
    "dynamodb": dynamodb_store,
}


@pytest.fixture(params=list(STORE_FACTORIES))
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """A fresh, empty store of each implementation."""
    opened = await STORE_FACTORIES[request.param](request, tmp_path)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture(params=list(STORE_FACTORIES))
async def owned_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """A fresh store of each implementation with an owner (a local server's, "server-1")."""
    opened = await STORE_FACTORIES[request.param](request, tmp_path, owner="server-1")
    try:
        yield opened
    finally:
        await opened.close()
