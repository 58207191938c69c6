"""The cost estimate as the engine sees it: a collaborator given to it, as telemetry is.

The engine asks it for three figures, each nothing where nothing is metered (the local server:
:data:`NO_COSTS`): the final response with its estimate at finish, the figure a delivery move
writes into the record (``extra["cost"]``), and, once that move made the rollout final, to hand
the full figure on (the metric ``RolloutCost``). ``rollout()`` scopes the work done for one
rollout, for a runtime that takes several up in one invocation (the re-drive). On Lambda the
composition root gives the engine :class:`rollout_sdk.aws.ledger.MeteredLedger`.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rollout_sdk.protocol import RolloutResponse
    from rollout_sdk.store.base import TransitionResult
    from rollout_sdk.store.record import RolloutRecord


class CostEntry(Protocol):
    """The figure one delivery move writes: the record's ``extra`` with it."""

    @property
    def extra(self) -> dict[str, Any]: ...


class CostLedger(Protocol):
    """What the engine asks of the cost estimate."""

    def with_estimate(self, response: RolloutResponse) -> RolloutResponse:
        """``response`` with the estimate at finish (itself when nothing is metered)."""
        ...

    def entry(self, record: RolloutRecord) -> CostEntry | None:
        """The figure the delivery move about to be written for ``record`` carries."""
        ...

    def recorded(self, entry: CostEntry | None, moved: TransitionResult) -> None:
        """A delivery move was written with ``entry``; once final, the full figure goes on."""
        ...

    def rollout(self) -> AbstractContextManager[object]:
        """The scope of the work done for one rollout."""
        ...


class Unmetered:
    """Nothing metered: the local server has no AWS bill to estimate."""

    def with_estimate(self, response: RolloutResponse) -> RolloutResponse:
        return response

    def entry(self, record: RolloutRecord) -> CostEntry | None:
        return None

    def recorded(self, entry: CostEntry | None, moved: TransitionResult) -> None:
        return None

    def rollout(self) -> AbstractContextManager[object]:
        return nullcontext()


NO_COSTS: CostLedger = Unmetered()


def extra_of(entry: CostEntry | None) -> dict[str, Any] | None:
    """The record's ``extra`` a delivery move writes (None: leave it as it is)."""
    return None if entry is None else entry.extra
