"""Shared pieces of ``make bench``: figures over runs, /proc readers, the stand-in's callback
signal, and the report line of a bench subprocess (the request bodies are
:mod:`testkit.bodies`)."""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollout_sdk.traingate.client import CHAT_PATH, COMPLETED_PATH
from testkit import REPO_ROOT
from testkit.aws import fake_aws_env

MIB = 1024 * 1024

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def median(values: list[float]) -> float:
    """The median of the values that are numbers (a failed run's NaN is left out); NaN for
    none."""
    numbers = [v for v in values if not math.isnan(v)]
    return statistics.median(numbers) if numbers else math.nan


@dataclass
class Figure:
    """One figure: a value per run, reported as the median."""

    unit: str
    runs: list[float] = field(default_factory=list)

    @property
    def value(self) -> float:
        return median(self.runs)

    def to_json(self) -> dict[str, Any]:
        return {
            "median": _finite(self.value),
            "runs": [_finite(v) for v in self.runs],
            "unit": self.unit,
        }


def _finite(value: float) -> float | None:
    return None if math.isnan(value) or math.isinf(value) else round(value, 4)


# ---------------------------------------------------------------- /proc


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM (and the other ``kB`` lines) of ``/proc/<pid>/status``, in bytes."""
    values: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB":
            values[key] = int(parts[0]) * 1024
    return values


def rss(pid: int) -> int:
    """Resident set size now, in bytes."""
    return proc_status(pid)["VmRSS"]


def peak_rss(pid: int) -> int:
    """Peak resident set size (VmHWM), in bytes."""
    return proc_status(pid)["VmHWM"]


def reset_peak_rss(pid: int) -> bool:
    """Reset VmHWM to the current RSS (``clear_refs`` 5); False when the kernel refuses."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5", encoding="ascii")
    except OSError:
        return False
    return True


class PeakIncrease:
    """How far this process's peak RSS rises from now on: its peak is reset to the current RSS
    first, and :attr:`reset` says whether the kernel allowed that."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.reset = reset_peak_rss(self.pid)
        self.before = rss(self.pid)

    def mib(self) -> float:
        """The peak so far, above the RSS at the start, in MiB."""
        return (peak_rss(self.pid) - self.before) / MIB


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of ``pid`` so far."""
    text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    fields = text[text.rindex(")") + 2 :].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return ticks / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------- the stand-in's callbacks


class StandinProbe:
    """ASGI wrapper around the stand-in's app (which stays unchanged): notes the time of every
    2xx answer to ``/v1/rollout/completed`` and calls ``notify`` (from the stand-in's thread),
    so a driver can start a new rollout the moment one is called back; counts the chat calls
    in progress (the most at once is ``peak_chats``)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.notify: Callable[[], None] | None = None
        self._lock = threading.Lock()
        self._times: list[float] = []
        self._chats = 0
        self.peak_chats = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path") if scope.get("type") == "http" else None
        if path == CHAT_PATH:
            with self._lock:
                self._chats += 1
                self.peak_chats = max(self.peak_chats, self._chats)
            try:
                await self.app(scope, receive, send)
            finally:
                with self._lock:
                    self._chats -= 1
            return
        if path != COMPLETED_PATH:
            await self.app(scope, receive, send)
            return
        status = 0

        async def watch(message: Message) -> None:
            nonlocal status
            if message.get("type") == "http.response.start":
                status = int(message.get("status", 0))
            await send(message)

        await self.app(scope, receive, watch)
        if 200 <= status < 300:
            with self._lock:
                self._times.append(time.perf_counter())
            notify = self.notify
            if notify is not None:
                notify()

    def times(self) -> list[float]:
        """``time.perf_counter()`` of each 2xx callback so far, in order."""
        with self._lock:
            return list(self._times)

    def chats_in_progress(self) -> int:
        with self._lock:
            return self._chats


def steady_window(callback_times: list[float], warmup: int, total: int) -> tuple[float, int]:
    """(seconds, rollouts) of the measured window: from the ``warmup``-th callback (the
    pipeline is full from then on) to the last of at most ``total``; a run that lost rollouts
    is measured over those that came back (its failures say so). (NaN, 0) when none did."""
    ordered = sorted(callback_times)[:total]
    if len(ordered) <= max(warmup, 1):
        return math.nan, 0
    start = ordered[warmup - 1] if warmup > 0 else ordered[0]
    return ordered[-1] - start, len(ordered) - warmup


#: Prefix of the one line of JSON a bench subprocess reports (logs may share its stdout).
RESULT_MARK = "BENCH-RESULT "


def emit_result(result: Any) -> None:
    """Print ``result`` as the subprocess's report line."""
    print(RESULT_MARK + json.dumps(result, default=str), flush=True)


def report_and_exit(report: dict[str, Any], lines: list[str]) -> int:
    """A fresh-process bench's end: its lines and failures on stderr, the report line on
    stdout; 1 when a case failed."""
    for line in [*lines, *report["failures"]]:
        print(line, file=sys.stderr)
    emit_result(report)
    return 1 if report["failures"] else 0


def parse_result(stdout: str) -> Any:
    """The report line of a bench subprocess's stdout; ValueError when there is none."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            return json.loads(line[len(RESULT_MARK) :])
    raise ValueError("the subprocess printed no result line")


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a bench subprocess: fake AWS (:mod:`testkit.aws`), none of the outer
    shell's kit settings, and this repository on ``PYTHONPATH``; then ``extra``."""
    return fake_aws_env({"PYTHONPATH": str(REPO_ROOT), **(extra or {})}, clean=True)


def run_child(module: str, *args: str, timeout: float) -> Any:
    """The report line of ``python -m MODULE ARGS`` run fresh in :func:`child_env`; ValueError
    ending with its stderr's end when it printed none (TimeoutExpired past ``timeout``)."""
    done = subprocess.run(  # noqa: S603 - a fixed argv list, no shell
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=timeout,
        check=False,
    )
    try:
        return parse_result(done.stdout)
    except ValueError:
        raise ValueError(f"the child failed: {done.stderr.strip()[-300:]}") from None
