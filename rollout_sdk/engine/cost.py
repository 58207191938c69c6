"""What one rollout cost on AWS, estimated from what really happened to it (docs/cost.md,
"Per-rollout estimate", has the formula and what it leaves out).

Two figures, one formula:

- **at finish**, in the final response, ``extra_fields["rollout_sdk"]["cost"]``. The response
  is fixed before its first delivery attempt, so it holds what is known then: the rollout's share
  of the worker invocation's duration so far (in a queue batch, split with the rollouts running
  beside it), its share of the cold start's init, the API function's part (carried in the job),
  and the requests made for it so far;
- **after delivery and re-drive**, the same figure grown by each later attempt: kept in the
  record (``extra["cost"]``, written by the delivery's own moves, so it costs no request of its
  own) and handed to the runtime's cost sink (:attr:`Costs.sink`) once the rollout is DELIVERED
  or UNDELIVERABLE, for the metric ``RolloutCost``.

How it knows. A Lambda handler opens an :class:`Invocation` (the function's memory and
architecture, the hand-off mode, the batch, and the cold start's init duration, once) and, per
rollout, a :class:`RolloutMeter`, held in a context variable, so the rollouts of one queue batch,
running concurrently on one loop, each charge their own. botocore hooks on the runtime's clients
(:func:`instrument`) count every request the kit makes and charge it to the meter of the rollout
whose code made it; DynamoDB's write and read units are the ones DynamoDB reports (the hook asks
for ``ReturnConsumedCapacity="TOTAL"``), or the request's minimum when an answer reports none
(counted in ``dynamodb.units_assumed``). What AWS does for the rollout outside the kit's clients
is added from evidence: the invocation's own Lambda request (shared by its batch), the
``SendMessage`` a received message proves, the event source mapping's receive and delete of the
batch (shared by it).

The local server opens no invocation, so its responses carry no estimate: there is no AWS bill
(the host's own cost is not the kit's to estimate). Nothing here may fail a rollout: an estimate
that cannot be made is logged once and left out.
"""

from __future__ import annotations

import contextvars
import json
import logging
import math
import platform
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from rollout_sdk.engine.record import RolloutRecord
    from rollout_sdk.protocol import RolloutResponse
    from rollout_sdk.settings import RolloutSettings
    from rollout_sdk.store.base import TransitionResult

logger = logging.getLogger("rollout_sdk.engine.cost")

T = TypeVar("T")

# --------------------------------------------------------------------------- prices

#: When every price below was read (the search tools' stored copies of the pages named).
PRICES_READ = "2026-12-01"

LAMBDA_PAGE = "https://aws.amazon.com/lambda/pricing/"
API_GATEWAY_PAGE = "https://aws.amazon.com/api-gateway/pricing/"
DYNAMODB_PAGE = "https://aws.amazon.com/dynamodb/pricing/on-demand/"
SQS_PAGE = "https://aws.amazon.com/sqs/pricing/"
KMS_PAGE = "https://aws.amazon.com/kms/pricing/"
S3_PAGE = "https://aws.amazon.com/s3/pricing/"
CLOUDWATCH_PAGE = "https://aws.amazon.com/cloudwatch/pricing/"


@dataclass(frozen=True)
class Price:
    """One published price: US dollars per ``per``, us-east-1, on demand, first tier."""

    usd: float
    per: str
    label: str
    #: AWS's pricing page for it.
    page: str
    #: What the figure was checked against on :data:`PRICES_READ`. AWS's pricing pages draw their
    #: rate tables by script, so the stored text of most of them holds no figure.
    checked: str


#: The one price table (``bench/cost.py`` and docs/cost.md use it too). ``ROLLOUT_SDK_PRICES``
#: overrides any of them (a JSON object by these names).
PRICE_TABLE: dict[str, Price] = {
    "lambda_gb_second_x86_64": Price(
        0.0000166667,
        "GB-second",
        "Lambda duration, x86_64, per GB-second",
        LAMBDA_PAGE,
        "AWS's whitepaper 'How AWS Pricing Works' (Lambda): $0.00001667, rounded; the exact "
        "digits from summaries of the page (artillery's prices.js, cloudchipr.com)",
    ),
    "lambda_gb_second_arm64": Price(
        0.0000133334,
        "GB-second",
        "Lambda duration, arm64, per GB-second",
        LAMBDA_PAGE,
        "summaries of the page only (cloudchipr.com, artillery's prices.js); not on an AWS page",
    ),
    "lambda_request": Price(
        0.20 / 1e6,
        "request",
        "Lambda, per request",
        LAMBDA_PAGE,
        "AWS's whitepaper 'How AWS Pricing Works' (Lambda): $0.20 per 1 million requests",
    ),
    "http_api_request": Price(
        1.00 / 1e6,
        "request (512 KB metered)",
        "API Gateway HTTP API, per request",
        API_GATEWAY_PAGE,
        "summaries only for the price (learnaws.org, awsforengineers.com, 2025); the 512 KB "
        "metering from AWS's whitepaper on API Gateway private APIs (cost optimization)",
    ),
    "dynamodb_write_unit": Price(
        0.625 / 1e6,
        "write request unit",
        "DynamoDB on-demand, per write request unit",
        DYNAMODB_PAGE,
        "summaries only (airbyte.com, jusdb.com, 2025: half the earlier price since "
        "2024-11-01); not on an AWS page",
    ),
    "dynamodb_read_unit": Price(
        0.125 / 1e6,
        "read request unit",
        "DynamoDB on-demand, per read request unit",
        DYNAMODB_PAGE,
        "summaries only (airbyte.com, 2025); one summary (infratally.com) still says $0.25",
    ),
    "sqs_request": Price(
        0.40 / 1e6,
        "request (64 KB chunk)",
        "SQS standard, per request",
        SQS_PAGE,
        "summaries only (cloudburn.io, March 2026; factualminds.com, June 2026)",
    ),
    "kms_request": Price(
        0.03 / 1e4,
        "request",
        "KMS, per request (symmetric)",
        KMS_PAGE,
        "summaries only (wring.co, March 2026; factualminds.com); the page's stored text has the "
        "free tier and the key's $1 a month, not this table",
    ),
    "s3_put_request": Price(
        0.005 / 1e3,
        "request",
        "S3 Standard, per PUT request",
        S3_PAGE,
        "summaries only (c3x.dev, cloudkaramchari.com)",
    ),
    "s3_get_request": Price(
        0.0004 / 1e3,
        "request",
        "S3 Standard, per GET request",
        S3_PAGE,
        "summaries only (c3x.dev)",
    ),
    "cloudwatch_logs_gb": Price(
        0.50,
        "GB ingested",
        "CloudWatch Logs, per GB ingested (standard class)",
        CLOUDWATCH_PAGE,
        "summaries only (c3x.dev, June 2026; hykell.com); not in the per-rollout estimate",
    ),
}

#: What a rollout is charged per unit of (the estimate's ``units``): each is a price's name.
UNITS = (
    "lambda_request",
    "http_api_request",
    "dynamodb_write_unit",
    "dynamodb_read_unit",
    "sqs_request",
    "kms_request",
    "s3_put_request",
    "s3_get_request",
)
ARCHITECTURES = ("x86_64", "arm64")


def price_overrides(text: str) -> dict[str, float]:
    """``ROLLOUT_SDK_PRICES``: a JSON object of prices by name, in US dollars per unit.

    ValueError naming each key that is unknown, not a number, or negative.
    """
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"must be a JSON object of prices by name: {exc}") from exc
    if not isinstance(value, dict):
        raise ValueError('must be a JSON object of prices by name, e.g. {"lambda_request": 2e-7}')
    problems: list[str] = []
    prices: dict[str, float] = {}
    for key, usd in value.items():
        if key not in PRICE_TABLE:
            problems.append(f"unknown price {key!r} (known: {', '.join(PRICE_TABLE)})")
        elif isinstance(usd, bool) or not isinstance(usd, int | float) or not math.isfinite(usd):
            problems.append(f"price {key!r} must be a number of US dollars, got {usd!r}")
        elif usd < 0:
            problems.append(f"price {key!r} must not be negative, got {usd!r}")
        else:
            prices[key] = float(usd)
    if problems:
        raise ValueError("; ".join(problems))
    return prices


def effective_prices(overrides: Mapping[str, float] | None = None) -> dict[str, float]:
    """The table's prices with ``overrides`` applied."""
    return {name: price.usd for name, price in PRICE_TABLE.items()} | dict(overrides or {})


# --------------------------------------------------------------------------- usage


@dataclass
class LambdaPart:
    """One function's part of a rollout: its seconds (a share of an invocation's duration), its
    share of a cold start's init, and what a GB-second of it costs."""

    seconds: float = 0.0
    init_seconds: float = 0.0
    memory_mb: int = 0
    architecture: str = "x86_64"
    #: Rollouts the invocation was shared by (1 in direct mode).
    batch: int = 1

    def plus(self, other: LambdaPart) -> LambdaPart:
        return replace(
            other,
            seconds=self.seconds + other.seconds,
            init_seconds=self.init_seconds + other.init_seconds,
        )

    def to_json(self, *, compact: bool = False) -> dict[str, Any]:
        data = {
            "seconds": round(self.seconds, 6),
            "init_seconds": round(self.init_seconds, 6),
            "memory_mb": self.memory_mb,
            "architecture": self.architecture,
            "batch": self.batch,
        }
        if compact:  # what from_json reads back as the default, and the formula needs not
            data = {k: v for k, v in data.items() if v != _PART_DEFAULTS.get(k)}
        return data


_PART_DEFAULTS: dict[str, Any] = {"batch": 1}


@dataclass
class Usage:
    """What a rollout used, additive: Lambda time by function, and billed units by price name."""

    functions: dict[str, LambdaPart] = field(default_factory=dict)
    units: dict[str, float] = field(default_factory=lambda: dict.fromkeys(UNITS, 0.0))
    #: DynamoDB calls made, and how many of their answers reported no consumed capacity (their
    #: units are then the request's minimum: moto, or a failed call).
    dynamodb_calls: int = 0
    dynamodb_units_assumed: int = 0

    def plus(self, other: Usage) -> Usage:
        functions = dict(self.functions)
        for name, part in other.functions.items():
            functions[name] = functions[name].plus(part) if name in functions else part
        return Usage(
            functions=functions,
            units={k: self.units.get(k, 0.0) + other.units.get(k, 0.0) for k in UNITS},
            dynamodb_calls=self.dynamodb_calls + other.dynamodb_calls,
            dynamodb_units_assumed=self.dynamodb_units_assumed + other.dynamodb_units_assumed,
        )

    def to_json(self, *, compact: bool = False) -> dict[str, Any]:
        """Every unit (``compact``: only those used, and no default values: the record's
        figure, where every byte may cost a write unit)."""
        units = {k: round(self.units.get(k, 0.0), 6) for k in UNITS}
        return {
            "lambda": {
                name: part.to_json(compact=compact) for name, part in self.functions.items()
            },
            "units": {k: v for k, v in units.items() if v} if compact else units,
            "dynamodb": {
                "calls": self.dynamodb_calls,
                "units_assumed": self.dynamodb_units_assumed,
            },
        }

    @classmethod
    def from_json(cls, data: Any) -> Usage:
        """Inverse of :meth:`to_json` (an estimate's JSON reads as its usage); ValueError when
        ``data`` is not one."""
        if not isinstance(data, dict):
            raise ValueError("a cost estimate must be a JSON object")
        functions: dict[str, LambdaPart] = {}
        for name, part in (data.get("lambda") or {}).items():
            architecture = str(part.get("architecture", "x86_64"))
            if architecture not in ARCHITECTURES:
                raise ValueError(f"unknown architecture {architecture!r}")
            functions[str(name)] = LambdaPart(
                seconds=_number(part.get("seconds", 0)),
                init_seconds=_number(part.get("init_seconds", 0)),
                memory_mb=int(_number(part.get("memory_mb", 0))),
                architecture=architecture,
                batch=int(_number(part.get("batch", 1))),
            )
        units = data.get("units") or {}
        dynamodb = data.get("dynamodb") or {}
        return cls(
            functions=functions,
            units={k: _number(units.get(k, 0)) for k in UNITS},
            dynamodb_calls=int(_number(dynamodb.get("calls", 0))),
            dynamodb_units_assumed=int(_number(dynamodb.get("units_assumed", 0))),
        )


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {value!r}")
    if value < 0:
        raise ValueError(f"expected a non-negative number, got {value!r}")
    return float(value)


def usd(usage: Mapping[str, Any], price: Mapping[str, float]) -> float:
    """The formula of docs/cost.md over an estimate's JSON (its ``lambda`` and ``units``)."""
    lambda_usd = sum(
        (part["seconds"] + part["init_seconds"])
        * part["memory_mb"]
        / 1024
        * price["lambda_gb_second_" + part["architecture"]]
        for part in usage["lambda"].values()
    )
    return float(lambda_usd + sum(n * price[item] for item, n in usage["units"].items()))


@dataclass(frozen=True)
class CostEstimate:
    """A rollout's estimated cost: the usage, priced."""

    usage: Usage
    usd: float
    #: "finish" (the final response's figure) or "delivery" (after the delivery attempts so far).
    at: str
    #: The function that took the figure, and the hand-off mode (the metric's dimensions).
    function: str
    hand_off: str
    #: The price table's date, with "+overrides" when ROLLOUT_SDK_PRICES changed any.
    prices: str

    @classmethod
    def of(
        cls,
        usage: Usage,
        *,
        prices: Mapping[str, float],
        prices_label: str,
        at: str,
        function: str,
        hand_off: str,
    ) -> CostEstimate:
        # Priced from the rounded figures the JSON carries, so that anyone applying the formula
        # to the JSON gets this very number.
        figures = usage.to_json()
        return cls(
            usage=Usage.from_json(figures),
            usd=usd(figures, prices),
            at=at,
            function=function,
            hand_off=hand_off,
            prices=prices_label,
        )

    def to_json(self, *, compact: bool = False) -> dict[str, Any]:
        """The estimate as ``extra_fields`` carries it (``compact``: as the record keeps it,
        the usage and its price only)."""
        if compact:
            return {"usd": self.usd, **self.usage.to_json(compact=True), "prices": self.prices}
        return {
            "usd": self.usd,
            "at": self.at,
            "function": self.function,
            "hand_off": self.hand_off,
            **self.usage.to_json(),
            "prices": self.prices,
        }


class CostSink(Protocol):
    """Receives a rollout's full figure once it is final (DELIVERED or UNDELIVERABLE): where the
    telemetry port emits the metric ``RolloutCost`` (USD, dimensions ``Function`` and
    ``HandOff``: ``estimate.function`` and ``estimate.hand_off``)."""

    def __call__(self, record: RolloutRecord, estimate: CostEstimate) -> None: ...


# --------------------------------------------------------------------------- metering

_warned: set[str] = set()


def _warn_once(what: str, exc: BaseException) -> None:
    if what not in _warned:
        _warned.add(what)
        logger.warning("cost estimate: %s failed; left out: %s: %s", what, type(exc).__name__, exc)


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
        try:
            self.sink(record, estimate)
        except Exception as exc:
            _warn_once("the cost sink", exc)


class RolloutMeter:
    """What one rollout used in one invocation, and what it carried in from earlier ones."""

    def __init__(self, invocation: Invocation, seat: Seat) -> None:
        self.invocation = invocation
        self.seat = seat
        self._lock = threading.Lock()
        self._counted = Usage()
        #: This meter fixed the rollout's response (so its estimate is part of this meter's).
        self.fixed = False
        #: The record's figure from before this invocation (read once, at the first write).
        self.base: Usage | None = None

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
        try:
            carried = Usage.from_json(data)
        except (ValueError, TypeError, AttributeError) as exc:
            _warn_once("reading the job's carried cost", exc)
            return
        with self._lock:
            self._counted = self._counted.plus(carried)

    def usage(self) -> Usage:
        """This meter's usage so far, the invocation's time share included."""
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


#: The event source mapping's requests per queue batch: the ReceiveMessage that got it and the
#: DeleteMessageBatch after it (its empty long polls are the queue's fixed cost).
QUEUE_REQUESTS_PER_BATCH = 2


def queued(meter: RolloutMeter | None, *, batch: int) -> None:
    """A rollout that came through the queue: the SendMessage its message proves, and its
    share of the batch's receive and delete."""
    if meter is not None:
        meter.add("sqs_request", 1 + QUEUE_REQUESTS_PER_BATCH / max(batch, 1))


#: HTTP API requests are metered in 512 KB increments.
HTTP_API_METERING_BYTES = 512 * 1024


def http_api_requests(event: Any) -> int:
    """The HTTP API requests an API Gateway (payload 2.0) event is billed as."""
    if not isinstance(event, dict):
        return 1
    body = event.get("body") or ""
    size = len(body.encode()) if isinstance(body, str) else 0
    if event.get("isBase64Encoded"):
        size = size * 3 // 4
    headers = event.get("headers") or {}
    if isinstance(headers, dict):
        size += sum(len(str(k)) + len(str(v)) + 4 for k, v in headers.items())
    return max(1, math.ceil(size / HTTP_API_METERING_BYTES))


# --------------------------------------------------------------------------- the engine's side


def carried() -> dict[str, Any] | None:
    """The current rollout's usage so far, for the job that hands it on (the API function's
    part, read by the worker); None when nothing is metered."""
    meter = _ROLLOUT.get()
    if meter is None:
        return None
    try:
        return meter.usage().to_json()
    except Exception as exc:
        _warn_once("the hand-off's carried cost", exc)
        return None


def with_estimate(response: RolloutResponse) -> RolloutResponse:
    """``response`` with the estimate at finish in ``extra_fields["rollout_sdk"]["cost"]``,
    beside a failure entry (the agent's own extra fields, if any, stay as they are); the
    response itself when nothing is metered (the local server)."""
    meter = _ROLLOUT.get()
    if meter is None:
        return response
    from rollout_sdk.engine.responses import EXTRA_KEY

    try:
        extra = dict(response.extra_fields)
        kit = extra.get(EXTRA_KEY, {})
        if not isinstance(kit, dict):
            return response  # not the kit's: never overwritten
        extra[EXTRA_KEY] = {**kit, "cost": meter.estimate(at="finish").to_json()}
        meter.fixed = True
        return response.model_copy(update={"extra_fields": extra})
    except Exception as exc:
        _warn_once("the estimate at finish", exc)
        return response


def estimate_of(response: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The estimate a stored response carries, if any."""
    from rollout_sdk.engine.responses import EXTRA_KEY

    extra = (response or {}).get("extra_fields") or {}
    kit = extra.get(EXTRA_KEY) if isinstance(extra, dict) else None
    found = kit.get("cost") if isinstance(kit, dict) else None
    return found if isinstance(found, dict) else None


@dataclass(frozen=True)
class Ledger:
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
    try:
        return Usage.from_json(stored)
    except (ValueError, TypeError, AttributeError) as exc:
        _warn_once("reading the record's cost", exc)
        return Usage()


def ledger(record: RolloutRecord) -> Ledger | None:
    """The rollout's figure so far, for the delivery move about to be written; None when
    nothing is metered (the local server)."""
    meter = _ROLLOUT.get()
    if meter is None:
        return None
    try:
        if meter.base is None:
            meter.base = _prior(record, fixed=meter.fixed)
        estimate = meter.estimate(at="delivery", base=meter.base)
        return Ledger(meter, estimate, {**record.extra, "cost": estimate.to_json(compact=True)})
    except Exception as exc:
        _warn_once("the figure after delivery", exc)
        return None


def extra_of(entry: Ledger | None) -> dict[str, Any] | None:
    """The record's ``extra`` a delivery move writes (None: leave it as it is)."""
    return None if entry is None else entry.extra


def recorded(entry: Ledger | None, moved: TransitionResult) -> None:
    """A delivery move was written with ``entry``: once the rollout is final, hand its full
    figure to the sink (the metric ``RolloutCost``), taken after the move, so that the write
    that made it final is in it too (the record's own figure cannot hold the write storing it)."""
    from rollout_sdk.engine.record import RecordState

    if entry is None or not moved.applied or moved.record is None:
        return
    if moved.record.state not in (RecordState.DELIVERED, RecordState.UNDELIVERABLE):
        return
    meter = entry.meter
    try:
        final = meter.estimate(at="delivery", base=meter.base)
    except Exception as exc:
        _warn_once("the figure after delivery", exc)
        return
    meter.invocation.emit(moved.record, final)


# --------------------------------------------------------------------------- botocore hooks

_MINIMUM_UNITS = "rollout_sdk_cost_minimum_units"
_READS = frozenset({"GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems"})
_S3_GETS = frozenset({"GetObject", "HeadObject"})
_S3_PUTS = frozenset({"PutObject", "CopyObject", "ListObjectsV2", "ListObjects"})
_THROTTLED = ("Throttl", "ProvisionedThroughputExceeded", "RequestLimitExceeded")


def _minimum_units(operation: str, params: Mapping[str, Any]) -> float:
    """The fewest units a DynamoDB request is billed, whatever its items' sizes."""
    consistent = bool(params.get("ConsistentRead"))
    if operation == "TransactWriteItems":
        return 2.0 * len(params.get("TransactItems") or [])
    if operation == "TransactGetItems":
        return 2.0 * len(params.get("TransactItems") or [])
    if operation == "BatchWriteItem":
        return float(sum(len(v) for v in (params.get("RequestItems") or {}).values()))
    if operation in ("GetItem", "Query", "Scan"):
        return 1.0 if consistent else 0.5
    if operation in ("PutItem", "UpdateItem", "DeleteItem"):
        return 1.0
    return 0.0


def _ask_consumed_capacity(
    params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any
) -> dict[str, Any] | None:
    """DynamoDB: ask for the request's consumed capacity (what on-demand bills), and remember
    the request's minimum for an answer that reports none."""
    if _ROLLOUT.get() is None:
        return None
    context[_MINIMUM_UNITS] = _minimum_units(model.name, params)
    members = getattr(model.input_shape, "members", {}) or {}
    if "ReturnConsumedCapacity" in members and "ReturnConsumedCapacity" not in params:
        return {**params, "ReturnConsumedCapacity": "TOTAL"}
    return None


def _dynamodb_units(operation: str, parsed: Mapping[str, Any]) -> tuple[float, float] | None:
    """(read, write) units a DynamoDB answer reports; None when it reports none."""
    consumed = parsed.get("ConsumedCapacity")
    entries = consumed if isinstance(consumed, list) else [consumed] if consumed else []
    entries = [e for e in entries if isinstance(e, dict)]
    if not entries:
        return None
    read = write = 0.0
    for entry in entries:
        if "ReadCapacityUnits" in entry or "WriteCapacityUnits" in entry:
            read += float(entry.get("ReadCapacityUnits") or 0)
            write += float(entry.get("WriteCapacityUnits") or 0)
        elif operation in _READS:
            read += float(entry.get("CapacityUnits") or 0)
        else:
            write += float(entry.get("CapacityUnits") or 0)
    return read, write


def _count_call(
    http_response: Any, parsed: Any, model: Any, context: Mapping[str, Any], **_: Any
) -> None:
    """Charge one answered AWS request to the current rollout's meter."""
    meter = _ROLLOUT.get()
    if meter is None:
        return
    try:
        answer = parsed if isinstance(parsed, dict) else {}
        code = str((answer.get("Error") or {}).get("Code") or "")
        if any(mark in code for mark in _THROTTLED):
            return  # a throttled request is retried, and not billed
        service = model.service_model.service_name
        operation = model.name
        if service == "dynamodb":
            units = _dynamodb_units(operation, answer)
            if units is None:
                minimum = float(context.get(_MINIMUM_UNITS, 0.0))
                read, write = (minimum, 0.0) if operation in _READS else (0.0, minimum)
                meter.add_dynamodb(read=read, write=write, assumed=True)
            else:
                meter.add_dynamodb(read=units[0], write=units[1], assumed=False)
        elif service == "s3":
            if operation in _S3_GETS:
                meter.add("s3_get_request", 1)
            elif operation in _S3_PUTS:
                meter.add("s3_put_request", 1)
        elif service == "kms":
            meter.add("kms_request", 1)
        elif service == "sqs":
            meter.add("sqs_request", 1)
        # Lambda's Invoke is the worker's own request: its invocation counts it. Secrets
        # Manager's reads (the server key, cached) are the API function's fixed cost.
    except Exception as exc:
        _warn_once("counting an AWS request", exc)


def instrument(client: T) -> T:
    """Count ``client``'s requests into the meter of the rollout that makes each (a boto3
    client of the Lambda runtime); without a meter the hooks do nothing."""
    meta = getattr(client, "meta", None)
    if meta is None:
        return client
    service = meta.service_model.service_id.hyphenize()
    if meta.service_model.service_name == "dynamodb":
        meta.events.register(f"provide-client-params.{service}", _ask_consumed_capacity)
    meta.events.register(f"after-call.{service}", _count_call)
    return client


# --------------------------------------------------------------------------- the Lambda side

#: The hand-off each function's rollouts came by, where the function itself says it.
_HAND_OFF_OF = {
    "worker": "direct",
    "worker-failed": "direct",
    "queue-worker": "queue",
    "dead-letters": "queue",
}


def machine_architecture() -> str:
    """The architecture this process runs on, as Lambda names it (x86_64 or arm64)."""
    return "arm64" if platform.machine().lower() in ("aarch64", "arm64") else "x86_64"


def process_age_seconds() -> float | None:
    """Seconds since this process started (Linux's /proc), None where that cannot be read."""
    import os

    try:
        with open("/proc/self/stat", encoding="ascii") as stat:
            # The fields after the command name (which may hold spaces): starttime is 22nd.
            fields = stat.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime", encoding="ascii") as uptime:
            up = float(uptime.read().split()[0])
        return max(0.0, up - int(fields[19]) / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def init_duration(settings: RolloutSettings, *, measured: float) -> float:
    """The cold start's init duration, as an on-demand function is billed for it (since
    2025-08-01): on Lambda, the process's age at the end of the handler's import (the runtime's
    start included); elsewhere (``rollout-sdk invoke``, tests) ``measured``, the time the
    runtime took to build. Provisioned concurrency and SnapStart bill init otherwise: 0."""
    aws = settings.aws
    if aws.initialization_type not in (None, "", "on-demand"):
        return 0.0
    if aws.function_name:
        age = process_age_seconds()
        if age is not None:
            return age
    return max(0.0, measured)


def _context_memory(context: Any) -> int:
    try:
        return int(getattr(context, "memory_limit_in_mb", 0) or 0)
    except (TypeError, ValueError):
        return 0


class Costs:
    """A Lambda environment's facts for estimates (memory, architecture, prices, the cold
    start's init), and where final figures go (:attr:`sink`)."""

    def __init__(
        self,
        *,
        hand_off: str,
        prices: Mapping[str, float] | None = None,
        overridden: bool = False,
        memory_mb: int | None = None,
        architecture: str | None = None,
        init_seconds: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.hand_off = hand_off
        self.prices = effective_prices(prices)
        self.prices_label = PRICES_READ + ("+overrides" if overridden else "")
        self.memory_mb = memory_mb
        self.architecture = architecture or machine_architecture()
        self._init_seconds = init_seconds
        self.clock = clock
        #: Where a rollout's full figure goes once it is final. None: only the record keeps it.
        #: The telemetry port sets this to emit the metric RolloutCost.
        self.sink: CostSink | None = None

    @classmethod
    def for_lambda(cls, settings: RolloutSettings, *, init_seconds: float) -> Costs:
        overrides = settings.kit.price_overrides()
        return cls(
            hand_off=settings.aws.hand_off,
            prices=overrides,
            overridden=bool(overrides),
            memory_mb=settings.aws.function_memory_mb,
            init_seconds=init_seconds,
        )

    def _take_init(self) -> float:
        """The cold start's init: charged to the environment's first invocation only."""
        seconds, self._init_seconds = self._init_seconds, 0.0
        return seconds

    def invocation(
        self,
        function: str,
        context: Any = None,
        *,
        seats: int = 0,
        shares_request: bool = True,
    ) -> AbstractContextManager[Invocation]:
        """The current invocation of ``function`` for the code run inside: ``seats`` rollouts
        in it from the start (a batch; 0 for one that takes them up as it goes), sharing its
        request (``shares_request``) and the cold start's init."""
        init = self._take_init()
        return invocation_scope(
            Invocation(
                function=function,
                hand_off=_HAND_OFF_OF.get(function, self.hand_off),
                memory_mb=self.memory_mb or _context_memory(context),
                architecture=self.architecture,
                prices=self.prices,
                prices_label=self.prices_label,
                init_seconds=init if seats else 0.0,
                seats=seats,
                shares_request=shares_request,
                sink=self.sink,
                clock=self.clock,
            )
        )
