"""Record stores: the ``Store`` port and its adapters."""

from __future__ import annotations

from rollout_sdk.store.base import CreateResult, Store, TransactionalStore, TransitionResult
from rollout_sdk.store.memory import MemoryStore
from rollout_sdk.store.sqlite import SQLiteStore

__all__ = [
    "CreateResult",
    "MemoryStore",
    "SQLiteStore",
    "Store",
    "TransactionalStore",
    "TransitionResult",
]
