"""Shared pieces of ``make bench``: figures over runs, /proc readers, the stand-in's callback
signal, and the request bodies of the calculator exchange."""

from __future__ import annotations

import json
import math
import os
import statistics
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollout_sdk.engine.client import CHAT_PATH, COMPLETED_PATH

REPO_ROOT = Path(__file__).resolve().parent.parent
MIB = 1024 * 1024
SYSTEM_PROMPT = "You are a careful calculator. Use the tools."
COMPLETION_PARAMS: dict[str, Any] = {"temperature": 0.0, "max_tokens": 128}

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


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by nearest rank; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


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


# ---------------------------------------------------------------- the calculator exchange


def first_messages(question: str) -> list[dict[str, Any]]:
    """The conversation a calculator rollout starts with."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": question},
    ]


def init_body(
    rollout_id: str, question: str, truth: str, *, server_url: str, callback_key: str
) -> dict[str, Any]:
    """A ``RolloutRequest`` for the calculator agent."""
    return {
        "rollout_id": rollout_id,
        "server_url": server_url,
        "messages": first_messages(question),
        "completion_params": dict(COMPLETION_PARAMS),
        "metadata": {"ground_truth": truth},
        "api_key": callback_key,
    }


#: Prefix of the one line of JSON a bench subprocess reports (logs may share its stdout).
RESULT_MARK = "BENCH-RESULT "


def emit_result(result: Any) -> None:
    """Print ``result`` as the subprocess's report line."""
    print(RESULT_MARK + json.dumps(result, default=str), flush=True)


def parse_result(stdout: str) -> Any:
    """The report line of a bench subprocess's stdout; ValueError when there is none."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            return json.loads(line[len(RESULT_MARK) :])
    raise ValueError("the subprocess printed no result line")


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a bench subprocess: fake AWS credentials and no outer config, so no
    child can reach real AWS; the kit's own settings of the outer shell are dropped."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_REGION")
        and not k.startswith(("OSMOSIS_ROLLOUT_", "ROLLOUT_SDK_"))
    }
    env.update(
        {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SESSION_TOKEN": "testing",
            "AWS_SECURITY_TOKEN": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "PYTHONPATH": str(REPO_ROOT),
        }
    )
    env.update(extra or {})
    return env
