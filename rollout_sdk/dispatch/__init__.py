"""Dispatchers: the ``Dispatcher`` port and its adapters."""

from __future__ import annotations

from .base import Dispatcher, Job
from .inprocess import InProcessDispatcher

__all__ = ["Dispatcher", "InProcessDispatcher", "Job"]
