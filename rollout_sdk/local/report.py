"""What ``rollout-sdk demo`` and ``rollout-sdk test`` report: each rollout's outcome, the run's
summary (one shape, one number format for both), the ``-o`` results (a file, or stdout for
``-o -``), and the commands' error line.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

#: How the summary counts a failed rollout that carries no failure category.
UNCATEGORIZED = "uncategorized"
#: The status of a rollout whose final response never came (within the run's wait).
MISSING = "missing"
#: The status of a rollout whose init the local server did not accept.
REFUSED = "refused"
#: Failed rollouts the summary names one by one (the ``-o`` file has them all).
SHOWN_FAILURES = 10
#: ``-o -``: the results JSON on stdout, alone; the summary and everything else on stderr.
STDOUT = "-"


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by nearest rank; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


#: ``rollout-sdk --debug``: a failure also prints the traceback of what caused it.
DEBUG = False


def fail(command: str, message: str, code: int = 1) -> int:
    """Say ``rollout-sdk COMMAND: error: MESSAGE`` on stderr; ``code``, the exit status. Under
    ``--debug``, called while an exception is handled, its traceback comes first."""
    if DEBUG and sys.exc_info()[1] is not None:
        import traceback

        traceback.print_exc(file=sys.stderr)
    print(f"{command}: error: {message}", file=sys.stderr)
    return code


def fmt_ms(value: float) -> str:
    """Milliseconds as every latency of the summary shows them (``-`` for no value)."""
    return "-" if math.isnan(value) else f"{value:.1f}"


@dataclass
class RowOutcome:
    """How one rollout went (the ``-o`` file's per-row record is :meth:`as_json`)."""

    row_index: int
    success: bool
    status: str
    error: str | None
    duration_ms: float
    token_usage: dict[str, int] = field(default_factory=dict)
    reward: float | None = None
    finish_reason: str | None = None
    category: str | None = None
    llm_latency_ms: float = 0.0
    #: The rollout's own ``metrics.total_latency_ms`` (NaN when it sent none).
    total_latency_ms: float = math.nan
    #: The init's HTTP status (None: the server did not answer) and its round trip.
    init_status: int | None = 202
    init_ms: float = math.nan

    def as_json(self) -> dict[str, Any]:
        """v1's per-row shape."""
        return {
            "row_index": self.row_index,
            "success": self.success,
            "error": self.error,
            "duration_ms": self.duration_ms,
            "token_usage": self.token_usage,
            "reward": self.reward,
            "finish_reason": self.finish_reason,
        }


def outcome_of(
    row_index: int,
    body: dict[str, Any],
    *,
    duration_ms: float,
    init_ms: float,
    failure: tuple[str, str] | None = None,
) -> RowOutcome:
    """The outcome of a rollout whose final response is ``body``; ``failure`` is the
    (category, message) of what the TrainGate side saw end it, if it saw anything."""
    from rollout_sdk.engine.responses import failure_of

    metrics = body.get("metrics") or {}
    prompt = int(metrics.get("prompt_tokens") or 0)
    completion = int(metrics.get("response_tokens") or 0)
    status = str(body.get("status"))
    success = status == "COMPLETED"
    category = error = None
    if not success:
        kit_failure = failure_of(body) or {}
        category, error = failure or (
            str(kit_failure.get("category", UNCATEGORIZED)),
            str(body.get("error_message") or "ERROR"),
        )
    reward = body.get("reward")
    return RowOutcome(
        row_index=row_index,
        success=success,
        status=status,
        error=error,
        duration_ms=duration_ms,
        token_usage={
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "num_llm_calls": int(metrics.get("num_llm_calls") or 0),
        },
        reward=None if reward is None else float(reward),
        finish_reason=body.get("finish_reason"),
        category=category,
        llm_latency_ms=float(metrics.get("llm_latency_ms") or 0.0),
        total_latency_ms=float(metrics.get("total_latency_ms", math.nan)),
        init_ms=init_ms,
    )


@dataclass
class RunReport:
    """Every rollout that ran, in row order, and how the run ended."""

    outcomes: list[RowOutcome]
    total_duration_ms: float
    #: Why the run stopped early (a failure every row would hit), if it did.
    stop_reason: str | None = None
    not_run: int = 0
    timed_out: bool = False
    #: Final responses received beyond the first for a rollout, and for rollouts of no row
    #: (counted when the TrainGate side keeps every callback: the demo's stand-in).
    duplicates: int = 0
    unexpected: int = 0

    @property
    def passed(self) -> int:
        return sum(1 for o in self.outcomes if o.success)

    @property
    def failed(self) -> int:
        return len(self.outcomes) - self.passed

    @property
    def total_tokens(self) -> int:
        return sum(o.token_usage.get("total_tokens", 0) for o in self.outcomes)

    @property
    def statuses(self) -> Counter[str]:
        return Counter(o.status for o in self.outcomes)

    @property
    def categories(self) -> Counter[str]:
        return Counter(o.category or UNCATEGORIZED for o in self.outcomes if not o.success)

    @property
    def init_failures(self) -> Counter[str]:
        return Counter(
            "no answer" if o.init_status is None else str(o.init_status)
            for o in self.outcomes
            if o.init_status != 202
        )

    @property
    def ok(self) -> bool:
        """Every row ran and completed, and was reported exactly once."""
        return not (
            self.failed or self.not_run or self.timed_out or self.duplicates or self.unexpected
        )

    def as_json(self) -> dict[str, Any]:
        """v1's ``-o`` shape (its five summary fields first; the kit adds the rest)."""
        return {
            "summary": {
                "total": len(self.outcomes),
                "passed": self.passed,
                "failed": self.failed,
                "total_duration_ms": self.total_duration_ms,
                "total_tokens": self.total_tokens,
                "statuses": dict(self.statuses),
                "errors_by_category": dict(self.categories),
                "stopped_early": self.stop_reason is not None,
                "stop_reason": self.stop_reason,
                "not_run": self.not_run,
            },
            "results": [o.as_json() for o in self.outcomes],
        }


def _line(label: str, value: object) -> str:
    return f"  {label:<24}{value!s:>10}"


def _count_lines(report: RunReport) -> list[str]:
    statuses = report.statuses
    lines = [
        _line("rollouts", len(report.outcomes) + report.not_run),
        _line("COMPLETED", statuses["COMPLETED"]),
        _line("ERROR", statuses["ERROR"]),
        _line(MISSING, statuses[MISSING]),
    ]
    lines += [
        _line(status, count)
        for status, count in sorted(statuses.items())
        if status not in ("COMPLETED", "ERROR", MISSING)
    ]
    ranked = sorted(report.categories.items(), key=lambda item: (-item[1], item[0]))
    if not ranked:
        lines.append(_line("errors by category", "none"))
    else:
        lines += ["  errors by category"] + [f"    {c:<22}{n:>10}" for c, n in ranked]
    lines.append(_line("duplicates received", report.duplicates))
    if report.unexpected:
        lines.append(_line("unexpected rollout ids", report.unexpected))
    lines += [_line(f"init answered {s}", n) for s, n in sorted(report.init_failures.items())]
    if report.not_run:
        lines.append(_line("not run", report.not_run))
    return lines


def _figure_lines(report: RunReport) -> list[str]:
    rewards = [o.reward for o in report.outcomes if o.reward is not None]
    usage = Counter[str]()
    for outcome in report.outcomes:
        usage.update(outcome.token_usage)
    mean = f"{sum(rewards) / len(rewards):.3f}" if rewards else "-"
    return [
        f"{_line('mean reward', mean)}  ({len(rewards)} rewarded)",
        _line("tokens prompt", f"{usage['prompt_tokens']:,}"),
        _line("tokens completion", f"{usage['completion_tokens']:,}"),
        _line("tokens total", f"{usage['total_tokens']:,}"),
        _line("model calls", usage["num_llm_calls"]),
    ]


def _latency_lines(report: RunReport) -> list[str]:
    outcomes = report.outcomes
    per_call = [
        o.llm_latency_ms / o.token_usage["num_llm_calls"]
        for o in outcomes
        if o.token_usage.get("num_llm_calls")
    ]
    series = (
        ("rollout total_latency", [o.total_latency_ms for o in outcomes]),
        ("row", [o.duration_ms for o in outcomes if o.status != MISSING]),
        ("model call", per_call),
        ("init round trip", [o.init_ms for o in outcomes]),
    )
    lines = [f"  {'latency (ms)':<24}{'p50':>10}{'p95':>10}{'p99':>10}"]
    for name, values in series:
        known = [v for v in values if not math.isnan(v)]
        cells = "".join(f"{fmt_ms(percentile(known, q)):>10}" for q in (50, 95, 99))
        lines.append(f"  {name:<24}{cells}")
    return lines


def _verdict(report: RunReport) -> list[str]:
    failed = [o for o in report.outcomes if not o.success]
    lines = []
    if failed:
        lines += ["", "failed rows:"]
        lines += [f"  row {o.row_index}: {o.error}" for o in failed[:SHOWN_FAILURES]]
        if len(failed) > SHOWN_FAILURES:
            lines.append(f"  ... and {len(failed) - SHOWN_FAILURES} more (see -o)")
    if report.stop_reason is not None:
        lines += ["", f"STOPPED EARLY: {report.stop_reason}"]
    lines.append("")
    if report.ok:
        return [*lines, "OK: every rollout was reported exactly once, none ERROR"]
    statuses = report.statuses
    why = []
    if report.timed_out:
        why.append("timed out waiting for callbacks")
    if statuses[MISSING]:
        why.append(f"{statuses[MISSING]} never reported")
    if report.duplicates:
        why.append(f"{report.duplicates} duplicate callbacks")
    if statuses["ERROR"]:
        errors = Counter(o.category or UNCATEGORIZED for o in failed if o.status == "ERROR")
        by = ", ".join(f"{n} {c}" for c, n in errors.most_common())
        why.append(f"{statuses['ERROR']} ERROR ({by})")
    if report.init_failures:
        why.append(f"{sum(report.init_failures.values())} inits not accepted")
    if report.unexpected:
        why.append(f"{report.unexpected} callbacks for unknown rollouts")
    if report.not_run:
        why.append(f"{report.not_run} not run")
    return [*lines, "FAILED: " + "; ".join(why or ["see the counts above"])]


def format_summary(report: RunReport, *, title: str) -> str:
    """The summary printed to stdout (stderr with ``-o -``): counts by status and failure category, reward, tokens,
    latency percentiles, wall time and throughput, the first failed rows, and the verdict."""
    wall = report.total_duration_ms / 1000
    rate = len(report.outcomes) / wall if wall > 0 else 0.0
    return "\n".join(
        [
            title,
            "",
            *_count_lines(report),
            *_figure_lines(report),
            "",
            *_latency_lines(report),
            "",
            f"  {'wall time':<24}{wall:>9.2f}s",
            f"  {'throughput':<24}{rate:>10.1f}  rollouts/s",
            *_verdict(report),
        ]
    )


def write_output(path: str, report: RunReport, *, stdout: TextIO | None = None) -> None:
    """The ``-o`` results: for :data:`STDOUT`, on ``stdout`` (default ``sys.stdout``) in one
    write; else the file, whole or not at all (a temporary file beside it, renamed over it), its
    folder made if missing. OSError when it cannot be written."""
    text = json.dumps(report.as_json(), indent=2) + "\n"
    if path == STDOUT:
        stream = sys.stdout if stdout is None else stdout
        stream.write(text)
        stream.flush()
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    # Beside the target, so the rename stays on one file system; "x": a name of nobody else's.
    partial = target.with_name(f".{target.name}.{secrets.token_hex(4)}.partial")
    try:
        with partial.open("x", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
