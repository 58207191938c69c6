"""``rollout-sdk demo``: the example agent end to end on this machine.

Starts the local server and a TrainGate stand-in with a scripted model on free loopback ports,
posts one init per dataset row (times ``--repeat``) with bounded concurrency, counts the
callbacks the stand-in receives, prints a summary, and stops both servers whatever happens.

The server, the stand-in and the agent loader are imported inside the functions that run them,
so ``demo --help`` and a bad option load none of them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import secrets
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rollout_sdk.errors import DatasetError
from rollout_sdk.local.progress import Progress, percentile

if TYPE_CHECKING:
    import argparse

    from rollout_sdk.testing.standin import TrainGateStandIn

POLL_SECONDS = 0.05
#: How the summary counts an ERROR that carries no failure category.
UNCATEGORIZED = "uncategorized"


@dataclass(frozen=True)
class DatasetRow:
    """One rollout's input: the initial conversation and the metadata (ground truth, ...)."""

    messages: list[dict[str, Any]]
    metadata: dict[str, Any]


def load_dataset(path: str | Path) -> list[DatasetRow]:
    """Read JSON lines with ``messages`` and optional ``metadata``; blank lines are skipped.

    Raises DatasetError naming the file and the line of the first bad row.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"cannot read dataset {path}: {exc}") from exc
    rows: list[DatasetRow] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{where}: not valid JSON: {exc}") from exc
        if not isinstance(row, dict):
            raise DatasetError(f"{where}: a row must be a JSON object, got {type(row).__name__}")
        messages = row.get("messages")
        if (
            not isinstance(messages, list)
            or not messages
            or not all(isinstance(m, dict) for m in messages)
        ):
            raise DatasetError(f"{where}: 'messages' must be a non-empty list of message objects")
        metadata = row.get("metadata", {})
        if metadata is None:
            metadata = {}
        if not isinstance(metadata, dict):
            raise DatasetError(f"{where}: 'metadata' must be an object when present")
        rows.append(DatasetRow(messages=messages, metadata=metadata))
    if not rows:
        raise DatasetError(f"dataset {path} has no rows")
    return rows


@dataclass
class InitOutcome:
    """How one init went: the HTTP status (None on a transport error) and its round trip."""

    rollout_id: str
    status_code: int | None
    latency_ms: float
    error: str | None = None


@dataclass
class DemoResult:
    """Everything the summary prints; ``ok`` is the exit criterion."""

    expected: list[str]
    inits: list[InitOutcome]
    callbacks: dict[str, list[dict[str, Any]]]
    wall_seconds: float
    timed_out: bool
    statuses: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        for rollout_id in self.expected:
            bodies = self.callbacks.get(rollout_id)
            self.statuses[str(bodies[0].get("status")) if bodies else "missing"] += 1

    @property
    def duplicates(self) -> int:
        return sum(len(b) - 1 for b in self.callbacks.values() if b)

    @property
    def unexpected(self) -> int:
        return len(set(self.callbacks) - set(self.expected))

    @property
    def init_failures(self) -> Counter[str]:
        return Counter(
            str(i.status_code) if i.status_code is not None else "transport error"
            for i in self.inits
            if i.status_code != 202
        )

    @property
    def ok(self) -> bool:
        reported_once = all(len(self.callbacks.get(r, ())) == 1 for r in self.expected)
        return (
            reported_once
            and self.statuses["ERROR"] == 0
            and not self.unexpected
            and not self.init_failures
        )

    def first_bodies(self) -> list[dict[str, Any]]:
        return [self.callbacks[r][0] for r in self.expected if self.callbacks.get(r)]

    @property
    def error_categories(self) -> Counter[str]:
        """The ERRORs TrainGate received, by the failure category each carries
        (``extra_fields.rollout_sdk.failure``; ``uncategorized`` when it carries none)."""
        from rollout_sdk.engine.responses import failure_of

        counted: Counter[str] = Counter()
        for body in self.first_bodies():
            if body.get("status") == "ERROR":
                failure = failure_of(body)
                counted[str(failure.get("category")) if failure else UNCATEGORIZED] += 1
        return counted


async def _post_inits(
    *,
    server_url: str,
    server_key: str,
    bodies: list[dict[str, Any]],
    concurrency: int,
    request_timeout: float,
    outcomes: list[InitOutcome],
) -> None:
    """Post every init, at most ``concurrency`` at once, appending to ``outcomes`` as they end
    (so a run cut short by the timeout still reports the inits that did finish)."""
    import httpx

    slots = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(
        base_url=server_url,
        headers={"Authorization": f"Bearer {server_key}"},
        timeout=request_timeout,
        limits=limits,
    ) as client:

        async def one(body: dict[str, Any]) -> None:
            async with slots:
                started = time.perf_counter()
                try:
                    response = await client.post("/v1/rollout/init", json=body)
                except httpx.HTTPError as exc:
                    elapsed = (time.perf_counter() - started) * 1000
                    outcomes.append(
                        InitOutcome(body["rollout_id"], None, elapsed, type(exc).__name__)
                    )
                    return
                elapsed = (time.perf_counter() - started) * 1000
                error = None if response.status_code == 202 else response.text[:200]
                outcomes.append(
                    InitOutcome(body["rollout_id"], response.status_code, elapsed, error)
                )

        await asyncio.gather(*(one(b) for b in bodies))


async def _drive(
    *,
    standin: TrainGateStandIn,
    server_url: str,
    server_key: str,
    bodies: list[dict[str, Any]],
    concurrency: int,
    wait_seconds: float,
    progress: Progress,
) -> tuple[list[InitOutcome], float, bool]:
    started = time.perf_counter()
    deadline = started + wait_seconds
    inits: list[InitOutcome] = []
    posting = asyncio.create_task(
        _post_inits(
            server_url=server_url,
            server_key=server_key,
            bodies=bodies,
            concurrency=concurrency,
            request_timeout=max(1.0, wait_seconds),
            outcomes=inits,
        )
    )
    timed_out = False
    try:
        while True:
            progress.update(standin.reported())
            if posting.done():
                posting.result()  # re-raise what broke the posting, if anything
                accepted = sum(1 for i in inits if i.status_code == 202)
                if standin.reported() >= accepted:
                    break
            if time.perf_counter() >= deadline:
                timed_out = True
                break
            await asyncio.sleep(POLL_SECONDS)
        wall = time.perf_counter() - started
        progress.update(standin.reported())
    finally:
        progress.finish()
        if not posting.done():
            posting.cancel()
            await asyncio.gather(posting, return_exceptions=True)
    return inits, wall, timed_out


def _fmt_ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1f}"


def _category_lines(categories: Counter[str]) -> list[str]:
    """``errors by category`` and a count per category, most first (``none`` when no ERROR)."""
    if not categories:
        return [f"  {'errors by category':<24}{'none':>10}"]
    ranked = sorted(categories.items(), key=lambda item: (-item[1], item[0]))
    return ["  errors by category"] + [
        f"    {category:<22}{count:>10}" for category, count in ranked
    ]


def format_summary(result: DemoResult, *, title: str) -> str:
    """The summary table printed to stdout."""
    bodies = result.first_bodies()
    rewards = [float(b["reward"]) for b in bodies if b.get("reward") is not None]
    totals = [float((b.get("metrics") or {}).get("total_latency_ms", math.nan)) for b in bodies]
    totals = [t for t in totals if not math.isnan(t)]
    init_ms = [i.latency_ms for i in result.inits]
    reported = len(bodies)
    rate = reported / result.wall_seconds if result.wall_seconds > 0 else 0.0
    lines = [
        title,
        "",
        f"  {'rollouts':<24}{len(result.expected):>10}",
        f"  {'COMPLETED':<24}{result.statuses['COMPLETED']:>10}",
        f"  {'ERROR':<24}{result.statuses['ERROR']:>10}",
        *_category_lines(result.error_categories),
        f"  {'missing':<24}{result.statuses['missing']:>10}",
        f"  {'duplicates received':<24}{result.duplicates:>10}",
    ]
    for status, count in sorted(result.statuses.items()):
        if status not in ("COMPLETED", "ERROR", "missing"):
            lines.append(f"  {status:<24}{count:>10}")
    if result.unexpected:
        lines.append(f"  {'unexpected rollout ids':<24}{result.unexpected:>10}")
    for status, count in sorted(result.init_failures.items()):
        lines.append(f"  {'init answered ' + status:<24}{count:>10}")
    mean_reward = f"{sum(rewards) / len(rewards):.3f}" if rewards else "-"
    lines += [
        f"  {'mean reward':<24}{mean_reward:>10}  ({len(rewards)} rewarded)",
        "",
        f"  {'latency (ms)':<24}{'p50':>10}{'p95':>10}{'p99':>10}",
    ]
    for name, values in (("rollout total_latency", totals), ("init round trip", init_ms)):
        cells = "".join(f"{_fmt_ms(percentile(values, q)):>10}" for q in (50, 95, 99))
        lines.append(f"  {name:<24}{cells}")
    lines += [
        "",
        f"  {'wall time':<24}{result.wall_seconds:>9.2f}s",
        f"  {'throughput':<24}{rate:>10.1f}  rollouts/s",
        "",
    ]
    if result.ok:
        lines.append("OK: every rollout was reported exactly once, none ERROR")
    else:
        why = []
        if result.timed_out:
            why.append("timed out waiting for callbacks")
        if result.statuses["missing"]:
            why.append(f"{result.statuses['missing']} never reported")
        if result.duplicates:
            why.append(f"{result.duplicates} duplicate callbacks")
        if result.statuses["ERROR"]:
            by = ", ".join(f"{n} {c}" for c, n in result.error_categories.most_common())
            why.append(f"{result.statuses['ERROR']} ERROR ({by})")
        if result.init_failures:
            why.append(f"{sum(result.init_failures.values())} inits not accepted")
        if result.unexpected:
            why.append(f"{result.unexpected} callbacks for unknown rollouts")
        lines.append("FAILED: " + "; ".join(why or ["see the counts above"]))
    return "\n".join(lines)


def _error(message: str, code: int = 1) -> int:
    print(f"rollout-sdk demo: error: {message}", file=sys.stderr)
    return code


def run_demo(args: argparse.Namespace) -> int:
    """Run the demo; 0 only if every rollout was reported exactly once and none ERROR.

    1 for a bad dataset, agent or failed run; 2 for bad options; 130 when interrupted.
    """
    from rollout_sdk.agent.validation import format_report, validate_agent_loop
    from rollout_sdk.errors import ConfigurationError, StoreError
    from rollout_sdk.loader import load_agent_loop
    from rollout_sdk.local.server import build_local_app
    from rollout_sdk.testing.standin import ScriptedModel, TrainGateStandIn
    from rollout_sdk.testing.threads import ServerThread

    if args.repeat < 1:
        return _error("--repeat must be at least 1", 2)
    if args.base_url is not None:
        return _run_on_endpoint(args)
    if args.model is not None or args.api_key is not None:
        return _error(
            "--model and --api-key need --base-url (without it the demo uses its scripted "
            "model; for OpenAI itself pass --base-url https://api.openai.com/v1)",
            2,
        )
    if args.concurrency < 1:
        return _error("--concurrency must be at least 1", 2)
    if not args.timeout > 0:
        return _error("--timeout must be positive", 2)
    try:
        rows = load_dataset(args.dataset)
        agent_loop = load_agent_loop(args.agent)
    except (DatasetError, ConfigurationError) as exc:
        return _error(str(exc))
    report = validate_agent_loop(agent_loop)
    if not report.valid:
        print(format_report(report), file=sys.stderr)
        return 1

    server_key = secrets.token_urlsafe(32)
    callback_key = secrets.token_urlsafe(32)
    standin = TrainGateStandIn(model=ScriptedModel(wrong_every=7), callback_key=callback_key)
    servers: list[ServerThread] = []
    with tempfile.TemporaryDirectory(prefix="rollout-sdk-demo-") as state_dir:
        try:
            try:
                app = build_local_app(
                    agent_loop,
                    store=args.store,
                    state_dir=state_dir,
                    api_keys=[server_key],
                    docs=False,
                )
            except (ConfigurationError, StoreError) as exc:
                return _error(str(exc))
            traingate, rollout_server = ServerThread(standin.app), ServerThread(app)
            servers += [traingate, rollout_server]  # listed first, so finally stops them
            try:
                traingate.start()
                rollout_server.start()
            except RuntimeError as exc:  # a server that would not start
                return _error(str(exc))
            traingate_url, server_url = traingate.url, rollout_server.url
            expected: list[str] = []
            bodies: list[dict[str, Any]] = []
            for rep in range(args.repeat):
                for index, row in enumerate(rows):
                    rollout_id = f"demo-{rep + 1}-{index + 1:04d}"
                    expected.append(rollout_id)
                    bodies.append(
                        {
                            "rollout_id": rollout_id,
                            "server_url": traingate_url,
                            "messages": row.messages,
                            "completion_params": {"temperature": 0.7, "max_tokens": 256},
                            "metadata": row.metadata,
                            "api_key": callback_key,
                        }
                    )
            print(
                f"rollout-sdk demo: agent {agent_loop.name!r} on {server_url} "
                f"(store {args.store}), TrainGate stand-in on {traingate_url}; "
                f"{len(bodies)} rollouts, {args.concurrency} inits in flight",
                file=sys.stderr,
            )
            progress = Progress(len(bodies), label="rollouts reported")
            inits, wall, timed_out = asyncio.run(
                _drive(
                    standin=standin,
                    server_url=server_url,
                    server_key=server_key,
                    bodies=bodies,
                    concurrency=args.concurrency,
                    wait_seconds=args.timeout,
                    progress=progress,
                )
            )
        except KeyboardInterrupt:
            print("\nrollout-sdk demo: interrupted; stopping the servers", file=sys.stderr)
            # Stopping mid-run drops the rollouts' open requests; uvicorn would print a
            # traceback for each, which says nothing the user does not already know.
            logging.getLogger("uvicorn.error").setLevel(logging.CRITICAL)
            return 130
        finally:
            for server in reversed(servers):
                server.stop()
    # Both servers have stopped, so nothing writes to the stand-in's record any more.
    callbacks = {k: list(v) for k, v in standin.completions.items()}
    result = DemoResult(
        expected=expected,
        inits=inits,
        callbacks=callbacks,
        wall_seconds=wall,
        timed_out=timed_out,
    )
    title = (
        f"rollout-sdk demo: {len(expected)} rollouts of {agent_loop.name!r} "
        f"({args.dataset} x {args.repeat}, store {args.store})"
    )
    print(format_summary(result, title=title))
    return 0 if result.ok else 1


def _run_on_endpoint(args: argparse.Namespace) -> int:
    """``demo --base-url``: the dataset's rows against a real endpoint, through
    :func:`rollout_sdk.local.testrun.execute` (the path of ``rollout-sdk test``)."""
    import os

    from rollout_sdk.errors import ConfigurationError
    from rollout_sdk.loader import load_agent_loop
    from rollout_sdk.local.dataset import RunRow
    from rollout_sdk.local.forward import DEFAULT_MODEL, resolve_endpoint
    from rollout_sdk.local.testrun import execute

    if args.concurrency < 1:
        return _error("--concurrency must be at least 1", 2)
    try:
        endpoint = resolve_endpoint(
            model=args.model or DEFAULT_MODEL,
            base_url=args.base_url,
            api_key=args.api_key,
            environ=dict(os.environ),
            timeout=args.timeout,
        )
        dataset = load_dataset(args.dataset)
        agent_loop = load_agent_loop(args.agent)
    except (DatasetError, ConfigurationError) as exc:
        return _error(str(exc))
    rows = [
        RunRow(index, row.messages, {**row.metadata, "row_index": index})
        for index, row in enumerate(dataset * args.repeat)
    ]
    return execute(
        agent_loop,
        endpoint,
        rows,
        # None of the scripted run's sampling params: the model's own defaults (reasoning models
        # refuse a temperature other than 1).
        params={},
        max_turns=10,
        concurrency=args.concurrency,
        quiet=False,
        debug=False,
        title=(
            f"rollout-sdk demo: {len(rows)} rollouts of {agent_loop.name!r} on "
            f"{endpoint.model} at {endpoint.shown()} ({args.dataset} x {args.repeat})"
        ),
    )
