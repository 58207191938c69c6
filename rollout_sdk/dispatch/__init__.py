"""Dispatchers: the ``Dispatcher`` port and its adapters."""

from __future__ import annotations

from rollout_sdk.dispatch.base import Dispatcher, Job
from rollout_sdk.dispatch.inprocess import InProcessDispatcher

__all__ = ["Dispatcher", "InProcessDispatcher", "Job"]
