"""Record stores: the ``Store`` port and its adapters."""

from __future__ import annotations

from .base import CreateResult, Store, TransactionalStore, TransitionResult
from .memory import MemoryStore
from .sqlite import SQLiteStore

__all__ = [
    "CreateResult",
    "MemoryStore",
    "SQLiteStore",
    "Store",
    "TransactionalStore",
    "TransitionResult",
]
