"""The job on the wire (dispatch/base.py): the API function's part of the cost travels inside
the job, given by the cost meter the composition root passes to each remote dispatcher; events
from before the cost field still parse. And the one guard every cost figure is made under."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from rollout_sdk.cost.guard import figure
from rollout_sdk.dispatch.aws_lambda import LambdaDispatcher
from rollout_sdk.dispatch.base import Job, failure_from_event, job_event, job_from_event
from rollout_sdk.dispatch.sealed import job_from_message, message_body

SHARE = {"functions": {"api": {"seconds": 0.05}}, "units": {"lambda_request": 1}}


class RecordingLambda:
    def __init__(self) -> None:
        self.payloads: list[dict[str, Any]] = []

    def invoke(self, **call: Any) -> dict[str, Any]:
        self.payloads.append(json.loads(call["Payload"]))
        return {"StatusCode": 202}


async def test_a_remote_dispatcher_asks_the_meter_it_was_given_at_each_hand_off() -> None:
    shares = iter([SHARE, None])
    client = RecordingLambda()
    dispatcher = LambdaDispatcher("worker", client=client, cost_share=lambda: next(shares))  # type: ignore[arg-type]
    await dispatcher.dispatch(Job("r1", api_key="k"))
    await dispatcher.dispatch(Job("r2", api_key="k"))
    assert client.payloads[0] == {"rollout_id": "r1", "attempt": 1, "api_key": "k", "cost": SHARE}
    assert "cost" not in client.payloads[1]  # nothing metered: no field


async def test_without_a_meter_nothing_is_carried() -> None:
    client = RecordingLambda()
    await LambdaDispatcher("worker", client=client).dispatch(Job("r1"))  # type: ignore[arg-type]
    assert client.payloads == [{"rollout_id": "r1", "attempt": 1, "api_key": None}]


def test_the_cost_round_trips_in_the_event_the_failure_record_and_the_message() -> None:
    job = Job("r1", 2, api_key="k", cost=SHARE)
    assert job_from_event(job_event(job)).cost == SHARE
    record = {"requestPayload": job_event(job), "requestContext": {"condition": "RetriesExhausted"}}
    failed, _reason = failure_from_event(record)
    assert failed.cost == SHARE
    assert job_from_message(message_body(job, "b1:c2VhbGVk")).cost == SHARE


@pytest.mark.parametrize("carried", [None, "not an object", 3, ["a"]])
def test_an_event_without_a_usable_cost_still_parses(carried: object) -> None:
    event: dict[str, Any] = {"rollout_id": "r1", "attempt": 1, "api_key": "k"}
    if carried is not None:
        event["cost"] = carried
    job = job_from_event(event)
    assert (job.rollout_id, job.attempt, job.api_key, job.cost) == ("r1", 1, "k", None)


def test_the_guard_swallows_and_warns_once_per_figure(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="rollout_sdk.engine.cost")
    made: list[str] = []
    for _ in range(3):
        with figure("a test figure"):
            raise RuntimeError("boom")
        made.append("fallback")
    assert made == ["fallback"] * 3
    warned = [r for r in caplog.records if "a test figure" in r.getMessage()]
    assert len(warned) == 1 and "RuntimeError: boom" in warned[0].getMessage()


def test_the_guard_lets_other_errors_through_when_told_which_to_catch() -> None:
    with figure("a narrow figure", ValueError):
        raise ValueError("caught")
    with pytest.raises(KeyError), figure("a narrow figure", ValueError):
        raise KeyError("not caught")
