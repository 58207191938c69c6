"""The fault mix: every TrainGate fault profile at once on one local server."""

from __future__ import annotations

import asyncio
import itertools
import random
import secrets
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rollout_sdk.testing.standin import Call, Fault
from testkit.bodies import make_questions
from testkit.rigs import (
    LocalRig,
    records_of,
    rollout_body,
)
from testkit.scenarios.base import (
    Delivery,
    Row,
    Say,
    Scale,
    blocking,
    quiet,
    spread,
    tally,
)
from testkit.scenarios.waits import (
    drain,
    wait_reported,
    wait_terminal,
)


def _gaps_after(calls: Sequence[Call], status: int) -> list[float]:
    """Seconds between each answer with ``status`` and the next call of the same rollout."""
    ordered = sorted(calls, key=lambda c: c.arrived)
    return [
        later.arrived - call.answered
        for call, later in itertools.pairwise(ordered)
        if call.status == status
    ]


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
    #: The failure category the final response carries (None: no failure).
    category: str | None = None


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
        "ERROR naming the 503, category infrastructure, reward null; reported once; not run again",
        lambda i, t: [("chat", Fault(503, count=4))],
        status="ERROR",
        chat_attempts=4,
        error_contains="503",
        category="infrastructure",
    ),
    Profile(
        "chat-4xx",
        "local, chat: a final 400 on a call (the agent's ctx.chat raises OsmosisValidationError)",
        "not retried; ERROR naming the 400, category agent_error; reported once",
        lambda i, t: [("chat", Fault(400))],
        status="ERROR",
        chat_attempts=1,
        error_contains="400",
        category="agent_error",
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
    row.check_failure(item, profile.category, shown=record)
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


@blocking
async def run_fault_mix(rig: LocalRig, scale: Scale, say: Say = quiet) -> list[Row]:
    """Every fault profile, ``scale.per_profile`` rollouts each, all at once on one server."""
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
        items = row.count_rollouts(standin, mine)
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
            f"{tally(statuses)}; record {tally(states)}",
            f"callback attempts {spread(attempts)}, chat calls {spread(chats)}, "
            f"runs {spread(i.runs for i in items)}",
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
