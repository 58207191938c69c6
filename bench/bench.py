"""``make bench``: where the kit stands against the protocol's own cost, loopback only.

    python -m bench.bench [--runs 3] [--rollouts 500] [--concurrency 50] [--budget 720]
                          [--redrive-sizes 1000,10000,100000]

Each figure is the median of ``--runs`` runs (every run is kept in the results):

1. throughput and init latency (p50/p95/p99) of ``rollout-sdk serve`` with the memory and
   sqlite stores (and dynamodb on its embedded moto, run last and only while it fits in
   ``--budget``), the calculator agent and a zero-latency stand-in, ``--rollouts`` rollouts with
   ``--concurrency`` ROLLOUTS in flight; and, in the same invocation, the bare-protocol
   baseline: a bare client doing the same exchanges (two chat calls, one completion post per
   rollout) against the same stand-in. Three baselines are measured: ``raw`` (kept-alive
   HTTP/1.1 on asyncio streams: the protocol's own cost), ``httpx`` (one shared
   ``httpx.AsyncClient`` with its default pool: what the usual Python client stack costs before
   any kit code) and ``aiohttp`` (one shared ``aiohttp.ClientSession``: the fastest maintained
   client measured, the stack under the kit's TrainGate client). The kit/baseline ratios and
   the server's CPU ms per rollout are judged against goals. The stand-in runs in a thread of
   this process on uvicorn's h11 parser, so it bounds every run's rate (raw and aiohttp reach
   about the same here): the rates compare the kit with the bare clients on the same footing,
   and CPU per rollout is the figure that tells the client stacks apart. See
   :mod:`bench.throughput`.
2. SDK overhead per chat call against a raw aiohttp call (:mod:`bench.overhead`);
3. memory per rollout in flight (:mod:`bench.memory`);
4. AWS requests per rollout on the happy path (:mod:`bench.aws` ``requests``);
5. cold start of handler.api (to its first 202) and handler.worker (to its first chat call)
   against a bare import, on the Lambda runtime's Python (python3.13) with the built artifact,
   three ways: warm bytecode cache, as Lambda runs it (files as shipped, no writable cache) and
   with no bytecode; each as a ratio to the bare import of the same round, and the API's as
   Lambda runs it over no bytecode (:mod:`bench.aws` ``coldstart``, which builds the artifact
   when it is missing or stale); with a network guard on the imports;
6. the agent author's import time against ``from pydantic import BaseModel``, in fresh
   processes, and the server modules it loads (:mod:`bench.imports`);
7. the re-drive's reads: items read (``ScannedCount``, ``Count``), requests and seconds of one
   scheduled pass finding 10 parked rollouts beside ``--redrive-sizes`` delivered records, on
   moto's server, and what the stand-in received (:mod:`bench.redrive`). It runs before the
   dynamodb throughput, which fills what is left of ``--budget``.
8. the parse cost of one init: CPU seconds and peak memory increase of the worst bodies
   within the body limit, each posted once per fresh process (:mod:`bench.parse_cost`).
9. the answer cap: peak memory increase and CPU of one TrainGate chat call answered with 150 MB
   (with a length, chunked, gzip), with the 32 MiB cap and, as the baseline, without it, each
   in a fresh process (:mod:`bench.answer_cap`).
10. the durable worker's replay: the CPU of an invocation that replays 10, 50 and 200 recorded
   chat turns through the testing SDK's runner, and how it grows with the turns
   (:mod:`bench.durable_replay`).

Results go to ``bench/results/<UTC timestamp>.json`` and ``latest.json`` (machine, date,
versions, every figure with its runs, the goals passed or missed), the chart to ``latest.png``,
and a summary table to stdout. The chart and the summary show the server's CPU ratios of an
earlier results file beside this run's (``--before``; by default ``latest.json`` as this run
found it), as ``before`` in the results. A missed goal does not fail the command; a broken measurement
(a run that lost rollouts, a subprocess that failed) exits 1 after writing the results.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import functools
import importlib.metadata
import math
import operator
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.answer_cap import GOAL_PEAK_MIB as ANSWER_CAP_GOAL_PEAK_MIB
from bench.answer_cap import lines as answer_cap_lines
from bench.aws import cold_start_chart, cold_start_figures, cold_start_goals, cold_start_lines
from bench.common import Figure, child_env, median, parse_result
from bench.durable_replay import lines as durable_replay_lines
from bench.imports import GOAL_RATIO as IMPORT_GOAL_RATIO
from bench.imports import run_imports
from bench.memory import MemoryRun, run_memory
from bench.overhead import OverheadRun, run_overhead
from bench.parse_cost import GOAL_CPU_SECONDS as PARSE_GOAL_CPU_SECONDS
from bench.parse_cost import GOAL_PEAK_MIB as PARSE_GOAL_PEAK_MIB
from bench.parse_cost import lines as parse_cost_lines
from bench.redrive import DEFAULT_SIZES as REDRIVE_SIZES
from bench.redrive import GOAL_ITEMS_READ as REDRIVE_GOAL_ITEMS
from bench.redrive import parse_sizes
from bench.redrive import summary_lines as redrive_lines
from bench.throughput import BASELINE, ThroughputRun, run_baseline, run_kit
from testkit import REPO_ROOT
from testkit.earlier_run import CPU_BASELINE, before_lines, before_of
from testkit.machine import machine

RESULTS = REPO_ROOT / "bench" / "results"
PACKAGES = (
    "fastapi",
    "pydantic",
    "pydantic-core",
    "httpx",
    "httpcore",
    "anyio",
    "uvicorn",
    "boto3",
    "botocore",
    "moto",
    "mangum",
    "aws-lambda-powertools",
)
STORES = ("memory", "sqlite")
#: The bare clients run beside the kit, by label: the raw-asyncio floor of the protocol's cost,
#: httpx with its own pool (what a Python client stack costs before any kit code), and aiohttp
#: (the fastest maintained client measured here: the ceiling for a kit built on it).
BASELINE_CLIENTS = {BASELINE: "raw", f"{BASELINE}_httpx": "httpx", f"{BASELINE}_aiohttp": "aiohttp"}
BASELINES = tuple(BASELINE_CLIENTS)
#: (store, baseline): lowest kit/baseline throughput ratio.
RATIO_GOALS = {
    ("memory", BASELINE): 0.6,
    ("sqlite", BASELINE): 0.5,
    ("sqlite", f"{BASELINE}_httpx"): 1.0,
}
# CPU_BASELINE (testkit.earlier_run): the bare client the server's CPU per rollout is held
# against, aiohttp making the same three exchanges, the stack the kit's TrainGate client runs on.
#: Most server CPU per rollout over :data:`CPU_BASELINE`'s client CPU per rollout, per store:
#: run by run (they ran side by side), the median of the runs deciding.
CPU_RATIO_GOALS = {"sqlite": 2.5, "memory": 2.2}
INIT_P50_GOAL_MS = 50.0
MEMORY_GOAL_MIB = 0.1
AWS_REQUESTS_GOAL = 6
#: The Lambda runtime's Python, which the cold start is measured with (pyenv finds it).
LAMBDA_PYTHON = "python3.13"


class Clock:
    """Seconds since the bench began, and progress lines on stderr."""

    def __init__(self) -> None:
        self.began = time.monotonic()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.began

    def log(self, message: str) -> None:
        print(f"[{self.elapsed:5.0f} s] {message}", file=sys.stderr, flush=True)


@dataclass
class Goal:
    name: str
    target: str
    value: float | None
    passed: bool | None

    def to_json(self) -> dict[str, Any]:
        value = None if self.value is None or math.isnan(self.value) else round(self.value, 4)
        return {"goal": self.name, "target": self.target, "value": value, "pass": self.passed}


# ---------------------------------------------------------------- machine and versions


def _git(*args: str) -> str:
    git = shutil.which("git")
    if git is None:
        return ""
    done = subprocess.run(  # noqa: S603 - a fixed argv list, no shell
        [git, *args], cwd=REPO_ROOT, capture_output=True, text=True, check=False
    )
    return done.stdout.strip() if done.returncode == 0 else ""


def versions() -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    changed = _git("status", "--porcelain", "--", "rollout_sdk", "handler.py", "examples")
    found["rollout-sdk"] = {
        "version": importlib.metadata.version("rollout-sdk"),
        "commit": _git("rev-parse", "HEAD") or None,
        # Uncommitted changes to the kit's code at the time of the run, if any.
        "uncommitted": changed.splitlines() if changed else [],
    }
    return found


# ---------------------------------------------------------------- the measurements


def _init_p(run: ThroughputRun, q: float) -> float:
    return run.init_percentile(q)


def _throughput_json(runs: list[ThroughputRun]) -> dict[str, Any]:
    def figure(unit: str, get: Callable[[ThroughputRun], float]) -> dict[str, Any]:
        return Figure(unit, [get(r) for r in runs]).to_json()

    out: dict[str, Any] = {
        "rollouts_per_s": figure("rollouts/s", lambda r: r.rate),
        "cpu_ms_per_rollout": figure("ms", lambda r: r.cpu_ms_per_rollout),
        "runs": [r.to_json() for r in runs],
        "failures": sorted({f for r in runs for f in r.failures}),
    }
    if not runs[0].label.startswith(BASELINE):
        for q in (50, 95, 99):
            out[f"init_ms_p{q}"] = figure("ms", functools.partial(_init_p, q=q))
        out["peak_rss_mib"] = figure("MiB", lambda r: r.peak_rss_mib)
    return out


def _ratios(kit: list[ThroughputRun], base: list[ThroughputRun]) -> Figure:
    """Kit/baseline per run, paired by run (they ran side by side)."""
    return Figure("ratio", [k.rate / b.rate for k, b in zip(kit, base, strict=False) if b.rate])


def _cpu_ratios(kit: list[ThroughputRun], base: list[ThroughputRun]) -> Figure:
    """Server CPU per rollout over the bare client's, per run, paired by run."""
    return Figure(
        "ratio",
        [
            k.cpu_ms_per_rollout / b.cpu_ms_per_rollout
            for k, b in zip(kit, base, strict=False)
            if b.cpu_ms_per_rollout
        ],
    )


def _subprocess_json(args: list[str], timeout: float, *, echo: bool = False) -> dict[str, Any]:
    """Run ``python -m bench.<args>`` and return its report (``error`` on failure, with the
    last of its stderr); ``echo`` copies its stderr (its progress) to ours as it comes."""
    process = subprocess.Popen(  # noqa: S603 - a fixed argv list, no shell
        [sys.executable, "-m", *args],
        cwd=REPO_ROOT,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out: list[str] = []
    err: collections.deque[str] = collections.deque(maxlen=200)

    def read_err() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            err.append(line)
            if echo:
                sys.stderr.write(line)
                sys.stderr.flush()

    def read_out() -> None:
        assert process.stdout is not None
        out.append(process.stdout.read())

    readers = [threading.Thread(target=f, daemon=True) for f in (read_err, read_out)]
    for reader in readers:
        reader.start()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return {"error": f"took longer than {timeout:g} s"}
    finally:
        for reader in readers:
            reader.join(10)
    try:
        result: dict[str, Any] = parse_result("".join(out))
    except ValueError:
        return {"error": f"exit {process.returncode}: {''.join(err)[-1500:]}"}
    return result


def run_all(args: argparse.Namespace, clock: Clock) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    problems: list[str] = []
    n, c, w = args.rollouts, args.concurrency, args.concurrency
    throughput: dict[str, list[ThroughputRun]] = {
        **{b: [] for b in BASELINES},
        **{s: [] for s in STORES},
    }

    # 1. throughput: baselines and stores interleaved, run by run
    for i in range(args.runs):
        steps: list[tuple[str, Callable[[], ThroughputRun]]] = [
            *[
                (
                    label,
                    functools.partial(
                        run_baseline, rollouts=n, warmup=w, concurrency=c, deadline=120, client=b
                    ),
                )
                for label, b in BASELINE_CLIENTS.items()
            ],
            *[
                (
                    s,
                    functools.partial(
                        run_kit, s, rollouts=n, warmup=w, concurrency=c, deadline=180
                    ),
                )
                for s in STORES
            ],
        ]
        for label, step in steps:
            run = step()
            throughput[label].append(run)
            clock.log(
                f"throughput run {i + 1}/{args.runs}: {label:<14} {run.rate:7.1f} rollouts/s"
                + (f", init p50 {run.init_percentile(50):.1f} ms" if run.init_ms else "")
                + (f"  FAILURES: {run.failures}" if run.failures else "")
            )

    # 2. SDK overhead per chat call
    overhead: list[OverheadRun] = run_overhead(runs=args.runs, calls=args.overhead_calls)
    figures["sdk_overhead_per_chat_call"] = {
        "overhead_us": Figure("µs", [r.overhead_us for r in overhead]).to_json(),
        "sdk_call_us": Figure("µs", [r.sdk_us for r in overhead]).to_json(),
        "raw_aiohttp_call_us": Figure("µs", [r.raw_us for r in overhead]).to_json(),
        "overhead_mean_us": Figure("µs", [r.overhead_mean_us for r in overhead]).to_json(),
        "calls_per_run": args.overhead_calls,
    }
    clock.log(f"SDK overhead: {median([r.overhead_us for r in overhead]):.1f} µs per chat call")

    # 3. memory per rollout in flight
    memory: list[MemoryRun] = [run_memory(in_flight=100, chat_delay=2.0) for _ in range(args.runs)]
    figures["memory_per_rollout_in_flight"] = {
        "per_rollout_mib": Figure("MiB", [m.per_rollout_mib for m in memory]).to_json(),
        "idle_rss_mib": Figure("MiB", [m.idle_mib for m in memory]).to_json(),
        "peak_rss_mib": Figure("MiB", [m.peak_mib for m in memory]).to_json(),
        "in_flight": 100,
        "chat_delay_seconds": 2.0,
        "store": "sqlite",
        "runs": [m.to_json() for m in memory],
    }
    problems += [f"memory: {f}" for m in memory for f in m.failures]
    clock.log(
        f"memory per rollout in flight: {median([m.per_rollout_mib for m in memory]):.3f} MiB"
    )

    # 4. AWS requests per rollout
    requests = _subprocess_json(["bench.aws", "requests", "--runs", str(args.runs)], 180)
    figures["aws_requests_per_rollout"] = requests
    problems += [f"aws requests: {f}" for f in requests.get("failures", [])]
    if "error" in requests:
        problems.append(f"aws requests: {requests['error']}")
    clock.log(f"AWS requests per rollout: {requests.get('median')} {requests.get('requests')}")

    # 5. cold start, on the Lambda runtime's Python with the artifact, three ways
    cold = _subprocess_json(
        ["bench.aws", "coldstart", "--python", LAMBDA_PYTHON, "--runs", str(args.runs)], 900
    )
    problems += [f"cold start: {f}" for f in cold.get("failures", [])]
    if "error" in cold:
        problems.append(f"cold start: {cold['error']}")
        cold["not_measured"] = cold["error"][:300]
    figures["cold_start"] = cold_start_figures(cold)
    for line in cold_start_lines(figures["cold_start"]):
        clock.log(line)

    # 6. the agent author's import, fresh processes
    imports = run_imports(runs=max(5, 5 * args.runs))
    figures["author_import"] = imports.to_json()
    problems += [f"author import: {f}" for f in imports.failures]
    clock.log(
        f"author import: {median(imports.author_ms):.0f} ms, "
        f"{figures['author_import']['ratio']['median']}x from pydantic import BaseModel"
    )

    # 7. the re-drive's reads, at every size: before the dynamodb throughput, which fills what
    # is left of the budget, so the figure at 100k records is never the one left out
    sizes = ",".join(str(n) for n in args.redrive_sizes)
    redrive = _subprocess_json(["bench.redrive", "--sizes", sizes], 1200, echo=True)
    figures["redrive"] = redrive
    problems += [f"re-drive: {f}" for f in redrive.get("failures", [])]
    if "error" in redrive:
        problems.append(f"re-drive: {redrive['error']}")
    for size in redrive.get("sizes", []):
        clock.log(
            f"re-drive, {size['delivered_records']:,} delivered: read "
            + ", ".join(f"{p['scanned_count']:,}" for p in size.get("passes", []))
            + " items per pass"
        )

    # 8. the parse cost of the worst init bodies, 9. the answer cap against the uncapped
    # read of a 150 MB answer, 10. the durable replay: each case in fresh processes
    for key, module, label, describe in (
        ("parse_cost", "bench.parse_cost", "parse cost", parse_cost_lines),
        ("answer_cap", "bench.answer_cap", "answer cap", answer_cap_lines),
        ("durable_replay", "bench.durable_replay", "durable replay", durable_replay_lines),
    ):
        report = _subprocess_json([module, "--runs", str(args.runs)], 900)
        figures[key] = report
        problems += [f"{label}: {f}" for f in report.get("failures", [])]
        if "error" in report:
            problems.append(f"{label}: {report['error']}")
        for line in describe(report):
            clock.log(line)

    # 10. dynamodb throughput, last: only the runs that fit the budget
    dynamodb: list[ThroughputRun] = []
    skipped = ""
    if args.skip_dynamodb:
        skipped = "--skip-dynamodb"
    estimate = 90.0
    for i in range(0 if skipped else args.runs):
        left = args.budget - clock.elapsed
        if left < estimate:
            skipped = (
                f"run {i + 1} of {args.runs} skipped: {left:.0f} s of the {args.budget:g} s "
                f"budget left, a run takes about {estimate:.0f} s"
            )
            break
        began = time.monotonic()
        run = run_kit("dynamodb", rollouts=n, warmup=w, concurrency=c, deadline=min(180, left))
        estimate = time.monotonic() - began
        dynamodb.append(run)
        clock.log(
            f"throughput run {i + 1}/{args.runs}: {'dynamodb':<14} {run.rate:7.1f} rollouts/s, "
            f"init p50 {run.init_percentile(50):.1f} ms"
            + (f"  FAILURES: {run.failures}" if run.failures else "")
        )
    if dynamodb:
        throughput["dynamodb"] = dynamodb

    figures["throughput"] = {label: _throughput_json(runs) for label, runs in throughput.items()}
    if skipped:
        figures["throughput"]["dynamodb_skipped"] = skipped
    figures["kit_vs_baseline"] = {
        label: {f"vs_{b}": _ratios(runs, throughput[b]).to_json() for b in BASELINES}
        for label, runs in throughput.items()
        if label not in BASELINES
    }
    figures["cpu_vs_baseline"] = {
        label: {f"vs_{CPU_BASELINE}": _cpu_ratios(runs, throughput[CPU_BASELINE]).to_json()}
        for label, runs in throughput.items()
        if label not in BASELINES
    }
    for label, runs in throughput.items():
        problems += [f"throughput {label}: {f}" for r in runs for f in r.failures]
    return {"figures": figures, "problems": sorted(set(problems))}


def goals(figures: dict[str, Any]) -> list[Goal]:
    def value(*path: str) -> float | None:
        node: Any = figures
        for key in path:
            if not isinstance(node, dict) or key not in node:
                return None
            node = node[key]
        return float(node) if isinstance(node, int | float) else None

    def check(v: float | None, ok: Callable[[float], bool]) -> bool | None:
        return None if v is None or math.isnan(v) else ok(v)

    out = []
    for (store, base), floor in RATIO_GOALS.items():
        ratio = value("kit_vs_baseline", store, f"vs_{base}", "median")
        out.append(
            Goal(
                f"{store}: kit/{base}",
                f">= {floor}",
                ratio,
                check(ratio, functools.partial(operator.le, floor)),
            )
        )
    for store, most in CPU_RATIO_GOALS.items():
        ratio = value("cpu_vs_baseline", store, f"vs_{CPU_BASELINE}", "median")
        runs = figures.get("cpu_vs_baseline", {}).get(store, {}).get(f"vs_{CPU_BASELINE}") or {}
        shown = "/".join(f"{r:.2f}" for r in runs.get("runs", []))
        out.append(
            Goal(
                f"{store}: server CPU/rollout over {CPU_BASELINE}'s (runs {shown or 'none'})",
                f"<= {most:g}",
                ratio,
                check(ratio, functools.partial(operator.ge, most)),
            )
        )
    for store in STORES:
        p50 = value("throughput", store, "init_ms_p50", "median")
        out.append(
            Goal(
                f"{store}: init p50 ms",
                f"<= {INIT_P50_GOAL_MS:g}",
                p50,
                check(p50, lambda v: v <= INIT_P50_GOAL_MS),
            )
        )
    mem = value("memory_per_rollout_in_flight", "per_rollout_mib", "median")
    out.append(
        Goal(
            "MiB per rollout in flight",
            f"<= {MEMORY_GOAL_MIB}",
            mem,
            check(mem, lambda v: v <= MEMORY_GOAL_MIB),
        )
    )
    req = value("aws_requests_per_rollout", "median")
    out.append(
        Goal(
            "AWS requests per rollout",
            f"<= {AWS_REQUESTS_GOAL}",
            req,
            check(req, lambda v: v <= AWS_REQUESTS_GOAL),
        )
    )
    out += [Goal(*goal) for goal in cold_start_goals(figures.get("cold_start") or {})]
    redrive = figures.get("redrive") or {}
    for size in redrive.get("sizes", []):
        passes = size.get("passes") or []
        read = max((int(p["scanned_count"]) for p in passes), default=None)
        out.append(
            Goal(
                f"re-drive, {size['delivered_records']:,} delivered: items read",
                f"<= {REDRIVE_GOAL_ITEMS}",
                read,
                size.get("goal"),
            )
        )
    for size in redrive.get("skipped") or {}:
        out.append(
            Goal(
                f"re-drive, {int(size):,} delivered: items read",
                f"<= {REDRIVE_GOAL_ITEMS}",
                None,
                None,
            )
        )
    for case in (figures.get("parse_cost") or {}).get("cases", []):
        out.append(
            Goal(
                f"init parse cost, {case['case']}: CPU s",
                f"< {PARSE_GOAL_CPU_SECONDS:g} (and < {PARSE_GOAL_PEAK_MIB:g} MiB)",
                case["cpu_seconds"]["median"],
                case["goal"],
            )
        )
    for case in (figures.get("answer_cap") or {}).get("cases", []):
        out.append(
            Goal(
                f"answer cap, 150 MB {case['case']}: peak increase MiB",
                f"< {ANSWER_CAP_GOAL_PEAK_MIB:g}",
                case["capped_peak"]["median"],
                case["goal"],
            )
        )
    ratio = value("author_import", "ratio", "median")
    out.append(
        Goal(
            "author import / pydantic BaseModel",
            f"<= {IMPORT_GOAL_RATIO:g}",
            ratio,
            check(ratio, lambda v: v <= IMPORT_GOAL_RATIO),
        )
    )
    for name, target, found in (
        (
            "author import loads no server module",
            "0 modules",
            figures.get("author_import", {}).get("server_modules_loaded"),
        ),
        (
            "nothing touches the network at import",
            "0 attempts",
            figures.get("cold_start", {}).get("network_at_import"),
        ),
    ):
        # A list of what should not have happened: the goal is an empty one.
        out.append(
            Goal(
                name,
                target,
                None if found is None else float(len(found)),
                None if found is None else not found,
            )
        )
    return out


# ---------------------------------------------------------------- output


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def summary(results: dict[str, Any]) -> str:
    f = results["figures"]
    lines = [
        f"rollout-sdk bench, {results['date']}, {results['machine']['cores']} x "
        f"{results['machine']['cpu_model']}, Python {results['machine']['python']}, "
        f"commit {(results['versions']['rollout-sdk']['commit'] or '?')[:10]}",
        f"{results['settings']['rollouts']} rollouts, {results['settings']['concurrency']} in "
        f"flight, median of {results['settings']['runs']} runs",
        "",
        f"{'':<18}{'rollouts/s':>11}{'vs raw':>8}{'vs httpx':>10}{'vs aiohttp':>12}"
        f"{'init p50':>10}{'p95':>8}{'p99':>8}{'CPU ms/rollout':>16}",
    ]
    for label, t in f["throughput"].items():
        if not isinstance(t, dict):
            continue
        ratios = f.get("kit_vs_baseline", {}).get(label, {})
        raw, httpx, aiohttp = (ratios.get(f"vs_{b}", {}).get("median") for b in BASELINES)
        lines.append(
            f"{label:<18}{_fmt(t['rollouts_per_s']['median']):>11}{_fmt(raw, 2):>8}"
            f"{_fmt(httpx, 2):>10}{_fmt(aiohttp, 2):>12}"
            f"{_fmt(t.get('init_ms_p50', {}).get('median')):>10}"
            f"{_fmt(t.get('init_ms_p95', {}).get('median')):>8}"
            f"{_fmt(t.get('init_ms_p99', {}).get('median')):>8}"
            f"{_fmt(t['cpu_ms_per_rollout']['median'], 2):>16}"
        )
    if "dynamodb_skipped" in f["throughput"]:
        lines.append(f"dynamodb: {f['throughput']['dynamodb_skipped']}")
    lines += before_lines(results)
    o = f["sdk_overhead_per_chat_call"]
    m = f["memory_per_rollout_in_flight"]
    r = f["aws_requests_per_rollout"]
    lines += [
        "",
        f"SDK overhead per chat call   {_fmt(o['overhead_us']['median'])} µs "
        f"(SDK {_fmt(o['sdk_call_us']['median'], 0)} µs vs raw aiohttp "
        f"{_fmt(o['raw_aiohttp_call_us']['median'], 0)} µs per call)",
        f"memory per rollout in flight {_fmt(m['per_rollout_mib']['median'], 3)} MiB "
        f"(idle {_fmt(m['idle_rss_mib']['median'])} MiB, peak {_fmt(m['peak_rss_mib']['median'])} "
        f"MiB with {m['in_flight']} in flight)",
        f"AWS requests per rollout     {_fmt(r.get('median'), 0)}: {', '.join(r.get('requests', []))}",
        *cold_start_lines(f.get("cold_start") or {"not_measured": "absent"}),
        *_author_import_line(f.get("author_import")),
        *_redrive_lines(f.get("redrive")),
        *answer_cap_lines(f.get("answer_cap") or {}),
        *durable_replay_lines(f.get("durable_replay") or {}),
        "",
        "goals:",
    ]
    for g in results["goals"]:
        verdict = {True: "PASS", False: "MISS", None: "n/a "}[g["pass"]]
        lines.append(
            f"  {verdict}  {g['goal']:<42} {g['target']:>8}   measured {_fmt(g['value'], 3)}"
        )
    if results["problems"]:
        lines += ["", "measurement problems:", *(f"  - {p}" for p in results["problems"])]
    lines.append(f"\n{results['elapsed_seconds']:.0f} s; results in {results['files']['json']}")
    return "\n".join(lines)


def _author_import_line(figure: dict[str, Any] | None) -> list[str]:
    """The summary's line for the author's import (absent from results written before it)."""
    if figure is None:
        return []
    loaded = figure["server_modules_loaded"]
    return [
        f"author import                {_fmt(figure['author_ms']['median'], 0)} ms vs "
        f"{_fmt(figure['baseline_ms']['median'], 0)} ms for `{figure['baseline']}` "
        f"({_fmt(figure['ratio']['median'], 2)}x); server modules loaded: "
        f"{', '.join(loaded) or 'none'}"
    ]


def _redrive_lines(figure: dict[str, Any] | None) -> list[str]:
    """The summary's re-drive table (absent from results written before it)."""
    if figure is None:
        return []
    if "error" in figure:
        return ["", f"re-drive: not measured ({figure['error'][:200]})"]
    return ["", *redrive_lines(figure)]


def _label_bars(
    axes: Any, xs: Iterable[float], values: Iterable[float | None], fmt: str, *, zeros: bool = False
) -> None:
    """Each bar's value written above it (a missing one, or a zero unless ``zeros``, is not)."""
    for x, v in zip(xs, values, strict=True):
        if v is not None and (v or zeros):
            axes.annotate(
                fmt.format(v),
                (x, v),
                ha="center",
                va="bottom",
                fontsize=8,
                xytext=(0, 2),
                textcoords="offset points",
            )


def cpu_ratio_chart(axes: Any, results: dict[str, Any]) -> None:
    """Server CPU per rollout over the bare aiohttp client's, per store: this run beside the
    earlier one (``before``), with the goals."""
    now = results["figures"].get("cpu_vs_baseline") or {}
    before = (results.get("before") or {}).get("cpu_vs_baseline") or {}
    stores = [s for s in now if s in CPU_RATIO_GOALS] or list(CPU_RATIO_GOALS)
    width = 0.38
    commit = ((results.get("before") or {}).get("commit") or "?")[:7]
    this = ((results.get("versions") or {}).get("rollout-sdk") or {}).get("commit") or "?"
    for j, (label, source) in enumerate(
        ((f"before ({commit})", before), (f"this run ({this[:7]})", now))
    ):
        values = [
            ((source.get(s) or {}).get(f"vs_{CPU_BASELINE}", source.get(s)) or {}).get("median")
            for s in stores
        ]
        xs = [i + (j - 0.5) * width for i in range(len(stores))]
        axes.bar(xs, [v or 0.0 for v in values], width, label=label)
        _label_bars(axes, xs, values, "{:.2f}")
    for i, store in enumerate(stores):
        axes.hlines(
            CPU_RATIO_GOALS[store],
            i - width,
            i + width,
            colors="#d62728",
            linestyles="--",
            label="goal" if i == 0 else None,
        )
    axes.set_xticks(range(len(stores)), stores)
    axes.set_ylabel(f"server CPU per rollout / {CPU_BASELINE}'s (median)")
    axes.set_title("CPU over the bare client: the earlier run beside this one")
    axes.legend(fontsize=8)


def chart(results: dict[str, Any], path: Path) -> None:
    """Throughput and init latency per store against the baselines, and the cold-start ratios
    to the bare import, one PNG."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    f = results["figures"]["throughput"]
    labels = [k for k, v in f.items() if isinstance(v, dict)]
    rates = [f[k]["rollouts_per_s"] for k in labels]
    colours = ["#7f7f7f" if k.startswith(BASELINE) else "#1f77b4" for k in labels]
    figure, ((left, right), (cpu, cold), (ratio, spare)) = plt.subplots(3, 2, figsize=(15, 14))
    cpu_ratio_chart(ratio, results)
    spare.axis("off")
    medians = [r["median"] or 0.0 for r in rates]
    spreads = [
        [v for v in r["runs"] if v is not None] or [m] for m, r in zip(medians, rates, strict=True)
    ]
    lows = [max(0.0, m - min(v)) for m, v in zip(medians, spreads, strict=True)]
    highs = [max(0.0, max(v) - m) for m, v in zip(medians, spreads, strict=True)]
    left.bar(labels, medians, color=colours, yerr=[lows, highs], capsize=4)
    for x, (m, high) in enumerate(zip(medians, highs, strict=True)):
        left.annotate(
            f"{m:.0f}",
            (x, m + high),
            ha="center",
            va="bottom",
            fontsize=8,
            xytext=(0, 3),
            textcoords="offset points",
        )
    styles = dict(zip(BASELINES, ("--", ":", "-."), strict=True))
    for (store, base), floor in RATIO_GOALS.items():
        style = styles[base]
        left.axhline(
            (f[base]["rollouts_per_s"]["median"] or 0) * floor,
            linestyle=style,
            linewidth=1,
            color="#d62728" if store == "memory" else "#ff7f0e",
            label=f"goal {store}: {floor} x {base}",
        )
    left.set_ylabel("rollouts/s (median, bars: min-max)")
    left.set_title(
        f"Throughput, {results['settings']['rollouts']} rollouts, {results['settings']['concurrency']} in flight"
    )
    left.legend(fontsize=8)
    left.tick_params(axis="x", labelsize=8)
    stores = [k for k in labels if not k.startswith(BASELINE)]
    width = 0.25
    for j, q in enumerate((50, 95, 99)):
        values = [f[s][f"init_ms_p{q}"]["median"] or 0 for s in stores]
        xs = [i + (j - 1) * width for i in range(len(stores))]
        right.bar(xs, values, width, label=f"p{q}")
    right.axhline(
        INIT_P50_GOAL_MS,
        linestyle="--",
        linewidth=1,
        color="#d62728",
        label=f"p50 goal {INIT_P50_GOAL_MS:g} ms",
    )
    right.set_xticks(range(len(stores)), stores)
    right.set_yscale("log")
    right.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    right.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    for x, s in enumerate(stores):
        p50 = f[s]["init_ms_p50"]["median"]
        if p50:
            right.annotate(
                f"{p50:.0f}",
                (x - width, p50),
                ha="center",
                va="bottom",
                fontsize=8,
                xytext=(0, 2),
                textcoords="offset points",
            )
    right.set_ylabel("init latency, ms (log)")
    right.set_title("Init latency (202) per store")
    right.legend(fontsize=8)
    cpu_ms = [f[k]["cpu_ms_per_rollout"]["median"] or 0.0 for k in labels]
    cpu.bar(labels, cpu_ms, color=colours)
    _label_bars(cpu, range(len(cpu_ms)), cpu_ms, "{:.1f}", zeros=True)
    base_ms = f[CPU_BASELINE]["cpu_ms_per_rollout"]["median"] if CPU_BASELINE in f else None
    for (store, most), colour in zip(CPU_RATIO_GOALS.items(), ("#d62728", "#9467bd"), strict=False):
        if base_ms:
            # The goal is a ratio; drawn at that ratio of the bare client's median.
            cpu.axhline(
                most * base_ms,
                linestyle="--",
                linewidth=1,
                color=colour,
                label=f"goal {store}: <= {most:g} x {CPU_BASELINE}",
            )
    cpu.set_ylabel("CPU ms per rollout (server, or the bare client)")
    memory = results["figures"].get("memory_per_rollout_in_flight") or {}
    per_rollout = (memory.get("per_rollout_mib") or {}).get("median")
    cpu.set_title(
        "CPU per rollout; memory per rollout in flight "
        + (f"{per_rollout:.3f} MiB" if per_rollout is not None else "not measured")
        + f" (goal <= {MEMORY_GOAL_MIB:g})"
    )
    cpu.legend(fontsize=8)
    cpu.tick_params(axis="x", labelsize=8)
    cold_start_chart(cold, results["figures"].get("cold_start") or {})
    m = results["machine"]
    figure.suptitle(
        f"rollout-sdk bench {results['date'][:16]}Z, {m['cores']} x {m['cpu_model']}, "
        f"commit {(results['versions']['rollout-sdk']['commit'] or '?')[:10]}",
        fontsize=9,
    )
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.bench", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (default 3)")
    parser.add_argument("--rollouts", type=int, default=500, help="measured rollouts per run")
    parser.add_argument("--concurrency", type=int, default=50, help="rollouts in flight")
    parser.add_argument("--overhead-calls", type=int, default=1000, help="chat-call pairs per run")
    parser.add_argument(
        "--budget",
        type=float,
        # 720: the re-drive's 100k records take about five minutes to seed, and at least one
        # dynamodb throughput run must still fit after them.
        default=720.0,
        help="seconds of measuring after which no further dynamodb run starts (default 720)",
    )
    parser.add_argument("--skip-dynamodb", action="store_true")
    parser.add_argument(
        "--redrive-sizes",
        type=parse_sizes,
        default=list(REDRIVE_SIZES),
        metavar="N,N,...",
        help="delivered records beside the 10 parked of the re-drive figure (default "
        + ",".join(str(n) for n in REDRIVE_SIZES)
        + ")",
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder")
    parser.add_argument(
        "--before",
        type=Path,
        metavar="JSON",
        help="an earlier results file whose CPU ratios the chart and the summary show beside "
        "this run's (default: the results folder's latest.json, as it was before this run)",
    )
    parser.add_argument("--no-chart", action="store_true")
    parser.add_argument(
        "--render",
        type=Path,
        metavar="JSON",
        help="measure nothing: draw the chart (beside the file, latest.png) and print the "
        "summary of a results file",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.render is not None:
        import json

        stored = json.loads(args.render.read_text(encoding="utf-8"))
        chart(stored, args.render.parent / "latest.png")
        print(summary(stored))
        return 0
    if not (
        1 <= args.runs <= 10 and 1 <= args.rollouts <= 20_000 and 1 <= args.concurrency <= 1000
    ):
        print("bench: runs 1-10, rollouts 1-20000, concurrency 1-1000", file=sys.stderr)
        return 2
    clock = Clock()
    now = dt.datetime.now(dt.UTC)
    load_before = os.getloadavg()
    clock.log(f"bench: {args.runs} runs of each figure; results to {args.out}")
    if load_before[0] > 0.5:
        clock.log(
            f"warning: load average {load_before[0]:.2f} before the start: other work on this "
            "machine will slow the figures down"
        )
    measured = run_all(args, clock)
    results: dict[str, Any] = {
        "schema": 1,
        "date": now.isoformat(timespec="seconds").replace("+00:00", "Z"),
        "command": "make bench"
        if os.environ.get("MAKELEVEL")
        else "python -m bench.bench " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {
            **machine(),
            # 1-minute load average before and after: other work on the machine shows here.
            "load_average_before": round(load_before[0], 2),
            "load_average_after": round(os.getloadavg()[0], 2),
        },
        "versions": versions(),
        "settings": {
            "runs": args.runs,
            "rollouts": args.rollouts,
            "warmup_rollouts": args.concurrency,
            "concurrency": args.concurrency,
            "in_flight": "rollouts (a new init when a callback arrives)",
            "agent": "examples.calculator.agent:agent_loop",
            "standin": "rollout_sdk.testing.standin.TrainGateStandIn, zero latency, in the bench process",
            "baselines": {
                BASELINE: "bare client, kept-alive HTTP/1.1 on asyncio streams, one connection "
                "per slot: the protocol's own cost (wire, JSON, stand-in)",
                f"{BASELINE}_httpx": "bare client, one shared httpx.AsyncClient with httpx's "
                "default pool: the Python client stack's cost before any kit code",
            },
            "budget_seconds": args.budget,
            "redrive_sizes": args.redrive_sizes,
        },
        **measured,
    }
    results["goals"] = [g.to_json() for g in goals(results["figures"])]
    before_path = args.before or args.out / "latest.json"
    if before_path.exists():
        results["before"] = before_of(before_path)
    results["elapsed_seconds"] = round(clock.elapsed, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    json_path = args.out / f"{stamp}.json"
    results["files"] = {
        "json": os.path.relpath(json_path, REPO_ROOT),
        "latest": os.path.relpath(args.out / "latest.json", REPO_ROOT),
        "chart": None if args.no_chart else os.path.relpath(args.out / "latest.png", REPO_ROOT),
    }
    import json

    text = json.dumps(results, indent=2, ensure_ascii=False) + "\n"
    json_path.write_text(text, encoding="utf-8")
    (args.out / "latest.json").write_text(text, encoding="utf-8")
    if not args.no_chart:
        try:
            chart(results, args.out / "latest.png")
        except (ValueError, TypeError, KeyError, OSError) as exc:  # the figures stay written
            results["problems"].append(f"chart: {type(exc).__name__}: {exc}")
    print(summary(results))
    return 1 if results["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
