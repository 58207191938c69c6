"""The Lambda side of the cost estimate: the environment's facts (memory, architecture, the
cold start's init, prices), the botocore hooks that count each request the kit makes into the
meter of the rollout that made it, and what AWS bills around the kit's own requests (an HTTP
API request by its size, a queued rollout's share of the batch's receive and delete).

DynamoDB's write and read units are the ones DynamoDB reports (the hook asks for
``ReturnConsumedCapacity="TOTAL"``), or the request's minimum when an answer reports none
(counted in ``dynamodb.units_assumed``).
"""

from __future__ import annotations

import math
import os
import platform
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

from rollout_sdk.cost.guard import figure
from rollout_sdk.cost.meter import Invocation, RolloutMeter, current, invocation_scope
from rollout_sdk.prices import PRICES_READ, effective_prices

if TYPE_CHECKING:
    from rollout_sdk.cost.usage import CostSink
    from rollout_sdk.settings import RolloutSettings

T = TypeVar("T")

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
    if current() is None:
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
    meter = current()
    if meter is None:
        return
    with figure("counting an AWS request"):
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


def machine_architecture() -> str:
    """The architecture this process runs on, as Lambda names it (x86_64 or arm64)."""
    return "arm64" if platform.machine().lower() in ("aarch64", "arm64") else "x86_64"


def process_age_seconds() -> float | None:
    """Seconds since this process started (Linux's /proc), None where that cannot be read."""
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
        sink: CostSink | None = None,
    ) -> None:
        self.hand_off = hand_off
        self.prices = effective_prices(prices)
        self.prices_label = PRICES_READ + ("+overrides" if overridden else "")
        self.memory_mb = memory_mb
        self.architecture = architecture or machine_architecture()
        self._init_seconds = init_seconds
        self.clock = clock
        self._sink = sink

    @property
    def sink(self) -> CostSink | None:
        """Where a rollout's full figure goes once it is final (None: only the record keeps
        it); on Lambda, the metric RolloutCost. Given at construction."""
        return self._sink

    @classmethod
    def for_lambda(
        cls, settings: RolloutSettings, *, init_seconds: float, sink: CostSink | None = None
    ) -> Costs:
        overrides = settings.kit.price_overrides()
        return cls(
            hand_off=settings.aws.hand_off,
            prices=overrides,
            overridden=bool(overrides),
            memory_mb=settings.aws.function_memory_mb,
            init_seconds=init_seconds,
            sink=sink,
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
        hand_off: str | None = None,
        seats: int = 0,
        shares_request: bool = True,
    ) -> AbstractContextManager[Invocation]:
        """The current invocation of ``function`` (its cost label) for the code run inside,
        its rollouts come by ``hand_off`` (default: the stack's): ``seats`` rollouts in it from
        the start (a batch; 0 for one that takes them up as it goes), sharing its request
        (``shares_request``) and the cold start's init."""
        init = self._take_init()
        return invocation_scope(
            Invocation(
                function=function,
                hand_off=hand_off or self.hand_off,
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
