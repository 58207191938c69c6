"""``rollout-sdk start-api``'s emulation of Lambda around the API function, with fakes behind
:class:`LocalFunction`'s interface (the real processes run in tests/integration and in the
0.3.8 suite's test_lambda.py): API Gateway's routes and answers, an asynchronous invocation's
retries and failure destination, the parameter overrides and --env-vars files."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from rollout_sdk.errors import ConfigurationError, InstanceThrottled
from rollout_sdk.local.invoke import load_env_vars, load_event, parse_overrides
from rollout_sdk.local.start_api import (
    FUNCTION_FAILED,
    THROTTLED,
    TIMED_OUT,
    LocalApi,
    LocalFunction,
    failure_record,
)

pytestmark = pytest.mark.timeout(30)

ROOT = Path(__file__).resolve().parents[2]


class Scripted(LocalFunction):
    """A function whose invocations answer from a script: an answer dict, None (a function
    error), or an exception to raise (InstanceThrottled, TimeoutError)."""

    def __init__(self, logical_id: str, *script: Any) -> None:
        super().__init__(logical_id, {}, 1.0)
        self.script = list(script)
        self.events: list[Any] = []
        self.done = threading.Event()

    def invoke(self, event: Any, within: float | None = None) -> dict[str, Any] | None:
        self.events.append(event)
        step = self.script.pop(0) if self.script else {"result": "ok", "dispatched": []}
        if not self.script:
            self.done.set()
        if isinstance(step, BaseException):
            raise step
        return step


def _event(method: str, path: str) -> dict[str, Any]:
    event: dict[str, Any] = load_event(ROOT / "events" / "init.json")
    event["rawPath"] = event["requestContext"]["http"]["path"] = path
    event["requestContext"]["http"]["method"] = method
    return event


def test_result_polls_go_to_the_poll_function_and_the_rest_to_the_api() -> None:
    api, poll = Scripted("ApiFunction"), Scripted("PollFunction")
    local = LocalApi(api=api, worker=Scripted("WorkerFunction"), poll=poll)
    local.invoke_api(_event("GET", "/rollout/r-1/result"))
    local.invoke_api(_event("POST", "/rollout"))
    local.invoke_api(_event("GET", "/rollout/r-1/result/more"))
    assert len(poll.events) == 1 and len(api.events) == 2
    # Without a poll function (no Workflow), API Gateway's $default route takes them all.
    alone = LocalApi(api=Scripted("ApiFunction"), worker=Scripted("WorkerFunction"))
    alone.invoke_api(_event("GET", "/rollout/r-1/result"))
    assert len(alone.api.events) == 1  # type: ignore[attr-defined]


def test_api_gateway_answers_a_throttle_a_timeout_and_a_function_error() -> None:
    api = Scripted("ApiFunction", InstanceThrottled("ApiFunction"), TimeoutError("late"), None)
    local = LocalApi(api=api, worker=Scripted("WorkerFunction"))
    answers = [local.invoke_api(_event("GET", "/health")) for _ in range(3)]
    assert answers == [THROTTLED, TIMED_OUT, FUNCTION_FAILED]
    assert [a["statusCode"] for a in answers] == [500, 503, 500]


def test_a_hand_off_is_retried_after_function_errors_then_sent_to_the_destination() -> None:
    job = {"rollout_id": "r-1", "attempt": 1, "api_key": "k"}
    worker = Scripted("WorkerFunction", None, TimeoutError("late"), None)
    destination = Scripted("WorkerFailureFunction")
    local = LocalApi(
        api=Scripted("ApiFunction", {"result": {"statusCode": 202}, "dispatched": [job]}),
        worker=worker,
        on_failure=destination,
        retries=2,
    )
    local.invoke_api(_event("POST", "/v1/rollout/init"))
    assert destination.done.wait(10)
    assert worker.events == [job, job, job]  # the first try and two retries
    (record,) = destination.events
    assert record["requestPayload"] == job
    assert record["requestContext"]["condition"] == "RetriesExhausted"
    assert record["requestContext"]["approximateInvokeCount"] == 3
    # The last error said: a timeout, as Lambda words it.
    assert record["responsePayload"]["errorType"] == "Sandbox.Timedout"


def test_a_hand_off_that_succeeds_on_a_retry_reaches_no_destination() -> None:
    job = {"rollout_id": "r-2", "attempt": 1, "api_key": "k"}
    worker = Scripted("WorkerFunction", None, {"result": {"status": "ran"}, "dispatched": []})
    destination = Scripted("WorkerFailureFunction")
    local = LocalApi(api=Scripted("ApiFunction"), worker=worker, on_failure=destination)
    local.start_worker(job).join(10)
    assert worker.events == [job, job] and destination.events == []


def test_the_failure_record_has_the_shape_of_the_sample_event() -> None:
    sample = load_event(ROOT / "events" / "worker-failure.json")
    record = failure_record({"rollout_id": "r"}, {"errorType": "E", "errorMessage": "m"}, 3)
    assert set(record) == set(sample)
    assert set(record["requestContext"]) == set(sample["requestContext"])
    assert set(record["responseContext"]) == set(sample["responseContext"])
    json.dumps(record)  # what an instance's stdin takes


def test_parameter_overrides_are_taken_as_sam_takes_them() -> None:
    assert parse_overrides(["Workflow=a.b:C Grader=a.b:D", "MaxLiveRollouts=10"]) == {
        "Workflow": "a.b:C",
        "Grader": "a.b:D",
        "MaxLiveRollouts": "10",
    }
    assert parse_overrides(["Empty="]) == {"Empty": ""}
    with pytest.raises(ConfigurationError, match="'Workflow': give NAME=VALUE"):
        parse_overrides(["Workflow"])


def test_an_env_vars_file_is_read_as_sam_local_reads_one(tmp_path: Path) -> None:
    good = tmp_path / "env.json"
    good.write_text(json.dumps({"Parameters": {"A": 1}, "ApiFunction": {"B": "x"}}))
    assert load_env_vars(good) == {"Parameters": {"A": "1"}, "ApiFunction": {"B": "x"}}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"A": "1"}))
    with pytest.raises(ConfigurationError, match="give a JSON object of objects"):
        load_env_vars(bad)


def test_a_parameter_the_template_lacks_is_named_with_those_it_has() -> None:
    template: dict[str, Any] = {"Parameters": {"Workflow": {}, "Grader": {}}}
    assert parse_overrides(["Workflow=a:B"], template) == {"Workflow": "a:B"}
    with pytest.raises(
        ConfigurationError, match=r"no parameter Wrkflow \(it has Grader, Workflow\)"
    ):
        parse_overrides(["Wrkflow=a:B"], template)


def test_a_throttled_hand_off_waits_and_is_tried_again_without_counting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("rollout_sdk.local.start_api.THROTTLED_RETRY_SECONDS", 0.01)
    job = {"rollout_id": "r-3", "attempt": 1, "api_key": "k"}
    throttled = InstanceThrottled("WorkerFunction")
    worker = Scripted("WorkerFunction", throttled, throttled, None, None, None)
    destination = Scripted("WorkerFailureFunction")
    local = LocalApi(api=Scripted("ApiFunction"), worker=worker, on_failure=destination, retries=2)
    local.start_worker(job).join(10)
    assert len(worker.events) == 5  # two throttles, then the try and its two retries
    (record,) = destination.events
    assert record["requestContext"]["approximateInvokeCount"] == 3
