"""What a rollout used (Lambda seconds by function, requests and units by price name) and what
that comes to in US dollars at the price table's prices (docs/cost.md, "Per-rollout estimate")."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from rollout_sdk.prices import ARCHITECTURES, UNITS

if TYPE_CHECKING:
    from rollout_sdk.store.record import RolloutRecord


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
