"""Duplicates at init: identical inits, a reused key with another request, a reused rollout_id."""

from __future__ import annotations

import asyncio
from collections import Counter

from rollout_sdk.testing.standin import Fault
from testkit.rigs import (
    LocalRig,
    record_of,
    rollout_body,
    slow,
)
from testkit.scenarios.base import (
    TERMINAL,
    Row,
    Say,
    Scale,
    blocking,
    fresh_ids,
    quiet,
    spread,
)
from testkit.scenarios.waits import (
    in_state,
    is_reported,
    until,
)


async def _identical_inits(
    rig: LocalRig, scale: Scale, say: Say, inits_per_rollout: int = 50
) -> Row:
    row = Row(
        f"local: {inits_per_rollout} identical inits at once, and one after the report",
        f"1 run, 1 callback; {inits_per_rollout} identical 202 bodies",
    )
    ids = fresh_ids("dup", scale.duplicate_rollouts, width=3)
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
    items = row.count_rollouts(rig.standin, ids)
    for item in items:
        row.check(item.attempts == 1, f"{item.rollout_id}: {item.attempts} callbacks")
        row.check(item.runs == 1, f"{item.rollout_id}: {item.runs} runs")
        row.check(
            (item.body or {}).get("status") == "COMPLETED", f"{item.rollout_id}: not COMPLETED"
        )
        row.check_failure(item, None)
    row.measured = (
        f"{len(ids) * (inits_per_rollout + 1)} inits: {same_bodies}/{len(ids)} rollouts with "
        f"identical 202 bodies; runs {spread(i.runs for i in items)}, callbacks "
        f"{spread(i.attempts for i in items)} per rollout"
    )
    return row.shown(say)


async def _conflicting_key(rig: LocalRig, scale: Scale) -> Row:
    row = Row(
        "local: the same idempotency key with a different request",
        "409 naming the fields that differ; nothing started",
    )
    ids = fresh_ids("key", scale.conflicts)
    refusals = 0
    async with rig.client() as client:
        for rid in ids:
            other = f"{rid}-other"
            first = rollout_body(rid, rig.traingate_url, idempotency_key=f"k-{rid}")
            row.check(await rig.init_accepted(client, first), f"{rid}: first init refused")
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
            if not row.check(
                await record_of(client, other) is None, f"{other}: stored after a 409"
            ):
                row.counts["stored"] += 1
            await until(is_reported(rig.standin, rid), within=30, what=f"{rid} reported")
        await asyncio.sleep(1.0)
    items = row.count_rollouts(rig.standin, ids)
    for item in items:
        other = item.rollout_id + "-other"
        if not row.check(
            not rig.standin.calls_for("chat", other), f"{other}: run after its init got 409"
        ):
            row.counts["run"] += 1
        row.check_once(item)
        row.check_failure(item, None)
    row.measured = (
        f"{refusals}/{2 * len(ids)} conflicting inits answered 409 naming the fields; "
        f"{row.counts['stored']} stored and {row.counts['run']} run for them; the first "
        f"request reported once {sum(i.runs == 1 and i.attempts == 1 for i in items)}/{len(items)}"
    )
    return row


async def _rollout_id_reused(rig: LocalRig, scale: Scale) -> Row:
    row = Row(
        "local: the same rollout_id under another idempotency key (live, then reported)",
        "409 both times; the first rollout runs and reports once",
    )
    ids = fresh_ids("rid", scale.conflicts)
    refusals = 0
    async with rig.client() as client:
        for rid in ids:
            first = rollout_body(rid, rig.traingate_url, idempotency_key=f"a-{rid}")
            first["metadata"].update(slow(4, 0.2))
            second = {**first, "idempotency_key": f"b-{rid}"}
            row.check(await rig.init_accepted(client, first), f"{rid}: first init refused")
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
    items = row.count_rollouts(rig.standin, ids)
    for item in items:
        row.check_once(item)
        row.check_failure(item, None)
    once = sum(i.runs == 1 and i.attempts == 1 for i in items)
    row.measured = (
        f"{refusals}/{2 * len(ids)} answered 409; first rollouts reported once {once}/{len(items)}"
    )
    return row


@blocking
async def run_duplicates(rig: LocalRig, scale: Scale, say: Say = quiet) -> list[Row]:
    """Identical inits, a reused key with a different request, a reused rollout_id."""
    return [
        await _identical_inits(rig, scale, say),
        await _conflicting_key(rig, scale),
        await _rollout_id_reused(rig, scale),
    ]
