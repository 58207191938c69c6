"""The AWS path's scenarios: duplicate deliveries, identical inits, worker deaths, the
re-drive, the Lambda deadline."""

from __future__ import annotations

import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from rollout_sdk.testing.standin import Fault
from testkit.rigs import (
    AWS_SETTINGS,
    CALLBACK_KEY,
    AwsRig,
    failure_record,
    init_call,
    rollout_body,
    slow,
)
from testkit.scenarios.base import (
    Row,
    Say,
    Scale,
    ScenarioError,
    delivery,
    fresh_ids,
    quiet,
    spread,
    tally,
    tally_field,
)
from testkit.scenarios.control import check_last_turn
from testkit.wait import wait_until


def _aws_body(rig: AwsRig, rid: str, **metadata: Any) -> dict[str, Any]:
    return rollout_body(rid, rig.traingate_url, metadata=metadata)


def _accepted(rig: AwsRig, row: Row, rid: str, **metadata: Any) -> Any:
    """Init through the API function; the one worker event it dispatched."""
    status, _, dispatched = rig.init(_aws_body(rig, rid, **metadata))
    if status != 202 or len(dispatched) != 1:
        raise ScenarioError(f"{rid}: init answered {status} and dispatched {len(dispatched)}")
    return dispatched[0]


def run_aws_duplicate_deliveries(rig: AwsRig, scale: Scale, say: Say = quiet) -> Row:
    """The worker event delivered twice at once (two environments), then again afterwards."""
    row = Row(
        "AWS: the worker event delivered twice at once, and again after the report",
        "1 run, 1 callback; the other deliveries run nothing",
    )
    outcomes: Counter[str] = Counter()
    ids = fresh_ids("awsdup", scale.aws_deliveries)
    for rid in ids:
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
    items = row.count_rollouts(rig.standin, ids)
    for item in items:
        row.check_once(item)
        row.check((item.body or {}).get("status") == "COMPLETED", f"{item.rollout_id}: status")
        row.check_failure(item, None)
    row.measured = f"deliveries: {tally(outcomes)}; runs {spread(i.runs for i in items)} each"
    return row.shown(say)


def run_aws_identical_inits(rig: AwsRig, scale: Scale, say: Say = quiet, inits: int = 50) -> Row:
    """``inits`` identical inits spread over the API environments at once; every worker event
    they dispatched delivered at once."""
    row = Row(
        f"AWS: {inits} identical inits through the API function, {rig.size} execution "
        "environments at once; every worker event they dispatched delivered, at once",
        f"{inits} identical 202 bodies; 1 run, 1 callback",
    )
    ids = fresh_ids("awsinit", scale.aws_init_rollouts)
    dispatched_total = 0
    for rid in ids:
        rig.standin.inject("chat", Fault(200, delay=0.2, rollout_id=rid))
        body = _aws_body(rig, rid) | {"idempotency_key": f"key-{rid}"}
        futures = [rig.submit(i, init_call(body)) for i in range(inits)]
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
    for item in row.count_rollouts(rig.standin, ids):
        row.check_once(item)
        row.check_failure(item, None)
    row.measured = (
        f"{len(ids) * inits} inits, all 202 with one body per rollout; {dispatched_total} worker "
        f"events dispatched, 1 ran per rollout"
    )
    return row.shown(say)


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
                "ERROR naming the failure, category worker_lost, reward null; once, when the lease "
                "runs out; not run again",
            ),
            finished=False,
            by_destination=True,
        ),
        _Death(
            Row(
                "AWS: worker process SIGKILLed mid-run; the event redelivered",
                "ERROR naming the failure, category worker_lost, reward null; once, when the lease "
                "runs out; not run again",
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
        wait_until(dying, within=60, what="every worker process mid-run or mid-callback")
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
    first_attempts = {rid: delivery(rig.standin, rid).attempts for rid in events}
    states = {rid: getattr(rig.record(rid), "state", None) for rid in events}
    # Afterwards, neither another failure record nor a late event sends anything.
    for index, event in enumerate(events.values()):
        rig.failed(failure_record(event), env=index).result(60)
        rig.worker(event, env=index).result(60)
    time.sleep(1.0)
    for death in deaths:
        row = death.row
        items = row.count_rollouts(rig.standin, death.ids)
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
            # A record RUNNING when its worker died is settled as a worker lost.
            row.check_failure(item, None if death.finished else "worker_lost")
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
            f"{tally_field(items, 'status')}, received once "
            f"{sum(i.received == 1 for i in items)}/{len(items)}, within {took:.1f} s of the kill "
            f"(lease 5 s); POSTs after a second failure record and a late event: "
            f"{sum(i.attempts - first_attempts[i.rollout_id] for i in items)}"
        )
    say(f"   {deaths[0].row.measured}")
    return [d.row for d in deaths]


def run_aws_aged_out(rig: AwsRig, scale: Scale, say: Say = quiet) -> Row:
    """Worker events that aged out in Lambda's queue: the on-failure destination gets an
    ``EventAgeExceeded`` record (no response payload: nothing ran) for a rollout still ACCEPTED,
    and reports it once; the event arriving late runs nothing."""
    row = Row(
        "AWS: the worker event aged out in Lambda's queue (EventAgeExceeded); on-failure "
        "destination",
        "ERROR naming EventAgeExceeded, category never_started, reward null; once; never run, "
        "not even by the event arriving late",
    )
    ids = fresh_ids("awsaged", scale.aws_deaths)
    events = {rid: _accepted(rig, row, rid) for rid in ids}
    failures: dict[str, Any] = {}
    for rid, event in events.items():
        failures[rid] = failure_record(event, "EventAgeExceeded")
        failures[rid].pop("responsePayload", None)  # Lambda never invoked the function
    settled = {
        rid: rig.failed(failure, env=i).result(60)
        for i, (rid, failure) in enumerate(failures.items())
    }
    # Afterwards: the event delivered late, and the failure record again, send nothing.
    late: Counter[str] = Counter()
    for index, rid in enumerate(ids):
        late[str(rig.worker(events[rid], env=index).result(60).get("status"))] += 1
        rig.failed(failures[rid], env=index).result(60)
    time.sleep(0.5)
    items = row.count_rollouts(rig.standin, ids)
    for item in items:
        rid = item.rollout_id
        body = item.body or {}
        row.check(item.attempts == 1, f"{item.describe()}: expected one POST")
        row.check(
            settled[rid].get("state") == "DELIVERED", f"{rid}: the destination said {settled[rid]}"
        )
        row.check(
            body.get("status") == "ERROR" and "EventAgeExceeded" in str(body.get("error_message")),
            f"{rid}: {body.get('status')} {body.get('error_message')!r}",
        )
        row.check_failure(item, "never_started", attempt=0)  # no worker ever claimed it
        row.check(item.runs == 0 and not rig.standin.calls_for("chat", rid), f"{rid}: it ran")
    row.check(late == {"skipped": len(ids)}, f"the late events: {dict(late)}")
    row.measured = (
        f"{tally_field(items, 'status')}, received once "
        f"{sum(i.received == 1 for i in items)}/{len(items)}; late events {tally(late)}; "
        f"chat calls {sum(len(rig.standin.calls_for('chat', r)) for r in ids)}"
    )
    return row.shown(say)


def run_aws_parked_redrive(rig: AwsRig, scale: Scale, say: Say = quiet) -> Row:
    """Every callback attempt fails; the scheduled re-drive (twice at once) delivers once."""
    row = Row(
        "AWS: every callback attempt fails (3 x 503); handler.redrive, invoked twice at once",
        "parked with the key sealed by KMS; re-driven once; DELIVERED",
    )
    ids = fresh_ids("awspark", scale.aws_parked)
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
    items = row.count_rollouts(rig.standin, ids)
    for item in items:
        row.check(item.attempts == 4, f"{item.describe()}: expected 3 failures and 1 delivery")
        row.check_failure(item, None)
        record = rig.record(item.rollout_id)
        row.check(
            record is not None and record.state.value == "DELIVERED" and record.sealed_key is None,
            f"{item.rollout_id}: record {record.state if record else None} after the re-drive",
        )
    examined = [r["examined"] for r in reports]
    counted = [r["delivered"] for r in reports]
    row.check(
        sum(counted) == len(ids), f"the two re-drives reported {counted} delivered of {len(ids)}"
    )
    row.check(again["delivered"] == 0, f"a third re-drive delivered {again['delivered']}")
    row.measured = (
        f"{len(ids)} parked, sealed; two concurrent re-drives (examined {examined}, reported "
        f"delivered {counted}) and a third; "
        f"POSTs per rollout {spread(i.attempts for i in items)} "
        f"({sum(i.attempts - i.received for i in items)} failed, "
        f"{sum(i.received for i in items)} delivered)"
    )
    return row.shown(say)


def run_aws_deadline(rig: AwsRig, scale: Scale, say: Say = quiet) -> Row:
    """A slow agent on a worker with little time left: stopped before the time runs out."""
    budget = 1.5
    margin = float(AWS_SETTINGS["DEADLINE_MARGIN_SECONDS"])
    row = Row(
        f"AWS: a slow agent with {margin + budget:g} s of Lambda time left "
        f"(DEADLINE_MARGIN_SECONDS={margin:g})",
        'stopped before the time runs out; ERROR "timeout", category timeout, reward null, '
        "with the conversation as of the last completed turn",
    )
    ids = fresh_ids("awsslow", scale.aws_deadlines)
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
    items = row.count_rollouts(rig.standin, ids)
    for item in items:
        body = item.body or {}
        row.check(
            (body.get("status"), body.get("finish_reason")) == ("ERROR", "timeout"),
            f"{item.rollout_id}: {body.get('status')} {body.get('finish_reason')}",
        )
        row.check_failure(item, "timeout")
        row.counts["as of the last turn"] += check_last_turn(
            row, item.rollout_id, body, rig.standin.calls_for("chat", item.rollout_id)
        )
    row.measured = (
        f"{tally_field(items, 'finish_reason')}; handler returned after "
        f"{spread(round(e, 2) for e in elapsed)} s of {margin + budget:g} s; conversation as of "
        f"the last completed turn {row.counts['as of the last turn']}/{len(items)}"
    )
    return row.shown(say)
