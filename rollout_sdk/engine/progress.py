"""Where a pulled rollout's changes are heard in this process: the status a running 0.3.8
rollout is in (running, grading), and a pulse when its record changes, so that a result poll
waiting on it answers at once rather than at its next look at the store.

A hint, as the due index is: a poll reads the record again after every pulse, and also every
:data:`RECHECK_SECONDS` without one (a change made elsewhere: a recoverer in another process).
"""

from __future__ import annotations

import asyncio
import contextlib

#: The longest a waiting poll goes without reading the record again.
RECHECK_SECONDS = 1.0


class StatusBoard:
    """The phase of each 0.3.8 rollout running here, and one pulse per change."""

    def __init__(self) -> None:
        self._phases: dict[str, str] = {}
        self._events: dict[str, asyncio.Event] = {}

    def phase(self, rollout_id: str) -> str | None:
        """The phase the rollout's worker here last set (None: not running here)."""
        return self._phases.get(rollout_id)

    def set_phase(self, rollout_id: str, phase: str) -> None:
        self._phases[rollout_id] = phase
        self.pulse(rollout_id)

    def done(self, rollout_id: str) -> None:
        """The rollout's record has its final response (or it left this process)."""
        self._phases.pop(rollout_id, None)
        self.pulse(rollout_id)

    def pulse(self, rollout_id: str) -> None:
        event = self._events.pop(rollout_id, None)
        if event is not None:
            event.set()

    async def wait(self, rollout_id: str, seconds: float) -> None:
        """Until the rollout's next pulse, or ``seconds`` at most."""
        event = self._events.get(rollout_id)
        if event is None:
            event = self._events[rollout_id] = asyncio.Event()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, seconds)):
                await event.wait()
