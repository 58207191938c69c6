"""Dispatchers: the ``Dispatcher`` port and its adapters.

Each name is imported on first use, so importing one adapter loads no other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rollout_sdk._lazy import lazy_exports

if TYPE_CHECKING:
    from rollout_sdk.dispatch.base import Dispatcher, Job
    from rollout_sdk.dispatch.inprocess import InProcessDispatcher

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "rollout_sdk.dispatch.base": ("Dispatcher", "Job"),
        "rollout_sdk.dispatch.inprocess": ("InProcessDispatcher",),
    },
)

__all__ = ["Dispatcher", "InProcessDispatcher", "Job"]
