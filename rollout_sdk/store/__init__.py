"""Record stores: the ``Store`` port, the record it stores (:mod:`rollout_sdk.store.record`, the
state machine), and its adapters.

Each name is imported on first use, so code that needs only the port (``rollout_sdk.store.base``)
never loads sqlite3.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rollout_sdk._lazy import lazy_exports

if TYPE_CHECKING:
    from rollout_sdk.store.base import CreateResult, Store, TransitionResult
    from rollout_sdk.store.memory import MemoryStore
    from rollout_sdk.store.sqlite import SQLiteStore
    from rollout_sdk.store.transactional import TransactionalStore

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "rollout_sdk.store.base": (
            "CreateResult",
            "Store",
            "TransitionResult",
        ),
        "rollout_sdk.store.memory": ("MemoryStore",),
        "rollout_sdk.store.sqlite": ("SQLiteStore",),
        "rollout_sdk.store.transactional": ("TransactionalStore",),
    },
)

__all__ = [
    "CreateResult",
    "MemoryStore",
    "SQLiteStore",
    "Store",
    "TransactionalStore",
    "TransitionResult",
]
