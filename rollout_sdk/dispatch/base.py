"""The ``Dispatcher`` port: hands an accepted rollout to a worker before init answers 202."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Job:
    """What a worker needs beyond the record: the id, the attempt, and the callback key.

    The callback key travels with the job, never in the record (protocol.md section 3).
    """

    rollout_id: str
    attempt: int = 1
    api_key: str | None = field(default=None, repr=False)


@runtime_checkable
class Dispatcher(Protocol):
    """Starts workers. ``dispatch`` returns once the hand-off is durable or running."""

    async def dispatch(self, job: Job) -> None:
        """Hand ``job`` to a worker; raise DispatchError when that is impossible."""
        ...

    @property
    def active(self) -> int:
        """Rollouts this process is running or holding (for /health)."""
        ...

    @property
    def completed(self) -> int:
        """Rollouts this process has finished since it started (for /health)."""
        ...

    async def aclose(self) -> None:
        """Stop; rollouts still running are left to the record's recovery rules."""
        ...
