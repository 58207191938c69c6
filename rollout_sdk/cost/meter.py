"""Metering: one Lambda invocation's duration shared among the rollouts it runs, and each
rollout's meter, held in a context variable so that the rollouts of one queue batch, running
concurrently on one loop, each charge their own (the botocore hooks of
:mod:`rollout_sdk.aws.metering` charge the meter of the rollout whose code made a request).

Outside an invocation (the local server) there is no meter, and nothing is metered.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rollout_sdk.cost.guard import figure
from rollout_sdk.cost.usage import CostEstimate, LambdaPart, Usage
from rollout_sdk.prices import PRICES_READ, UNITS

if TYPE_CHECKING:
    from rollout_sdk.cost.usage import CostSink
    from rollout_sdk.store.record import RolloutRecord


@dataclass
class Seat:
    """One rollout's place in an invocation: its time share runs while it is there."""

    joined: float
    left: float | None = None


class Invocation:
    """One Lambda invocation, its duration shared among the rollouts it runs.

    While ``n`` rollouts are in the invocation, each is charged ``1/n`` of every second, so the
    shares of a batch add up to the invocation's duration (from the handler's start until the
    last rollout leaves). A batch's rollouts are all in from the start (``seats``); a re-drive's
    join as it takes them up (and the time it spends on no rollout is the schedule's own).
    """

    def __init__(
        self,
        *,
        function: str,
        hand_off: str,
        memory_mb: int,
        architecture: str,
        prices: Mapping[str, float],
        prices_label: str = PRICES_READ,
        init_seconds: float = 0.0,
        seats: int = 0,
        shares_request: bool = True,
        sink: CostSink | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.function = function
        self.hand_off = hand_off
        self.memory_mb = memory_mb
        self.architecture = architecture
        self.prices = dict(prices)
        self.prices_label = prices_label
        self.batch = max(seats, 1)
        #: Each rollout of the batch: its share of the cold start's init and of the request.
        self.init_share = init_seconds / self.batch if seats else 0.0
        self.request_share = 1.0 / self.batch if shares_request and seats else 0.0
        self.sink = sink
        self._clock = clock
        self._lock = threading.Lock()
        self._last = clock()
        self._charged = 0.0  # seconds each rollout present since the start has been charged
        self._present = seats
        self._reserved = seats

    def _advance(self, now: float) -> None:
        if self._present > 0:
            self._charged += max(0.0, now - self._last) / self._present
        self._last = now

    def take_seat(self) -> Seat:
        """A place for one rollout: one of the batch's, or a new one from now on."""
        with self._lock:
            self._advance(self._clock())
            if self._reserved > 0:
                self._reserved -= 1
                return Seat(joined=0.0)
            self._present += 1
            return Seat(joined=self._charged)

    def leave(self, seat: Seat) -> None:
        with self._lock:
            if seat.left is None:
                self._advance(self._clock())
                self._present -= 1
                seat.left = self._charged

    def seconds(self, seat: Seat) -> float:
        """``seat``'s share of the invocation's duration so far."""
        with self._lock:
            self._advance(self._clock())
            until = self._charged if seat.left is None else seat.left
            return until - seat.joined

    def close(self) -> None:
        """The handler returns: seats of the batch no rollout took stop sharing."""
        with self._lock:
            self._advance(self._clock())
            self._present -= self._reserved
            self._reserved = 0

    def emit(self, record: RolloutRecord, estimate: CostEstimate) -> None:
        """Hand a final figure to the sink; a sink that fails is logged once, never raised."""
        if self.sink is None:
            return
        with figure("the cost sink"):
            self.sink(record, estimate)


class RolloutMeter:
    """What one rollout used in one invocation, and what it carried in from earlier ones."""

    def __init__(self, invocation: Invocation, seat: Seat) -> None:
        self.invocation = invocation
        self.seat = seat
        self._lock = threading.Lock()
        self._counted = Usage()
        #: What :meth:`carry` added of it (earlier functions' and invocations' parts).
        self._carried = Usage()
        #: This meter fixed the rollout's response (so its estimate is part of this meter's).
        self.fixed = False
        #: The record's figure from before this invocation (read once, at the first write).
        self.base: Usage | None = None
        #: A durable rollout's execution-wide charges so far (its operations, the data it
        #: wrote and Lambda keeps: :meth:`DurableJournal.execution_usage`), which only the
        #: invocation that ends it knows in full: in :meth:`usage`, never in :meth:`own`.
        self.execution: Callable[[], Usage] | None = None

    def add(self, unit: str, amount: float) -> None:
        """Charge ``amount`` of ``unit`` (a name of :data:`UNITS`)."""
        with self._lock:
            self._counted.units[unit] = self._counted.units.get(unit, 0.0) + amount

    def add_dynamodb(self, *, read: float, write: float, assumed: bool) -> None:
        with self._lock:
            units = self._counted.units
            units["dynamodb_read_unit"] += read
            units["dynamodb_write_unit"] += write
            self._counted.dynamodb_calls += 1
            self._counted.dynamodb_units_assumed += int(assumed)

    def carry(self, data: Any) -> None:
        """Add what an earlier function used for this rollout (the API function's part, in the
        job); a malformed one is logged once and left out."""
        if data is None:
            return
        with figure("reading the job's carried cost", ValueError, TypeError, AttributeError):
            carried = Usage.from_json(data)
            with self._lock:
                self._counted = self._counted.plus(carried)
                self._carried = self._carried.plus(carried)

    def own(self) -> Usage:
        """This invocation's own part so far: its time share and request, and the units counted
        here, without what was carried in (a durable rollout's invocation records it at its
        suspension, and the next invocations carry it: rollout_sdk/aws/durable.py)."""
        with self._lock:
            counted, carried = self._counted, self._carried
        here = Usage(
            units={k: counted.units.get(k, 0.0) - carried.units.get(k, 0.0) for k in UNITS},
            dynamodb_calls=counted.dynamodb_calls - carried.dynamodb_calls,
            dynamodb_units_assumed=counted.dynamodb_units_assumed - carried.dynamodb_units_assumed,
        )
        return here.plus(self._invocation_part())

    def _invocation_part(self) -> Usage:
        """The invocation's time share (and cold start's init share) and its request share."""
        inv = self.invocation
        own = Usage(
            functions={
                inv.function: LambdaPart(
                    seconds=inv.seconds(self.seat),
                    init_seconds=inv.init_share,
                    memory_mb=inv.memory_mb,
                    architecture=inv.architecture,
                    batch=inv.batch,
                )
            }
        )
        own.units["lambda_request"] = inv.request_share
        return own

    def usage(self) -> Usage:
        """This meter's usage so far, the invocation's time share (and a durable execution's
        own charges) included."""
        own = self._invocation_part()
        if self.execution is not None:
            own = own.plus(self.execution())
        with self._lock:
            return self._counted.plus(own)

    def estimate(self, *, at: str, base: Usage | None = None) -> CostEstimate:
        inv = self.invocation
        usage = self.usage() if base is None else base.plus(self.usage())
        return CostEstimate.of(
            usage,
            prices=inv.prices,
            prices_label=inv.prices_label,
            at=at,
            function=inv.function,
            hand_off=inv.hand_off,
        )


_INVOCATION: contextvars.ContextVar[Invocation | None] = contextvars.ContextVar(
    "rollout_sdk_cost_invocation", default=None
)
_ROLLOUT: contextvars.ContextVar[RolloutMeter | None] = contextvars.ContextVar(
    "rollout_sdk_cost_rollout", default=None
)


@contextmanager
def invocation_scope(invocation: Invocation) -> Iterator[Invocation]:
    """``invocation`` is the current one here (and in the tasks started here)."""
    token = _INVOCATION.set(invocation)
    try:
        yield invocation
    finally:
        invocation.close()
        _INVOCATION.reset(token)


@contextmanager
def rollout() -> Iterator[RolloutMeter | None]:
    """One rollout's meter in the current invocation, for the code run here (and in the tasks
    and threads started here); None, and nothing metered, outside an invocation (the local
    server)."""
    invocation = _INVOCATION.get()
    if invocation is None:
        yield None
        return
    meter = RolloutMeter(invocation, invocation.take_seat())
    token = _ROLLOUT.set(meter)
    try:
        yield meter
    finally:
        _ROLLOUT.reset(token)
        invocation.leave(meter.seat)


def current() -> RolloutMeter | None:
    """The meter of the rollout whose code runs here, if any."""
    return _ROLLOUT.get()


def carried() -> dict[str, Any] | None:
    """The current rollout's usage so far, for the job that hands it on (the API function's
    part, read by the worker); None when nothing is metered."""
    meter = _ROLLOUT.get()
    if meter is None:
        return None
    with figure("the hand-off's carried cost"):
        return meter.usage().to_json()
    return None
