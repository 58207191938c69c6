"""The local server's metrics, kept in memory and served at ``GET /metrics`` in Prometheus' text
exposition format (version 0.0.4).

Written here rather than with ``prometheus_client``: the kit's runtime dependencies are fixed, and
what is exposed is a dozen counters, two histograms and a gauge of one process, which takes less
code than adapting that library's process-wide registry (one per app here: tests and tools build
several apps in one process) and its multiprocess machinery, which the local server does not need.
The tests parse the output with ``prometheus_client``'s own parser, so the format is checked by
the reference implementation.

The names follow Prometheus' conventions: counters end in ``_total``, durations are in seconds
(``ChatCallLatency`` is milliseconds in CloudWatch, seconds here), histograms have cumulative
``_bucket`` series up to ``le="+Inf"``, then ``_sum`` and ``_count``. Locally every metric has the
same function and hand-off (``local``), so only the finished counter has labels (status,
category); the cold-start counter is Lambda's alone.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Literal

from rollout_sdk.telemetry import EmitFailures, Metric, Span

#: The exposition format's media type (Prometheus text format 0.0.4).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

PREFIX = "rollout_sdk_"
#: Chat calls take milliseconds to minutes (a retried call, a slow model).
CHAT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
#: Rollouts take a second to the request timeout (600 s by default, longer when raised).
DURATION_BUCKETS = (0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)

Kind = Literal["counter", "histogram", "gauge"]


@dataclass(frozen=True)
class Family:
    """One exposed metric: its name (a counter's without ``_total``), type, help and labels."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()


FAMILIES: dict[Metric, Family] = {
    Metric.ROLLOUTS_ACCEPTED: Family(
        PREFIX + "rollouts_accepted", "counter", "Rollouts init accepted and handed off."
    ),
    Metric.ROLLOUTS_STARTED: Family(
        PREFIX + "rollouts_started", "counter", "Rollouts a worker claimed."
    ),
    Metric.ROLLOUTS_FINISHED: Family(
        PREFIX + "rollouts_finished",
        "counter",
        "Final responses fixed, by status and failure category (none for COMPLETED).",
        labels=("status", "category"),
    ),
    Metric.ROLLOUTS_DELIVERED: Family(
        PREFIX + "rollouts_delivered", "counter", "Final responses TrainGate accepted (2xx)."
    ),
    Metric.ROLLOUTS_PARKED: Family(
        PREFIX + "rollouts_parked",
        "counter",
        "Rollouts whose callback failed, parked for re-drive.",
    ),
    Metric.ROLLOUTS_REDRIVEN: Family(
        PREFIX + "rollouts_redriven",
        "counter",
        "Stored responses a re-drive pass sent again, and rollouts it handed off again.",
    ),
    Metric.ROLLOUTS_UNDELIVERABLE: Family(
        PREFIX + "rollouts_undeliverable",
        "counter",
        "Final responses TrainGate refused for good, or the re-drive gave up on.",
    ),
    Metric.CALLBACK_ATTEMPTS: Family(
        PREFIX + "callback_attempts", "counter", "POSTs to /v1/rollout/completed."
    ),
    Metric.OUTBOUND_REFUSED: Family(
        PREFIX + "outbound_refused",
        "counter",
        "Calls the outbound policy refused at connect time (nothing was sent).",
    ),
    Metric.CHAT_CALL_LATENCY: Family(
        PREFIX + "chat_call_seconds",
        "histogram",
        "Chat calls to TrainGate, retries included, in seconds.",
        buckets=CHAT_BUCKETS,
    ),
    Metric.ROLLOUT_DURATION: Family(
        PREFIX + "rollout_duration_seconds",
        "histogram",
        "Claim to final response fixed, in seconds.",
        buckets=DURATION_BUCKETS,
    ),
    Metric.OLDEST_PARKED_AGE: Family(
        PREFIX + "oldest_parked_age_seconds",
        "gauge",
        "Age of the oldest parked response the last re-drive pass saw, in seconds (0: none).",
    ),
}

LabelValues = tuple[str, ...]


@dataclass
class _Histogram:
    """Counts per bucket (not yet cumulative), the sum and the count."""

    buckets: tuple[float, ...]
    counts: list[int] = field(init=False)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.buckets)

    def observe(self, value: float) -> None:
        for index, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[index] += 1
                break
        self.total += value
        self.count += 1


def _number(value: float) -> str:
    """A sample value or bucket bound as the format writes it (``+Inf``, ``1.0``, ``0.005``)."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return repr(float(value))


def _escape(value: str) -> str:
    """A label value escaped as the format requires: backslash, double quote and newline."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: list[tuple[str, str]]) -> str:
    if not pairs:
        return ""
    return "{" + ",".join(f'{name}="{_escape(value)}"' for name, value in pairs) + "}"


class PrometheusTelemetry:
    """The engine's telemetry on the local server: counters, histograms and a gauge in memory,
    rendered by :meth:`exposition`. Spans are not kept (no tracer runs locally)."""

    def __init__(self) -> None:
        # The app's loop writes; the /metrics answer reads on the same loop, but a lock keeps
        # the exposition consistent whatever thread calls it (tools, tests).
        self._lock = threading.Lock()
        self._counters: dict[Metric, dict[LabelValues, float]] = {}
        self._histograms: dict[Metric, dict[LabelValues, _Histogram]] = {}
        self._gauges: dict[Metric, dict[LabelValues, float]] = {}
        self.failures = EmitFailures("recording a local metric")

    def count(self, metric: Metric, value: float = 1, /, **dimensions: str) -> None:
        """Add ``value`` to the counter (a metric with no local family is dropped)."""
        self._record(metric, float(value), dimensions)

    def observe(self, metric: Metric, value: float, /, **dimensions: str) -> None:
        """One value of a histogram, or the gauge's new value."""
        self._record(metric, float(value), dimensions)

    def _record(self, metric: Metric, value: float, dimensions: dict[str, str]) -> None:
        with self.failures.swallowed():
            family = FAMILIES.get(metric)
            if family is None:
                return
            key = tuple(dimensions.get(label, "") for label in family.labels)
            with self._lock:
                if family.kind == "counter":
                    series = self._counters.setdefault(metric, {})
                    series[key] = series.get(key, 0.0) + value
                elif family.kind == "gauge":
                    self._gauges.setdefault(metric, {})[key] = value
                else:
                    histograms = self._histograms.setdefault(metric, {})
                    histogram = histograms.get(key)
                    if histogram is None:
                        histogram = histograms[key] = _Histogram(family.buckets)
                    histogram.observe(value)

    def span(self, name: Span, *, rollout_id: str) -> AbstractContextManager[None]:
        """Nothing is traced locally."""
        return nullcontext()

    def exposition(self) -> str:
        """Every family, in the text exposition format (each with ``# HELP`` and ``# TYPE``)."""
        with self._lock:
            return "".join(
                self._family_lines(metric, family) for metric, family in FAMILIES.items()
            )

    def _family_lines(self, metric: Metric, family: Family) -> str:
        name = family.name + ("_total" if family.kind == "counter" else "")
        lines = [f"# HELP {name} {family.help}", f"# TYPE {name} {family.kind}"]
        lines.extend(self._samples(metric, family, name))
        return "\n".join(lines) + "\n"

    def _samples(self, metric: Metric, family: Family, name: str) -> Iterator[str]:
        if family.kind == "histogram":
            histograms = self._histograms.get(metric, {})
            if not histograms and not family.labels:
                histograms = {(): _Histogram(family.buckets)}  # an empty histogram, all zeros
            for key, histogram in sorted(histograms.items()):
                pairs = list(zip(family.labels, key, strict=True))
                cumulative = 0
                for bound, count in zip(histogram.buckets, histogram.counts, strict=True):
                    cumulative += count
                    le = _labels([*pairs, ("le", _number(bound))])
                    yield f"{family.name}_bucket{le} {cumulative}"
                yield f"{family.name}_bucket{_labels([*pairs, ('le', '+Inf')])} {histogram.count}"
                yield f"{family.name}_sum{_labels(pairs)} {_number(histogram.total)}"
                yield f"{family.name}_count{_labels(pairs)} {histogram.count}"
            return
        values = (self._counters if family.kind == "counter" else self._gauges).get(metric, {})
        if not values and not family.labels:
            values = {(): 0.0}  # a counter that has not moved, or a gauge never set, reads 0
        for key, value in sorted(values.items()):
            yield f"{name}{_labels(list(zip(family.labels, key, strict=True)))} {_number(value)}"
