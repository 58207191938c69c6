"""The fault-injection matrix: every rollout reported once, none run twice, under faults.

    python -m bench.reliability                  # the full matrix (make reliability)
    python -m bench.reliability --scale fast --out /tmp/reliability.md

Every row drives the real thing over loopback: a ``rollout-sdk serve`` subprocess on its SQLite
store, or the Lambda handlers of ``handler.py`` on moto's server, against the TrainGate stand-in
(:mod:`rollout_sdk.testing.standin`, served by uvicorn on 127.0.0.1), which fails on command. The stand-in
logs every call and how it ended, so each row counts, rollout by rollout:

- lost: TrainGate never received a final response;
- duplicated: a final response sent again after one attempt got its 2xx back, two different final
  responses, or a second run of the agent (each run sends its own ``run_id`` with its chat calls,
  so a retried call is never mistaken for a second run);
- re-sent after a lost acknowledgement: TrainGate had the response but the kit never saw the 2xx.
  Allowed, if identical; counted apart.

Every row also checks its expected outcome (status, record state, attempts, Retry-After honoured,
nothing stored...). The full matrix writes ``docs/reliability.md`` and exits 1 when any row has a
lost or duplicated rollout or a wrong outcome. ``tests/reliability`` runs the same scenarios at the
``fast`` scale in ``make test``. Every wait is bounded; every server and subprocess is stopped in a
``finally``; all traffic stays on 127.0.0.1; AWS is moto's server with fake credentials.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import random
import secrets
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Self, TypeVar
from urllib.parse import quote

import httpx

from bench.load import REPO_ROOT, HTTPSubprocess, ServerProcess, make_questions, subprocess_env
from rollout_sdk.testing.lifecycle import StartStop
from rollout_sdk.testing.standin import ACK_LOST, OK, REFUSED, Call, Fault, TrainGateStandIn
from rollout_sdk.testing.threads import ServerThread

T = TypeVar("T")

#: The suite's agent: the calculator with a run id per run, or a slow multi-turn loop.
AGENT = "tests.reliability.agents:agent_loop"
SERVER_KEY = "reliability-server-key"
AUTH = {"Authorization": f"Bearer {SERVER_KEY}"}
CALLBACK_KEY = "reliability-callback-key"
#: What events/init.json sends, and so what the AWS rig stores as the server key.
AWS_SERVER_KEY = "local-server-key"
EVENTS = REPO_ROOT / "events"
TEMPLATE = REPO_ROOT / "template.yaml"
TERMINAL = ("DELIVERED", "UNDELIVERABLE")
RESTART_WORDS = "server stopped while this rollout was in flight"
DEFAULT_OUT = REPO_ROOT / "docs" / "reliability.md"

Say = Callable[[str], None]


def quiet(_: str) -> None:
    """Progress that goes nowhere (the tests)."""


class ScenarioError(RuntimeError):
    """A scenario could not set up what it means to test, or a wait ran out."""


# ---------------------------------------------------------------------------- accounting


def _canonical(body: dict[str, Any] | None) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Delivery:
    """What TrainGate saw of one rollout's final response: the POSTs to /v1/rollout/completed,
    in the order they arrived, and the agent runs its chat calls show."""

    rollout_id: str
    calls: tuple[Call, ...]
    runs: int

    @property
    def attempts(self) -> int:
        """POSTs of the final response, whatever became of them."""
        return len(self.calls)

    @property
    def received(self) -> int:
        """POSTs TrainGate handled (acknowledged, or acknowledged and the 2xx lost)."""
        return sum(1 for c in self.calls if c.handled)

    @property
    def refused(self) -> int:
        """POSTs TrainGate answered with a final 4xx."""
        return sum(1 for c in self.calls if c.outcome == REFUSED)

    @property
    def reported(self) -> bool:
        """TrainGate received a final response (and took it, or refused it for good)."""
        return self.received > 0 or self.refused > 0

    @property
    def body(self) -> dict[str, Any] | None:
        """The final response TrainGate first received (or refused)."""
        for call in self.calls:
            if call.handled or call.outcome == REFUSED:
                return call.body
        return None

    @property
    def distinct_bodies(self) -> int:
        """Different final responses among every POST (a re-send must be identical)."""
        return len({_canonical(c.body) for c in self.calls if c.body is not None})

    def _first_ack(self) -> Call | None:
        acked = [c for c in self.calls if c.outcome == OK]
        return min(acked, key=lambda c: c.answered) if acked else None

    @property
    def sent_after_ack(self) -> int:
        """POSTs after one got its 2xx back (a second acknowledged one included)."""
        first = self._first_ack()
        if first is None:
            return 0
        return sum(1 for c in self.calls if c is not first and c.arrived >= first.answered) + sum(
            1
            for c in self.calls
            if c is not first and c.outcome == OK and c.arrived < first.answered
        )

    @property
    def sent_after_refusal(self) -> int:
        """POSTs after a final 4xx (which must not be retried)."""
        refused = [c.answered for c in self.calls if c.outcome == REFUSED]
        return sum(1 for c in self.calls if refused and c.arrived > min(refused))

    @property
    def duplicated(self) -> int:
        """Re-sends after a 2xx, plus one for two different final responses, plus extra runs."""
        different = 1 if self.distinct_bodies > 1 else 0
        return self.sent_after_ack + different + max(0, self.runs - 1)

    @property
    def resent_after_lost_ack(self) -> int:
        """POSTs after TrainGate took the response but the kit never saw the 2xx, up to the
        first acknowledged one."""
        lost = [c for c in self.calls if c.outcome == ACK_LOST]
        if not lost:
            return 0
        first_lost = min(lost, key=lambda c: c.arrived)
        ack = self._first_ack()
        cutoff = ack.arrived if ack is not None else float("inf")
        return sum(1 for c in self.calls if first_lost.arrived < c.arrived <= cutoff)

    def describe(self) -> str:
        """The POSTs in short, for failure messages."""
        shown = ", ".join(f"{c.outcome}:{c.status}" for c in self.calls) or "none"
        return f"{self.rollout_id}: POSTs [{shown}], runs {self.runs}"


def delivery(standin: TrainGateStandIn, rollout_id: str) -> Delivery:
    """``rollout_id``'s final-response POSTs as TrainGate saw them."""
    calls = sorted(standin.calls_for("completed", rollout_id), key=lambda c: c.arrived)
    return Delivery(rollout_id, tuple(calls), standin.runs(rollout_id))


@dataclass
class Row:
    """One line of the matrix, and the checks that failed for it."""

    fault: str
    expected: str
    measured: str = ""
    sent: int = 0
    reported: int = 0
    lost: int = 0
    duplicated: int = 0
    resent: int = 0
    failures: list[str] = field(default_factory=list)
    #: False when the row's rollouts are counted by another row too (not added to the total).
    distinct: bool = True
    #: The rollouts counted, by id (not shown in the table).
    ids: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures and self.lost == 0 and self.duplicated == 0

    def fail(self, message: str) -> None:
        """Record a wrong outcome."""
        self.failures.append(message)

    def check(self, condition: bool, message: str) -> bool:
        """Record ``message`` as a wrong outcome unless ``condition``."""
        if not condition:
            self.fail(message)
        return condition

    def count(self, deliveries: Iterable[Delivery]) -> None:
        """Add rollouts: sent, reported, lost, duplicated, re-sent after a lost ack."""
        for item in deliveries:
            self.sent += 1
            self.ids.append(item.rollout_id)
            if item.reported:
                self.reported += 1
            else:
                self.lost += 1
                self.fail(f"lost: {item.describe()}")
            if item.duplicated:
                self.duplicated += item.duplicated
                self.fail(f"duplicated: {item.describe()}, {item.distinct_bodies} bodies")
            self.resent += item.resent_after_lost_ack

    def summary(self) -> str:
        """The row and its failures, for an assertion message."""
        head = (
            f"{self.fault}: sent {self.sent}, reported {self.reported}, lost {self.lost}, "
            f"duplicated {self.duplicated}, re-sent {self.resent}; {self.measured}"
        )
        shown = self.failures[:8]
        more = len(self.failures) - len(shown)
        lines = [head, *(f"  - {f}" for f in shown)]
        if more:
            lines.append(f"  - ... and {more} more")
        return "\n".join(lines)


def _spread(values: Iterable[float | int]) -> str:
    items = sorted(values)
    if not items:
        return "-"
    low, high = items[0], items[-1]
    fmt = "{:g}"
    return fmt.format(low) if low == high else f"{fmt.format(low)}-{fmt.format(high)}"


def _tally(counter: Counter[str]) -> str:
    return ", ".join(f"{n} {k}" for k, n in counter.most_common()) or "none"


# ---------------------------------------------------------------------------- scale


@dataclass(frozen=True)
class Scale:
    """How many rollouts each scenario runs."""

    name: str
    per_profile: int
    concurrency: int
    client_timeout: float
    duplicate_rollouts: int
    conflicts: int
    cancel_rounds: int
    control_running: int
    control_queued: int
    backpressure: int
    kill_delivered: int
    kill_parked: int
    kill_running: int
    kill_finished: int
    kill_queued: int
    aws_environments: int
    aws_deliveries: int
    aws_init_rollouts: int
    aws_deaths: int
    aws_parked: int
    aws_deadlines: int
    deadline: float


#: ``make test``: every row, a few rollouts each.
FAST = Scale(
    name="fast",
    per_profile=2,
    concurrency=16,
    client_timeout=2.0,
    duplicate_rollouts=1,
    conflicts=1,
    cancel_rounds=1,
    control_running=2,
    control_queued=2,
    backpressure=12,
    kill_delivered=2,
    kill_parked=2,
    kill_running=2,
    kill_finished=2,
    kill_queued=2,
    aws_environments=3,
    aws_deliveries=1,
    aws_init_rollouts=1,
    aws_deaths=1,
    aws_parked=2,
    aws_deadlines=1,
    deadline=300.0,
)

#: ``make reliability``: over 1,000 rollouts under mixed faults.
FULL = Scale(
    name="full",
    per_profile=60,
    concurrency=40,
    client_timeout=5.0,
    duplicate_rollouts=20,
    conflicts=5,
    cancel_rounds=4,
    control_running=4,
    control_queued=4,
    backpressure=120,
    kill_delivered=20,
    kill_parked=10,
    kill_running=20,
    kill_finished=10,
    kill_queued=20,
    aws_environments=4,
    aws_deliveries=10,
    aws_init_rollouts=4,
    aws_deaths=4,
    aws_parked=10,
    aws_deadlines=4,
    deadline=600.0,
)

SCALES = {"fast": FAST, "full": FULL}


# ---------------------------------------------------------------------------- local rig


_OURS = ("OSMOSIS_ROLLOUT_", "ROLLOUT_SDK_")


def isolated_env(settings: dict[str, str]) -> dict[str, str]:
    """A child's environment: this one's (fake AWS credentials forced) without any outer
    ``OSMOSIS_ROLLOUT_*`` or ``ROLLOUT_SDK_*`` setting, plus ``settings``."""
    inherited = subprocess_env()
    kept = {k: v for k, v in inherited.items() if not k.upper().startswith(_OURS)}
    return {**kept, **settings}


def client_env(timeout: float) -> dict[str, str]:
    """Fast retries and a small client timeout, so faults cost little time."""
    return {
        "OSMOSIS_ROLLOUT_CLIENT_TIMEOUT_SECONDS": f"{timeout:g}",
        "OSMOSIS_ROLLOUT_CLIENT_RETRY_BASE_DELAY": "0.05",
        "OSMOSIS_ROLLOUT_CLIENT_RETRY_MAX_DELAY": "0.5",
    }


def fault_env(scale: Scale) -> dict[str, str]:
    """The fault-mix server: small client timeout, re-drive every second."""
    return {
        **client_env(scale.client_timeout),
        "ROLLOUT_SDK_REDRIVE_INTERVAL_SECONDS": "1",
        "OSMOSIS_ROLLOUT_SERVER_MAX_CONCURRENT_ROLLOUTS": "100",
    }


def control_env(scale: Scale) -> dict[str, str]:
    """The cancel and backpressure server: a few running, a few queued, then 429."""
    return {
        **client_env(10.0),
        "OSMOSIS_ROLLOUT_SERVER_MAX_CONCURRENT_ROLLOUTS": str(scale.control_running),
        "ROLLOUT_SDK_MAX_QUEUED_ROLLOUTS": str(scale.control_queued),
        "ROLLOUT_SDK_RETRY_AFTER_SECONDS": "1",
        "ROLLOUT_SDK_REDRIVE_INTERVAL_SECONDS": "1",
        "OSMOSIS_ROLLOUT_SERVER_REQUEST_TIMEOUT_SECONDS": f"{LOCAL_REQUEST_TIMEOUT:g}",
    }


#: The control rig's rollout deadline: past it, a rollout ends as ERROR "timeout".
LOCAL_REQUEST_TIMEOUT = 4.0


class LocalRig(StartStop):
    """A ``rollout-sdk serve`` subprocess (SQLite, in a fresh state folder) serving the suite's
    agent, and a TrainGate stand-in on another loopback port. ``kill`` and ``restart`` run the
    same command again in the same folder, on the same port."""

    def __init__(self, *, env: dict[str, str], name: str = "rig", keep_chat: bool = False) -> None:
        self.env = env
        self.name = name
        self.standin = TrainGateStandIn(callback_key=CALLBACK_KEY)
        #: Log chat bodies too (what a timed-out rollout's conversation is checked against).
        self.standin.keep_chat_bodies = keep_chat
        self.traingate = ServerThread(self.standin.app, timeout_graceful_shutdown=1)
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.state_dir = Path()
        self.server: HTTPSubprocess | None = None
        self.restarts = 0
        self.init_retries: Counter[str] = Counter()

    @property
    def url(self) -> str:
        if self.server is None:
            raise ScenarioError("the rig is not started")
        return self.server.url

    @property
    def traingate_url(self) -> str:
        return self.traingate.url

    def start(self) -> Self:
        self._tmp = tempfile.TemporaryDirectory(prefix=f"rollout-sdk-{self.name}-")
        self.state_dir = Path(self._tmp.name)
        try:
            self.traingate.start()
            self.server = ServerProcess(
                agent=AGENT,
                state_dir=self.state_dir,
                server_key=SERVER_KEY,
                env=self.env,
                log_level="warning",
            )
            self.server.env = isolated_env({**self.env, "ROLLOUT_SDK_SERVER_KEY": SERVER_KEY})
            self.server.start(timeout=60)
        except BaseException:
            self.stop()
            raise
        return self

    def kill(self) -> None:
        """SIGKILL the server: no shutdown, no cleanup, the lock released by the OS."""
        server = self.server
        if server is None or server.process is None:
            raise ScenarioError("no server to kill")
        server.process.send_signal(signal.SIGKILL)
        server.process.wait(10)
        server.stop()

    def restart(self) -> None:
        """Start the same command again, in the same folder (the restart sweep runs first)."""
        old = self.server
        if old is None:
            raise ScenarioError("no server to restart")
        self.restarts += 1
        self.server = HTTPSubprocess(
            old.argv,
            url=old.url,
            log_path=self.state_dir / f"server-restart-{self.restarts}.log",
            env=old.env,
            cwd=old.cwd,
        )
        self.server.start(timeout=60)

    async def post_init(self, client: httpx.AsyncClient, body: dict[str, Any]) -> httpx.Response:
        """POST an init as TrainGate does: the same init again when the connection fails
        (at most 5 times); ``init_retries`` counts them by rollout id."""
        for attempt in range(5):
            try:
                return await client.post("/v1/rollout/init", json=body)
            except httpx.TransportError:
                if attempt == 4:
                    raise
                self.init_retries[str(body.get("rollout_id"))] += 1
                await asyncio.sleep(0.2 * (attempt + 1))
        raise AssertionError("unreachable")  # pragma: no cover

    def client(self, connections: int = 64) -> httpx.AsyncClient:
        """An HTTP client for the server, with its key."""
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        return httpx.AsyncClient(base_url=self.url, headers=AUTH, timeout=60.0, limits=limits)

    def log_tail(self) -> str:
        return self.server.log_tail() if self.server is not None else "(no server)"

    def stop(self) -> None:
        try:
            if self.server is not None:
                self.server.stop()
        finally:
            self.standin.release()
            self.traingate.stop()
            if self._tmp is not None:
                self._tmp.cleanup()
                self._tmp = None


def rollout_body(
    rollout_id: str,
    server_url: str,
    *,
    question: str = "What is 6 * 7?",
    truth: str = "42",
    metadata: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """An init body for the suite's agent, calling TrainGate back with ``CALLBACK_KEY``."""
    return {
        "rollout_id": rollout_id,
        "server_url": server_url,
        "messages": [
            {"role": "system", "content": "You are a careful calculator. Use the tools."},
            {"role": "user", "content": question},
        ],
        "completion_params": {"temperature": 0.0, "max_tokens": 128},
        "metadata": {"ground_truth": truth, **(metadata or {})},
        "api_key": CALLBACK_KEY,
        **extra,
    }


def slow(turns: int, turn_delay: float) -> dict[str, Any]:
    """Metadata of a slow rollout (see tests/reliability/agents.py)."""
    return {"slow": {"turns": turns, "turn_delay": turn_delay}}


def _path(rollout_id: str) -> str:
    return f"/v1/rollout/{quote(rollout_id, safe='')}"


async def record_of(client: httpx.AsyncClient, rollout_id: str) -> dict[str, Any] | None:
    """The server's record of ``rollout_id`` (GET /v1/rollout/{id}); None on 404. A connection
    the server closed as it was reused (keep-alive) is tried again, a few times."""
    for attempt in range(5):
        try:
            response = await client.get(_path(rollout_id))
            break
        except httpx.TransportError:
            if attempt == 4:
                raise
            await asyncio.sleep(0.2 * (attempt + 1))
    if response.status_code == 404:
        return None
    response.raise_for_status()
    data: dict[str, Any] = response.json()
    return data


async def records_of(
    client: httpx.AsyncClient, rollout_ids: Sequence[str], *, parallel: int = 32
) -> dict[str, dict[str, Any] | None]:
    """Records of many rollouts, ``parallel`` requests at a time."""
    slots = asyncio.Semaphore(parallel)

    async def one(rollout_id: str) -> tuple[str, dict[str, Any] | None]:
        async with slots:
            return rollout_id, await record_of(client, rollout_id)

    return dict(await asyncio.gather(*(one(r) for r in rollout_ids)))


async def until(check: Callable[[], Awaitable[bool]], *, within: float, what: str) -> None:
    """Poll ``check`` until it holds; ScenarioError naming ``what`` after ``within`` s."""
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise ScenarioError(f"{what} did not happen within {within:g} s")
        await asyncio.sleep(0.05)


def holds(predicate: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    """A plain predicate as :func:`until` wants it."""

    async def check() -> bool:
        return predicate()

    return check


def is_reported(standin: TrainGateStandIn, rollout_id: str) -> Callable[[], Awaitable[bool]]:
    """For :func:`until`: TrainGate has a final response for ``rollout_id``."""
    return holds(lambda: delivery(standin, rollout_id).reported)


def in_state(
    client: httpx.AsyncClient, rollout_id: str, states: Sequence[str]
) -> Callable[[], Awaitable[bool]]:
    """For :func:`until`: the server's record of ``rollout_id`` is in one of ``states``."""

    async def check() -> bool:
        record = await record_of(client, rollout_id)
        return record is not None and record["state"] in states

    return check


def past_turn(
    standin: TrainGateStandIn, rollout_ids: Sequence[str], turns: int
) -> Callable[[], Awaitable[bool]]:
    """For :func:`until`: every rollout has had ``turns`` chat calls answered."""
    return holds(lambda: all(standin.chat_count(r) >= turns for r in rollout_ids))


async def wait_reported(
    standin: TrainGateStandIn,
    rollout_ids: Sequence[str],
    *,
    within: float,
    label: str,
    say: Say,
) -> None:
    """Until TrainGate has a final response (taken or refused) for every rollout."""
    deadline = time.monotonic() + within
    shown = -1.0
    while True:
        done = sum(1 for r in rollout_ids if delivery(standin, r).reported)
        now = time.monotonic()
        if now - shown >= 5 or done == len(rollout_ids):
            say(f"   {label}: {done}/{len(rollout_ids)} reported")
            shown = now
        if done == len(rollout_ids):
            return
        if now > deadline:
            raise ScenarioError(
                f"{label}: only {done} of {len(rollout_ids)} rollouts reported within {within:g} s"
            )
        await asyncio.sleep(0.1)


async def wait_terminal(
    client: httpx.AsyncClient, rollout_ids: Sequence[str], *, within: float
) -> dict[str, dict[str, Any] | None]:
    """Records once each is DELIVERED or UNDELIVERABLE (or as they are when ``within`` ends)."""
    deadline = time.monotonic() + within
    found: dict[str, dict[str, Any] | None] = {}
    waiting = list(rollout_ids)
    while waiting:
        fetched = await records_of(client, waiting)
        found.update(fetched)
        waiting = [r for r, rec in fetched.items() if rec is None or rec["state"] not in TERMINAL]
        if not waiting or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    return found


async def drain(standin: TrainGateStandIn, *, within: float = 20.0) -> None:
    """Until the stand-in holds no call (a hanging fault answers, or gives up, first)."""
    await until(
        holds(lambda: standin.pending_total() == 0), within=within, what="hanging calls ending"
    )


def _gaps_after(calls: Sequence[Call], status: int) -> list[float]:
    """Seconds between each answer with ``status`` and the next call of the same rollout."""
    ordered = sorted(calls, key=lambda c: c.arrived)
    return [
        later.arrived - call.answered
        for call, later in itertools.pairwise(ordered)
        if call.status == status
    ]


# ---------------------------------------------------------------------------- fault mix


FINAL_4XX = (400, 403, 404, 409, 422)
Injector = Callable[[int, float], list[tuple[str, Fault]]]


@dataclass(frozen=True)
class Profile:
    """One kind of fault in the mix: what is injected per rollout, and what must come of it."""

    key: str
    fault: str
    expected: str
    inject: Injector
    status: str = "COMPLETED"
    state: str = "DELIVERED"
    attempts: int = 1
    chat_attempts: int | None = 2
    resent: int = 0
    retry_after: float | None = None
    backoff_status: int | None = None
    error_contains: str | None = None


def _hang(timeout: float) -> float:
    return timeout + 1.0


def _late(timeout: float) -> float:
    return min(0.5, timeout / 3)


PROFILES: tuple[Profile, ...] = (
    Profile(
        "clean",
        "local: no fault (baseline, under the same load)",
        "COMPLETED, reward 1.0; 1 run, 1 callback",
        lambda i, t: [],
    ),
    Profile(
        "chat-5xx",
        "local, chat: a burst of 503, 500, 502 on one call",
        "retried with backoff; COMPLETED; 1 run, 1 callback",
        lambda i, t: [("chat", Fault(503)), ("chat", Fault(500)), ("chat", Fault(502))],
        chat_attempts=5,
        backoff_status=503,
    ),
    Profile(
        "chat-5xx-exhausted",
        "local, chat: 503 on all 4 attempts of a call (OSMOSIS_ROLLOUT_CLIENT_MAX_RETRIES=3)",
        "ERROR naming the 503, reported once; not run again",
        lambda i, t: [("chat", Fault(503, count=4))],
        status="ERROR",
        chat_attempts=4,
        error_contains="503",
    ),
    Profile(
        "chat-429",
        "local, chat: 2 x 429 with Retry-After: 1",
        "waits >= 1 s before each retry; COMPLETED",
        lambda i, t: [("chat", Fault(429, count=2, retry_after="1"))],
        chat_attempts=4,
        retry_after=1.0,
    ),
    Profile(
        "chat-timeout",
        "local, chat: no answer within OSMOSIS_ROLLOUT_CLIENT_TIMEOUT_SECONDS",
        "timed out, retried; COMPLETED",
        lambda i, t: [("chat", Fault(0, delay=_hang(t)))],
        chat_attempts=3,
    ),
    Profile(
        "chat-drop",
        "local, chat: 2 dropped connections",
        "retried; COMPLETED",
        lambda i, t: [("chat", Fault(0, count=2))],
        chat_attempts=4,
    ),
    Profile(
        "chat-slow",
        "local, chat: every turn answered late, within the timeout",
        "COMPLETED with no retry",
        lambda i, t: [("chat", Fault(200, count=2, delay=_late(t)))],
        chat_attempts=2,
    ),
    Profile(
        "cb-5xx",
        "local, callback: 503 then 500, then 2xx",
        "retried with backoff; delivered on attempt 3",
        lambda i, t: [("completed", Fault(503)), ("completed", Fault(500))],
        attempts=3,
        backoff_status=503,
    ),
    Profile(
        "cb-429",
        "local, callback: 429 with Retry-After: 1, then 2xx",
        "waits >= 1 s; delivered on attempt 2",
        lambda i, t: [("completed", Fault(429, retry_after="1"))],
        attempts=2,
        retry_after=1.0,
    ),
    Profile(
        "cb-timeout",
        "local, callback: no answer within the client timeout, then 2xx",
        "timed out, retried; delivered on attempt 2",
        lambda i, t: [("completed", Fault(0, delay=_hang(t)))],
        attempts=2,
    ),
    Profile(
        "cb-drop",
        "local, callback: 2 dropped connections, then 2xx",
        "retried; delivered on attempt 3",
        lambda i, t: [("completed", Fault(0, count=2))],
        attempts=3,
    ),
    Profile(
        "cb-slow",
        "local, callback: answered late, within the timeout",
        "delivered on attempt 1",
        lambda i, t: [("completed", Fault(200, delay=_late(t)))],
    ),
    Profile(
        "cb-4xx",
        "local, callback: a final 4xx (400, 403, 404, 409, 422 in turn)",
        "UNDELIVERABLE after 1 attempt; never retried, never re-driven",
        lambda i, t: [("completed", Fault(FINAL_4XX[i % len(FINAL_4XX)]))],
        state="UNDELIVERABLE",
    ),
    Profile(
        "cb-redrive",
        "local, callback: all 3 attempts fail (503)",
        "parked; the re-drive loop (every 1 s) delivers it, once",
        lambda i, t: [("completed", Fault(503, count=3))],
        attempts=4,
    ),
    Profile(
        "cb-redrive-twice",
        "local, callback: the worker's 3 attempts and the first re-drive's 3 fail",
        "parked twice; the second re-drive delivers it, once",
        lambda i, t: [("completed", Fault(503, count=6))],
        attempts=7,
    ),
    Profile(
        "cb-lost-ack",
        "local, callback: TrainGate takes it, the 2xx is lost (connection dropped)",
        "re-sent once, identical; DELIVERED",
        lambda i, t: [("completed", Fault(200, lose_ack=True))],
        attempts=2,
        resent=1,
    ),
    Profile(
        "cb-lost-ack-redrive",
        "local, callback: the 2xx of all 3 attempts is lost",
        "parked; re-driven; every re-send identical; DELIVERED",
        lambda i, t: [("completed", Fault(200, count=3, lose_ack=True))],
        attempts=4,
        resent=3,
    ),
    Profile(
        "combo",
        "local: chat 503 + dropped connection; callback 429 (Retry-After: 1) + lost 2xx",
        "COMPLETED; re-sent once after the lost 2xx, identical",
        lambda i, t: [
            ("chat", Fault(503)),
            ("chat", Fault(0)),
            ("completed", Fault(429, retry_after="1")),
            ("completed", Fault(200, lose_ack=True)),
        ],
        chat_attempts=4,
        attempts=3,
        resent=1,
        retry_after=1.0,
    ),
)


def _check_profile(
    row: Row,
    profile: Profile,
    item: Delivery,
    record: dict[str, Any] | None,
    chat: Sequence[Call],
) -> tuple[float | None, float | None]:
    """Check one rollout of ``profile``; returns (min wait after a 429, min backoff gap)."""
    rid = item.rollout_id
    body = item.body or {}
    row.check(
        body.get("status") == profile.status,
        f"{rid}: status {body.get('status')}, expected {profile.status}",
    )
    if profile.status == "COMPLETED":
        row.check(body.get("reward") == 1.0, f"{rid}: reward {body.get('reward')}, expected 1.0")
    if profile.error_contains is not None:
        row.check(
            profile.error_contains in str(body.get("error_message")),
            f"{rid}: error_message {body.get('error_message')!r} does not name "
            f"{profile.error_contains}",
        )
    state = record["state"] if record else "absent"
    row.check(state == profile.state, f"{rid}: record {state}, expected {profile.state}")
    row.check(
        item.attempts == profile.attempts,
        f"{rid}: {item.attempts} callback attempts, expected {profile.attempts}",
    )
    row.check(item.sent_after_refusal == 0, f"{rid}: re-sent after a final 4xx")
    row.check(
        item.resent_after_lost_ack == profile.resent,
        f"{rid}: re-sent {item.resent_after_lost_ack} times after a lost 2xx, "
        f"expected {profile.resent}",
    )
    if profile.chat_attempts is not None:
        row.check(
            len(chat) == profile.chat_attempts,
            f"{rid}: {len(chat)} chat calls, expected {profile.chat_attempts}",
        )
    calls = [*chat, *item.calls]
    waited: float | None = None
    if profile.retry_after is not None:
        gaps = _gaps_after(chat, 429) + _gaps_after(item.calls, 429)
        if row.check(bool(gaps), f"{rid}: no retry after a 429"):
            waited = min(gaps)
            row.check(
                waited >= profile.retry_after - 0.05,
                f"{rid}: retried {waited:.2f} s after a 429 with Retry-After "
                f"{profile.retry_after:g}",
            )
    backoff: float | None = None
    if profile.backoff_status is not None:
        gaps = _gaps_after(calls, profile.backoff_status)
        if row.check(bool(gaps), f"{rid}: no retry after a {profile.backoff_status}"):
            backoff = min(gaps)
            row.check(backoff >= 0.02, f"{rid}: retried {backoff:.3f} s after a 5xx (no backoff)")
    return waited, backoff


async def _fault_mix(rig: LocalRig, scale: Scale, say: Say) -> list[Row]:
    standin = rig.standin
    timeout = scale.client_timeout
    tag = secrets.token_hex(3)
    plan: list[tuple[Profile, str, dict[str, Any]]] = []
    questions = iter(make_questions(scale.per_profile * len(PROFILES), seed=4))
    for profile in PROFILES:
        for index in range(scale.per_profile):
            rid = f"mix-{tag}-{profile.key}-{index:03d}"
            question, truth = next(questions)
            for endpoint, fault in profile.inject(index, timeout):
                standin.inject(endpoint, replace(fault, rollout_id=rid))
            plan.append(
                (profile, rid, rollout_body(rid, rig.traingate_url, question=question, truth=truth))
            )
    random.Random(11).shuffle(plan)
    ids = [rid for _, rid, _ in plan]
    say(
        f"   {len(plan)} rollouts, {len(PROFILES)} fault profiles, {scale.concurrency} inits "
        f"in flight, client timeout {timeout:g} s"
    )
    refused: Counter[str] = Counter()
    slots = asyncio.Semaphore(scale.concurrency)
    async with rig.client(scale.concurrency + 8) as client:

        async def post(body: dict[str, Any]) -> None:
            async with slots:
                response = await rig.post_init(client, body)
            if response.status_code != 202:
                refused[f"{body['rollout_id']}: {response.status_code}"] += 1

        await asyncio.gather(*(post(body) for _, _, body in plan))
        within = 60 + 0.15 * len(plan)
        await wait_reported(standin, ids, within=within, label="mix", say=say)
        records = await wait_terminal(client, ids, within=30)
        # Room for anything late: a re-drive re-sending a delivered response, a retried 4xx.
        await asyncio.sleep(2.5)
        await drain(standin)
        records.update(await records_of(client, ids))

    rows: list[Row] = []
    for profile in PROFILES:
        row = Row(profile.fault, profile.expected)
        mine = [rid for p, rid, _ in plan if p is profile]
        items = [delivery(standin, rid) for rid in mine]
        row.count(items)
        waits: list[float] = []
        gaps: list[float] = []
        attempts: list[int] = []
        chats: list[int] = []
        statuses: Counter[str] = Counter()
        states: Counter[str] = Counter()
        for item in items:
            record = records.get(item.rollout_id)
            chat = standin.calls_for("chat", item.rollout_id)
            waited, gap = _check_profile(row, profile, item, record, chat)
            waits += [waited] if waited is not None else []
            gaps += [gap] if gap is not None else []
            attempts.append(item.attempts)
            chats.append(len(chat))
            statuses[str((item.body or {}).get("status"))] += 1
            states[record["state"] if record else "absent"] += 1
        for failure in refused:
            if any(failure.startswith(rid) for rid in mine):
                row.fail(f"init not accepted: {failure}")
        measured = [
            f"{_tally(statuses)}; record {_tally(states)}",
            f"callback attempts {_spread(attempts)}, chat calls {_spread(chats)}, "
            f"runs {_spread(i.runs for i in items)}",
        ]
        if waits:
            measured.append(f"waited >= {min(waits):.2f} s after 429")
        if gaps:
            measured.append(f"backoff >= {min(gaps):.3f} s")
        retried = sum(rig.init_retries[rid] for rid in mine)
        if retried:
            measured.append(f"{retried} inits re-sent after a connection error")
        row.measured = "; ".join(measured)
        rows.append(row)
    return rows


def run_fault_mix(rig: LocalRig, scale: Scale, say: Say = quiet) -> list[Row]:
    """Every fault profile, ``scale.per_profile`` rollouts each, all at once on one server."""
    return asyncio.run(_fault_mix(rig, scale, say))


# ---------------------------------------------------------------------------- bad input


@dataclass(frozen=True)
class BadInit:
    """One bad init: what is sent, the statuses that are right, what the answer must name."""

    what: str
    statuses: tuple[int, ...]
    names: str | None
    body: Any = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    raw_headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    probe: str | None = None


def _bad_inits(traingate_url: str, tag: str) -> list[BadInit]:
    def rid(n: int) -> str:
        return f"bad-{tag}-{n:02d}"

    def good(n: int, **changes: Any) -> dict[str, Any]:
        return {**rollout_body(rid(n), traingate_url), **changes}

    missing = good(3)
    del missing["messages"]
    big_metadata = {"padding": "x" * (1024 * 1024 + 1024)}
    big_body = [{"role": "user", "content": "y" * (7 * 1024 * 1024)}]
    return [
        BadInit(
            "malformed JSON",
            (400, 422),
            "body",
            content=b'{"rollout_id": "x", ',
            headers={"Content-Type": "application/json"},
        ),
        BadInit("a JSON array, not an object", (422,), "body", body=[good(2)]),
        BadInit("missing field messages", (422,), "messages", body=missing, probe=rid(3)),
        BadInit(
            "wrong type: max_turns a string",
            (422,),
            "max_turns",
            body=good(4, max_turns="ten"),
            probe=rid(4),
        ),
        BadInit(
            "wrong type: messages a string",
            (422,),
            "messages",
            body=good(5, messages="hi"),
            probe=rid(5),
        ),
        BadInit("blank rollout_id", (422,), "rollout_id", body=good(6, rollout_id="   ")),
        BadInit(
            "257-character rollout_id", (422,), "rollout_id", body=good(7, rollout_id="r" * 257)
        ),
        BadInit(
            "server_url not http(s)",
            (422,),
            "server_url",
            body=good(8, server_url="ftp://127.0.0.1:1"),
            probe=rid(8),
        ),
        BadInit(
            "server_url with no host",
            (422,),
            "server_url",
            body=good(9, server_url="http://"),
            probe=rid(9),
        ),
        BadInit(
            "server_url link-local (cloud metadata)",
            (422,),
            "server_url",
            body=good(10, server_url="http://169.254.169.254"),
            probe=rid(10),
        ),
        BadInit(
            "metadata over 1 MiB",
            (413,),
            "OSMOSIS_ROLLOUT_MAX_METADATA_SIZE_BYTES",
            body=good(11, metadata=big_metadata),
            probe=rid(11),
        ),
        BadInit(
            "body over 6 MiB",
            (413,),
            "ROLLOUT_SDK_MAX_BODY_BYTES",
            body=good(12, messages=big_body),
            probe=rid(12),
        ),
        BadInit(
            "content type text/plain",
            (415,),
            "application/json",
            content=json.dumps(good(13)).encode(),
            headers={"Content-Type": "text/plain"},
            probe=rid(13),
        ),
        BadInit(
            "no Authorization header",
            (401,),
            None,
            body=good(14),
            headers={"Authorization": ""},
            probe=rid(14),
        ),
        BadInit(
            "wrong server key",
            (401,),
            None,
            body=good(15),
            headers={"Authorization": "Bearer not-the-key"},
            probe=rid(15),
        ),
        BadInit(
            "malformed Authorization (Basic)",
            (401,),
            None,
            body=good(16),
            headers={"Authorization": "Basic dXNlcjpwYXNz"},
            probe=rid(16),
        ),
        BadInit(
            "non-ASCII bytes in Authorization",
            (401,),
            None,
            body=good(17),
            raw_headers=[(b"authorization", b"Bearer \xff\xfe\xe9t\xe9")],
            probe=rid(17),
        ),
    ]


async def _bad_input(rig: LocalRig) -> Row:
    row = Row(
        "local: bad input at init (malformed JSON, wrong types, bad ids and URLs, oversize, "
        "wrong content type, bad keys)",
        "4xx naming the field (401 before the body); nothing stored, run or reported",
        distinct=False,
    )
    tag = secrets.token_hex(3)
    cases = _bad_inits(rig.traingate_url, tag)
    codes: Counter[int] = Counter()
    async with rig.client() as client:
        for case in cases:
            headers = {k: v for k, v in {**AUTH, **case.headers}.items() if v}
            content = case.content
            if case.body is not None:
                content = json.dumps(case.body).encode()
                headers.setdefault("Content-Type", "application/json")
            request = client.build_request(
                "POST", "/v1/rollout/init", content=content, headers=headers
            )
            if not case.headers.get("Authorization", "x"):
                del request.headers["authorization"]
            if case.raw_headers:
                names = {name.lower() for name, _ in case.raw_headers}
                kept = [(k, v) for k, v in request.headers.raw if k.lower() not in names]
                request.headers = httpx.Headers([*kept, *case.raw_headers])
            response = await client.send(request)
            codes[response.status_code] += 1
            row.check(
                response.status_code in case.statuses,
                f"{case.what}: {response.status_code} {response.text[:200]}, "
                f"expected {case.statuses}",
            )
            if case.names is not None:
                row.check(
                    case.names in response.text,
                    f"{case.what}: the answer does not name {case.names}: {response.text[:200]}",
                )
            if case.probe is not None:
                row.check(
                    await record_of(client, case.probe) is None,
                    f"{case.what}: a record of {case.probe} was stored",
                )
    await asyncio.sleep(0.5)  # room for a run, if one had been started
    for case in cases:
        if case.probe is not None:
            calls = rig.standin.calls_for("chat", case.probe)
            calls += rig.standin.calls_for("completed", case.probe)
            row.check(not calls, f"{case.what}: {case.probe} reached TrainGate")
    row.sent = len(cases)
    row.measured = (
        f"{len(cases) - len(row.failures)}/{len(cases)} right: "
        + ", ".join(f"{n} x {code}" for code, n in sorted(codes.items()))
        + "; none stored or run"
    )
    return row


def run_bad_input(rig: LocalRig) -> Row:
    """Bad inits: each refused with the right 4xx, nothing stored, nothing run."""
    return asyncio.run(_bad_input(rig))


# ---------------------------------------------------------------------------- duplicates


async def _identical_inits(
    rig: LocalRig, scale: Scale, say: Say, inits_per_rollout: int = 50
) -> Row:
    row = Row(
        f"local: {inits_per_rollout} identical inits at once, and one after the report",
        f"1 run, 1 callback; {inits_per_rollout} identical 202 bodies",
    )
    tag = secrets.token_hex(3)
    ids = [f"dup-{tag}-{i:03d}" for i in range(scale.duplicate_rollouts)]
    same_bodies = 0
    async with rig.client(inits_per_rollout + 8) as client:
        for rid in ids:
            # A slow first turn keeps the first run going while the duplicates arrive.
            rig.standin.inject("chat", Fault(200, delay=0.2, rollout_id=rid))
            body = rollout_body(rid, rig.traingate_url, idempotency_key=f"key-{rid}")
            answers = await asyncio.gather(
                *(rig.post_init(client, body) for _ in range(inits_per_rollout))
            )
            codes = Counter(a.status_code for a in answers)
            row.check(codes == {202: inits_per_rollout}, f"{rid}: answers {dict(codes)}")
            contents = {a.content for a in answers}
            if row.check(len(contents) == 1, f"{rid}: {len(contents)} different 202 bodies"):
                same_bodies += 1
            await until(is_reported(rig.standin, rid), within=30, what=f"{rid} reported")
            await until(
                in_state(client, rid, TERMINAL), within=10, what=f"{rid} recorded as delivered"
            )
            late = await rig.post_init(client, body)
            row.check(
                late.status_code == 202 and late.content in contents,
                f"{rid}: a duplicate after the report answered {late.status_code}",
            )
        await asyncio.sleep(1.5)  # room for a second run or callback, had one been started
    items = [delivery(rig.standin, rid) for rid in ids]
    row.count(items)
    for item in items:
        row.check(item.attempts == 1, f"{item.rollout_id}: {item.attempts} callbacks")
        row.check(item.runs == 1, f"{item.rollout_id}: {item.runs} runs")
        row.check(
            (item.body or {}).get("status") == "COMPLETED", f"{item.rollout_id}: not COMPLETED"
        )
    row.measured = (
        f"{len(ids) * (inits_per_rollout + 1)} inits: {same_bodies}/{len(ids)} rollouts with "
        f"identical 202 bodies; runs {_spread(i.runs for i in items)}, callbacks "
        f"{_spread(i.attempts for i in items)} per rollout"
    )
    say(f"   {row.measured}")
    return row


async def _conflicting_key(rig: LocalRig, scale: Scale) -> Row:
    row = Row(
        "local: the same idempotency key with a different request",
        "409 naming the fields that differ; nothing started",
    )
    tag = secrets.token_hex(3)
    ids: list[str] = []
    refusals = 0
    async with rig.client() as client:
        for n in range(scale.conflicts):
            rid, other = f"key-{tag}-{n:02d}", f"key-{tag}-{n:02d}-other"
            key = f"k-{tag}-{n}"
            ids.append(rid)
            first = rollout_body(rid, rig.traingate_url, idempotency_key=key)
            row.check(
                (await rig.post_init(client, first)).status_code == 202,
                f"{rid}: first init refused",
            )
            variants = {
                ("metadata", "rollout_id"): {
                    **first,
                    "rollout_id": other,
                    "metadata": {"ground_truth": "43"},
                },
                ("messages",): {**first, "messages": [{"role": "user", "content": "What is 1+1?"}]},
            }
            for fields, changed in variants.items():
                answer = await rig.post_init(client, changed)
                detail = answer.json() if answer.status_code == 409 else {}
                named = all(f in str(detail.get("detail")) for f in fields)
                if row.check(
                    answer.status_code == 409 and named and detail.get("fields") == list(fields),
                    f"{rid}: a different request under its key answered {answer.status_code} "
                    f"{answer.text[:200]}, expected 409 naming {fields}",
                ):
                    refusals += 1
            row.check(await record_of(client, other) is None, f"{other}: stored after a 409")
            await until(is_reported(rig.standin, rid), within=30, what=f"{rid} reported")
        await asyncio.sleep(1.0)
    items = [delivery(rig.standin, rid) for rid in ids]
    row.count(items)
    for item in items:
        other = item.rollout_id + "-other"
        row.check(not rig.standin.calls_for("chat", other), f"{other}: run after its init got 409")
        row.check(item.runs == 1 and item.attempts == 1, f"{item.describe()}: not once")
    row.measured = (
        f"{refusals}/{2 * len(ids)} conflicting inits answered 409 naming the fields; "
        "nothing stored or run for them; the first request reported once"
    )
    return row


async def _rollout_id_reused(rig: LocalRig, scale: Scale) -> Row:
    row = Row(
        "local: the same rollout_id under another idempotency key (live, then reported)",
        "409 both times; the first rollout runs and reports once",
    )
    tag = secrets.token_hex(3)
    ids: list[str] = []
    refusals = 0
    async with rig.client() as client:
        for n in range(scale.conflicts):
            rid = f"rid-{tag}-{n:02d}"
            ids.append(rid)
            first = rollout_body(rid, rig.traingate_url, idempotency_key=f"a-{rid}")
            first["metadata"].update(slow(4, 0.2))
            second = {**first, "idempotency_key": f"b-{rid}"}
            row.check(
                (await rig.post_init(client, first)).status_code == 202,
                f"{rid}: first init refused",
            )
            live = await rig.post_init(client, second)
            record = await record_of(client, rid)
            row.check(
                record is not None and record["state"] in ("ACCEPTED", "RUNNING"),
                f"{rid}: not live when the second key arrived ({record})",
            )
            await until(in_state(client, rid, TERMINAL), within=30, what=f"{rid} delivered")
            after = await rig.post_init(client, second)
            for when, answer in (("live", live), ("reported", after)):
                if row.check(
                    answer.status_code == 409 and "rollout_id" in answer.text,
                    f"{rid} ({when}): another key answered {answer.status_code}, expected 409",
                ):
                    refusals += 1
        await asyncio.sleep(1.0)
    items = [delivery(rig.standin, rid) for rid in ids]
    row.count(items)
    for item in items:
        row.check(item.runs == 1 and item.attempts == 1, f"{item.describe()}: not once")
    row.measured = f"{refusals}/{2 * len(ids)} answered 409; each first rollout reported once"
    return row


def run_duplicates(rig: LocalRig, scale: Scale, say: Say = quiet) -> list[Row]:
    """Identical inits, a reused key with a different request, a reused rollout_id."""

    async def all_three() -> list[Row]:
        return [
            await _identical_inits(rig, scale, say),
            await _conflicting_key(rig, scale),
            await _rollout_id_reused(rig, scale),
        ]

    return asyncio.run(all_three())


# ---------------------------------------------------------------------------- cancel


async def _cancel(rig: LocalRig, scale: Scale, say: Say) -> list[Row]:
    running_row = Row(
        "local: cancel a running rollout (POST /v1/rollout/{id}/cancel)",
        'stops before its next turn; reported once, ERROR "cancelled"',
    )
    queued_row = Row(
        "local: cancel a rollout not started yet (queued)",
        'reported at once, ERROR "cancelled"; never run',
    )
    finished_row = Row(
        "local: cancel a rollout that already has its final response",
        "409; nothing sent again",
        distinct=False,
    )
    tag = secrets.token_hex(3)
    turns_after: list[int] = []
    running_ids: list[str] = []
    queued_ids: list[str] = []
    conflicts = 0
    async with rig.client() as client:
        unknown = await client.post(_path(f"never-{tag}") + "/cancel")
        queued_row.check(unknown.status_code == 404, f"unknown id: {unknown.status_code}")
        for round_ in range(scale.cancel_rounds):
            running = [f"cancel-{tag}-{round_}-run-{i}" for i in range(scale.control_running)]
            queued = [f"cancel-{tag}-{round_}-queued-{i}" for i in range(scale.control_queued)]
            for rid in running:
                body = rollout_body(rid, rig.traingate_url, metadata=slow(60, 0.2))
                running_row.check(
                    (await rig.post_init(client, body)).status_code == 202,
                    f"{rid}: init refused",
                )
            await until(
                past_turn(rig.standin, running, 2),
                within=20,
                what="every running rollout past its second turn",
            )
            for rid in queued:
                body = rollout_body(rid, rig.traingate_url, metadata=slow(3, 0.1))
                queued_row.check(
                    (await rig.post_init(client, body)).status_code == 202,
                    f"{rid}: init refused",
                )
                record = await record_of(client, rid)
                state = record["state"] if record else "absent"
                queued_row.check(state == "ACCEPTED", f"{rid}: {state} before the cancel")
            for rid in queued:
                answer = await client.post(_path(rid) + "/cancel")
                queued_row.check(answer.status_code == 202, f"{rid}: cancel {answer.status_code}")
            for rid in running:
                before = rig.standin.chat_count(rid)
                answer = await client.post(_path(rid) + "/cancel")
                running_row.check(answer.status_code == 202, f"{rid}: cancel {answer.status_code}")
                turns_after.append(-before)
            await wait_reported(
                rig.standin, running + queued, within=30, label="cancelled", say=quiet
            )
            await wait_terminal(client, running + queued, within=10)
            for rid in running + queued:
                again = await client.post(_path(rid) + "/cancel")
                if finished_row.check(
                    again.status_code == 409,
                    f"{rid}: cancel after the report answered {again.status_code}",
                ):
                    conflicts += 1
            running_ids += running
            queued_ids += queued
        # The queued jobs reach a free slot now, and must find nothing to run.
        await asyncio.sleep(1.5)
    for index, rid in enumerate(running_ids):
        turns_after[index] += rig.standin.chat_count(rid)
    for ids, row in ((running_ids, running_row), (queued_ids, queued_row)):
        items = [delivery(rig.standin, rid) for rid in ids]
        row.count(items)
        for item in items:
            body = item.body or {}
            row.check(
                (body.get("status"), body.get("finish_reason")) == ("ERROR", "cancelled"),
                f"{item.rollout_id}: {body.get('status')} {body.get('finish_reason')}",
            )
            row.check(item.attempts == 1, f"{item.describe()}: not one callback")
    for rid, extra in zip(running_ids, turns_after, strict=True):
        running_row.check(extra <= 1, f"{rid}: {extra} chat calls after the cancel")
        running_row.check(rig.standin.runs(rid) == 1, f"{rid}: {rig.standin.runs(rid)} runs")
    for rid in queued_ids:
        queued_row.check(
            rig.standin.chat_count(rid) == 0 and not rig.standin.calls_for("chat", rid),
            f"{rid}: ran after its cancel",
        )
    running_row.measured = (
        f"{running_row.reported}/{len(running_ids)} ERROR cancelled; chat calls after the "
        f"cancel {_spread(turns_after)} (1 allowed: a turn already in flight)"
    )
    queued_row.measured = (
        f"{queued_row.reported}/{len(queued_ids)} ERROR cancelled; 0 chat calls; unknown id 404"
    )
    finished_row.sent = finished_row.reported = len(running_ids) + len(queued_ids)
    finished_row.measured = f"{conflicts}/{finished_row.sent} answered 409; no second callback"
    say(f"   {running_row.measured}; {queued_row.measured}")
    return [running_row, queued_row, finished_row]


def run_cancel(rig: LocalRig, scale: Scale, say: Say = quiet) -> list[Row]:
    """Cancel running, queued and finished rollouts (needs the control rig's small limits)."""
    return asyncio.run(_cancel(rig, scale, say))


# ---------------------------------------------------------------------------- backpressure


async def _backpressure(rig: LocalRig, scale: Scale, say: Say) -> Row:
    limit = scale.control_running + scale.control_queued
    row = Row(
        f"local: {scale.backpressure} inits at once past the limits "
        f"(MAX_CONCURRENT_ROLLOUTS={scale.control_running}, "
        f"MAX_QUEUED_ROLLOUTS={scale.control_queued})",
        "excess inits 429 with Retry-After, nothing stored for them; a driver honouring "
        "Retry-After gets every rollout reported once",
    )
    tag = secrets.token_hex(3)
    ids = [f"bp-{tag}-{i:03d}" for i in range(scale.backpressure)]
    refusals = 0
    retry_afters: Counter[str] = Counter()
    peak = 0
    async with rig.client(scale.backpressure + 8) as client:

        async def drive(rid: str) -> None:
            nonlocal refusals
            body = rollout_body(rid, rig.traingate_url, metadata=slow(2, 0.1))
            for _ in range(200):
                answer = await rig.post_init(client, body)
                if answer.status_code == 202:
                    return
                if not row.check(answer.status_code == 429, f"{rid}: {answer.status_code}"):
                    return
                refusals += 1
                header = answer.headers.get("retry-after", "")
                retry_afters[header] += 1
                if not row.check(
                    header.isdigit() and int(header) >= 1, f"{rid}: Retry-After {header!r}"
                ):
                    return
                row.check(await record_of(client, rid) is None, f"{rid}: stored after its 429")
                await asyncio.sleep(int(header))
            row.fail(f"{rid}: still refused after 200 inits")

        async def sample() -> None:
            nonlocal peak
            while True:
                health = (await client.get("/health")).json()
                peak = max(peak, int(health.get("active_rollouts", 0)))
                await asyncio.sleep(0.02)

        sampler = asyncio.create_task(sample())
        try:
            await asyncio.gather(*(drive(rid) for rid in ids))
            await wait_reported(
                rig.standin, ids, within=60 + 0.5 * len(ids), label="backpressure", say=say
            )
        finally:
            sampler.cancel()
            await asyncio.gather(sampler, return_exceptions=True)
        await wait_terminal(client, ids, within=10)
        await asyncio.sleep(1.5)
    items = [delivery(rig.standin, rid) for rid in ids]
    row.count(items)
    for item in items:
        row.check(item.attempts == 1 and item.runs == 1, f"{item.describe()}: not once")
        row.check(
            (item.body or {}).get("status") == "COMPLETED", f"{item.rollout_id}: not COMPLETED"
        )
    row.check(refusals > 0, "no init was refused: the limits were never reached")
    row.check(peak <= limit, f"{peak} rollouts held at once, over the limit of {limit}")
    row.measured = (
        f"{refusals} x 429 (Retry-After {_tally(retry_afters)} s), none stored; peak held "
        f"{peak} <= {limit}; {row.reported}/{len(ids)} COMPLETED after retries"
    )
    say(f"   {row.measured}")
    return row


def run_backpressure(rig: LocalRig, scale: Scale, say: Say = quiet) -> Row:
    """More inits at once than the control rig holds; the driver honours Retry-After."""
    return asyncio.run(_backpressure(rig, scale, say))


# ---------------------------------------------------------------------------- deadline


def check_last_turn(row: Row, rollout_id: str, body: dict[str, Any], chat: Sequence[Call]) -> None:
    """A timed-out rollout reports the conversation as of its last completed turn: what it sent
    with its last answered chat call, plus that call's reply. (When the deadline fell while an
    answer was on the wire, that turn never completed: the call before it is the last.)"""
    messages = body.get("final_messages") or []
    answered = [c for c in sorted(chat, key=lambda c: c.arrived) if c.outcome == OK and c.body]
    sent = [(c.body or {}).get("messages") for c in answered[-2:]]
    row.check(
        bool(messages) and messages[-1].get("role") == "assistant" and messages[:-1] in sent,
        f"{rollout_id}: the reported conversation ({len(messages)} messages) is not the one of "
        f"its last completed turn ({len(answered)} turns answered)",
    )


async def _local_deadline(rig: LocalRig, scale: Scale, say: Say) -> Row:
    row = Row(
        "local: a slow agent past OSMOSIS_ROLLOUT_SERVER_REQUEST_TIMEOUT_SECONDS="
        f"{LOCAL_REQUEST_TIMEOUT:g}",
        'stopped at the deadline; ERROR "timeout" with the conversation as of the last '
        "completed turn; reported once",
    )
    tag = secrets.token_hex(3)
    ids = [f"late-{tag}-{i:02d}" for i in range(scale.control_running)]
    took: list[float] = []
    async with rig.client() as client:
        started = time.monotonic()
        for rid in ids:
            body = rollout_body(rid, rig.traingate_url, metadata=slow(200, 0.2))
            row.check(
                (await rig.post_init(client, body)).status_code == 202,
                f"{rid}: init refused",
            )
        await wait_reported(
            rig.standin, ids, within=LOCAL_REQUEST_TIMEOUT + 20, label="late", say=quiet
        )
        for rid in ids:
            first = min(c.answered for c in rig.standin.calls_for("completed", rid))
            took.append(first - started)
        await wait_terminal(client, ids, within=10)
        await asyncio.sleep(1.5)
    items = [delivery(rig.standin, rid) for rid in ids]
    row.count(items)
    for item, seconds in zip(items, took, strict=True):
        body = item.body or {}
        rid = item.rollout_id
        row.check(
            (body.get("status"), body.get("finish_reason")) == ("ERROR", "timeout")
            and "OSMOSIS_ROLLOUT_SERVER_REQUEST_TIMEOUT_SECONDS" in str(body.get("error_message")),
            f"{rid}: {body.get('status')} {body.get('finish_reason')} {body.get('error_message')}",
        )
        row.check(
            LOCAL_REQUEST_TIMEOUT - 0.5 <= seconds <= LOCAL_REQUEST_TIMEOUT + 5,
            f"{rid}: reported {seconds:.1f} s after its init",
        )
        check_last_turn(row, rid, body, rig.standin.calls_for("chat", rid))
        row.check(item.attempts == 1 and item.runs == 1, f"{item.describe()}: not once")
    row.measured = (
        f"{_tally(Counter(str((i.body or {}).get('finish_reason')) for i in items))}; reported "
        f"{_spread(round(t, 1) for t in took)} s after init; conversation as of the last completed turn"
    )
    say(f"   {row.measured}")
    return row


def run_local_deadline(rig: LocalRig, scale: Scale, say: Say = quiet) -> Row:
    """Slow rollouts on the control rig, whose request timeout is ``LOCAL_REQUEST_TIMEOUT``."""
    return asyncio.run(_local_deadline(rig, scale, say))


# ---------------------------------------------------------------------------- SIGKILL


def kill_env(scale: Scale) -> dict[str, str]:
    """The kill server: slots for the running and the finishing rollouts only, so the queued
    ones wait; a re-drive slow enough that a parked response is still parked at the kill."""
    return {
        **client_env(60.0),
        "OSMOSIS_ROLLOUT_SERVER_MAX_CONCURRENT_ROLLOUTS": str(
            scale.kill_running + scale.kill_finished
        ),
        "ROLLOUT_SDK_REDRIVE_INTERVAL_SECONDS": "6",
    }


async def _kill_restart(rig: LocalRig, scale: Scale, say: Say) -> list[Row]:
    standin = rig.standin
    tag = secrets.token_hex(3)
    groups: dict[str, list[str]] = {
        name: [f"kill-{tag}-{name}-{i:02d}" for i in range(count)]
        for name, count in (
            ("delivered", scale.kill_delivered),
            ("parked", scale.kill_parked),
            ("running", scale.kill_running),
            ("finished", scale.kill_finished),
            ("queued", scale.kill_queued),
        )
    }
    expected_state = {
        "delivered": "DELIVERED",
        "parked": "FINISHED",
        "running": "RUNNING",
        "finished": "FINISHED",
        "queued": "ACCEPTED",
    }
    hang = 8.0
    rows = {
        "delivered": Row(
            "local, SIGKILL + restart: rollouts delivered before the kill",
            "not sent again",
            distinct=True,
        ),
        "parked": Row(
            "local, SIGKILL + restart: response parked for re-drive at the kill",
            "the stored response (COMPLETED) re-driven once after the restart; not run again",
        ),
        "running": Row(
            "local, SIGKILL + restart: rollouts mid-run at the kill",
            "ERROR naming the restart, reported once by the start-up sweep; not run again",
        ),
        "finished": Row(
            "local, SIGKILL + restart: final response stored, callback in flight at the kill",
            "the stored response (COMPLETED) sent once by the sweep; not run again",
        ),
        "queued": Row(
            "local, SIGKILL + restart: accepted, queued, not started at the kill",
            "ERROR naming the restart, reported once; never run",
        ),
    }
    async with rig.client() as client:

        async def post(rid: str, **metadata: Any) -> None:
            answer = await rig.post_init(
                client, rollout_body(rid, rig.traingate_url, metadata=metadata)
            )
            if answer.status_code != 202:
                raise ScenarioError(f"{rid}: init answered {answer.status_code}")

        for rid in groups["delivered"]:
            await post(rid)
        await until(
            lambda: _all_in(client, groups["delivered"], ("DELIVERED",)),
            within=30,
            what="the first rollouts delivered",
        )
        for rid in groups["parked"]:
            standin.inject("completed", Fault(503, count=3, rollout_id=rid))
            await post(rid)
        await until(
            lambda: _all_parked(client, groups["parked"]),
            within=20,
            what="the parked rollouts parked",
        )
        for rid in groups["running"]:
            await post(rid, **slow(50, 0.2))
        for rid in groups["finished"]:
            standin.inject("completed", Fault(503, delay=hang, rollout_id=rid))
            await post(rid)
        await until(
            holds(
                lambda: (
                    all(standin.chat_count(r) >= 1 for r in groups["running"])
                    and all(standin.pending("completed", r) for r in groups["finished"])
                )
            ),
            within=20,
            what="every running rollout past a turn and every callback hanging",
        )
        for rid in groups["queued"]:
            await post(rid, **slow(3, 0.1))
        at_kill = await records_of(client, [r for ids in groups.values() for r in ids])
    for name, ids in groups.items():
        for rid in ids:
            record = at_kill.get(rid)
            state = record["state"] if record else "absent"
            if state != expected_state[name]:
                raise ScenarioError(
                    f"{rid} was {state} before the kill, not {expected_state[name]}"
                )

    say(f"   SIGKILL pid {rig.server.process.pid if rig.server and rig.server.process else '?'}")
    rig.kill()
    await asyncio.sleep(0.5)  # a chat call the dead server had in flight still lands
    chats = {r: standin.chat_count(r) for ids in groups.values() for r in ids}
    runs = {r: standin.runs(r) for ids in groups.values() for r in ids}
    restart_at = time.monotonic()
    rig.restart()
    say(f"   restarted ({time.monotonic() - restart_at:.1f} s, start-up sweep included)")
    everyone = [r for ids in groups.values() for r in ids]
    async with rig.client() as client:
        await wait_reported(standin, everyone, within=60, label="after restart", say=say)
        records = await wait_terminal(client, everyone, within=30)
        await asyncio.sleep(2.0)
        await drain(standin, within=hang + 5)
        records.update(await records_of(client, everyone))
    for name, ids in groups.items():
        row = rows[name]
        items = [delivery(standin, rid) for rid in ids]
        row.count(items)
        statuses: Counter[str] = Counter()
        for item in items:
            rid = item.rollout_id
            body = item.body or {}
            statuses[str(body.get("status"))] += 1
            row.check(item.received == 1, f"{item.describe()}: received {item.received} times")
            record = records.get(rid)
            row.check(
                record is not None and record["state"] == "DELIVERED",
                f"{rid}: record {record['state'] if record else 'absent'}",
            )
            row.check(standin.chat_count(rid) == chats[rid], f"{rid}: chat calls after the kill")
            row.check(standin.runs(rid) == runs[rid] <= 1, f"{rid}: {standin.runs(rid)} runs")
            if name in ("running", "queued"):
                row.check(
                    body.get("status") == "ERROR"
                    and RESTART_WORDS in str(body.get("error_message")),
                    f"{rid}: {body.get('status')} {body.get('error_message')!r}",
                )
            else:
                row.check(
                    body.get("status") == "COMPLETED" and body.get("reward") == 1.0,
                    f"{rid}: {body.get('status')}, expected the stored COMPLETED",
                )
        if name == "queued":
            row.check(all(runs[r] == 0 for r in ids), "a queued rollout had started")
        row.measured = (
            f"{expected_state[name]} at the kill; {_tally(statuses)}, received once each"
            + (" (before the kill; nothing after the restart)" if name == "delivered" else "")
            + "; chat calls unchanged since the kill"
        )
    return list(rows.values())


async def _all_in(
    client: httpx.AsyncClient, rollout_ids: Sequence[str], states: Sequence[str]
) -> bool:
    found = await records_of(client, rollout_ids)
    return all(r is not None and r["state"] in states for r in found.values())


async def _all_parked(client: httpx.AsyncClient, rollout_ids: Sequence[str]) -> bool:
    found = await records_of(client, rollout_ids)
    return all(
        r is not None and r["state"] == "FINISHED" and r["next_attempt_at"] is not None
        for r in found.values()
    )


def run_kill_restart(scale: Scale, say: Say = quiet) -> list[Row]:
    """SIGKILL ``rollout-sdk serve`` with rollouts in every state, start it again the same way."""
    with LocalRig(env=kill_env(scale), name="kill") as rig:
        try:
            return asyncio.run(_kill_restart(rig, scale, say))
        except ScenarioError as exc:
            raise ScenarioError(f"{exc}\nserver log:\n{rig.log_tail()}") from exc


# ---------------------------------------------------------------------------- AWS rig


AWS_SETTINGS = {
    **client_env(30.0),
    "POWERTOOLS_LOG_LEVEL": "CRITICAL",
    "DEADLINE_MARGIN_SECONDS": "1",
    "ROLLOUT_SDK_LEASE_SECONDS": "5",
    "ROLLOUT_SDK_HEARTBEAT_SECONDS": "1",
    "ROLLOUT_SDK_REDRIVE_INTERVAL_SECONDS": "1",
}

_LAMBDA_PROCESS = """
import json, sys
from rollout_sdk.local.invoke import LocalLambdaContext, import_handler
event_path, function, timeout, out_path = sys.argv[1:5]
handler = import_handler({})
with open(event_path, encoding="utf-8") as f:
    event = json.load(f)
context = LocalLambdaContext(function_name=function, timeout_seconds=float(timeout))
result = getattr(handler, function)(event, context)
with open(out_path, "w", encoding="utf-8") as f:
    json.dump(result, f)
"""


class LambdaProcess:
    """One Lambda execution environment as a process: ``handler.py`` imported afresh, one
    invocation, its result written to a file. ``kill`` is a crash."""

    def __init__(self, env: dict[str, str], function: str, event: Any, *, timeout: float) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="rollout-sdk-lambda-")
        folder = Path(self._dir.name)
        (folder / "event.json").write_text(json.dumps(event), encoding="utf-8")
        self._out = folder / "result.json"
        self._log: IO[bytes] = (folder / "log.txt").open("wb")
        self.process = subprocess.Popen(  # noqa: S603 - a fixed argv, no shell
            [
                sys.executable,
                "-c",
                _LAMBDA_PROCESS,
                str(folder / "event.json"),
                function,
                f"{timeout:g}",
                str(self._out),
            ],
            cwd=REPO_ROOT,
            env=isolated_env(env),
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def kill(self) -> None:
        """SIGKILL: the environment dies mid-invocation."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def result(self, timeout: float) -> dict[str, Any]:
        """The handler's return value; ScenarioError when it failed or took too long."""
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired as exc:
            self.kill()
            raise ScenarioError(f"the Lambda process took over {timeout:g} s") from exc
        if self.process.returncode != 0 or not self._out.exists():
            self._log.flush()
            log = (Path(self._dir.name) / "log.txt").read_text(errors="replace")[-2000:]
            raise ScenarioError(f"the Lambda process failed ({self.process.returncode}): {log}")
        data: dict[str, Any] = json.loads(self._out.read_text(encoding="utf-8"))
        return data

    def close(self) -> None:
        self.kill()
        self._log.close()
        self._dir.cleanup()


class AwsRig(StartStop):
    """The AWS path on one machine: moto's server on 127.0.0.1 provisioned from template.yaml,
    ``handler.py`` imported ``environments`` times (each import is an execution environment
    with its own event loop, clients and thread), Lambda processes for crashes, and a TrainGate
    stand-in. ``endpoint`` reuses a running moto server (the tests' session one)."""

    def __init__(
        self, *, endpoint: str | None = None, prefix: str = "reliability", environments: int = 3
    ) -> None:
        self.endpoint = endpoint
        self.prefix = prefix
        self.size = environments
        self.standin = TrainGateStandIn(callback_key=CALLBACK_KEY)
        self.standin.keep_chat_bodies = True
        self.traingate = ServerThread(self.standin.app, timeout_graceful_shutdown=1)
        self.env: dict[str, str] = {}
        self.modules: list[Any] = []
        self.pools: list[ThreadPoolExecutor] = []
        self._moto: Any = None
        self._environ: dict[str, str] | None = None
        self._sys_path: list[str] = []
        self._processes: list[LambdaProcess] = []

    @property
    def traingate_url(self) -> str:
        return self.traingate.url

    def start(self) -> Self:
        from rollout_sdk.local.emulator import EmbeddedMoto, load_template, provision
        from rollout_sdk.local.invoke import function_environment, import_handler

        self._environ = dict(os.environ)
        self._sys_path = list(sys.path)
        try:
            if self.endpoint is None:
                self._moto = EmbeddedMoto().start()
                self.endpoint = self._moto.endpoint_url
            resources = provision(
                self.endpoint,
                template_path=TEMPLATE,
                agent_loop=AGENT,
                server_key=AWS_SERVER_KEY,
                prefix=self.prefix,
            )
            template = load_template(TEMPLATE)
            self.env = {**function_environment(template, "ApiFunction", resources), **AWS_SETTINGS}
            if str(REPO_ROOT) not in sys.path:
                sys.path.insert(0, str(REPO_ROOT))
            for _ in range(self.size):
                module = import_handler(self.env)
                runtime = module.runtime
                # Build every lazy piece now, one environment at a time: boto3's default session
                # is not safe to build clients from in several threads at once.
                for client in ("dynamodb", "s3", "lambda_", "kms", "secretsmanager"):
                    getattr(runtime.clients, client)
                runtime.api_handler  # noqa: B018 - builds the app
                runtime.worker  # noqa: B018
                self.modules.append(module)
                self.pools.append(
                    ThreadPoolExecutor(
                        1, initializer=asyncio.set_event_loop, initargs=(runtime.loop,)
                    )
                )
            self.traingate.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for process in self._processes:
            process.close()
        self._processes.clear()
        for pool in self.pools:
            pool.shutdown(wait=True, cancel_futures=True)
        self.pools.clear()
        for module in self.modules:
            module.runtime.close()
        self.modules.clear()
        sys.modules.pop("handler", None)
        self.standin.release()
        self.traingate.stop()
        if self._moto is not None:
            self._moto.stop()
            self._moto = None
        if self._environ is not None:
            os.environ.clear()
            os.environ.update(self._environ)
            self._environ = None
        if self._sys_path:
            sys.path[:] = self._sys_path

    # ------------------------------------------------------------------ calls

    def submit(self, index: int, call: Callable[[Any], T]) -> Future[T]:
        """Run ``call(handler_module)`` in environment ``index``'s own thread."""
        module = self.modules[index % len(self.modules)]
        return self.pools[index % len(self.pools)].submit(call, module)

    def run(self, index: int, call: Callable[[Any], T], timeout: float = 120.0) -> T:
        """:meth:`submit` and wait."""
        return self.submit(index, call).result(timeout)

    def init(self, body: dict[str, Any], *, env: int = 0) -> tuple[int, str, list[Any]]:
        """POST the init through the API function: (status, body, worker events dispatched)."""
        return self.run(env, _init_call(body))

    def worker(self, event: Any, *, env: int = 0, timeout: float = 900.0) -> Future[Any]:
        """Deliver a worker event in environment ``env`` (a Lambda context of ``timeout`` s)."""
        from rollout_sdk.local.invoke import LocalLambdaContext

        def call(module: Any) -> Any:
            return module.worker(event, LocalLambdaContext("WorkerFunction", timeout))

        return self.submit(env, call)

    def failed(self, event: Any, *, env: int = 0) -> Future[Any]:
        """The on-failure destination record, to ``handler.worker_failed``."""
        from rollout_sdk.local.invoke import LocalLambdaContext

        def call(module: Any) -> Any:
            return module.worker_failed(event, LocalLambdaContext("WorkerFailureFunction", 300))

        return self.submit(env, call)

    def redrive(self, *, env: int = 0) -> Future[Any]:
        """The scheduled re-drive, to ``handler.redrive``."""
        from rollout_sdk.local.invoke import LocalLambdaContext, load_event

        event = load_event(EVENTS / "redrive.json")

        def call(module: Any) -> Any:
            return module.redrive(event, LocalLambdaContext("RedriveFunction", 600))

        return self.submit(env, call)

    def record(self, rollout_id: str) -> Any:
        """The rollout's record in DynamoDB (None when absent)."""

        def call(module: Any) -> Any:
            runtime = module.runtime
            return runtime.loop.run_until_complete(runtime.store.get(rollout_id, now=time.time()))

        return self.run(0, call)

    def process(self, function: str, event: Any, *, timeout: float = 900.0) -> LambdaProcess:
        """A fresh execution environment in its own process, running one invocation."""
        started = LambdaProcess(self.env, function, event, timeout=timeout)
        self._processes.append(started)
        return started


def failure_record(event: Any, condition: str = "RetriesExhausted") -> Any:
    """What Lambda sends the on-failure destination for ``event`` (events/worker-failure.json)."""
    from rollout_sdk.local.invoke import load_event

    record = load_event(EVENTS / "worker-failure.json")
    record["requestPayload"] = event
    record["requestContext"]["condition"] = condition
    record["responsePayload"] = {
        "errorType": "Runtime.ExitError",
        "errorMessage": "RequestId: 1 Error: Runtime exited with error: signal: killed",
    }
    return record


def _wait(predicate: Callable[[], bool], *, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise ScenarioError(f"{what} did not happen within {within:g} s")
        time.sleep(0.05)


def _aws_body(rig: AwsRig, rid: str, **metadata: Any) -> dict[str, Any]:
    return rollout_body(rid, rig.traingate_url, metadata=metadata)


def _accepted(rig: AwsRig, row: Row, rid: str, **metadata: Any) -> Any:
    """Init through the API function; the one worker event it dispatched."""
    status, _, dispatched = rig.init(_aws_body(rig, rid, **metadata))
    if status != 202 or len(dispatched) != 1:
        raise ScenarioError(f"{rid}: init answered {status} and dispatched {len(dispatched)}")
    return dispatched[0]


# ---------------------------------------------------------------------------- AWS scenarios


def run_aws_duplicate_deliveries(rig: AwsRig, scale: Scale, say: Say = quiet) -> Row:
    """The worker event delivered twice at once (two environments), then again afterwards."""
    row = Row(
        "AWS: the worker event delivered twice at once, and again after the report",
        "1 run, 1 callback; the other deliveries run nothing",
    )
    tag = secrets.token_hex(3)
    outcomes: Counter[str] = Counter()
    ids: list[str] = []
    for n in range(scale.aws_deliveries):
        rid = f"awsdup-{tag}-{n:02d}"
        ids.append(rid)
        rig.standin.inject("chat", Fault(200, delay=0.3, rollout_id=rid))
        event = _accepted(rig, row, rid)
        barrier = threading.Barrier(2)

        def both(module: Any, event: Any = event, barrier: threading.Barrier = barrier) -> Any:
            from rollout_sdk.local.invoke import LocalLambdaContext

            barrier.wait(10)
            return module.worker(event, LocalLambdaContext("WorkerFunction", 900))

        first, second = rig.submit(0, both), rig.submit(1, both)
        results = [first.result(60), second.result(60)]
        late = rig.worker(event, env=2).result(60)
        kinds = sorted(r["status"] for r in results)
        outcomes.update([*kinds, f"late {late['status']}"])
        row.check(kinds == ["done", "skipped"], f"{rid}: concurrent deliveries {results}")
        row.check(late["status"] == "skipped", f"{rid}: the late delivery {late}")
    items = [delivery(rig.standin, rid) for rid in ids]
    row.count(items)
    for item in items:
        row.check(item.attempts == 1 and item.runs == 1, f"{item.describe()}: not once")
        row.check((item.body or {}).get("status") == "COMPLETED", f"{item.rollout_id}: status")
    row.measured = f"deliveries: {_tally(outcomes)}; runs {_spread(i.runs for i in items)} each"
    say(f"   {row.measured}")
    return row


def run_aws_identical_inits(rig: AwsRig, scale: Scale, say: Say = quiet, inits: int = 50) -> Row:
    """``inits`` identical inits spread over the API environments at once; every worker event
    they dispatched delivered at once."""
    row = Row(
        f"AWS: {inits} identical inits through the API function, {rig.size} execution "
        "environments at once; every worker event they dispatched delivered, at once",
        f"{inits} identical 202 bodies; 1 run, 1 callback",
    )
    tag = secrets.token_hex(3)
    ids: list[str] = []
    dispatched_total = 0
    for n in range(scale.aws_init_rollouts):
        rid = f"awsinit-{tag}-{n:02d}"
        ids.append(rid)
        rig.standin.inject("chat", Fault(200, delay=0.2, rollout_id=rid))
        body = _aws_body(rig, rid) | {"idempotency_key": f"key-{rid}"}
        futures = [rig.submit(i, _init_call(body)) for i in range(inits)]
        answers = [f.result(120) for f in futures]
        codes = Counter(a[0] for a in answers)
        row.check(codes == {202: inits}, f"{rid}: answers {dict(codes)}")
        row.check(len({a[1] for a in answers}) == 1, f"{rid}: different 202 bodies")
        events = [e for a in answers for e in a[2]]
        dispatched_total += len(events)
        row.check(bool(events), f"{rid}: nothing dispatched")
        results = [r.result(120) for r in [rig.worker(e, env=i) for i, e in enumerate(events)]]
        done = [r for r in results if r["status"] == "done"]
        row.check(len(done) == 1, f"{rid}: {len(done)} deliveries ran it")
    items = [delivery(rig.standin, rid) for rid in ids]
    row.count(items)
    for item in items:
        row.check(item.attempts == 1 and item.runs == 1, f"{item.describe()}: not once")
    row.measured = (
        f"{len(ids) * inits} inits, all 202 with one body per rollout; {dispatched_total} worker "
        f"events dispatched, 1 ran per rollout"
    )
    say(f"   {row.measured}")
    return row


def _init_call(body: dict[str, Any]) -> Callable[[Any], tuple[int, str, list[Any]]]:
    from rollout_sdk.local.invoke import invoke, load_event

    event = load_event(EVENTS / "init.json")
    event["body"] = json.dumps(body)

    def call(module: Any) -> tuple[int, str, list[Any]]:
        done = invoke(module, "ApiFunction", event, timeout_seconds=29)
        return int(done.result["statusCode"]), str(done.result["body"]), done.dispatched

    return call


@dataclass
class _Death:
    """One way a worker process dies, and how the rollout is recovered."""

    row: Row
    finished: bool
    by_destination: bool
    ids: list[str] = field(default_factory=list)


def run_aws_worker_deaths(rig: AwsRig, scale: Scale, say: Say = quiet) -> list[Row]:
    """Worker processes SIGKILLed mid-run, and after storing their response (callback in
    flight); each rollout recovered by the on-failure destination or by a redelivered event."""
    deaths = [
        _Death(
            Row(
                "AWS: worker process SIGKILLed mid-run; on-failure destination "
                "(handler.worker_failed)",
                "ERROR naming the failure, once, when the lease runs out; not run again",
            ),
            finished=False,
            by_destination=True,
        ),
        _Death(
            Row(
                "AWS: worker process SIGKILLed mid-run; the event redelivered",
                "ERROR naming the failure, once, when the lease runs out; not run again",
            ),
            finished=False,
            by_destination=False,
        ),
        _Death(
            Row(
                "AWS: worker process SIGKILLed after storing its response (callback in flight); "
                "on-failure destination",
                "the stored response (COMPLETED) sent once; not run again",
            ),
            finished=True,
            by_destination=True,
        ),
        _Death(
            Row(
                "AWS: worker process SIGKILLed after storing its response (callback in flight); "
                "the event redelivered",
                "the stored response (COMPLETED) sent once; not run again",
            ),
            finished=True,
            by_destination=False,
        ),
    ]
    tag = secrets.token_hex(3)
    events: dict[str, Any] = {}
    for index, death in enumerate(deaths):
        for n in range(scale.aws_deaths):
            rid = f"awsdead-{tag}-{index}-{n:02d}"
            death.ids.append(rid)
            if death.finished:
                rig.standin.inject("completed", Fault(503, delay=10.0, rollout_id=rid))
                events[rid] = _accepted(rig, death.row, rid)
            else:
                events[rid] = _accepted(rig, death.row, rid, **slow(60, 0.2))
    processes = [rig.process("worker", event) for event in events.values()]

    def dying() -> bool:
        return all(
            rig.standin.pending("completed", rid) >= 1
            if death.finished
            else rig.standin.chat_count(rid) >= 1
            for death in deaths
            for rid in death.ids
        )

    try:
        _wait(dying, within=60, what="every worker process mid-run or mid-callback")
    finally:
        for process in processes:
            process.kill()
    time.sleep(0.5)  # a call the dead process had in flight still lands
    chats = {rid: rig.standin.chat_count(rid) for rid in events}
    killed_at = time.monotonic()
    futures: dict[str, Future[Any]] = {}
    for index, (rid, event) in enumerate(events.items()):
        death = next(d for d in deaths if rid in d.ids)
        if death.by_destination:
            futures[rid] = rig.failed(failure_record(event), env=index)
        else:
            futures[rid] = rig.worker(event, env=index)
    results = {rid: future.result(120) for rid, future in futures.items()}
    took = time.monotonic() - killed_at
    # Reported by that one recovery, before anything else is tried.
    first = {rid: delivery(rig.standin, rid).received for rid in events}
    states = {rid: getattr(rig.record(rid), "state", None) for rid in events}
    # Afterwards, neither another failure record nor a late event sends anything.
    for index, event in enumerate(events.values()):
        rig.failed(failure_record(event), env=index).result(60)
        rig.worker(event, env=index).result(60)
    time.sleep(1.0)
    for death in deaths:
        row = death.row
        items = [delivery(rig.standin, rid) for rid in death.ids]
        row.count(items)
        for item in items:
            rid = item.rollout_id
            body = item.body or {}
            row.check(item.received == 1, f"{item.describe()}: received {item.received} times")
            row.check(
                first[rid] == 1 and str(states[rid]) == "DELIVERED",
                f"{rid}: not reported by the recovery ({states[rid]}; handler said {results[rid]})",
            )
            row.check(rig.standin.chat_count(rid) == chats[rid], f"{rid}: chat after the kill")
            row.check(item.runs <= 1, f"{rid}: {item.runs} runs")
            record = rig.record(rid)
            row.check(
                record is not None and record.state.value == "DELIVERED",
                f"{rid}: record {record.state if record else None}; handler said {results[rid]}",
            )
            if death.finished:
                row.check(
                    body.get("status") == "COMPLETED" and body.get("reward") == 1.0,
                    f"{rid}: {body.get('status')}, expected the stored COMPLETED",
                )
            else:
                words = "RetriesExhausted" if death.by_destination else "stopped before reporting"
                row.check(
                    body.get("status") == "ERROR" and words in str(body.get("error_message")),
                    f"{rid}: {body.get('status')} {body.get('error_message')!r}, expected an "
                    f"ERROR naming {words!r}",
                )
        row.measured = (
            f"{_tally(Counter(str((i.body or {}).get('status')) for i in items))}, received "
            f"once each, within {took:.1f} s of the kill (lease 5 s); a second failure record "
            "and a late event sent nothing"
        )
    say(f"   {deaths[0].row.measured}")
    return [d.row for d in deaths]


def run_aws_parked_redrive(rig: AwsRig, scale: Scale, say: Say = quiet) -> Row:
    """Every callback attempt fails; the scheduled re-drive (twice at once) delivers once."""
    row = Row(
        "AWS: every callback attempt fails (3 x 503); handler.redrive, invoked twice at once",
        "parked with the key sealed by KMS; re-driven once; DELIVERED",
    )
    tag = secrets.token_hex(3)
    ids = [f"awspark-{tag}-{n:02d}" for n in range(scale.aws_parked)]
    for index, rid in enumerate(ids):
        rig.standin.inject("completed", Fault(503, count=3, rollout_id=rid))
        result = rig.worker(_accepted(rig, row, rid), env=index).result(120)
        row.check(result.get("state") == "FINISHED", f"{rid}: worker answered {result}")
    for rid in ids:
        record = rig.record(rid)
        row.check(
            record is not None
            and record.next_attempt_at is not None
            and record.sealed_key is not None
            and CALLBACK_KEY not in record.sealed_key,
            f"{rid}: not parked with a sealed key",
        )
    time.sleep(1.2)  # the re-drive interval
    passes = [rig.redrive(env=0), rig.redrive(env=1)]
    reports = [p.result(120) for p in passes]
    again = rig.redrive(env=0).result(120)
    time.sleep(0.5)
    items = [delivery(rig.standin, rid) for rid in ids]
    row.count(items)
    for item in items:
        row.check(item.attempts == 4, f"{item.describe()}: expected 3 failures and 1 delivery")
        record = rig.record(item.rollout_id)
        row.check(
            record is not None and record.state.value == "DELIVERED" and record.sealed_key is None,
            f"{item.rollout_id}: record {record.state if record else None} after the re-drive",
        )
    examined = [r["examined"] for r in reports]
    row.check(again["delivered"] == 0, f"a third re-drive delivered {again['delivered']}")
    row.measured = (
        f"{len(ids)} parked, sealed; two concurrent re-drives (examined {examined}) and a third; "
        f"POSTs per rollout {_spread(i.attempts for i in items)} (3 failed, 1 delivered)"
    )
    say(f"   {row.measured}")
    return row


def run_aws_deadline(rig: AwsRig, scale: Scale, say: Say = quiet) -> Row:
    """A slow agent on a worker with little time left: stopped before the time runs out."""
    budget = 1.5
    margin = float(AWS_SETTINGS["DEADLINE_MARGIN_SECONDS"])
    row = Row(
        f"AWS: a slow agent with {margin + budget:g} s of Lambda time left "
        f"(DEADLINE_MARGIN_SECONDS={margin:g})",
        'stopped before the time runs out; ERROR "timeout" with the conversation as of the '
        "last completed turn",
    )
    tag = secrets.token_hex(3)
    ids = [f"awsslow-{tag}-{n:02d}" for n in range(scale.aws_deadlines)]
    events = [_accepted(rig, row, rid, **slow(60, 0.2)) for rid in ids]
    elapsed: list[float] = []

    def timed(event: Any) -> Callable[[Any], tuple[Any, float]]:
        def call(module: Any) -> tuple[Any, float]:
            from rollout_sdk.local.invoke import LocalLambdaContext

            started = time.monotonic()
            result = module.worker(event, LocalLambdaContext("WorkerFunction", margin + budget))
            return result, time.monotonic() - started

        return call

    futures = [rig.submit(i, timed(e)) for i, e in enumerate(events)]
    for rid, future in zip(ids, futures, strict=True):
        result, took = future.result(60)
        elapsed.append(took)
        row.check(took < margin + budget, f"{rid}: returned after {took:.2f} s, past the time")
        row.check(result.get("state") == "DELIVERED", f"{rid}: {result}")
    items = [delivery(rig.standin, rid) for rid in ids]
    row.count(items)
    for item in items:
        body = item.body or {}
        row.check(
            (body.get("status"), body.get("finish_reason")) == ("ERROR", "timeout"),
            f"{item.rollout_id}: {body.get('status')} {body.get('finish_reason')}",
        )
        check_last_turn(row, item.rollout_id, body, rig.standin.calls_for("chat", item.rollout_id))
    row.measured = (
        f"{_tally(Counter(str((i.body or {}).get('finish_reason')) for i in items))}; handler "
        f"returned after {_spread(round(e, 2) for e in elapsed)} s of {margin + budget:g} s; "
        "conversation as of the last completed turn"
    )
    say(f"   {row.measured}")
    return row


# ---------------------------------------------------------------------------- the matrix


@contextmanager
def _section(rows: list[Row], title: str, say: Say) -> Iterator[None]:
    say(f"== {title}")
    started = time.monotonic()
    try:
        yield
    except Exception as exc:  # a scenario that crashed is a failed row, not a crashed run
        rows.append(
            Row(title, "the scenario runs", f"crashed: {type(exc).__name__}", failures=[str(exc)])
        )
        say(f"   CRASHED: {type(exc).__name__}: {exc}")
    say(f"   ({time.monotonic() - started:.1f} s)")


def run_matrix(scale: Scale, *, say: Say = quiet) -> list[Row]:
    """Every scenario at ``scale``; a crashed scenario becomes a failed row."""
    rows: list[Row] = []
    with (
        _section(rows, "local server: TrainGate faults under load", say),
        LocalRig(env=fault_env(scale), name="faults") as rig,
    ):
        rows += run_fault_mix(rig, scale, say)
        say("== local server: duplicates")
        rows += run_duplicates(rig, scale, say)
        say("== local server: bad input")
        rows.append(run_bad_input(rig))
    with (
        _section(rows, "local server: cancel, backpressure, deadline", say),
        LocalRig(env=control_env(scale), name="control", keep_chat=True) as rig,
    ):
        rows += run_cancel(rig, scale, say)
        rows.append(run_backpressure(rig, scale, say))
        say("== local server: the rollout deadline")
        rows.append(run_local_deadline(rig, scale, say))
    with _section(rows, "local server: SIGKILL in the middle of rollouts, restart", say):
        rows += run_kill_restart(scale, say)
    with (
        _section(rows, "AWS path: handler.py on moto's server", say),
        AwsRig(environments=scale.aws_environments) as aws,
    ):
        rows.append(run_aws_duplicate_deliveries(aws, scale, say))
        rows.append(run_aws_identical_inits(aws, scale, say))
        rows += run_aws_worker_deaths(aws, scale, say)
        rows.append(run_aws_parked_redrive(aws, scale, say))
        rows.append(run_aws_deadline(aws, scale, say))
    return rows


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def machine() -> str:
    """This machine in one line: CPU model and count, OS, Python."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{os.cpu_count()} x {model}; {platform.system()} {platform.release()}; "
        f"Python {platform.python_version()}"
    )


def totals(rows: Sequence[Row]) -> dict[str, int]:
    """Sums over the rows whose rollouts no other row counts."""
    counted = [r for r in rows if r.distinct]
    return {
        "sent": sum(r.sent for r in counted),
        "reported": sum(r.reported for r in counted),
        "lost": sum(r.lost for r in rows),
        "duplicated": sum(r.duplicated for r in rows),
        "resent": sum(r.resent for r in counted),
        "failed_rows": sum(1 for r in rows if not r.ok),
    }


def render(
    rows: Sequence[Row], *, command: str, scale: Scale, seconds: float, when: datetime
) -> str:
    """``docs/reliability.md``: the table, the command, the date and the machine."""
    sums = totals(rows)
    verdict = "PASS" if sums["failed_rows"] == 0 else f"FAIL ({sums['failed_rows']} rows)"
    lines = [
        "# Reliability matrix",
        "",
        "<!-- Generated by `make reliability` (python -m bench.reliability); do not edit. -->",
        "",
        f"- Command: `{command}` (scale `{scale.name}`)",
        f"- Date: {when.strftime('%Y-%m-%d %H:%M UTC')}; run time {seconds:.0f} s",
        f"- Machine: {machine()}",
        f"- Result: **{verdict}**: {sums['sent']} rollouts, {sums['reported']} reported, "
        f"{sums['lost']} lost, {sums['duplicated']} duplicated, {sums['resent']} re-sent after "
        "a lost acknowledgement",
        "",
        "Definitions (issue 4): *lost*: TrainGate never received a final response. "
        "*Duplicated*: a final response sent again after one attempt got a 2xx, two different "
        "final responses, or an agent run twice for one rollout (each run sends its own "
        "`run_id` with its chat calls, so a retried call is not a second run). *Re-sent after "
        "a lost acknowledgement*: TrainGate took the response but the kit never saw the 2xx "
        "(the stand-in dropped the connection after taking it); allowed, identical, counted "
        "apart. *Reported* counts rollouts TrainGate received a final response for (a final "
        "4xx included: TrainGate got it and refused it).",
        "",
        "Local rows run `rollout-sdk serve` (SQLite store) as a subprocess; AWS rows run "
        "`handler.py` against moto's server, in several imported execution environments and "
        "in subprocesses for crashes. TrainGate is `rollout_sdk.testing.standin` under uvicorn. All on "
        "127.0.0.1. Settings: client timeout "
        f"{scale.client_timeout:g} s under the TrainGate faults, retry delays 0.05-0.5 s, "
        "re-drive every 1 s (every 6 s on the server that is killed); AWS: lease 5 s, heartbeat "
        "1 s, DEADLINE_MARGIN_SECONDS 1.",
        "",
        "| Fault | Expected outcome | Measured outcome | Sent | Reported | Lost | Duplicated "
        "| Re-sent after lost ack |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        measured = row.measured if row.ok else f"**FAIL** {row.measured}: {row.failures[0]}"
        lines.append(
            f"| {_cell(row.fault)} | {_cell(row.expected)} | {_cell(measured)} | {row.sent} "
            f"| {row.reported} | {row.lost} | {row.duplicated} | {row.resent} |"
        )
    lines += [
        f"| **Total** (distinct rollouts) | 0 lost, 0 duplicated | {verdict} | {sums['sent']} "
        f"| {sums['reported']} | {sums['lost']} | {sums['duplicated']} | {sums['resent']} |",
        "",
        "Rows that reuse another row's rollouts (bad input: inits, not rollouts; a cancel "
        "after the report) are left out of the total's sent and reported.",
        "",
    ]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.reliability",
        description="Run the fault-injection matrix against the real local server and Lambda "
        "handlers on loopback; write the table; exit 1 if any rollout was lost or duplicated "
        "or any outcome was wrong.",
    )
    parser.add_argument("--scale", choices=sorted(SCALES), default="full")
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"markdown output (default {DEFAULT_OUT})"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    scale = SCALES[args.scale]
    command = shlex.join(["python", "-m", "bench.reliability", *(argv or sys.argv[1:])])
    if os.environ.get("MAKELEVEL"):  # run by make
        command = f"make reliability ({command})"
    began = time.monotonic()
    when = datetime.now(UTC)

    def say(message: str) -> None:
        print(f"[{time.monotonic() - began:6.1f}s] {message}", file=sys.stderr, flush=True)

    say(f"reliability matrix, scale {scale.name} (deadline {scale.deadline:g} s)")
    try:
        rows = run_matrix(scale, say=say)
    except KeyboardInterrupt:
        print("bench.reliability: interrupted", file=sys.stderr)
        return 130
    seconds = time.monotonic() - began
    if seconds > scale.deadline:
        rows.append(
            Row(
                "the whole matrix",
                f"finishes within {scale.deadline:g} s",
                f"took {seconds:.0f} s",
                failures=["over the deadline"],
                distinct=False,
            )
        )
    text = render(rows, command=command, scale=scale, seconds=seconds, when=when)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(text)
    for row in rows:
        if not row.ok:
            print(f"FAIL {row.summary()}", file=sys.stderr)
    sums = totals(rows)
    say(
        f"{sums['sent']} rollouts, {sums['lost']} lost, {sums['duplicated']} duplicated, "
        f"{sums['failed_rows']} failed rows; written to {args.out}"
    )
    return 0 if sums["failed_rows"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
