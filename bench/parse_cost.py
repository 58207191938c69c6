"""What one init costs the API while reading its body: CPU seconds and peak memory increase, for
the worst bodies within the body limit.

    python -m bench.parse_cost [--runs 3] [--case NAME ...]

Each case is a body of at most ``ROLLOUT_SDK_MAX_BODY_BYTES`` (6 MiB) built here, written to a
file, and posted once, in a fresh interpreter, to the app ``create_app`` builds with the
default settings (the one the Lambda API function runs behind Mangum, and ``rollout-sdk serve``
runs), a memory store and a dispatcher that keeps the job: the admission middleware, FastAPI's
parse, validation, init's rules, the record and the hand-off, everything but the HTTP server
(and Mangum's decoding of the Lambda event). The child warms the app up with one small init,
resets its peak RSS (``clear_refs``), and measures ``time.process_time`` and VmHWM - VmRSS
around the one ASGI call. The goal: under 1.0 s of CPU and 200 MiB for every case. The figures
are this machine's; a Lambda function's CPU share depends on its memory size.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import MIB, Figure, PeakIncrease, emit_result, report_and_exit, run_child
from testkit.asgi import http_scope
from testkit.bodies import calculator_body

GOAL_CPU_SECONDS = 1.0
GOAL_PEAK_MIB = 200.0
BODY_LIMIT = 6 * MIB
URL = "http://traingate.test"


def _body(rollout_id: str = "parse-cost", **fields: Any) -> bytes:
    return json.dumps(calculator_body(rollout_id, URL, **fields), separators=(",", ":")).encode()


def _nested(levels: int) -> Any:
    value: Any = 0
    for _ in range(levels):
        value = [value]
    return value


def _real() -> bytes:
    """500 messages of chat, tool calls and results, and 1 MiB of metadata (token ids)."""
    messages: list[dict[str, Any]] = []
    for turn in range(250):
        messages.append({"role": "user", "content": f"Step {turn}: what is {turn} * 17? " * 30})
        messages.append({"role": "assistant", "content": f"{turn} * 17 = {turn * 17}. " * 20})
    return _body(messages=messages, metadata={"prompt_token_ids": list(range(100_000, 249_000))})


def _deep(levels: int) -> bytes:
    nest = b'"deep":' + b"[" * levels + b"]" * levels + b","
    return _body().replace(b'"metadata":{', nest + b'"metadata":{')


#: name: (body, what the answer should be). Counts are the defaults': values 1,000,000, depth
#: 128, messages 10,000, tools 1,000, metadata 1 MiB.
CASES: dict[str, tuple[Callable[[], bytes], int]] = {
    "1.8M {} messages": (lambda: _body(messages=[{}] * 1_800_000), 413),
    "2M [] in completion_params": (lambda: _body(completion_params={"x": [[]] * 2_000_000}), 413),
    "2M tiny strings": (lambda: _body(completion_params={"x": [""] * 2_000_000}), 413),
    "3M numbers": (lambda: _body(completion_params={"x": [7] * 3_000_000}), 413),
    "2.9M levels deep": (lambda: _deep(2_900_000), 413),
    "900,000 levels deep (values under)": (lambda: _deep(900_000), 413),
    "999,9xx {} in completion_params (values just under)": (
        lambda: _body(completion_params={"x": [{}] * 999_970}),
        202,
    ),
    "999,9xx tiny strings (values just under)": (
        lambda: _body(completion_params={"x": [""] * 999_970}),
        202,
    ),
    "10,000 {} messages + 989,9xx {} (messages at the limit)": (
        lambda: _body(messages=[{}] * 10_000, completion_params={"x": [{}] * 989_970}),
        202,
    ),
    "1M numbers in metadata (over its size, refused after the parse)": (
        lambda: _body(metadata={"x": [7] * 999_970}),
        413,
    ),
    "128 levels (the field's 422)": (lambda: _body(metadata={"x": _nested(126)}), 422),
    "one 6 MiB string in a message": (
        lambda: _body(messages=[{"role": "user", "content": "x" * (BODY_LIMIT - 400)}]),
        202,
    ),
    "500 real messages + 1 MiB token ids": (_real, 202),
}


class _KeepingDispatcher:
    """Keeps each job (as a queue would hold it) and starts nothing."""

    active = 0
    completed = 0

    def __init__(self) -> None:
        self.jobs: list[Any] = []

    async def dispatch(self, job: Any) -> None:
        self.jobs.append(job)

    async def aclose(self) -> None:
        return None


async def _post(app: Any, body: bytes) -> int:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(
        http_scope("/v1/rollout/init", [(b"content-type", b"application/json")]), receive, send
    )
    return int(sent[0]["status"])


def measure(path: Path) -> dict[str, Any]:
    """In this (fresh) process: one init of the body in ``path``, measured."""
    from examples.calculator.agent import CalculatorAgent
    from rollout_sdk.http.app import create_app
    from rollout_sdk.settings import load_settings
    from rollout_sdk.store.memory import MemoryStore

    app = create_app(
        CalculatorAgent(),
        store=MemoryStore(),
        dispatcher=_KeepingDispatcher(),
        settings=load_settings(),
    )
    asyncio.run(_post(app, _body(rollout_id="warm-up")))
    body = path.read_bytes()
    peak = PeakIncrease()
    started = time.process_time()
    status = asyncio.run(_post(app, body))
    cpu = time.process_time() - started
    return {
        "status": status,
        "body_bytes": len(body),
        "cpu_seconds": cpu,
        "peak_increase_mib": peak.mib(),
        "peak_reset": peak.reset,
    }


def run_case(name: str, runs: int) -> dict[str, Any]:
    """``runs`` fresh processes posting the case's body once each."""
    build, expected = CASES[name]
    cpu, peak, failures, statuses = Figure("s"), Figure("MiB"), [], set()
    with tempfile.TemporaryDirectory(prefix="rollout-sdk-bench-") as folder:
        path = Path(folder) / "body.json"
        body = build()
        path.write_bytes(body)
        size = len(body)
        del body
        for _ in range(runs):
            try:
                result = run_child("bench.parse_cost", "--child", str(path), timeout=120)
            except ValueError as exc:
                failures.append(f"{name}: {exc}")
                continue
            statuses.add(result["status"])
            cpu.runs.append(result["cpu_seconds"])
            peak.runs.append(result["peak_increase_mib"])
            if not result["peak_reset"]:
                failures.append(f"{name}: the kernel refused to reset the peak RSS")
    if statuses != {expected}:
        failures.append(f"{name}: answered {sorted(statuses)}, expected {expected}")
    return {
        "case": name,
        "body_bytes": size,
        "status": sorted(statuses),
        "cpu_seconds": cpu.to_json(),
        "peak_increase_mib": peak.to_json(),
        "goal": cpu.value < GOAL_CPU_SECONDS and peak.value < GOAL_PEAK_MIB,
        "failures": failures,
    }


def run_parse_cost(runs: int = 3, cases: list[str] | None = None) -> dict[str, Any]:
    """Every case (or those named), ``runs`` times each."""
    measured = [run_case(name, runs) for name in cases or list(CASES)]
    over = [c for c in measured if c["body_bytes"] > BODY_LIMIT]
    return {
        "goal": f"< {GOAL_CPU_SECONDS:g} s CPU and < {GOAL_PEAK_MIB:g} MiB per init",
        "cases": measured,
        "failures": [f for c in measured for f in c["failures"]]
        + [f"{c['case']}: the body is over the body limit" for c in over],
    }


def lines(report: dict[str, Any]) -> list[str]:
    """One line per case: CPU and peak increase (medians), the answer, the goal."""
    out = []
    for case in report.get("cases", []):
        out.append(
            f"{case['case']:<58} {case['body_bytes'] / MIB:4.1f} MiB  "
            f"{case['status']}  CPU {case['cpu_seconds']['median']} s  "
            f"peak +{case['peak_increase_mib']['median']} MiB  "
            + ("met" if case["goal"] else "MISSED")
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per case")
    parser.add_argument("--case", action="append", choices=list(CASES), help="only these")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        emit_result(measure(args.child))
        return 0
    report = run_parse_cost(args.runs, args.case)
    return report_and_exit(report, lines(report))


if __name__ == "__main__":
    sys.exit(main())
