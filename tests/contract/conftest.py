"""The ``store`` fixture: every contract test runs once per ``Store`` implementation.

To add an implementation, write one async factory ``(request, tmp_path) -> Store`` and add it to
``STORE_FACTORIES``. A factory that needs a server (for example DynamoDB on moto's server at
127.0.0.1) takes it from a fixture with ``request.getfixturevalue("moto_server")`` and creates a
fresh table per call, so tests never share records. The fixture closes every store it opened.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from rollout_sdk.store.base import Store
from rollout_sdk.store.memory import MemoryStore
from rollout_sdk.store.sqlite import SQLiteStore

StoreFactory = Callable[[pytest.FixtureRequest, Path], Awaitable[Store]]


async def memory_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return MemoryStore()


async def sqlite_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return SQLiteStore(tmp_path / "state" / "rollouts.sqlite3")


STORE_FACTORIES: dict[str, StoreFactory] = {
    "memory": memory_store,
    "sqlite": sqlite_store,
}


@pytest.fixture(params=list(STORE_FACTORIES))
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """A fresh, empty store of each implementation."""
    opened = await STORE_FACTORIES[request.param](request, tmp_path)
    try:
        yield opened
    finally:
        await opened.close()
