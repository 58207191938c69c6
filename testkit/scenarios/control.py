"""The control rig's scenarios: cancel, backpressure and the rollout deadline."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from rollout_sdk.testing.standin import OK, Call
from testkit.rigs import (
    LOCAL_REQUEST_TIMEOUT,
    LocalRig,
    path_of,
    record_of,
    rollout_body,
    slow,
)
from testkit.scenarios.base import (
    Row,
    Say,
    Scale,
    blocking,
    delivery,
    fresh_ids,
    quiet,
    spread,
    tally,
    tally_field,
)
from testkit.scenarios.waits import (
    past_turn,
    until,
    wait_reported,
    wait_terminal,
)


@blocking
async def run_cancel(rig: LocalRig, scale: Scale, say: Say = quiet) -> list[Row]:
    """Cancel running, queued and finished rollouts (needs the control rig's small limits)."""
    running_row = Row(
        "local: cancel a running rollout (POST /v1/rollout/{id}/cancel)",
        'stops before its next turn; reported once, ERROR "cancelled", category cancelled',
    )
    queued_row = Row(
        "local: cancel a rollout not started yet (queued)",
        'reported at once, ERROR "cancelled", category cancelled; never run',
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
    records: dict[str, dict[str, Any] | None] = {}
    async with rig.client() as client:
        unknown = await client.post(path_of(f"never-{tag}") + "/cancel")
        queued_row.check(unknown.status_code == 404, f"unknown id: {unknown.status_code}")
        for round_ in range(scale.cancel_rounds):
            running = [f"cancel-{tag}-{round_}-run-{i}" for i in range(scale.control_running)]
            queued = [f"cancel-{tag}-{round_}-queued-{i}" for i in range(scale.control_queued)]
            for rid in running:
                body = rollout_body(rid, rig.traingate_url, metadata=slow(60, 0.2))
                running_row.check(await rig.init_accepted(client, body), f"{rid}: init refused")
            await until(
                past_turn(rig.standin, running, 2),
                within=20,
                what="every running rollout past its second turn",
            )
            for rid in queued:
                body = rollout_body(rid, rig.traingate_url, metadata=slow(3, 0.1))
                queued_row.check(await rig.init_accepted(client, body), f"{rid}: init refused")
                record = await record_of(client, rid)
                state = record["state"] if record else "absent"
                queued_row.check(state == "ACCEPTED", f"{rid}: {state} before the cancel")
            for rid in queued:
                answer = await client.post(path_of(rid) + "/cancel")
                queued_row.check(answer.status_code == 202, f"{rid}: cancel {answer.status_code}")
            for rid in running:
                before = rig.standin.chat_count(rid)
                answer = await client.post(path_of(rid) + "/cancel")
                running_row.check(answer.status_code == 202, f"{rid}: cancel {answer.status_code}")
                turns_after.append(-before)
            await wait_reported(
                rig.standin, running + queued, within=30, label="cancelled", say=quiet
            )
            records.update(await wait_terminal(client, running + queued, within=10))
            for rid in running + queued:
                again = await client.post(path_of(rid) + "/cancel")
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
        for item in row.count_rollouts(rig.standin, ids):
            body = item.body or {}
            row.check(
                (body.get("status"), body.get("finish_reason")) == ("ERROR", "cancelled"),
                f"{item.rollout_id}: {body.get('status')} {body.get('finish_reason')}",
            )
            # Cancelled while queued, the record was settled unclaimed: attempt 0.
            row.check_failure(
                item,
                "cancelled",
                attempt=1 if row is running_row else 0,
                shown=records.get(item.rollout_id),
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
        f"cancel {spread(turns_after)} (1 allowed: a turn already in flight)"
    )
    queued_chats = sum(len(rig.standin.calls_for("chat", rid)) for rid in queued_ids)
    queued_row.counts.update({"chat calls": queued_chats, f"unknown id {unknown.status_code}": 1})
    queued_row.measured = (
        f"{queued_row.reported}/{len(queued_ids)} ERROR cancelled; {queued_chats} chat calls; "
        f"unknown id {unknown.status_code}"
    )
    finished_row.sent = finished_row.reported = len(running_ids) + len(queued_ids)
    again_sent = sum(delivery(rig.standin, rid).attempts - 1 for rid in running_ids + queued_ids)
    finished_row.counts.update({"409": conflicts, "callbacks after the 409": again_sent})
    finished_row.measured = (
        f"{conflicts}/{finished_row.sent} answered 409; {again_sent} callbacks after it"
    )
    say(f"   {running_row.measured}; {queued_row.measured}")
    return [running_row, queued_row, finished_row]


@blocking
async def run_backpressure(rig: LocalRig, scale: Scale, say: Say = quiet) -> Row:
    """More inits at once than the control rig holds; the driver honours Retry-After."""
    limit = scale.control_running + scale.control_queued
    row = Row(
        f"local: {scale.backpressure} inits at once past the limits "
        f"(MAX_CONCURRENT_ROLLOUTS={scale.control_running}, "
        f"MAX_QUEUED_ROLLOUTS={scale.control_queued})",
        "excess inits 429 with Retry-After, nothing stored for them; a driver honouring "
        "Retry-After gets every rollout reported once",
    )
    ids = fresh_ids("bp", scale.backpressure, width=3)
    refusals = 0
    stored = 0
    retry_afters: Counter[str] = Counter()
    peak = 0
    async with rig.client(scale.backpressure + 8) as client:

        async def drive(rid: str) -> None:
            nonlocal refusals, stored
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
                if not row.check(
                    await record_of(client, rid) is None, f"{rid}: stored after its 429"
                ):
                    stored += 1
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
        records = await wait_terminal(client, ids, within=10)
        await asyncio.sleep(1.5)
    for item in row.count_rollouts(rig.standin, ids):
        row.check_once(item)
        row.check(
            (item.body or {}).get("status") == "COMPLETED", f"{item.rollout_id}: not COMPLETED"
        )
        row.check_failure(item, None, shown=records.get(item.rollout_id))
    row.check(refusals > 0, "no init was refused: the limits were never reached")
    row.check(peak <= limit, f"{peak} rollouts held at once, over the limit of {limit}")
    row.measured = (
        f"{refusals} x 429 (Retry-After {tally(retry_afters)} s), {stored} stored; peak held "
        f"{peak} <= {limit}; {row.reported}/{len(ids)} COMPLETED after retries"
    )
    return row.shown(say)


def check_last_turn(row: Row, rollout_id: str, body: dict[str, Any], chat: Sequence[Call]) -> bool:
    """A timed-out rollout reports the conversation as of its last completed turn: what it sent
    with its last answered chat call, plus that call's reply. (When the deadline fell while an
    answer was on the wire, that turn never completed: the call before it is the last.)"""
    messages = body.get("final_messages") or []
    answered = [c for c in sorted(chat, key=lambda c: c.arrived) if c.outcome == OK and c.body]
    sent = [(c.body or {}).get("messages") for c in answered[-2:]]
    return row.check(
        bool(messages) and messages[-1].get("role") == "assistant" and messages[:-1] in sent,
        f"{rollout_id}: the reported conversation ({len(messages)} messages) is not the one of "
        f"its last completed turn ({len(answered)} turns answered)",
    )


@blocking
async def run_local_deadline(rig: LocalRig, scale: Scale, say: Say = quiet) -> Row:
    """Slow rollouts on the control rig, whose request timeout is ``LOCAL_REQUEST_TIMEOUT``."""
    row = Row(
        "local: a slow agent past OSMOSIS_ROLLOUT_SERVER_REQUEST_TIMEOUT_SECONDS="
        f"{LOCAL_REQUEST_TIMEOUT:g}",
        'stopped at the deadline; ERROR "timeout", category timeout, reward null, with the '
        "conversation as of the last completed turn; reported once",
    )
    ids = fresh_ids("late", scale.control_running)
    took: list[float] = []
    async with rig.client() as client:
        started = time.monotonic()
        for rid in ids:
            body = rollout_body(rid, rig.traingate_url, metadata=slow(200, 0.2))
            row.check(await rig.init_accepted(client, body), f"{rid}: init refused")
        await wait_reported(
            rig.standin, ids, within=LOCAL_REQUEST_TIMEOUT + 20, label="late", say=quiet
        )
        for rid in ids:
            first = min(c.answered for c in rig.standin.calls_for("completed", rid))
            took.append(first - started)
        records = await wait_terminal(client, ids, within=10)
        await asyncio.sleep(1.5)
    items = row.count_rollouts(rig.standin, ids)
    for item, seconds in zip(items, took, strict=True):
        body = item.body or {}
        rid = item.rollout_id
        row.check(
            (body.get("status"), body.get("finish_reason")) == ("ERROR", "timeout")
            and "OSMOSIS_ROLLOUT_SERVER_REQUEST_TIMEOUT_SECONDS" in str(body.get("error_message")),
            f"{rid}: {body.get('status')} {body.get('finish_reason')} {body.get('error_message')}",
        )
        row.check_failure(item, "timeout", shown=records.get(rid))
        row.check(
            LOCAL_REQUEST_TIMEOUT - 0.5 <= seconds <= LOCAL_REQUEST_TIMEOUT + 5,
            f"{rid}: reported {seconds:.1f} s after its init",
        )
        row.counts["as of the last turn"] += check_last_turn(
            row, rid, body, rig.standin.calls_for("chat", rid)
        )
        row.check_once(item)
    row.measured = (
        f"{tally_field(items, 'finish_reason')}; reported {spread(round(t, 1) for t in took)} s "
        f"after init; conversation as of the last completed turn "
        f"{row.counts['as of the last turn']}/{len(items)}"
    )
    return row.shown(say)
