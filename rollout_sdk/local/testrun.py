"""``rollout-sdk test``: run an agent over a dataset against a real OpenAI-compatible model.

The agent runs through the kit's real server and worker (the local app with its in-process
dispatcher, served by uvicorn on a free loopback port), exactly as under TrainGate: each row is
posted as an init; the rollout's chat calls go to a local TrainGate
(:mod:`rollout_sdk.local.forward`) that forwards them to the endpoint, and its final response
comes back to that TrainGate's ``/v1/rollout/completed``. Both servers stop when the run ends.

Rows run ``--concurrency`` at a time (1 by default: v1 ran them one after another). A failure
every row would hit (a refused key, an unknown model, an unreachable endpoint) stops the run:
rows in flight end at once and no more start, as v1 stopped early. Exit status: 0 when every row
that ran completed, 1 when one failed or the run could not start, 2 for bad options.
``rollout-sdk demo --base-url`` runs its dataset by the same path.

The server, the forwarder and the dataset reader are imported inside the functions that run
them, so parsing ``test``'s options (and failing on a bad one) loads none of them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import secrets
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from rollout_sdk.local.dataset import RunRow
from rollout_sdk.local.forward import Endpoint, EndpointFailure, ForwardingTrainGate
from rollout_sdk.local.progress import Progress, percentile

if TYPE_CHECKING:
    import argparse

    from rollout_sdk.agent.loop import RolloutAgentLoop
    from rollout_sdk.local.interactive import InteractiveSession
    from rollout_sdk.settings import RolloutSettings

#: v1 gave each test rollout this token budget.
MAX_TOKENS_TOTAL = 4096
#: v1's folder for ``ctx.log_event`` traces under ``--debug``.
DEBUG_DIR = "./test_debug"
#: Beyond the rollout deadline, how long to wait for a final response before calling it lost.
RESULT_MARGIN_SECONDS = 60.0
UNCATEGORIZED = "uncategorized"


@dataclass
class RowOutcome:
    """How one row went (the ``-o`` file's per-row record is :meth:`as_json`)."""

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


@dataclass
class RunReport:
    """Every row that ran, in row order, and whether the run stopped early."""

    outcomes: list[RowOutcome]
    total_duration_ms: float
    stopped: EndpointFailure | None = None
    not_run: int = 0

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
    def categories(self) -> Counter[str]:
        return Counter(o.category or UNCATEGORIZED for o in self.outcomes if not o.success)

    def as_json(self) -> dict[str, Any]:
        """v1's ``-o`` shape (its five summary fields first; the kit adds the rest)."""
        return {
            "summary": {
                "total": len(self.outcomes),
                "passed": self.passed,
                "failed": self.failed,
                "total_duration_ms": self.total_duration_ms,
                "total_tokens": self.total_tokens,
                "statuses": dict(Counter(o.status for o in self.outcomes)),
                "errors_by_category": dict(self.categories),
                "stopped_early": self.stopped is not None,
                "stop_reason": self.stopped.message if self.stopped else None,
                "not_run": self.not_run,
            },
            "results": [o.as_json() for o in self.outcomes],
        }


def _outcome(
    row: RunRow, body: dict[str, Any], failure: EndpointFailure | None, duration_ms: float
) -> RowOutcome:
    from rollout_sdk.engine.responses import failure_of

    metrics = body.get("metrics") or {}
    prompt = int(metrics.get("prompt_tokens") or 0)
    completion = int(metrics.get("response_tokens") or 0)
    status = str(body.get("status"))
    success = status == "COMPLETED"
    category = None
    error = None
    if not success:
        kit_failure = failure_of(body)
        category = (
            failure.kind if failure else str((kit_failure or {}).get("category", UNCATEGORIZED))
        )
        error = failure.message if failure else str(body.get("error_message") or "ERROR")
    reward = body.get("reward")
    return RowOutcome(
        row_index=row.row_index,
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
    )


def run_settings(
    base: RolloutSettings, endpoint: Endpoint, *, concurrency: int, interactive: bool
) -> RolloutSettings:
    """The kit's settings for a run: the call to the local TrainGate outlasts the endpoint's
    timeout (or a pause of up to an hour, interactive); enough rollouts may run at once; an
    interactive rollout has a day."""
    client = base.client.model_copy(
        update={"timeout_seconds": 3600.0 if interactive else min(3600.0, endpoint.timeout + 30)}
    )
    server_update: dict[str, Any] = {
        "max_concurrent_rollouts": max(base.server.max_concurrent_rollouts, concurrency)
    }
    if interactive:
        server_update["request_timeout_seconds"] = 24 * 3600.0
    server = base.server.model_copy(update=server_update)
    return base.model_copy(update={"client": client, "server": server})


class LocalRun:
    """The kit's local server and the forwarding TrainGate, on free loopback ports, for as long
    as the ``with`` block lasts."""

    def __init__(
        self,
        agent_loop: RolloutAgentLoop,
        endpoint: Endpoint,
        *,
        settings: RolloutSettings,
        debug_dir: str | None = None,
        interactor: InteractiveSession | None = None,
    ) -> None:
        self.agent_loop = agent_loop
        self.settings = settings
        self.debug_dir = debug_dir
        self.server_key = secrets.token_urlsafe(32)
        self.callback_key = secrets.token_urlsafe(32)
        self.traingate = ForwardingTrainGate(
            endpoint, callback_key=self.callback_key, interactor=interactor
        )
        self._ids: Counter[int] = Counter()
        self._servers: list[Any] = []
        self.server_url = ""

    def __enter__(self) -> LocalRun:
        from rollout_sdk.local.server import build_local_app
        from rollout_sdk.testing.threads import ServerThread

        app = build_local_app(
            self.agent_loop,
            store="memory",
            state_dir=tempfile.gettempdir(),
            api_keys=[self.server_key],
            settings=self.settings,
            debug_dir=self.debug_dir,
            docs=False,
        )
        try:
            for server_app in (self.traingate.app, app):
                server = ServerThread(server_app)
                self._servers.append(server)
                server.start()
        except BaseException:
            self.__exit__()
            raise
        self.traingate_url, self.server_url = (s.url for s in self._servers)
        return self

    def __exit__(self, *_exc: object) -> None:
        for server in reversed(self._servers):
            server.stop()
        self._servers.clear()

    def rollout_id(self, row_index: int) -> str:
        """``test-N`` as in v1; ``test-N.2`` and on when a row runs again (interactive)."""
        self._ids[row_index] += 1
        runs = self._ids[row_index]
        return f"test-{row_index}" if runs == 1 else f"test-{row_index}.{runs}"

    async def run_row(
        self,
        client: Any,
        row: RunRow,
        *,
        completion_params: dict[str, Any],
        max_turns: int,
        on_tools: Callable[[list[dict[str, Any]]], None] | None = None,
    ) -> RowOutcome:
        """Post ``row`` as an init and wait for its final response."""
        import httpx

        rollout_id = self.rollout_id(row.row_index)
        self.traingate.expect(rollout_id, completion_params)
        started = time.perf_counter()

        def failed(message: str, category: str) -> RowOutcome:
            elapsed = (time.perf_counter() - started) * 1000
            return RowOutcome(row.row_index, False, "not run", message, elapsed, category=category)

        body = {
            "rollout_id": rollout_id,
            "server_url": self.traingate_url,
            "messages": row.messages,
            "completion_params": completion_params,
            "max_turns": max_turns,
            "max_tokens_total": MAX_TOKENS_TOTAL,
            "metadata": row.metadata,
            "api_key": self.callback_key,
        }
        try:
            answer = await client.post(f"{self.server_url}/v1/rollout/init", json=body)
        except httpx.HTTPError as exc:
            return failed(f"the local rollout server did not answer the init: {exc}", "init")
        if answer.status_code != 202:
            return failed(
                f"the local rollout server refused the init ({answer.status_code}): "
                f"{answer.text[:300]}",
                "init",
            )
        tools = list(answer.json().get("tools") or [])
        if on_tools is not None:
            on_tools(tools)
        self.traingate.set_tools(rollout_id, tools)
        wait = self.settings.server.request_timeout_seconds + RESULT_MARGIN_SECONDS
        try:
            async with asyncio.timeout(wait):
                final = await self.traingate.result(rollout_id)
        except TimeoutError:
            return failed(f"no final response within {wait:g} s", "lost")
        elapsed = (time.perf_counter() - started) * 1000
        return _outcome(row, final, self.traingate.failure(rollout_id), elapsed)

    async def run_rows(
        self,
        rows: list[RunRow],
        *,
        completion_params: dict[str, Any],
        max_turns: int,
        concurrency: int,
        on_done: Callable[[RowOutcome], None] = lambda _o: None,
    ) -> RunReport:
        """Every row, ``concurrency`` at a time, in order; none starts once the run tripped."""
        import httpx

        started = time.perf_counter()
        pending = iter(rows)
        outcomes: list[RowOutcome] = []
        async with httpx.AsyncClient(
            headers={"Authorization": f"Bearer {self.server_key}"}, timeout=60.0
        ) as client:

            async def worker() -> None:
                for row in pending:
                    if self.traingate.tripped is not None:
                        return
                    outcome = await self.run_row(
                        client, row, completion_params=completion_params, max_turns=max_turns
                    )
                    outcomes.append(outcome)
                    on_done(outcome)

            await asyncio.gather(*(worker() for _ in range(min(concurrency, len(rows)))))
        outcomes.sort(key=lambda o: o.row_index)
        return RunReport(
            outcomes=outcomes,
            total_duration_ms=(time.perf_counter() - started) * 1000,
            stopped=self.traingate.tripped,
            not_run=len(rows) - len(outcomes),
        )


# ---------------------------------------------------------------------------- output


def _fmt_ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.0f}"


def format_summary(report: RunReport, *, title: str) -> str:
    """The summary printed to stdout: counts, statuses and categories, reward, tokens, latency
    percentiles, and the first failed rows."""
    rewards = [o.reward for o in report.outcomes if o.reward is not None]
    usage = Counter[str]()
    for outcome in report.outcomes:
        usage.update(outcome.token_usage)
    lines = [
        title,
        "",
        f"  {'rows':<24}{len(report.outcomes):>10}",
        f"  {'passed':<24}{report.passed:>10}",
        f"  {'failed':<24}{report.failed:>10}",
    ]
    for status, count in sorted(Counter(o.status for o in report.outcomes).items()):
        lines.append(f"    {status:<22}{count:>10}")
    if report.categories:
        lines.append("  errors by category")
        for category, count in report.categories.most_common():
            lines.append(f"    {category:<22}{count:>10}")
    if report.not_run:
        lines.append(f"  {'not run (stopped)':<24}{report.not_run:>10}")
    mean = f"{sum(rewards) / len(rewards):.3f}" if rewards else "-"
    lines += [
        f"  {'mean reward':<24}{mean:>10}  ({len(rewards)} rewarded)",
        f"  {'tokens prompt':<24}{usage['prompt_tokens']:>10,}",
        f"  {'tokens completion':<24}{usage['completion_tokens']:>10,}",
        f"  {'tokens total':<24}{usage['total_tokens']:>10,}",
        f"  {'model calls':<24}{usage['num_llm_calls']:>10}",
        "",
        f"  {'latency (ms)':<24}{'p50':>10}{'p95':>10}{'p99':>10}",
    ]
    per_call = [
        o.llm_latency_ms / o.token_usage["num_llm_calls"]
        for o in report.outcomes
        if o.token_usage.get("num_llm_calls")
    ]
    for name, values in (
        ("row", [o.duration_ms for o in report.outcomes]),
        ("model call", per_call),
    ):
        cells = "".join(f"{_fmt_ms(percentile(values, q)):>10}" for q in (50, 95, 99))
        lines.append(f"  {name:<24}{cells}")
    lines += ["", f"  {'wall time':<24}{report.total_duration_ms / 1000:>9.2f}s"]
    failed = [o for o in report.outcomes if not o.success]
    if failed:
        lines += ["", "failed rows:"]
        lines += [f"  row {o.row_index}: {o.error}" for o in failed[:10]]
        if len(failed) > 10:
            lines.append(f"  ... and {len(failed) - 10} more (see -o)")
    if report.stopped is not None:
        lines += ["", f"STOPPED EARLY: {report.stopped.message}"]
    return "\n".join(lines)


def _row_line(outcome: RowOutcome, done: int, total: int) -> str:
    tokens = outcome.token_usage.get("total_tokens", 0)
    line = (
        f"[{done}/{total}] row {outcome.row_index}: {'OK' if outcome.success else 'FAILED'} "
        f"({outcome.duration_ms / 1000:.1f}s, {tokens:,} tokens)"
    )
    if not outcome.success and outcome.error:
        error = " ".join(outcome.error.split())
        line += " - " + (error[:97] + "..." if len(error) > 100 else error)
    return line


class RowProgress:
    """A bar on a terminal; otherwise a line per finished row (v1's lines); nothing when quiet."""

    def __init__(self, total: int, *, quiet: bool, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.total = total
        self.quiet = quiet
        self.done = 0
        self.bar = Progress(total, label="rows") if self.stream.isatty() and not quiet else None

    def __call__(self, outcome: RowOutcome) -> None:
        self.done += 1
        if self.quiet:
            return
        if self.bar is not None:
            self.bar.update(self.done)
        else:
            self.stream.write(_row_line(outcome, self.done, self.total) + "\n")
            self.stream.flush()

    def finish(self) -> None:
        if self.bar is not None:
            self.bar.finish()


def write_output(path: str, report: RunReport) -> None:
    """The ``-o`` file (its folder made if missing)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(report.as_json(), indent=2) + "\n", encoding="utf-8")


# ---------------------------------------------------------------------------- the command


def _error(message: str, code: int = 1) -> int:
    print(f"rollout-sdk test: error: {message}", file=sys.stderr)
    return code


@contextmanager
def _quiet_kit_logs(debug: bool) -> Iterator[None]:
    """Without ``--debug``, the kit's log lines (an agent's traceback when a chat call failed)
    stay out of the output: the row's error says what happened. With it, everything shows."""
    kit = logging.getLogger("rollout_sdk")
    if debug:
        logging.basicConfig(level=logging.DEBUG)
        yield
        return
    handler = logging.NullHandler()
    kit.addHandler(handler)
    propagate, kit.propagate = kit.propagate, False
    try:
        yield
    finally:
        kit.removeHandler(handler)
        kit.propagate = propagate


def load_agent(args: argparse.Namespace) -> RolloutAgentLoop:
    """The agent of ``-m MODULE:ATTR`` or ``--mcp DIR``; ConfigurationError."""
    from rollout_sdk.errors import ConfigurationError
    from rollout_sdk.loader import load_agent_loop

    if args.mcp is None:
        agent: RolloutAgentLoop = load_agent_loop(args.module)
        return agent
    import importlib

    # By name: the module is another part's (rollout-sdk[mcp]), and may not be installed.
    try:
        mcp = importlib.import_module("rollout_sdk.mcp")
    except ImportError as exc:
        raise ConfigurationError(
            "--mcp needs the MCP agent loop, which is not installed: pip install "
            f"'rollout-sdk[mcp]' ({exc})"
        ) from exc
    try:
        mcp_agent: RolloutAgentLoop = mcp.agent_loop_from_folder(args.mcp)
    except ImportError as exc:  # FastMCP itself missing
        raise ConfigurationError(
            f"--mcp needs FastMCP: pip install 'rollout-sdk[mcp]' ({exc})"
        ) from exc
    except Exception as exc:  # the folder's own error (MCPLoadError), said without a traceback
        raise ConfigurationError(f"cannot load the MCP folder {args.mcp}: {exc}") from exc
    return mcp_agent


def completion_params(args: argparse.Namespace) -> dict[str, Any]:
    """v1's: only what was given on the command line."""
    params: dict[str, Any] = {}
    if args.temperature is not None:
        params["temperature"] = args.temperature
    if args.max_tokens is not None:
        params["max_tokens"] = args.max_tokens
    return params


def execute(
    agent_loop: RolloutAgentLoop,
    endpoint: Endpoint,
    rows: list[RunRow],
    *,
    params: dict[str, Any],
    max_turns: int,
    concurrency: int,
    quiet: bool,
    debug: bool,
    title: str,
    output: str | None = None,
) -> int:
    """Run ``rows`` in batch, print the progress and the summary, write ``output``; the exit
    status (the path ``test`` and ``demo --base-url`` share)."""
    from rollout_sdk.agent.validation import format_report, validate_agent_loop
    from rollout_sdk.errors import ConfigurationError, ServeError, StoreError
    from rollout_sdk.settings import get_settings

    report = validate_agent_loop(agent_loop)
    if not report.valid:
        print(format_report(report), file=sys.stderr)
        return 1
    with _quiet_kit_logs(debug):
        try:
            settings = run_settings(
                get_settings(), endpoint, concurrency=concurrency, interactive=False
            )
            with LocalRun(
                agent_loop,
                endpoint,
                settings=settings,
                debug_dir=DEBUG_DIR if debug else None,
            ) as run:
                if not quiet:
                    print(
                        f"rollout-sdk test: {len(rows)} rows of {agent_loop.name!r} on "
                        f"{endpoint.model} at {endpoint.shown()}, {concurrency} at a time",
                        file=sys.stderr,
                    )
                progress = RowProgress(len(rows), quiet=quiet)
                try:
                    result = asyncio.run(
                        run.run_rows(
                            rows,
                            completion_params=params,
                            max_turns=max_turns,
                            concurrency=concurrency,
                            on_done=progress,
                        )
                    )
                finally:
                    progress.finish()
        except (ConfigurationError, ServeError, StoreError, RuntimeError) as exc:
            return _error(str(exc))
        except KeyboardInterrupt:
            print("\nrollout-sdk test: interrupted", file=sys.stderr)
            return 130
    if not quiet:
        print(format_summary(result, title=title))
    if output:
        write_output(output, result)
        if not quiet:
            print(f"\nresults written to {output}")
    if result.stopped is not None and quiet:
        print(f"rollout-sdk test: stopped early: {result.stopped.message}", file=sys.stderr)
    return 1 if result.failed or result.not_run else 0


def _interactive(
    agent_loop: RolloutAgentLoop,
    endpoint: Endpoint,
    rows: list[RunRow],
    *,
    params: dict[str, Any],
    args: argparse.Namespace,
) -> int:
    from rollout_sdk.errors import ConfigurationError, ServeError, StoreError
    from rollout_sdk.local.interactive import InteractiveSession
    from rollout_sdk.settings import get_settings

    session = InteractiveSession(stdin=sys.stdin, stdout=sys.stdout)
    by_index = {row.row_index: row for row in rows}
    first, last = rows[0].row_index, rows[-1].row_index

    async def one(run: LocalRun, client: Any, row: RunRow) -> None:
        session.start_row(row.row_index, row.messages)
        outcome = await run.run_row(client, row, completion_params=params, max_turns=args.max_turns)
        tokens = outcome.token_usage
        lines = [f"status: {outcome.status}"]
        if outcome.error:
            lines.append(f"error: {outcome.error}")
        if outcome.reward is not None:
            lines.append(f"reward: {outcome.reward}")
        if outcome.finish_reason:
            lines.append(f"finish reason: {outcome.finish_reason}")
        lines.append(f"duration: {outcome.duration_ms / 1000:.2f}s")
        lines.append(
            f"tokens: {tokens.get('total_tokens', 0):,} ({tokens.get('num_llm_calls', 0)} model calls)"
        )
        session.end_row(lines)

    async def session_loop(run: LocalRun) -> None:
        import httpx

        async with httpx.AsyncClient(
            headers={"Authorization": f"Bearer {run.server_key}"}, timeout=60.0
        ) as client:
            if args.row is not None:
                if args.row in by_index:
                    await one(run, client, by_index[args.row])
                else:
                    session.say(f"Invalid row index {args.row}. Valid range: {first}-{last}")
            while True:
                choice = await asyncio.to_thread(session.choose_row, first, last)
                if choice is None:
                    break
                await one(run, client, by_index[choice])
        session.say("interactive session ended")

    with _quiet_kit_logs(args.debug):
        try:
            settings = run_settings(get_settings(), endpoint, concurrency=1, interactive=True)
            with LocalRun(
                agent_loop,
                endpoint,
                settings=settings,
                debug_dir=DEBUG_DIR if args.debug else None,
                interactor=session,
            ) as run:
                asyncio.run(session_loop(run))
        except (ConfigurationError, ServeError, StoreError, RuntimeError) as exc:
            return _error(str(exc))
        except KeyboardInterrupt:
            print("\nrollout-sdk test: interrupted", file=sys.stderr)
            return 130
    return 0


def run_test(args: argparse.Namespace) -> int:
    """``rollout-sdk test``; the exit status."""
    from rollout_sdk.agent.validation import format_report, validate_agent_loop
    from rollout_sdk.errors import ConfigurationError, DatasetError
    from rollout_sdk.local.dataset import read_rows
    from rollout_sdk.local.forward import read_key_file, resolve_endpoint

    if (args.module is None) == (args.mcp is None):
        return _error("give the agent with -m/--module MODULE:ATTR or --mcp DIR (one of them)", 2)
    if args.row is not None and not args.interactive:
        return _error("--row needs --interactive", 2)
    for name in ("limit", "max_turns", "max_tokens", "concurrency"):
        value = getattr(args, name)
        if value is not None and value < 1:
            return _error(f"--{name.replace('_', '-')} must be at least 1", 2)
    if args.offset < 0:
        return _error("--offset must be 0 or more", 2)
    try:
        api_key = args.api_key
        if args.api_key_file is not None:
            api_key = read_key_file(args.api_key_file)
        endpoint = resolve_endpoint(
            model=args.model,
            base_url=args.base_url,
            api_key=api_key,
            environ=dict(os.environ),
            timeout=args.timeout,
        )
        agent_loop = load_agent(args)
        selection = read_rows(args.dataset, limit=args.limit, offset=args.offset)
    except (ConfigurationError, DatasetError) as exc:
        return _error(str(exc))
    if not selection.rows:
        return _error(
            f"no rows to test: {args.dataset} has {selection.total} rows and --offset is "
            f"{args.offset}"
        )
    params = completion_params(args)
    if args.interactive:
        report = validate_agent_loop(agent_loop)
        if not report.valid:
            print(format_report(report), file=sys.stderr)
            return 1
        return _interactive(agent_loop, endpoint, selection.rows, params=params, args=args)
    shown = (
        f"rows {selection.rows[0].row_index}-{selection.rows[-1].row_index} of {selection.total}"
    )
    return execute(
        agent_loop,
        endpoint,
        selection.rows,
        params=params,
        max_turns=args.max_turns,
        concurrency=args.concurrency,
        quiet=args.quiet,
        debug=args.debug,
        title=f"rollout-sdk test: {agent_loop.name!r} on {endpoint.model} ({args.dataset}, {shown})",
        output=args.output,
    )
