"""No silent loss on AWS: the failure destination, the worker's own recovery, the re-drive."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from rollout_sdk.local.emulator import LocalResources
from rollout_sdk.local.invoke import invoke, load_event
from rollout_sdk.protocol import RolloutResponse, RolloutStatus
from rollout_sdk.store.base import Store, TransitionResult
from rollout_sdk.store.record import RecordState, RolloutRecord, expiry
from rollout_sdk.testing.standin import Fault, TrainGateStandIn
from testkit.records import park_due_now

from .conftest import CALLBACK_KEY, ROOT

EVENTS = ROOT / "events"
RID = "sample-rollout-0001"


def _init(handler: Any, url: str) -> Any:
    event = load_event(EVENTS / "init.json")
    body = json.loads(event["body"])
    body["server_url"] = url
    event["body"] = json.dumps(body)
    call = invoke(handler, "ApiFunction", event, timeout_seconds=29)
    assert call.result["statusCode"] == 202
    return call


def _record(handler: Any) -> RolloutRecord:
    runtime = handler.runtime
    record = runtime.loop.run_until_complete(runtime.store.get(RID, now=time.time()))
    assert isinstance(record, RolloutRecord)
    return record


def _move(handler: Any, move: Callable[[Store, float], Awaitable[TransitionResult]]) -> None:
    """Apply one of the store's moves to the rollout, as a worker would."""
    runtime = handler.runtime
    moved = runtime.loop.run_until_complete(move(runtime.store, time.time()))
    assert moved.applied


def _claim_with_lease_run_out(handler: Any) -> None:
    _move(
        handler,
        lambda store, now: store.claim(
            RID, attempt=1, lease_until=now - 1, expires_at=expiry(now, 3600), now=now
        ),
    )


def test_an_event_that_aged_out_is_reported_once_as_error(
    handler: Any, standin: tuple[TrainGateStandIn, str]
) -> None:
    traingate, url = standin
    _init(handler, url)
    failure = load_event(EVENTS / "worker-failure.json")
    failure["requestContext"]["condition"] = "EventAgeExceeded"
    failure.pop("responsePayload")
    call = invoke(handler, "WorkerFailureFunction", failure, timeout_seconds=300)
    assert call.result == {"status": "settled", "rollout_id": RID, "state": "DELIVERED"}
    (report,) = traingate.completions[RID]
    assert report["status"] == "ERROR"
    assert "EventAgeExceeded" in report["error_message"]
    # The worker event arriving late runs nothing; the failure record again sends nothing.
    late = invoke(
        handler, "WorkerFunction", load_event(EVENTS / "worker.json"), timeout_seconds=900
    )
    assert late.result["status"] == "skipped"
    invoke(handler, "WorkerFailureFunction", failure, timeout_seconds=300)
    assert len(traingate.completions[RID]) == 1
    assert traingate.chat_calls == 0  # never run


def test_a_worker_that_timed_out_mid_run_is_reported_by_the_failure_destination(
    handler: Any, standin: tuple[TrainGateStandIn, str]
) -> None:
    traingate, url = standin
    _init(handler, url)
    # What a killed worker leaves: RUNNING, its lease run out.
    _claim_with_lease_run_out(handler)
    call = invoke(
        handler,
        "WorkerFailureFunction",
        load_event(EVENTS / "worker-failure.json"),
        timeout_seconds=300,
    )
    assert call.result["state"] == "DELIVERED"
    (report,) = traingate.completions[RID]
    assert report["status"] == "ERROR"
    assert "RetriesExhausted after 3 attempts" in report["error_message"]
    assert "Sandbox.Timedout" in report["error_message"]


def test_a_finished_rollout_whose_worker_died_before_the_callback_sends_the_stored_response(
    handler: Any, standin: tuple[TrainGateStandIn, str]
) -> None:
    traingate, url = standin
    _init(handler, url)
    stored = RolloutResponse(rollout_id=RID, status=RolloutStatus.COMPLETED, reward=0.5)
    _claim_with_lease_run_out(handler)
    _move(
        handler,
        lambda store, now: store.finish(
            RID,
            attempt=1,
            response=stored,
            lease_until=now - 1,
            expires_at=expiry(now, 3600),
            now=now,
        ),
    )
    # A redelivery of the worker event finds the dead owner's lease run out and sends it.
    call = invoke(
        handler, "WorkerFunction", load_event(EVENTS / "worker.json"), timeout_seconds=900
    )
    assert call.result["state"] == "DELIVERED"
    (report,) = traingate.completions[RID]
    assert (report["status"], report["reward"]) == ("COMPLETED", 0.5)
    # Never a second, different status afterwards.
    invoke(
        handler,
        "WorkerFailureFunction",
        load_event(EVENTS / "worker-failure.json"),
        timeout_seconds=300,
    )
    assert len(traingate.completions[RID]) == 1


def test_a_failed_callback_is_parked_sealed_and_redriven_once(
    handler: Any, resources: LocalResources, standin: tuple[TrainGateStandIn, str]
) -> None:
    traingate, url = standin
    handler.runtime.settings.client.retry_base_delay = 0.01
    handler.runtime.settings.client.retry_max_delay = 0.02
    _init(handler, url)
    traingate.inject("completed", Fault(503, count=3))  # every attempt of the worker fails
    call = invoke(
        handler, "WorkerFunction", load_event(EVENTS / "worker.json"), timeout_seconds=900
    )
    assert call.result["state"] == "FINISHED"
    parked = _record(handler)
    assert parked.next_attempt_at is not None and parked.sealed_key is not None
    raw = json.dumps(
        handler.runtime.clients.dynamodb.scan(TableName=resources.table_name)["Items"], default=repr
    )
    assert CALLBACK_KEY not in raw  # sealed with KMS, never in clear
    assert parked.expires_at > time.time() + handler.runtime.settings.kit.redrive_max_age_seconds

    # Due for re-drive now.
    _move(handler, lambda store, now: park_due_now(store, parked, now))
    redriven = invoke(
        handler, "RedriveFunction", load_event(EVENTS / "redrive.json"), timeout_seconds=600
    )
    assert redriven.result["delivered"] == 1
    final = _record(handler)
    assert final.state == RecordState.DELIVERED
    assert final.sealed_key is None  # dropped once delivered
    (report,) = traingate.completions[RID]
    assert report["status"] == "COMPLETED"
    again = invoke(
        handler, "RedriveFunction", load_event(EVENTS / "redrive.json"), timeout_seconds=600
    )
    assert again.result["examined"] == 0
    assert len(traingate.completions[RID]) == 1


def test_a_failure_record_without_a_job_is_rejected_without_raising(handler: Any) -> None:
    call = invoke(handler, "WorkerFailureFunction", {"requestPayload": {}}, timeout_seconds=300)
    assert call.result["status"] == "rejected"
    assert "rollout_id" in call.result["error"]
