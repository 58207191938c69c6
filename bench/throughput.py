"""Throughput and init latency of ``rollout-sdk serve``, and the bare-protocol baseline.

Both keep ``concurrency`` ROLLOUTS in flight (a closed loop): the kit run starts a new init the
moment the stand-in receives a rollout's callback, so init latency measures the server's service
time, not a queue of inits; the baseline client starts a new exchange when one ends. The first
``warmup`` rollouts fill the pipeline and are not counted: the window runs from the
``warmup``-th callback to the last, and covers exactly ``rollouts`` rollouts.

The baseline is a bare client in its own process doing what the calculator agent does on the
wire (two chat calls and one completion post per rollout; no init, no server between), on one of
:data:`BARE_CLIENTS`: raw asyncio streams, httpx, httpx2, httpx over the httpx-aiohttp transport,
aiohttp, or the kit's own transport without the kit; so the kit and the baseline both run beside
the stand-in, each in a process of its own.

    python -m bench.throughput baseline --url URL --client NAME ...   (the baseline's client)
    python -m bench.throughput kit --store sqlite --runs 3 [--serve-args "--loop uvloop"]
    python -m bench.throughput ceiling --rollouts 2000 [--clients raw,aiohttp,httpx]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import operator
import os
import re
import secrets
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast
from urllib.parse import urlsplit

import aiohttp
import httpx

from bench.common import (
    MIB,
    StandinProbe,
    child_env,
    cpu_seconds,
    emit_result,
    median,
    parse_result,
    peak_rss,
    steady_window,
)
from rollout_sdk.local.report import percentile
from rollout_sdk.testing.standin import TrainGateStandIn
from rollout_sdk.testing.threads import ServerThread
from rollout_sdk.traingate.client import CHAT_PATH, COMPLETED_PATH
from testkit import REPO_ROOT
from testkit.bodies import COMPLETION_PARAMS, calculator_body, first_messages, make_questions
from testkit.processes import ServerProcess

BASELINE = "baseline"

#: Something to run while the server is under load, given its pid (a profiler).
Attach = Callable[[int], contextlib.AbstractContextManager[Any]]


@dataclass
class ThroughputRun:
    """One run of the kit with one store, or of the baseline."""

    label: str
    rollouts: int
    warmup: int
    concurrency: int
    window_seconds: float = math.nan
    measured: int = 0
    wall_seconds: float = math.nan
    init_ms: list[float] = field(default_factory=list)
    cpu_seconds: float = math.nan
    peak_rss_mib: float = math.nan
    failures: list[str] = field(default_factory=list)
    #: Inits sent a second time after a transport error, by error.
    init_retries: dict[str, int] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        """Rollouts called back per second over the measured window."""
        if not self.measured or not self.window_seconds > 0:
            return math.nan
        return self.measured / self.window_seconds

    def init_percentile(self, q: float) -> float:
        return percentile(self.init_ms, q)

    @property
    def cpu_ms_per_rollout(self) -> float:
        total = self.rollouts + self.warmup
        return self.cpu_seconds * 1000 / total if total else math.nan

    def to_json(self) -> dict[str, Any]:
        def r(value: float) -> float | None:
            return None if math.isnan(value) else round(value, 3)

        return {
            "rollouts_per_s": r(self.rate),
            "init_ms": {
                "p50": r(self.init_percentile(50)),
                "p95": r(self.init_percentile(95)),
                "p99": r(self.init_percentile(99)),
            },
            "window_seconds": r(self.window_seconds),
            "wall_seconds": r(self.wall_seconds),
            "cpu_ms_per_rollout": r(self.cpu_ms_per_rollout),
            "peak_rss_mib": r(self.peak_rss_mib),
            "init_retries": self.init_retries,
            "failures": self.failures,
        }


def _check_callbacks(run: ThroughputRun, standin: TrainGateStandIn, ids: list[str]) -> None:
    """Every rollout called back exactly once, COMPLETED, with reward 1.0."""
    callbacks = {k: list(v) for k, v in list(standin.completions.items())}
    missing = duplicates = wrong = 0
    statuses: Counter[str] = Counter()
    for rollout_id in ids:
        bodies = callbacks.get(rollout_id, [])
        if not bodies:
            missing += 1
            continue
        duplicates += len(bodies) - 1
        statuses[str(bodies[0].get("status"))] += 1
        if bodies[0].get("status") == "COMPLETED" and bodies[0].get("reward") != 1.0:
            wrong += 1
    if missing:
        run.failures.append(f"{missing} rollouts never called back")
    if duplicates:
        run.failures.append(f"{duplicates} duplicate callbacks")
    others = {s: n for s, n in statuses.items() if s != "COMPLETED"}
    if others:
        run.failures.append(
            "not COMPLETED: " + ", ".join(f"{n} x {s}" for s, n in sorted(others.items()))
        )
    if wrong:
        run.failures.append(f"{wrong} COMPLETED rollouts without reward 1.0")


@contextlib.contextmanager
def standin_thread(callback_key: str) -> Iterator[tuple[TrainGateStandIn, StandinProbe, str]]:
    """A zero-latency stand-in in this process (its URL), probed; stopped on exit."""
    standin = TrainGateStandIn(callback_key=callback_key)
    signal = StandinProbe(standin.app)
    traingate = ServerThread(signal)
    try:
        traingate.start()
        yield standin, signal, traingate.url
    finally:
        signal.notify = None
        standin.chat_delay = 0.0
        traingate.stop()


# ---------------------------------------------------------------- the kit


async def _drive_kit(
    run: ThroughputRun,
    *,
    server: ServerProcess,
    standin: TrainGateStandIn,
    signal: StandinProbe,
    traingate_url: str,
    callback_key: str,
    deadline_at: float,
) -> list[str]:
    total = run.warmup + run.rollouts
    tag = secrets.token_hex(4)
    questions = make_questions(total)
    ids = [f"bench-{run.label}-{tag}-{i:05d}" for i in range(total)]
    init_ms = [math.nan] * total
    failures: Counter[str] = Counter()
    retried: Counter[str] = Counter()
    loop = asyncio.get_running_loop()
    wake = asyncio.Event()

    def notify() -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is waiting
            loop.call_soon_threadsafe(wake.set)

    signal.notify = notify
    headers = {"Authorization": f"Bearer {server.server_key}"} if server.server_key else {}
    pid = server.process.pid if server.process else 0
    # The inits go out through aiohttp, not httpx: this process also serves the stand-in, and
    # an httpx driver cost it so much CPU (about 2 ms per request, under one GIL with the
    # stand-in's thread) that it, not the server, bounded the run: measured, the same server
    # ran 60 rollouts/s driven by httpx and 136/s driven by aiohttp.
    connector = aiohttp.TCPConnector(limit=run.concurrency + 2)
    async with aiohttp.ClientSession(
        base_url=server.url,
        headers=headers,
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=60.0),
    ) as client:
        refused = 0

        async def init(i: int) -> None:
            nonlocal refused
            question, answer = questions[i]
            body = calculator_body(
                ids[i], traingate_url, question=question, truth=answer, callback_key=callback_key
            )
            started = time.perf_counter()
            for attempt in range(2):
                try:
                    async with client.post("/v1/rollout/init", json=body) as response:
                        await response.read()
                        status = str(response.status)
                    break
                except aiohttp.ClientConnectionError as exc:
                    # A kept-alive connection the server closed as this request went out (or a
                    # real failure): TrainGate would send the init again, which is safe (a
                    # duplicate gets the identical 202); counted, and timed from the first send.
                    status = type(exc).__name__
                    if attempt == 0:
                        retried[status] += 1
                except (aiohttp.ClientError, TimeoutError) as exc:
                    status = type(exc).__name__
                    break
            init_ms[i] = (time.perf_counter() - started) * 1000
            if status != "202":
                refused += 1
                failures[status] += 1
                wake.set()

        tasks: set[asyncio.Task[None]] = set()
        started = 0
        cpu_before = cpu_seconds(pid)
        began = time.perf_counter()
        try:
            while True:
                wake.clear()
                done = standin.reported()
                while started < total and started - done - refused < run.concurrency:
                    task = asyncio.create_task(init(started))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                    started += 1
                if started >= total and done + refused >= total:
                    break
                if time.monotonic() >= deadline_at:
                    run.failures.append("the run passed its deadline")
                    break
                if not server.alive:
                    run.failures.append("the server process exited during the run")
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), 0.25)
            run.wall_seconds = time.perf_counter() - began
            if server.alive:
                run.cpu_seconds = cpu_seconds(pid) - cpu_before
                run.peak_rss_mib = peak_rss(pid) / MIB
            await asyncio.sleep(0.2)  # a late duplicate would show up now
        finally:
            signal.notify = None
            for task in list(tasks):
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    if failures:
        run.failures.append(
            "inits not accepted: " + ", ".join(f"{n} x {s}" for s, n in sorted(failures.items()))
        )
    run.init_ms = [v for v in init_ms[run.warmup :] if not math.isnan(v)]
    run.init_retries = dict(retried)
    return ids


def run_kit(
    store: str,
    *,
    rollouts: int,
    warmup: int,
    concurrency: int,
    deadline: float,
    env: dict[str, str] | None = None,
    attach: Attach | None = None,
    serve_args: Sequence[str] = (),
) -> ThroughputRun:
    """One run of ``rollout-sdk serve --store STORE [serve_args]``: a fresh server and stand-in,
    stopped in every case. ``attach(pid)`` wraps the loaded phase (a profiler)."""
    run = ThroughputRun(store, rollouts, warmup, concurrency)
    callback_key = secrets.token_urlsafe(16)
    began = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="rollout-sdk-bench-") as state_dir,
        standin_thread(callback_key) as (standin, signal, url),
    ):
        server = ServerProcess(
            store=store,
            state_dir=state_dir,
            server_key=secrets.token_urlsafe(16),
            env=env,
            extra_args=serve_args,
        )
        try:
            server.start(timeout=min(60.0, deadline))
            pid = server.process.pid if server.process else 0
            with attach(pid) if attach else contextlib.nullcontext():
                ids = asyncio.run(
                    _drive_kit(
                        run,
                        server=server,
                        standin=standin,
                        signal=signal,
                        traingate_url=url,
                        callback_key=callback_key,
                        deadline_at=began + deadline,
                    )
                )
        finally:
            server.stop()
        _check_callbacks(run, standin, ids)
        run.window_seconds, run.measured = steady_window(signal.times(), warmup, warmup + rollouts)
    return run


# ---------------------------------------------------------------- the baseline

_OPERATIONS: dict[str, Callable[[float, float], float]] = {
    "add": operator.add,
    "subtract": operator.sub,
    "multiply": operator.mul,
    "divide": operator.truediv,
}
_LAST_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


class Poster(Protocol):
    """What a bare client needs: POST a JSON body, get the status and the decoded JSON."""

    async def post_json(self, path: str, body: dict[str, Any]) -> tuple[int, Any]: ...


class RawConnection:
    """HTTP/1.1 over one kept-alive asyncio stream: the least a client can do on the wire
    (frame the request, read the status line, headers and ``Content-Length`` body)."""

    def __init__(self, host: str, port: int, authorization: str) -> None:
        self.host = host
        self.port = port
        self._head = (
            f"Host: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Authorization: {authorization}\r\n"
        ).encode()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def post_json(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        if self._reader is None or self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        reader, writer = self._reader, self._writer
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        writer.write(
            b"POST "
            + path.encode()
            + b" HTTP/1.1\r\n"
            + self._head
            + b"Content-Length: "
            + str(len(data)).encode()
            + b"\r\n\r\n"
            + data
        )
        status_line = await reader.readline()
        if not status_line:
            raise ConnectionError("the stand-in closed the connection")
        status = int(status_line.split()[1])
        length = -1
        chunked = close = False
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"connection":
                close = b"close" in value.lower()
        if length >= 0:
            payload = await reader.readexactly(length)
        elif chunked:
            parts = []
            while size := int((await reader.readline()).split(b";")[0], 16):
                parts.append(await reader.readexactly(size))
                await reader.readline()
            await reader.readline()
            payload = b"".join(parts)
        else:
            payload, close = await reader.read(), True
        if close:
            await self.aclose()
        return status, json.loads(payload) if payload else None

    async def aclose(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(OSError):
                await self._writer.wait_closed()
        self._reader = self._writer = None


class HttpxPoster:
    """The same through a shared ``httpx.AsyncClient`` (``post`` and ``response.json()``)."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    async def post_json(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        response = await self.http.post(path, json=body)
        return response.status_code, response.json()


def _ok(status: int, what: str) -> None:
    if not 200 <= status < 300:
        raise ValueError(f"{what} answered {status}")


async def _exchange(client: Poster, rollout_id: str, question: str, truth: str) -> None:
    """What the calculator agent does on the wire: chat, tool, chat, completion post."""
    started = time.perf_counter()
    params: dict[str, Any] = {
        "model": "default",
        "temperature": 1.0,
        "top_p": 1.0,
        "max_tokens": 512,
        "logprobs": True,
        **COMPLETION_PARAMS,
    }
    messages: list[dict[str, Any]] = first_messages(question)
    usage: dict[str, int] = {}
    for _ in range(2):
        status, answer = await client.post_json(
            CHAT_PATH, {**params, "messages": messages, "rollout_id": rollout_id}
        )
        _ok(status, "chat")
        usage = answer.get("usage") or {}
        reply = answer["choices"][0]["message"]
        messages = [*messages, reply]
        for call in reply.get("tool_calls") or []:
            args = json.loads(call["function"]["arguments"])
            value = _OPERATIONS[args["operation"]](float(args["a"]), float(args["b"]))
            text = str(int(value)) if value.is_integer() else str(round(value, 6))
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": text})
    numbers = _LAST_NUMBER.findall(str(messages[-1].get("content") or ""))
    reward = 1.0 if numbers and float(numbers[-1]) == float(truth) else 0.0
    elapsed = (time.perf_counter() - started) * 1000
    body = {
        "rollout_id": rollout_id,
        "status": "COMPLETED",
        "final_messages": messages,
        "finish_reason": "stop",
        "reward": reward,
        "metrics": {
            "total_latency_ms": elapsed,
            "llm_latency_ms": elapsed,
            "tool_latency_ms": 0.0,
            "num_llm_calls": 2,
            "num_tool_calls": 1,
            "prompt_tokens": int(usage.get("prompt_tokens", 0)),
            "response_tokens": int(usage.get("completion_tokens", 0)),
            "max_context_tokens": int(usage.get("total_tokens", 0)),
        },
        "extra_fields": {},
    }
    status, _ = await client.post_json(COMPLETED_PATH, body)
    _ok(status, "completed")


class AiohttpPoster:
    """The same through a shared ``aiohttp.ClientSession`` (``post`` and ``response.json()``)."""

    def __init__(self, session: Any, base_url: str) -> None:
        self.session = session
        self.base_url = base_url

    async def post_json(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        async with self.session.post(self.base_url + path, json=body) as response:
            return response.status, await response.json()


class TransportPoster:
    """The kit's way: an ``httpx.Request`` straight to the kit's transport, no client above."""

    def __init__(self, transport: httpx.AsyncBaseTransport, base_url: str, headers: Any) -> None:
        self.transport = transport
        self.base_url = base_url
        self.headers = {**headers, "Content-Type": "application/json"}

    async def post_json(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        request = httpx.Request(
            "POST", self.base_url + path, headers=self.headers, content=json.dumps(body).encode()
        )
        response = await self.transport.handle_async_request(request)
        return response.status_code, json.loads(response.content)


#: The bare clients: how each builds its shared poster (an async context manager), by name.
BARE_CLIENTS = ("raw", "httpx", "httpx2", "httpx-aiohttp", "aiohttp", "kit-transport")


@contextlib.asynccontextmanager
async def shared_poster(client: str, url: str, authorization: str) -> Any:
    """One shared client of the named stack, with its default pool, as a :class:`Poster`."""
    headers = {"Authorization": authorization}
    if client == "aiohttp":
        import aiohttp

        async with aiohttp.ClientSession(headers=headers) as session:
            yield AiohttpPoster(session, url)
        return
    if client == "httpx2":
        import httpx2

        async with httpx2.AsyncClient(base_url=url, headers=headers, timeout=60.0) as http2:
            yield HttpxPoster(cast(Any, http2))  # the same API, another package
        return
    if client == "kit-transport":
        from rollout_sdk.traingate.transport import AiohttpTransport as KitTransport

        kit = KitTransport()
        try:
            yield TransportPoster(kit, url, headers)
        finally:
            await kit.aclose()
        return
    transport: httpx.AsyncBaseTransport | None = None
    if client == "httpx-aiohttp":
        from httpx_aiohttp import AiohttpTransport

        transport = AiohttpTransport()
    async with httpx.AsyncClient(
        base_url=url, headers=headers, timeout=60.0, transport=transport
    ) as http:
        yield HttpxPoster(http)


async def bare_client(
    url: str, callback_key: str, *, total: int, concurrency: int, tag: str, client: str
) -> dict[str, Any]:
    """Run ``total`` bare exchanges with ``concurrency`` in flight; errors by type.

    ``client`` "raw": one kept-alive HTTP/1.1 connection per slot; any other of
    :data:`BARE_CLIENTS`: one shared client of that stack with its default pool.
    """
    questions = make_questions(total)
    errors: Counter[str] = Counter()
    authorization = f"Bearer {callback_key}"
    split = urlsplit(url)
    host, port = split.hostname or "127.0.0.1", split.port or 80
    cpu_before = time.process_time()
    async with shared_poster("httpx" if client == "raw" else client, url, authorization) as shared:
        pending = list(range(total))
        pending.reverse()

        async def slot() -> None:
            poster: Poster = shared
            raw: RawConnection | None = None
            if client == "raw":
                poster = raw = RawConnection(host, port, authorization)
            try:
                while pending:
                    i = pending.pop()
                    question, answer = questions[i]
                    try:
                        await _exchange(poster, f"bench-{tag}-{i:05d}", question, answer)
                    except Exception as exc:
                        errors[type(exc).__name__] += 1
                        if raw is not None:
                            await raw.aclose()
            finally:
                if raw is not None:
                    await raw.aclose()

        await asyncio.gather(*(slot() for _ in range(concurrency)))
    return {"errors": dict(errors), "cpu_seconds": time.process_time() - cpu_before}


def _bare_client_process(
    url: str,
    callback_key: str,
    *,
    client: str,
    rollouts: int,
    concurrency: int,
    tag: str,
    timeout: float,
    prefix: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """``python -m bench.throughput baseline`` (one bare client) as a subprocess, to its end;
    raises TimeoutExpired (having killed it) after ``timeout`` seconds. ``prefix`` goes before
    the interpreter (a tool that runs it, as ``valgrind``)."""
    argv = [*prefix, sys.executable, "-m", "bench.throughput", BASELINE, "--url", url]
    argv += ["--client", client]
    argv += ["--rollouts", str(rollouts), "--concurrency", str(concurrency), "--tag", tag]
    return subprocess.run(  # noqa: S603 - a fixed argv list, no shell
        argv,
        cwd=REPO_ROOT,
        env=child_env({"BENCH_CALLBACK_KEY": callback_key}),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def run_baseline(
    *,
    rollouts: int,
    warmup: int,
    concurrency: int,
    deadline: float,
    client: str = "raw",
    prefix: Sequence[str] = (),
) -> ThroughputRun:
    """One baseline run: the bare client (one of :data:`BARE_CLIENTS`) as a subprocess against
    a fresh stand-in in this process (``prefix``: as :func:`_bare_client_process` takes it)."""
    label = BASELINE if client == "raw" else f"{BASELINE}_{client}"
    run = ThroughputRun(label, rollouts, warmup, concurrency)
    callback_key = secrets.token_urlsafe(16)
    tag = f"{label}-{secrets.token_hex(4)}"
    total = warmup + rollouts
    with standin_thread(callback_key) as (standin, signal, url):
        began = time.perf_counter()
        try:
            done = _bare_client_process(
                url,
                callback_key,
                client=client,
                rollouts=total,
                concurrency=concurrency,
                tag=tag,
                timeout=deadline,
                prefix=prefix,
            )
        except subprocess.TimeoutExpired:  # run() has killed it
            run.failures.append(f"the baseline client took longer than {deadline:g} s")
            return run
        run.wall_seconds = time.perf_counter() - began
        if done.returncode != 0:
            run.failures.append(
                f"the baseline client exited {done.returncode}: {done.stderr[-500:]}"
            )
            return run
        try:
            report = parse_result(done.stdout)
        except ValueError:
            run.failures.append(f"the baseline client reported nothing: {done.stderr[-500:]}")
            return run
        run.cpu_seconds = float(report["cpu_seconds"])
        if report["errors"]:
            run.failures.append(f"baseline exchanges failed: {report['errors']}")
        _check_callbacks(run, standin, [f"bench-{tag}-{i:05d}" for i in range(total)])
        run.window_seconds, run.measured = steady_window(signal.times(), warmup, total)
    return run


def _ceiling(args: argparse.Namespace) -> int:
    """``ceiling``: each bare client against the stand-in in a process of its own (not a thread
    of this one, as in ``make bench``), ``--runs`` times: the rate a client reaches when the
    stand-in is not the bottleneck. Every exchange must end 2xx (errors fail the command)."""
    from testkit.standin_server import standin_process

    clients = args.clients.split(",")
    rates: dict[str, list[float]] = {c: [] for c in clients}
    cpu: dict[str, list[float]] = {c: [] for c in clients}
    key = secrets.token_urlsafe(16)
    with tempfile.TemporaryDirectory(prefix="rollout-sdk-bench-") as log_dir:
        standin = standin_process(log_dir, callback_key=key)
        standin.start(timeout=30.0)
        try:
            for i in range(args.runs):
                for client in clients:
                    began = time.perf_counter()
                    done = _bare_client_process(
                        standin.url,
                        key,
                        client=client,
                        rollouts=args.rollouts,
                        concurrency=args.concurrency,
                        tag=f"c{i}-{client}",
                        timeout=300,
                    )
                    wall = time.perf_counter() - began
                    report = parse_result(done.stdout) if done.returncode == 0 else None
                    if report is None or report["errors"]:
                        print(
                            f"{client}: FAILED, not measured: {done.stderr[-300:]}", file=sys.stderr
                        )
                        return 1
                    rates[client].append(args.rollouts / wall)
                    cpu[client].append(report["cpu_seconds"] * 1000 / args.rollouts)
                    print(
                        f"run {i + 1}: {client:<14} {rates[client][-1]:7.0f} rollouts/s "
                        f"(process start included), client CPU {cpu[client][-1]:.2f} ms per rollout"
                    )
        finally:
            standin.stop()
    for client in clients:
        print(
            f"median: {client:<14} {median(rates[client]):7.0f} rollouts/s, {median(cpu[client]):.2f} ms"
        )
    return 0


def _kit_runs(args: argparse.Namespace) -> int:
    """``kit``: ``--runs`` runs of the server alone, each run's rate and CPU, then the medians
    (to compare server options, e.g. ``--serve-args "--loop uvloop --http httptools"``)."""
    rates, cpu = [], []
    for i in range(args.runs):
        run = run_kit(
            args.store,
            rollouts=args.rollouts,
            warmup=args.concurrency,
            concurrency=args.concurrency,
            deadline=300,
            serve_args=args.serve_args.split(),
        )
        if run.failures:
            print(f"run {i + 1}: FAILED, not measured: {run.failures}", file=sys.stderr)
            return 1
        rates.append(run.rate)
        cpu.append(run.cpu_ms_per_rollout)
        print(
            f"run {i + 1}: {run.rate:.1f} rollouts/s, {run.cpu_ms_per_rollout:.2f} server CPU ms per rollout"
        )
    print(
        f"median of {args.runs}: {median(rates):.1f} rollouts/s, "
        f"{median(cpu):.2f} ms per rollout ({args.store}, {args.serve_args or 'defaults'})"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    """The baseline's client, run by :func:`run_baseline` (the key comes in the environment);
    ``kit`` runs the server alone (see :func:`_kit_runs`)."""
    parser = argparse.ArgumentParser(prog="python -m bench.throughput")
    parser.add_argument("mode", choices=[BASELINE, "kit", "ceiling"])
    parser.add_argument("--url", help="the stand-in (baseline)")
    parser.add_argument("--client", choices=BARE_CLIENTS, default="raw")
    parser.add_argument("--rollouts", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--tag", default="bench")
    parser.add_argument("--store", default="sqlite", choices=("memory", "sqlite", "dynamodb"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--clients", default="raw,aiohttp,httpx", help="bare clients (ceiling)")
    parser.add_argument(
        "--serve-args", default="", help="extra arguments of rollout-sdk serve (kit)"
    )
    args = parser.parse_args(argv)
    if args.mode == "kit":
        return _kit_runs(args)
    if args.mode == "ceiling":
        return _ceiling(args)
    if args.url is None or urlsplit(args.url).hostname != "127.0.0.1":
        parser.error("the baseline talks to a loopback stand-in only (--url http://127.0.0.1:PORT)")
    report = asyncio.run(
        bare_client(
            args.url,
            os.environ["BENCH_CALLBACK_KEY"],
            total=args.rollouts,
            concurrency=args.concurrency,
            tag=args.tag,
            client=args.client,
        )
    )
    emit_result(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
