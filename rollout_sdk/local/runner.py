"""The one runner of ``rollout-sdk demo`` and ``rollout-sdk test``: an agent over dataset rows
through the kit's real server and worker, with one report.

The kit's local server (the app with its in-process dispatcher) and a TrainGate side run on free
loopback ports for as long as a :class:`LocalRun` lasts. Each row is posted as an init, exactly
as TrainGate posts one; the rollout's chat calls and its final response go to the TrainGate side.
What differs between the commands is only that side: the demo's scripted stand-in
(:class:`rollout_sdk.local.demo.ScriptedTrainGate`), or the forwarder to a real endpoint
(:class:`rollout_sdk.local.forward.ForwardingTrainGate`: ``test`` and ``demo --base-url``).

Rows run ``concurrency`` at a time. A failure the TrainGate side calls systemic (``tripped``:
a refused key, an unknown model) stops the run: no more rows start, as v1 stopped early.

The server and the HTTP client are imported inside the functions that run them, so parsing a
command's options (and failing on a bad one) loads none of them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO, runtime_checkable

from rollout_sdk.local.progress import RowProgress
from rollout_sdk.local.report import (
    MISSING,
    REFUSED,
    STDOUT,
    RowOutcome,
    RunReport,
    fail,
    format_summary,
    outcome_of,
    write_output,
)

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from rollout_sdk.agent.loop import RolloutAgentLoop
    from rollout_sdk.local.dataset import RunRow
    from rollout_sdk.local.forward import Endpoint, Interactor
    from rollout_sdk.settings import RolloutSettings

#: v1 gave each test rollout this token budget.
MAX_TOKENS_TOTAL = 4096
#: Beyond the rollout deadline, how long to wait for a final response before calling it lost.
RESULT_MARGIN_SECONDS = 60.0


class Failure(Protocol):
    """What the TrainGate side saw end a rollout: a category and a message with its fix."""

    @property
    def kind(self) -> str: ...

    @property
    def message(self) -> str: ...


class TrainGateSide(Protocol):
    """The TrainGate the rollouts of a run talk to (its ASGI app is ``app``)."""

    callback_key: str

    @property
    def app(self) -> ASGIApp:
        """What the run serves on a loopback port as TrainGate."""

    def expect(self, rollout_id: str, completion_params: dict[str, Any]) -> None:
        """Get ready for ``rollout_id`` (before its init is posted)."""

    def set_tools(self, rollout_id: str, tools: list[dict[str, Any]]) -> None:
        """The tools ``rollout_id``'s init answered with."""

    async def result(self, rollout_id: str) -> dict[str, Any]:
        """``rollout_id``'s final response, once the kit has sent it."""

    def failure(self, rollout_id: str) -> Failure | None:
        """What ended ``rollout_id``'s last chat call, if it failed."""

    @property
    def tripped(self) -> Failure | None:
        """The failure every row would hit, once one was seen: the run stops."""


@runtime_checkable
class CountsCallbacks(Protocol):
    """A TrainGate side that keeps every final response it received (re-sends included)."""

    def callbacks(self) -> dict[str, int]:
        """How many final responses came for each rollout id."""


@dataclass(frozen=True)
class RunPlan:
    """How a run posts its rows: the init's fields, the concurrency, and how long it waits
    (``wait_seconds``: for the whole run, or None for each row's own deadline)."""

    completion_params: dict[str, Any]
    max_turns: int
    concurrency: int
    wait_seconds: float | None = None


def run_settings(
    base: RolloutSettings,
    *,
    concurrency: int,
    call_timeout: float | None = None,
    interactive: bool = False,
) -> RolloutSettings:
    """The kit's settings for a run: enough rollouts may run at once; the call to the local
    TrainGate outlasts ``call_timeout`` (the endpoint's, when there is one) or a pause of up to
    an hour (interactive); an interactive rollout has a day."""
    server_update: dict[str, Any] = {
        "max_concurrent_rollouts": max(base.server.max_concurrent_rollouts, concurrency)
    }
    if interactive:
        server_update["request_timeout_seconds"] = 24 * 3600.0
    update: dict[str, Any] = {"server": base.server.model_copy(update=server_update)}
    if interactive or call_timeout is not None:
        timeout = 3600.0 if interactive else min(3600.0, (call_timeout or 0.0) + 30)
        update["client"] = base.client.model_copy(update={"timeout_seconds": timeout})
    return base.model_copy(update=update)


class LocalRun:
    """The kit's local server and ``traingate``, on free loopback ports, for as long as the
    ``with`` block lasts. ``store`` is the server's (``memory`` or ``sqlite`` in ``state_dir``);
    rollouts are named ``{prefix}-{row index}``."""

    def __init__(
        self,
        agent_loop: RolloutAgentLoop,
        traingate: TrainGateSide,
        *,
        settings: RolloutSettings,
        prefix: str,
        store: str = "memory",
        state_dir: str | Path | None = None,
        debug_dir: str | None = None,
    ) -> None:
        self.agent_loop = agent_loop
        self.traingate = traingate
        self.settings = settings
        self.prefix = prefix
        self.store = store
        self.state_dir = state_dir if state_dir is not None else tempfile.gettempdir()
        self.debug_dir = debug_dir
        self.server_key = secrets.token_urlsafe(32)
        self._ids: Counter[int] = Counter()
        self.issued: set[str] = set()
        self._servers: list[Any] = []
        self.server_url = self.traingate_url = ""

    def __enter__(self) -> LocalRun:
        from rollout_sdk.local.server import build_local_app
        from rollout_sdk.testing.threads import ServerThread

        app = build_local_app(
            self.agent_loop,
            store=self.store,  # type: ignore[arg-type]
            state_dir=self.state_dir,
            api_keys=[self.server_key],
            settings=self.settings,
            debug_dir=self.debug_dir,
            docs=False,
        )
        try:
            for server_app in (self.traingate.app, app):
                server = ServerThread(server_app, interface="asgi3")
                self._servers.append(server)
                server.start()
        except BaseException:
            self.__exit__()
            raise
        self.traingate_url, self.server_url = (s.url for s in self._servers)
        return self

    def __exit__(self, kind: type[BaseException] | None = None, *_exc: object) -> None:
        if kind is KeyboardInterrupt:
            # Stopping mid-run drops the rollouts' open requests; uvicorn would print a
            # traceback for each, which says nothing the user does not already know.
            logging.getLogger("uvicorn.error").setLevel(logging.CRITICAL)
        for server in reversed(self._servers):
            server.stop()
        self._servers.clear()

    def rollout_id(self, row_index: int) -> str:
        """``{prefix}-N`` (v1's ``test-N``); ``-N.2`` and on when a row runs again."""
        self._ids[row_index] += 1
        runs = self._ids[row_index]
        name = f"{self.prefix}-{row_index}"
        name = name if runs == 1 else f"{name}.{runs}"
        self.issued.add(name)
        return name

    def init_body(self, rollout_id: str, row: RunRow, plan: RunPlan) -> dict[str, Any]:
        """The init TrainGate would post for ``row``."""
        return {
            "rollout_id": rollout_id,
            "server_url": self.traingate_url,
            "messages": row.messages,
            "completion_params": plan.completion_params,
            "max_turns": plan.max_turns,
            "max_tokens_total": MAX_TOKENS_TOTAL,
            "metadata": row.metadata,
            "api_key": self.traingate.callback_key,
        }

    async def run_row(
        self,
        client: Any,
        row: RunRow,
        plan: RunPlan,
        *,
        deadline: float | None = None,
        on_tools: Callable[[list[dict[str, Any]]], None] | None = None,
    ) -> RowOutcome:
        """Post ``row`` as an init and wait for its final response (until ``deadline``, a
        ``time.perf_counter()`` value, or the rollout's own deadline and a margin)."""
        import httpx

        rollout_id = self.rollout_id(row.row_index)
        self.traingate.expect(rollout_id, plan.completion_params)
        started = time.perf_counter()
        init_ms = 0.0

        def failed(status: str, message: str, category: str, code: int | None) -> RowOutcome:
            elapsed = (time.perf_counter() - started) * 1000
            return RowOutcome(
                row.row_index, False, status, message, elapsed, category=category,
                init_status=code, init_ms=init_ms or elapsed,
            )  # fmt: skip

        try:
            answer = await client.post(
                f"{self.server_url}/v1/rollout/init", json=self.init_body(rollout_id, row, plan)
            )
        except httpx.HTTPError as exc:
            message = f"the local rollout server did not answer the init: {exc}"
            return failed(REFUSED, message, "init", None)
        init_ms = (time.perf_counter() - started) * 1000
        if answer.status_code != 202:
            message = (
                f"the local rollout server refused the init ({answer.status_code}): "
                f"{answer.text[:300]}"
            )
            return failed(REFUSED, message, "init", answer.status_code)
        tools = list(answer.json().get("tools") or [])
        if on_tools is not None:
            on_tools(tools)
        self.traingate.set_tools(rollout_id, tools)
        wait = self.settings.server.request_timeout_seconds + RESULT_MARGIN_SECONDS
        if deadline is not None:
            wait = max(0.0, min(wait, deadline - time.perf_counter()))
        try:
            async with asyncio.timeout(wait):
                final = await self.traingate.result(rollout_id)
        except TimeoutError:
            return failed(MISSING, f"no final response within {wait:.3g} s", "lost", 202)
        seen = self.traingate.failure(rollout_id)
        return outcome_of(
            row.row_index,
            final,
            duration_ms=(time.perf_counter() - started) * 1000,
            init_ms=init_ms,
            failure=None if seen is None else (seen.kind, seen.message),
        )

    async def run_rows(
        self,
        rows: list[RunRow],
        plan: RunPlan,
        *,
        on_done: Callable[[RowOutcome], None] = lambda _o: None,
    ) -> RunReport:
        """Every row, ``plan.concurrency`` at a time, in order; none starts once the run
        tripped or its wait is over."""
        import httpx

        pending = iter(rows)
        outcomes: list[RowOutcome] = []
        async with httpx.AsyncClient(
            headers={"Authorization": f"Bearer {self.server_key}"}, timeout=60.0
        ) as client:
            # From here: making the client (its TLS context) is no part of the run's wait.
            started = time.perf_counter()
            deadline = None if plan.wait_seconds is None else started + plan.wait_seconds

            async def worker() -> None:
                for row in pending:
                    if self.traingate.tripped is not None:
                        return
                    if deadline is not None and time.perf_counter() >= deadline:
                        return
                    outcome = await self.run_row(client, row, plan, deadline=deadline)
                    outcomes.append(outcome)
                    on_done(outcome)

            await asyncio.gather(*(worker() for _ in range(min(plan.concurrency, len(rows)))))
        outcomes.sort(key=lambda o: o.row_index)
        tripped = self.traingate.tripped
        not_run = len(rows) - len(outcomes)
        return RunReport(
            outcomes=outcomes,
            total_duration_ms=(time.perf_counter() - started) * 1000,
            stop_reason=None if tripped is None else tripped.message,
            not_run=not_run,
            timed_out=deadline is not None
            and (any(o.status == MISSING for o in outcomes) or (not_run > 0 and tripped is None)),
        )

    def count_callbacks(self, report: RunReport) -> None:
        """Once the servers stopped: the duplicate and unexpected final responses, when the
        TrainGate side keeps them all."""
        if isinstance(self.traingate, CountsCallbacks):
            counts = self.traingate.callbacks()
            report.duplicates = sum(n - 1 for n in counts.values() if n > 1)
            report.unexpected = len(set(counts) - self.issued)


def forwarding_run(
    agent_loop: RolloutAgentLoop,
    endpoint: Endpoint,
    *,
    concurrency: int,
    prefix: str,
    debug_dir: str | None = None,
    interactor: Interactor | None = None,
) -> LocalRun:
    """A run whose chat calls go to ``endpoint`` through the forwarding TrainGate."""
    from rollout_sdk.local.forward import ForwardingTrainGate
    from rollout_sdk.settings import get_settings

    traingate = ForwardingTrainGate(
        endpoint, callback_key=secrets.token_urlsafe(32), interactor=interactor
    )
    settings = run_settings(
        get_settings(),
        concurrency=concurrency,
        call_timeout=endpoint.timeout,
        interactive=interactor is not None,
    )
    return LocalRun(
        agent_loop,
        traingate,
        settings=settings,
        prefix=prefix,
        debug_dir=debug_dir,
    )


@contextmanager
def quiet_kit_logs(debug: bool) -> Iterator[None]:
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


def agent_is_valid(agent_loop: RolloutAgentLoop) -> bool:
    """Validate ``agent_loop``; its report on stderr when it is not valid."""
    from rollout_sdk.agent.validation import format_report, validate_agent_loop

    report = validate_agent_loop(agent_loop)
    if not report.valid:
        print(format_report(report), file=sys.stderr)
    return report.valid


@dataclass(frozen=True)
class Batch:
    """What a batch run prints: the command (``rollout-sdk demo``), where the rollouts go (for
    the start-up line), the summary's title, whether the kit's logs show, and what it writes:
    ``output``, the ``-o`` file, or :data:`~rollout_sdk.local.report.STDOUT` for the results on
    ``results`` (the command's real stdout; default ``sys.stdout``) and the summary on stderr."""

    command: str
    where: str
    title: str
    quiet: bool = False
    debug: bool = False
    output: str | None = None
    results: TextIO | None = None


def _discard_stdout(stream: TextIO | None) -> None:
    """Point the closed pipe's descriptor at /dev/null, so Python's flush at exit does not
    complain of it (Python's documented answer to a SIGPIPE)."""
    with suppress(AttributeError, OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, (sys.stdout if stream is None else stream).fileno())
        os.close(devnull)


def execute(run: LocalRun, rows: list[RunRow], plan: RunPlan, batch: Batch) -> int:
    """Run ``rows`` in batch, print the progress and the summary, write ``batch.output``; the
    exit status: 0 when every row completed, reported once; 1 otherwise or when the run could
    not start; 130 when interrupted (the path ``demo`` and ``test`` share)."""
    from rollout_sdk.errors import ConfigurationError, ServeError, StoreError

    if not agent_is_valid(run.agent_loop):
        return 1
    progress = RowProgress(len(rows), quiet=batch.quiet)
    try:
        with quiet_kit_logs(batch.debug), run:
            if not batch.quiet:
                print(
                    f"{batch.command}: {len(rows)} rollouts of {run.agent_loop.name!r} on "
                    f"{batch.where}, {plan.concurrency} at a time",
                    file=sys.stderr,
                )
            try:
                report = asyncio.run(run.run_rows(rows, plan, on_done=progress))
            finally:
                progress.finish()
    except (ConfigurationError, ServeError, StoreError, RuntimeError) as exc:
        return fail(batch.command, str(exc))
    except KeyboardInterrupt:
        print(f"\n{batch.command}: interrupted; stopping the servers", file=sys.stderr)
        return 130
    run.count_callbacks(report)
    on_stdout = batch.output == STDOUT
    if not batch.quiet:
        # With -o -, stdout is the results' alone: the summary goes with the progress.
        print(format_summary(report, title=batch.title), file=sys.stderr if on_stdout else None)
    if batch.output:
        try:
            write_output(batch.output, report, stdout=batch.results)
        except BrokenPipeError:
            # The reader left (``| head``): nothing more to tell it, nor at the exit's flush.
            _discard_stdout(batch.results)
            return 1
        except OSError as exc:
            return fail(
                batch.command,
                f"cannot write the results to {batch.output}: {exc.strerror or exc}; give -o a "
                "file in a folder you can write to, or - for stdout",
            )
        if not batch.quiet and not on_stdout:
            print(f"\nresults written to {batch.output}")
    if report.stop_reason is not None and batch.quiet:
        print(f"{batch.command}: stopped early: {report.stop_reason}", file=sys.stderr)
    return 0 if report.ok else 1
