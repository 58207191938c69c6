"""The Lambda functions' telemetry: Powertools Metrics in CloudWatch's embedded metric format
(EMF), and X-Ray subsegments through Powertools Tracer when the template's ``Tracing`` parameter
asks for them.

**Metrics.** One namespace (``POWERTOOLS_METRICS_NAMESPACE``, ``RolloutSDK``), and only
low-cardinality dimensions: ``Function`` (api, worker, queue_worker, failure, dead_letter,
redrive), ``HandOff`` (direct, queue) and, for ``RolloutsFinished``, ``Status`` and ``Category``;
never a rollout id. Values gather in memory during an invocation and are written to stdout as
EMF lines when it ends (:meth:`EmfTelemetry.flush`, called by ``handler.py``'s entry points), one
line per dimension set: a blob carries one set of dimensions, so ``RolloutsFinished`` of each
status and category gets a blob of its own, the way Powertools' ``single_metric`` does. They are
Powertools' EMF provider (``AmazonCloudWatchEMFProvider``) rather than ``single_metric`` or the
``Metrics`` class for one reason: both add a ``service`` dimension from
``POWERTOOLS_SERVICE_NAME``, which the template sets for the Logger, and an alarm matches a
metric only on its exact dimension set, which docs/operations.md names without it. Lambda sends
stdout to CloudWatch Logs, which turns each EMF line into metric values: no API call, nothing
on the rollout's path.

**Tracing.** ``Tracing: Active`` (template.yaml) makes Lambda record each invocation's own
segment; that costs the function nothing. With ``POWERTOOLS_TRACE_DISABLED=false`` (the
``Tracing`` parameter set to ``subsegments``) the kit adds subsegments for init's claim and
hand-off, each chat call and the callback, each annotated with the rollout_id, through Powertools
Tracer and the X-Ray SDK under it. The SDK is imported only then (it is in maintenance, and
costs the cold start: docs/aws.md, "Metrics, traces and logs"). The subsegments hang directly off the invocation's
segment and are sent when they close: the X-Ray SDK keeps open subsegments on one stack per
thread, and a queue batch runs its rollouts concurrently on one thread, so nesting them through
that stack (Powertools' ``capture_method``, ``in_subsegment_async``) would parent one rollout's
chat call under another's and close the wrong one.

Neither ever fails a rollout: each swallows its failures and logs the first
(:class:`~rollout_sdk.telemetry.EmitFailures`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from rollout_sdk.stack import LambdaFunction
from rollout_sdk.telemetry import EmitFailures, Metric, Span

if TYPE_CHECKING:
    # Here: the EMF provider loads with the first metric, not at import.
    from aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch import (
        AmazonCloudWatchEMFProvider,
    )

#: Each metric's CloudWatch unit, and the factor from the port's value (seconds for durations).
UNITS: dict[Metric, tuple[str, float]] = {
    Metric.ROLLOUTS_ACCEPTED: ("Count", 1.0),
    Metric.ROLLOUTS_STARTED: ("Count", 1.0),
    Metric.ROLLOUTS_FINISHED: ("Count", 1.0),
    Metric.ROLLOUTS_DELIVERED: ("Count", 1.0),
    Metric.ROLLOUTS_PARKED: ("Count", 1.0),
    Metric.ROLLOUTS_REDRIVEN: ("Count", 1.0),
    Metric.ROLLOUTS_UNDELIVERABLE: ("Count", 1.0),
    Metric.CALLBACK_ATTEMPTS: ("Count", 1.0),
    Metric.COLD_STARTS: ("Count", 1.0),
    Metric.CHAT_CALL_LATENCY: ("Milliseconds", 1000.0),
    Metric.ROLLOUT_DURATION: ("Seconds", 1.0),
    Metric.OLDEST_PARKED_AGE: ("Seconds", 1.0),
    Metric.ROLLOUT_COST: ("None", 1.0),
    Metric.OUTBOUND_REFUSED: ("Count", 1.0),
}

#: The port's dimension names as CloudWatch spells them.
DIMENSIONS = {"status": "Status", "category": "Category"}


def hand_off_of(function: str, configured: str) -> str:
    """The ``HandOff`` dimension of the function whose ``Function`` dimension is ``function``,
    in a stack whose hand-off is ``configured`` (:class:`~rollout_sdk.stack.
    LambdaFunction` says which serve one by construction)."""
    named = LambdaFunction.by_dimension(function)
    return named.hand_off_in(configured) if named is not None else configured


class XRaySpans:
    """Subsegments of the invocation's X-Ray segment, through Powertools Tracer's recorder.

    Building one imports Powertools Tracer and the X-Ray SDK (the cold start pays for it once).
    ``tracer`` is Powertools' ``Tracer`` (its ``provider`` the X-Ray recorder); by default one
    built for ``service``.
    """

    def __init__(self, *, service: str = "rollout-sdk", tracer: Any = None) -> None:
        # Here: the X-Ray SDK loads only with Tracing on (the cold start pays for it then).
        from aws_xray_sdk.core.models.subsegment import Subsegment
        from aws_xray_sdk.core.utils.stacktrace import get_stacktrace

        if tracer is None:
            from aws_lambda_powertools import Tracer

            # No auto-patching: patched botocore and httpx calls nest through the recorder's
            # per-thread stack, which concurrent rollouts would tangle (see the module docstring).
            tracer = Tracer(service=service, auto_patch=False)
        self.tracer = tracer
        self.recorder: Any = tracer.provider
        self._subsegment = Subsegment
        self._stacktrace = get_stacktrace
        self.failures = EmitFailures("recording a trace subsegment")

    @contextmanager
    def span(self, name: Span, *, rollout_id: str) -> Iterator[None]:
        """A subsegment ``name`` of the current invocation's segment, annotated with the
        ``rollout_id``, sent when it closes; nothing when the invocation is not sampled."""
        subsegment: Any = None
        with self.failures.swallowed():
            subsegment = self._begin(name, rollout_id)
        try:
            yield
        except Exception as exc:
            if subsegment is not None:
                with self.failures.swallowed():
                    subsegment.add_exception(exc, self._stacktrace(limit=10))
            raise
        finally:
            if subsegment is not None:
                with self.failures.swallowed():
                    subsegment.close()
                    # Streams every closed subsegment of the segment: this one, now.
                    self.recorder.stream_subsegments()

    def _begin(self, name: Span, rollout_id: str) -> Any:
        if self.tracer.disabled:
            return None
        # In Lambda, the recorder's context makes this the invocation's segment, from the
        # _X_AMZN_TRACE_ID Lambda sets for each invocation (a placeholder when there is none).
        segment = self.recorder.current_segment()
        if segment is None or not segment.sampled or getattr(segment, "initializing", False):
            return None  # not sampled: most invocations of a busy step (docs/aws.md)
        subsegment = self._subsegment(str(name), "local", segment)
        segment.add_subsegment(subsegment)
        subsegment.put_annotation("rollout_id", rollout_id)
        return subsegment


class EmfTelemetry:
    """The engine's telemetry in a Lambda execution environment: EMF lines on stdout at the end
    of each invocation, and subsegments through ``spans`` when tracing is on.

    ``hand_off`` is the stack's (HAND_OFF). :meth:`begin` names the function an invocation runs
    in (and counts its cold start); :meth:`flush` writes what the invocation gathered.
    """

    def __init__(self, *, namespace: str, hand_off: str, spans: XRaySpans | None = None) -> None:
        self.namespace = namespace
        self.hand_off = hand_off
        self.spans = spans
        self.function = "unknown"
        self._blobs: dict[tuple[tuple[str, str], ...], AmazonCloudWatchEMFProvider] = {}
        self._started: set[str] = set()
        self.failures = EmitFailures("writing CloudWatch metrics")

    def begin(self, function: str) -> None:
        """An invocation of ``function`` starts: its metrics carry its Function and HandOff, and
        the first invocation of each function in this environment counts a cold start."""
        self.function = function
        if function not in self._started:
            self._started.add(function)
            self.count(Metric.COLD_STARTS)

    def count(self, metric: Metric, value: float = 1, /, **dimensions: str) -> None:
        """Add ``value`` to the counter, in this invocation's blob for its dimensions."""
        self._add(metric, value, dimensions)

    def observe(self, metric: Metric, value: float, /, **dimensions: str) -> None:
        """One value of the distribution (CloudWatch keeps every value of a blob)."""
        self._add(metric, value, dimensions)

    def span(self, name: Span, *, rollout_id: str) -> AbstractContextManager[None]:
        """A subsegment when tracing is on, else nothing."""
        if self.spans is None:
            return nullcontext()
        return self.spans.span(name, rollout_id=rollout_id)

    def flush(self) -> None:
        """Write one EMF line per dimension set that gathered values since the last flush."""
        with self.failures.swallowed():
            for blob in self._blobs.values():
                if blob.metric_set:
                    blob.flush_metrics()

    def _add(self, metric: Metric, value: float, dimensions: dict[str, str]) -> None:
        with self.failures.swallowed():
            unit, factor = UNITS[metric]
            named = {
                "Function": self.function,
                "HandOff": hand_off_of(self.function, self.hand_off),
                **{DIMENSIONS[key]: str(item) for key, item in dimensions.items()},
            }
            key = tuple(sorted(named.items()))
            blob = self._blobs.get(key)
            if blob is None:
                blob = self._blobs[key] = self._blob(named)
            # Powertools writes the blob early (and starts afresh) at 100 values of a metric.
            blob.add_metric(name=metric.value, unit=unit, value=float(value) * factor)

    def _blob(self, dimensions: dict[str, str]) -> AmazonCloudWatchEMFProvider:
        # Here: the EMF provider loads with the first metric, not at import.
        from aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch import (
            AmazonCloudWatchEMFProvider,
        )

        # service="": no service dimension (see the module docstring); default_dimensions come
        # back after each flush.
        return AmazonCloudWatchEMFProvider(
            namespace=self.namespace, service="", default_dimensions=dimensions
        )
