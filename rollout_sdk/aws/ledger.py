"""The engine's cost ledger on Lambda (:class:`~rollout_sdk.engine.costs.CostLedger`): the
estimate at finish written into the final response, and the figure each delivery move writes
into the record and, once the rollout is final, hands to the cost sink (the metric
``RolloutCost``). Each reads the meter of the rollout whose code runs
(:mod:`rollout_sdk.cost.meter`); outside a metered invocation each does nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rollout_sdk.cost import meter as cost_meter
from rollout_sdk.cost.guard import figure
from rollout_sdk.cost.meter import RolloutMeter, current
from rollout_sdk.cost.usage import CostEstimate, Usage
from rollout_sdk.protocol import EXTRA_KEY
from rollout_sdk.store.record import RecordState

if TYPE_CHECKING:
    from rollout_sdk.engine.costs import CostEntry
    from rollout_sdk.protocol import RolloutResponse
    from rollout_sdk.store.base import TransitionResult
    from rollout_sdk.store.record import RolloutRecord


def with_estimate(response: RolloutResponse) -> RolloutResponse:
    """``response`` with the estimate at finish in ``extra_fields["rollout_sdk"]["cost"]``,
    beside a failure entry (the agent's own extra fields, if any, stay as they are); the
    response itself when nothing is metered (the local server)."""
    meter = current()
    if meter is None:
        return response
    with figure("the estimate at finish"):
        extra = dict(response.extra_fields)
        kit = extra.get(EXTRA_KEY, {})
        if not isinstance(kit, dict):
            return response  # not the kit's: never overwritten
        extra[EXTRA_KEY] = {**kit, "cost": meter.estimate(at="finish").to_json()}
        meter.fixed = True
        return response.model_copy(update={"extra_fields": extra})
    return response


def estimate_of(response: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The estimate a stored response carries, if any."""
    extra = (response or {}).get("extra_fields") or {}
    kit = extra.get(EXTRA_KEY) if isinstance(extra, dict) else None
    found = kit.get("cost") if isinstance(kit, dict) else None
    return found if isinstance(found, dict) else None


@dataclass(frozen=True)
class LedgerEntry:
    """The figure a delivery move writes into the record (``extra["cost"]``)."""

    meter: RolloutMeter
    estimate: CostEstimate
    extra: dict[str, Any]


def _prior(record: RolloutRecord, *, fixed: bool) -> Usage:
    """The record's figure from before this meter: what earlier deliveries wrote, or else the
    response's estimate at finish unless this meter made it (then it is in this meter's)."""
    stored = record.extra.get("cost") if isinstance(record.extra, dict) else None
    if stored is None and not fixed:
        stored = estimate_of(record.response)
    if stored is None:
        return Usage()
    with figure("reading the record's cost", ValueError, TypeError, AttributeError):
        return Usage.from_json(stored)
    return Usage()


def ledger(record: RolloutRecord) -> LedgerEntry | None:
    """The rollout's figure so far, for the delivery move about to be written; None when
    nothing is metered (the local server)."""
    meter = current()
    if meter is None:
        return None
    with figure("the figure after delivery"):
        if meter.base is None:
            meter.base = _prior(record, fixed=meter.fixed)
        estimate = meter.estimate(at="delivery", base=meter.base)
        return LedgerEntry(
            meter, estimate, {**record.extra, "cost": estimate.to_json(compact=True)}
        )
    return None


def recorded(entry: LedgerEntry | None, moved: TransitionResult) -> None:
    """A delivery move was written with ``entry``: once the rollout is final, hand its full
    figure to the sink (the metric ``RolloutCost``), taken after the move, so that the write
    that made it final is in it too (the record's own figure cannot hold the write storing it)."""
    if entry is None or not moved.applied or moved.record is None:
        return
    if moved.record.state not in (RecordState.DELIVERED, RecordState.UNDELIVERABLE):
        return
    meter = entry.meter
    with figure("the figure after delivery"):
        final = meter.estimate(at="delivery", base=meter.base)
        meter.invocation.emit(moved.record, final)


class MeteredLedger:
    """The :class:`~rollout_sdk.engine.costs.CostLedger` of the Lambda runtime."""

    def with_estimate(self, response: RolloutResponse) -> RolloutResponse:
        return with_estimate(response)

    def entry(self, record: RolloutRecord) -> CostEntry | None:
        return ledger(record)

    def recorded(self, entry: CostEntry | None, moved: TransitionResult) -> None:
        recorded(entry if isinstance(entry, LedgerEntry) else None, moved)

    def rollout(self) -> AbstractContextManager[object]:
        return cost_meter.rollout()
