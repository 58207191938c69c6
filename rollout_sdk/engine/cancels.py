"""Cancel signals of the rollouts this process is running, so a cancel reaches them at once.

A cancel is recorded in the rollout's record (``cancel_requested``) for whichever process runs
it; the heartbeat carries the flag to a worker elsewhere. Here, the service signals a rollout
that runs in this very process without waiting for the next heartbeat.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager


class CancelSignals:
    """One ``asyncio.Event`` per rollout running in this process."""

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}
        #: Why each signalled rollout was asked to stop, when not by a cancel request.
        self._reasons: dict[str, str] = {}

    def expect(self, rollout_id: str) -> None:
        """The rollout will run here at once (init created it claimed, its job dispatched):
        a cancel from now on is kept for it, even before its worker starts watching."""
        self._event(rollout_id)

    def _event(self, rollout_id: str) -> asyncio.Event:
        event = self._events.get(rollout_id)
        if event is None:
            event = self._events[rollout_id] = asyncio.Event()
        return event

    @contextmanager
    def watching(self, rollout_id: str) -> Iterator[asyncio.Event]:
        """The rollout's cancel event while the block runs it here (set already when a cancel
        came for an expected rollout before the block began)."""
        event = self._event(rollout_id)
        try:
            yield event
        finally:
            self._events.pop(rollout_id, None)
            self._reasons.pop(rollout_id, None)

    def signal(self, rollout_id: str, reason: str | None = None) -> bool:
        """Set the rollout's cancel event (``reason``: why, when not a cancel request: an
        osmosis-ai 0.3.8 polling lease that ran out); False when it does not run here."""
        event = self._events.get(rollout_id)
        if event is None:
            return False
        if reason is not None:
            self._reasons[rollout_id] = reason
        event.set()
        return True

    def reason(self, rollout_id: str) -> str | None:
        """Why the rollout was signalled, if a reason was given."""
        return self._reasons.get(rollout_id)

    def __contains__(self, rollout_id: object) -> bool:
        return rollout_id in self._events
