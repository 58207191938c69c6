"""What one oversized TrainGate answer costs the client: peak memory increase and CPU of one chat
call answered with 150 MB, with the answer cap and without it.

    python -m bench.answer_cap [--runs 3] [--case NAME ...]

Each run is a fresh interpreter that starts a raw HTTP/1.1 server (asyncio streams, in a thread,
on 127.0.0.1) answering the chat POST with a chat completion whose content is 150 MB of ``x``,
streamed in 1 MiB chunks: with a Content-Length, chunked with no length, or gzip (150 MB decoded,
a small body). It warms the client up with one small answer, resets its peak RSS
(``clear_refs``) and measures VmHWM - VmRSS and ``time.process_time`` (the server thread's
sending included; ``thread_time``: the client's own) around one
``TrainGateClient(policy=OutboundPolicy()).chat`` call, which should raise AnswerTooLarge (the
cap: 32 MiB). The baseline, in the same invocation: the same call through
``AiohttpTransport(max_answer_bytes=None)``, which reads the whole answer. The goal: a peak
increase under 64 MiB per case with the cap.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from typing import Any

from bench.common import MIB, Figure, PeakIncrease, emit_result, report_and_exit, run_child

GOAL_PEAK_MIB = 64.0
CONTENT_BYTES = 150 * 1000 * 1000
CHUNK = b"x" * MIB
PREFIX = b'{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":"'
SUFFIX = b'"},"finish_reason":"stop"}]}'
SMALL = PREFIX + b"warm" + SUFFIX
CASES = ("content-length", "chunked", "gzip")
MODES = ("capped", "uncapped")
#: The child's figures and their units: peak RSS increase, process CPU, the client thread's CPU.
FIGURES = {"peak": "MiB", "cpu": "s", "client_cpu": "s"}
CHILD_TIMEOUT = 120


def _pieces() -> Iterator[bytes]:
    """The answer's body, piece by piece (never whole)."""
    yield PREFIX
    for start in range(0, CONTENT_BYTES, len(CHUNK)):
        yield CHUNK[: CONTENT_BYTES - start]
    yield SUFFIX


def _gzipped() -> bytes:
    packer = zlib.compressobj(6, zlib.DEFLATED, 31)
    return b"".join([*(packer.compress(p) for p in _pieces()), packer.flush()])


def _frames(case: str, gz: bytes, warm: bool) -> Iterator[bytes]:
    """The answer, head first, in the pieces the server writes."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
    if warm:
        yield head + b"Content-Length: %d\r\n\r\n%b" % (len(SMALL), SMALL)
    elif case == "gzip":
        yield head + b"Content-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%b" % (len(gz), gz)
    elif case == "chunked":
        yield head + b"Transfer-Encoding: chunked\r\n\r\n"
        yield from (b"%x\r\n%b\r\n" % (len(piece), piece) for piece in _pieces())
        yield b"0\r\n\r\n"
    else:
        yield head + b"Content-Length: %d\r\n\r\n" % (len(PREFIX) + CONTENT_BYTES + len(SUFFIX))
        yield from _pieces()


async def _answer(
    case: str, gz: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        lengths = [int(h[15:]) for h in head.split(b"\r\n") if h.lower()[:15] == b"content-length:"]
        await reader.readexactly(lengths[0] if lengths else 0)
        for frame in _frames(case, gz, warm=b" /warm/" in head.split(b"\r\n")[0]):
            writer.write(frame)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass  # the capped client hung up
    finally:
        writer.close()


def _serve(case: str) -> int:
    """Start the server on its own loop, in a daemon thread; its port."""
    gz = _gzipped() if case == "gzip" else b""
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    serving = asyncio.start_server(lambda r, w: _answer(case, gz, r, w), "127.0.0.1", 0)
    server = asyncio.run_coroutine_threadsafe(serving, loop).result(30)
    return int(server.sockets[0].getsockname()[1])


async def _calls(url: str, capped: bool) -> dict[str, Any]:
    from rollout_sdk.traingate.client import TrainGateClient
    from rollout_sdk.traingate.outbound import OutboundPolicy
    from rollout_sdk.traingate.transport import AiohttpTransport

    transport = None if capped else AiohttpTransport(max_answer_bytes=None)
    client = TrainGateClient(policy=OutboundPolicy(), transport=transport)
    body = {"rollout_id": "answer-cap", "messages": [{"role": "user", "content": "hi"}]}
    await client.chat(url + "/warm", body, api_key=None)
    gc.collect()
    peak = PeakIncrease()
    cpu, own = time.process_time(), time.thread_time()
    try:
        await client.chat(url, body, api_key=None)
        outcome = "ok"
    except Exception as exc:  # the outcome is reported, not judged here
        outcome = type(exc).__name__
    cpu, own = time.process_time() - cpu, time.thread_time() - own
    peak_mib = peak.mib()
    await client.aclose()
    return {
        "outcome": outcome,
        "peak": peak_mib,
        "cpu": cpu,
        "client_cpu": own,
        "peak_reset": peak.reset,
    }


def measure(case: str, mode: str) -> dict[str, Any]:
    """In this (fresh) process: one chat call answered as ``case``, measured."""
    port = _serve(case)
    return asyncio.run(_calls(f"http://127.0.0.1:{port}", mode == "capped"))


def run_case(case: str, runs: int) -> dict[str, Any]:
    """``runs`` fresh processes per mode, capped and uncapped side by side."""
    fig = {f"{m}_{k}": Figure(u) for m in MODES for k, u in FIGURES.items()}
    ratio, failures = Figure("ratio"), []
    outcomes: dict[str, set[str]] = {m: set() for m in MODES}
    for _ in range(runs):
        peaks: dict[str, float] = {}
        for mode in MODES:
            try:
                result = run_child("bench.answer_cap", "--child", case, mode, timeout=CHILD_TIMEOUT)
            except subprocess.TimeoutExpired:
                failures.append(f"{case} {mode}: the child took longer than {CHILD_TIMEOUT} s")
                continue
            except ValueError as exc:
                failures.append(f"{case} {mode}: {exc}")
                continue
            outcomes[mode].add(result["outcome"])
            peaks[mode] = result["peak"]
            for name in FIGURES:
                fig[f"{mode}_{name}"].runs.append(result[name])
            if not result["peak_reset"]:
                failures.append(f"{case} {mode}: the kernel refused to reset the peak RSS")
        if peaks.get("uncapped"):
            ratio.runs.append(peaks.get("capped", float("nan")) / peaks["uncapped"])
    if outcomes["capped"] != {"AnswerTooLarge"}:
        failures.append(f"{case}: the capped call ended {sorted(outcomes['capped'])}")
    return {
        "case": case,
        "outcome": {m: sorted(o) for m, o in outcomes.items()},
        **{name: f.to_json() for name, f in fig.items()},
        "peak_ratio_to_uncapped": ratio.to_json(),
        "goal": fig["capped_peak"].value < GOAL_PEAK_MIB,
        "failures": failures,
    }


def run_answer_cap(runs: int = 3, cases: list[str] | None = None) -> dict[str, Any]:
    """Every case (or those named), ``runs`` times each."""
    measured = [run_case(name, runs) for name in cases or list(CASES)]
    return {
        "goal": f"peak increase < {GOAL_PEAK_MIB:g} MiB per capped call (cap 32 MiB)",
        "answer_bytes": len(PREFIX) + CONTENT_BYTES + len(SUFFIX),
        "cases": measured,
        "failures": [f for c in measured for f in c["failures"]],
    }


def _m(figure: dict[str, Any], digits: int) -> str:
    value = figure["median"]
    return "n/a" if value is None else f"{value:.{digits}f}"


def lines(report: dict[str, Any]) -> list[str]:
    """One line per case: peak increase and CPU (medians), capped against uncapped, the goal."""
    return [
        f"answer cap, 150 MB {c['case']:<14} capped: peak +{_m(c['capped_peak'], 1)} MiB, "
        f"CPU {_m(c['capped_cpu'], 3)} s, {'/'.join(c['outcome']['capped'])}; uncapped: peak "
        f"+{_m(c['uncapped_peak'], 1)} MiB, CPU {_m(c['uncapped_cpu'], 3)} s, "
        f"{'/'.join(c['outcome']['uncapped'])}; peak ratio {_m(c['peak_ratio_to_uncapped'], 3)}  "
        + ("met" if c["goal"] else "MISSED")
        for c in report.get("cases", [])
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per case and mode")
    parser.add_argument("--case", action="append", choices=CASES, help="only these")
    parser.add_argument("--child", nargs=2, metavar=("CASE", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        emit_result(measure(*args.child))
        return 0
    report = run_answer_cap(args.runs, args.case)
    return report_and_exit(report, lines(report))


if __name__ == "__main__":
    sys.exit(main())
