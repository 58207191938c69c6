"""Where the server's time goes: one throughput run of ``rollout-sdk serve`` with py-spy
sampling the server process, and the top hot spots (own and total samples per function).

    python -m bench.profile --store memory [--rollouts 500] [--top 15]

py-spy (``pip install -e '.[bench]'``) attaches to the server's pid for the loaded phase only,
writes collapsed stacks (``--format raw``) to ``bench/results/profile-<store>.txt``, and the
summary lists each function with its file, its own samples (it was on top of the stack) and its
total samples (it was anywhere in the stack), as percentages of the busy samples (py-spy leaves
out idle threads; an event loop caught waiting in ``select`` is counted apart as idle).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.throughput import run_kit
from testkit import REPO_ROOT

RESULTS = REPO_ROOT / "bench" / "results"
_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")
#: Frames that mean "waiting", not working.
IDLE = ("select (selectors.py", "poll (selectors.py", "epoll", "KqueueSelector.select")


@dataclass(frozen=True)
class HotSpot:
    function: str
    file: str
    own: float
    total: float


@dataclass
class Profile:
    samples: int
    idle: int
    spots: list[HotSpot]

    @property
    def busy(self) -> int:
        return self.samples - self.idle


def _split(frame: str) -> tuple[str, str]:
    match = _FRAME.match(frame.strip())
    if not match:
        return frame.strip(), "?"
    return match["func"], match["file"]


def parse_collapsed(text: str) -> Profile:
    """Own and total samples per (function, file) from py-spy's ``--format raw`` output."""
    own: Counter[tuple[str, str]] = Counter()
    total: Counter[tuple[str, str]] = Counter()
    samples = idle = 0
    for line in text.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [f for f in stack.split(";") if f and not f.startswith("process ")]
        if not frames:
            continue
        samples += count
        if any(marker in frames[-1] for marker in IDLE):
            idle += count
            continue
        own[_split(frames[-1])] += count
        for key in {_split(f) for f in frames}:
            total[key] += count
    busy = max(samples - idle, 1)
    spots = [
        HotSpot(func, file, 100 * n / busy, 100 * total[(func, file)] / busy)
        for (func, file), n in own.most_common()
    ]
    return Profile(samples, idle, spots)


def top_inclusive(profile_text: str, count: int) -> list[tuple[str, str, float]]:
    """The functions with the most total samples, skipping the event loop's own frames."""
    parsed = parse_collapsed(profile_text)
    busy = max(parsed.busy, 1)
    totals: Counter[tuple[str, str]] = Counter()
    for line in profile_text.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        frames = [f for f in stack.split(";") if f and not f.startswith("process ")]
        if not frames or any(marker in frames[-1] for marker in IDLE):
            continue
        for key in {_split(f) for f in frames}:
            totals[key] += int(count_text)
    boring = ("asyncio/", "runpy", "<module>", "uvicorn/server.py", "threading.py")
    rows = [
        (func, file, 100 * n / busy)
        for (func, file), n in totals.most_common()
        if not any(b in file or b in func for b in boring)
    ]
    return rows[:count]


@contextlib.contextmanager
def py_spy(pid: int, raw_path: Path, rate: int = 250) -> Iterator[None]:
    """py-spy sampling ``pid`` while the block runs, writing collapsed stacks to ``raw_path``
    (``flamegraph.pl`` or speedscope turn them into a picture)."""
    exe = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if exe is None:
        raise RuntimeError("py-spy is not installed: pip install -e '.[bench]'")
    argv = [exe, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw"]
    process = subprocess.Popen(  # noqa: S603 - a fixed argv list, no shell
        [*argv, "--output", str(raw_path)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        time.sleep(0.5)  # let it attach
        yield
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def render(profile: Profile, top: int, inclusive: list[tuple[str, str, float]]) -> str:
    lines = [
        f"{profile.samples} samples, {profile.idle} idle (event loop waiting), "
        f"{profile.busy} busy; percentages are of busy samples",
        f"{'own %':>6} {'total %':>8}  function (file)",
    ]
    for spot in profile.spots[:top]:
        lines.append(f"{spot.own:6.1f} {spot.total:8.1f}  {spot.function} ({spot.file})")
    lines += ["", "largest total (inclusive) shares:"]
    lines += [f"{pct:6.1f}  {func} ({file})" for func, file, pct in inclusive]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__)
    parser.add_argument("--store", choices=("memory", "sqlite", "dynamodb"), default="memory")
    parser.add_argument("--rollouts", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--raw", type=Path, help="summarise this collapsed-stack file only")
    args = parser.parse_args(argv)
    if args.raw is not None:
        text = args.raw.read_text(encoding="utf-8")
        print(render(parse_collapsed(text), args.top, top_inclusive(text, args.top)))
        return 0
    RESULTS.mkdir(parents=True, exist_ok=True)
    raw_path = RESULTS / f"profile-{args.store}.txt"
    run = run_kit(
        args.store,
        rollouts=args.rollouts,
        warmup=args.concurrency,
        concurrency=args.concurrency,
        deadline=300.0,
        attach=lambda pid: py_spy(pid, raw_path),
    )
    print(
        f"{args.store}: {run.rate:.1f} rollouts/s under the profiler, init p50 "
        f"{run.init_percentile(50):.1f} ms; failures: {run.failures or 'none'}"
    )
    text = raw_path.read_text(encoding="utf-8")
    print(f"collapsed stacks: {os.path.relpath(raw_path)}")
    print(render(parse_collapsed(text), args.top, top_inclusive(text, args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
