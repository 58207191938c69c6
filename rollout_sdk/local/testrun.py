"""``rollout-sdk test``: run an agent over a dataset against a real OpenAI-compatible model.

The rows run by the one runner of ``demo`` and ``test`` (:mod:`rollout_sdk.local.runner`): the
kit's real server and worker, exactly as under TrainGate, with a local TrainGate
(:mod:`rollout_sdk.local.forward`) forwarding the rollouts' chat calls to the endpoint. What is
``test``'s own: its options, the agent as ``-m`` or ``--mcp``, ``--interactive``, and ``-o -``:
the results JSON alone on stdout, while everything else the command prints (the start-up line,
the progress, the summary, an agent's own ``print``) goes to stderr. Exit status: 0 when every
row completed, 1 when one failed or the run could not start, 2 for bad options.

The server, the forwarder and the dataset reader are imported inside the functions that run
them, so parsing ``test``'s options (and failing on a bad one) loads none of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from rollout_sdk.local.report import STDOUT, fail
from rollout_sdk.local.runner import (
    Batch,
    LocalRun,
    RunPlan,
    agent_is_valid,
    execute,
    forwarding_run,
    quiet_kit_logs,
)
from rollout_sdk.project import install_hint

if TYPE_CHECKING:
    import argparse

    from rollout_sdk.agent.loop import RolloutAgentLoop
    from rollout_sdk.local.dataset import RunRow
    from rollout_sdk.local.forward import Endpoint

COMMAND = "rollout-sdk test"
#: v1's folder for ``ctx.log_event`` traces under ``--debug``.
DEBUG_DIR = "./test_debug"


def _error(message: str, code: int = 1) -> int:
    return fail(COMMAND, message, code)


def _debug_dir(args: argparse.Namespace) -> str | None:
    return DEBUG_DIR if args.test_debug else None


def load_agent(args: argparse.Namespace) -> RolloutAgentLoop:
    """The agent of ``-m MODULE:ATTR`` or ``--mcp DIR``; ConfigurationError."""
    from rollout_sdk.errors import ConfigurationError
    from rollout_sdk.loader import load_agent_loop

    if args.mcp is None:
        agent: RolloutAgentLoop = load_agent_loop(args.module)
        return agent
    import importlib

    # By name: the module is another part's (the mcp extra), and may not be installed.
    try:
        mcp = importlib.import_module("rollout_sdk.mcp")
    except ImportError as exc:
        raise ConfigurationError(
            f"--mcp needs the MCP agent loop, which is not installed: {install_hint('mcp')} ({exc})"
        ) from exc
    try:
        mcp_agent: RolloutAgentLoop = mcp.agent_loop_from_folder(args.mcp)
    except ImportError as exc:  # FastMCP itself missing
        raise ConfigurationError(f"--mcp needs FastMCP: {install_hint('mcp')} ({exc})") from exc
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


def _interactive(
    agent_loop: RolloutAgentLoop,
    endpoint: Endpoint,
    rows: list[RunRow],
    *,
    plan: RunPlan,
    args: argparse.Namespace,
) -> int:
    from rollout_sdk.errors import ConfigurationError, ServeError, StoreError
    from rollout_sdk.local.interactive import InteractiveSession

    session = InteractiveSession(stdin=sys.stdin, stdout=sys.stdout)
    by_index = {row.row_index: row for row in rows}
    first, last = rows[0].row_index, rows[-1].row_index

    async def one(run: LocalRun, client: Any, row: RunRow) -> None:
        session.start_row(row.row_index, row.messages)
        outcome = await run.run_row(client, row, plan)
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

    try:
        run = forwarding_run(
            agent_loop,
            endpoint,
            concurrency=1,
            prefix="test",
            debug_dir=_debug_dir(args),
            interactor=session,
        )
        with quiet_kit_logs(args.test_debug), run:
            asyncio.run(session_loop(run))
    except (ConfigurationError, ServeError, StoreError, RuntimeError) as exc:
        return _error(str(exc))
    except KeyboardInterrupt:
        print(f"\n{COMMAND}: interrupted; stopping the servers", file=sys.stderr)
        return 130
    return 0


def run_test(args: argparse.Namespace) -> int:
    """``rollout-sdk test``; the exit status. With ``-o -``, stdout is kept for the results:
    whatever else is printed meanwhile, by the kit or the agent, goes to stderr."""
    if args.output != STDOUT:
        return _run_test(args, None)
    results = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        return _run_test(args, results)


def _run_test(args: argparse.Namespace, results: TextIO | None) -> int:
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
    if args.output == STDOUT and args.interactive:
        return _error("--interactive talks on stdout: give -o a file, not -", 2)
    if args.output not in (None, STDOUT) and Path(args.output).is_dir():
        return _error(f"-o {args.output} is a folder: give the file to write, e.g. results.json", 2)
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
            f"{args.offset}; give an --offset below {selection.total}"
        )
    plan = RunPlan(completion_params(args), args.max_turns, args.concurrency)
    if args.interactive:
        if not agent_is_valid(agent_loop):
            return 1
        return _interactive(agent_loop, endpoint, selection.rows, plan=plan, args=args)
    rows = selection.rows
    shown = f"rows {rows[0].row_index}-{rows[-1].row_index} of {selection.total}"
    batch = Batch(
        command=COMMAND,
        where=f"{endpoint.model} at {endpoint.shown()}",
        title=f"{COMMAND}: {agent_loop.name!r} on {endpoint.model} ({args.dataset}, {shown})",
        quiet=args.quiet,
        debug=args.test_debug,
        output=args.output,
        results=results,
    )
    try:
        run = forwarding_run(
            agent_loop,
            endpoint,
            concurrency=args.concurrency,
            prefix="test",
            debug_dir=_debug_dir(args),
        )
    except ConfigurationError as exc:
        return _error(str(exc))
    return execute(run, rows, plan, batch)
