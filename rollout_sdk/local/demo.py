"""``rollout-sdk demo``: the example agent end to end on this machine.

The dataset's rows (times ``--repeat``) run by the one runner of ``demo`` and ``test``
(:mod:`rollout_sdk.local.runner`), with one difference: the TrainGate the rollouts talk to is a
stand-in with a scripted model (:class:`ScriptedTrainGate`), or with ``--base-url`` the
forwarder to that real endpoint, the path of ``rollout-sdk test``. The summary is the same.

The server, the stand-in and the agent loader are imported inside the functions that run them,
so ``demo --help`` and a bad option load none of them.
"""

from __future__ import annotations

import asyncio
import secrets
import tempfile
import threading
from typing import TYPE_CHECKING, Any

from rollout_sdk.local.report import fail
from rollout_sdk.local.runner import (
    Batch,
    LocalRun,
    RunPlan,
    execute,
    forwarding_run,
    run_settings,
)

if TYPE_CHECKING:
    import argparse

    from starlette.types import Receive, Scope, Send

    from rollout_sdk.local.dataset import RunRow

COMMAND = "rollout-sdk demo"
#: The scripted run's sampling params (an endpoint's run sends none: its model's defaults).
SCRIPTED_PARAMS: dict[str, Any] = {"temperature": 0.7, "max_tokens": 256}
MAX_TURNS = 10


class ScriptedTrainGate:
    """The demo's TrainGate: the stand-in whose scripted model solves the calculator's
    questions (every 7th rollout off by one, so the rewards are not all 1.0). It keeps every
    final response it receives, so the report counts duplicates; nothing trips it."""

    tripped = None

    def __init__(self, callback_key: str) -> None:
        from rollout_sdk.testing.standin import ScriptedModel, TrainGateStandIn

        self.callback_key = callback_key
        self.standin = TrainGateStandIn(
            model=ScriptedModel(wrong_every=7), callback_key=callback_key
        )
        self._lock = threading.Lock()
        self._waiting: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]]] = {}

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The stand-in's app; each callback it took wakes whoever waits for that rollout (the
        stand-in serves on a thread and an event loop of its own)."""
        await self.standin.app(scope, receive, send)
        if scope["type"] == "http" and scope["path"] == "/v1/rollout/completed":
            with self._lock:
                arrived = [r for r in self._waiting if self.standin.completions.get(r)]
                woken = [w for r in arrived for w in self._waiting.pop(r)]
            for loop, future in woken:
                loop.call_soon_threadsafe(_wake, future)

    def expect(self, rollout_id: str, completion_params: dict[str, Any]) -> None:
        """Nothing to prepare: the scripted model needs neither the params nor the tools."""

    def set_tools(self, rollout_id: str, tools: list[dict[str, Any]]) -> None:
        """Nothing to keep (see :meth:`expect`)."""

    async def result(self, rollout_id: str) -> dict[str, Any]:
        """The first final response the stand-in received for ``rollout_id``."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if not self.standin.completions.get(rollout_id):
                self._waiting.setdefault(rollout_id, []).append((loop, future))
            else:
                future.set_result(None)
        await future
        return self.standin.completions[rollout_id][0]

    def failure(self, rollout_id: str) -> None:
        """The scripted model never fails a call."""

    def callbacks(self) -> dict[str, int]:
        """How many final responses came for each rollout id."""
        return {rollout_id: len(b) for rollout_id, b in self.standin.completions.items()}


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():  # a waiter that gave up (its timeout) has a cancelled future
        future.set_result(None)


def _rows(args: argparse.Namespace) -> list[RunRow]:
    """The dataset's rows ``--repeat`` times, numbered on: ``demo-0``, ``demo-1``, ..."""
    from rollout_sdk.local.dataset import RunRow, read_rows

    dataset = read_rows(args.dataset).rows  # never none: an empty file is a DatasetError
    return [
        RunRow(index, row.messages, {**row.metadata, "row_index": index})
        for index, row in enumerate(dataset * args.repeat)
    ]


def _check(args: argparse.Namespace) -> str | None:
    """What is wrong with the options, if anything."""
    if args.repeat < 1:
        return "--repeat must be at least 1"
    if args.concurrency < 1:
        return "--concurrency must be at least 1"
    if not args.timeout > 0:
        return "--timeout must be positive"
    if args.base_url is None and (args.model is not None or args.api_key is not None):
        return (
            "--model and --api-key need --base-url (without it the demo uses its scripted "
            "model; for OpenAI itself pass --base-url https://api.openai.com/v1)"
        )
    return None


def run_demo(args: argparse.Namespace) -> int:
    """Run the demo; 0 only if every rollout was reported exactly once and none ERROR.

    1 for a bad dataset, agent or failed run; 2 for bad options; 130 when interrupted.
    """
    from rollout_sdk.errors import ConfigurationError, DatasetError
    from rollout_sdk.loader import load_agent_loop

    wrong = _check(args)
    if wrong is not None:
        return fail(COMMAND, wrong, 2)
    try:
        if args.base_url is not None:
            return _on_endpoint(args, _rows(args), load_agent_loop(args.agent))
        rows, agent_loop = _rows(args), load_agent_loop(args.agent)
    except (DatasetError, ConfigurationError) as exc:
        return fail(COMMAND, str(exc))
    from rollout_sdk.settings import get_settings

    plan = RunPlan(SCRIPTED_PARAMS, MAX_TURNS, args.concurrency, wait_seconds=args.timeout)
    batch = Batch(
        command=COMMAND,
        where="the TrainGate stand-in's scripted model",
        title=(
            f"{COMMAND}: {len(rows)} rollouts of {agent_loop.name!r} "
            f"({args.dataset} x {args.repeat}, store {args.store})"
        ),
    )
    with tempfile.TemporaryDirectory(prefix="rollout-sdk-demo-") as state_dir:
        try:
            settings = run_settings(get_settings(), concurrency=args.concurrency)
        except ConfigurationError as exc:
            return fail(COMMAND, str(exc))
        run = LocalRun(
            agent_loop,
            ScriptedTrainGate(secrets.token_urlsafe(32)),
            settings=settings,
            prefix="demo",
            store=args.store,
            state_dir=state_dir,
        )
        return execute(run, rows, plan, batch)


def _on_endpoint(args: argparse.Namespace, rows: list[RunRow], agent_loop: Any) -> int:
    """``demo --base-url``: the rows against a real endpoint, through the forwarder."""
    import os

    from rollout_sdk.local.forward import DEFAULT_MODEL, resolve_endpoint

    endpoint = resolve_endpoint(
        model=args.model or DEFAULT_MODEL,
        base_url=args.base_url,
        api_key=args.api_key,
        environ=dict(os.environ),
        timeout=args.timeout,
    )
    # None of the scripted run's sampling params: the model's own defaults (reasoning models
    # refuse a temperature other than 1).
    plan = RunPlan({}, MAX_TURNS, args.concurrency)
    batch = Batch(
        command=COMMAND,
        where=f"{endpoint.model} at {endpoint.shown()}",
        title=(
            f"{COMMAND}: {len(rows)} rollouts of {agent_loop.name!r} on "
            f"{endpoint.model} at {endpoint.shown()} ({args.dataset} x {args.repeat})"
        ),
    )
    run = forwarding_run(agent_loop, endpoint, concurrency=args.concurrency, prefix="demo")
    return execute(run, rows, plan, batch)
