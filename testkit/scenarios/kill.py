"""SIGKILL ``rollout-sdk serve`` with rollouts in every state; start it again the same way."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import httpx

from rollout_sdk.testing.standin import Fault
from testkit.rigs import (
    LocalRig,
    client_env,
    records_of,
    rollout_body,
    slow,
)
from testkit.scenarios.base import (
    RESTART_WORDS,
    Row,
    Say,
    Scale,
    ScenarioError,
    quiet,
    tally,
)
from testkit.scenarios.waits import (
    drain,
    holds,
    until,
    wait_reported,
    wait_terminal,
)


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
    # What each group's final response carries: the sweep settles a RUNNING record as a worker
    # lost, an ACCEPTED one (never claimed: attempt 0) as never started; a stored response has
    # none.
    expected_category = {"running": "worker_lost", "queued": "never_started"}
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
            "ERROR naming the restart, category worker_lost, reward null; reported once by the "
            "start-up sweep; not run again",
        ),
        "finished": Row(
            "local, SIGKILL + restart: final response stored, callback in flight at the kill",
            "the stored response (COMPLETED) sent once by the sweep; not run again",
        ),
        "queued": Row(
            "local, SIGKILL + restart: accepted, queued, not started at the kill",
            "ERROR naming the restart, category never_started (no worker claimed it), reward "
            "null; reported once; never run",
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
        items = row.count_rollouts(standin, ids)
        statuses: Counter[str] = Counter()
        counts = row.counts
        for item in items:
            rid = item.rollout_id
            body = item.body or {}
            statuses[str(body.get("status"))] += 1
            counts[f"at the kill {(at_kill.get(rid) or {}).get('state', 'absent')}"] += 1
            counts["received once"] += item.received == 1
            counts["POSTs after the restart"] += sum(
                1 for c in item.calls if c.arrived > restart_at
            )
            counts["chat calls after the kill"] += standin.chat_count(rid) - chats[rid]
            counts["runs after the kill"] += standin.runs(rid) - runs[rid]
            counts[f"reported {body.get('status')}"] += 1
            row.check(item.received == 1, f"{item.describe()}: received {item.received} times")
            record = records.get(rid)
            row.check_failure(
                item,
                expected_category.get(name),
                attempt=0 if name == "queued" else 1,  # never claimed
                shown=record,
            )
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
            f"{counts[f'at the kill {expected_state[name]}']}/{len(ids)} {expected_state[name]} "
            f"at the kill; {tally(statuses)}; received once {counts['received once']}/{len(ids)}; "
            f"POSTs after the restart {counts['POSTs after the restart']}; chat calls after the "
            f"kill {counts['chat calls after the kill']}; runs after the kill "
            f"{counts['runs after the kill']}"
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


def run_kill_restart(scale: Scale, say: Say = quiet, *, store: str = "sqlite") -> list[Row]:
    """SIGKILL ``rollout-sdk serve`` with rollouts in every state, start it again the same way
    (on SQLite, or on DynamoDB through ``--dynamodb-endpoint``: ``store``)."""
    with LocalRig(env=kill_env(scale), name="kill", store=store) as rig:
        try:
            rows = asyncio.run(_kill_restart(rig, scale, say))
            if store != "sqlite":
                for row in rows:
                    row.fault = row.fault.replace("local,", f"local ({store} endpoint),", 1)
            return rows
        except ScenarioError as exc:
            raise ScenarioError(f"{exc}\nserver log:\n{rig.log_tail()}") from exc
