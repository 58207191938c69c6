"""Every file in events/ fed through handler.py, the way `sam local invoke` would."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from rollout_sdk.local.invoke import LocalLambdaContext, invoke, load_event
from rollout_sdk.testing.standin import TrainGateStandIn

from .conftest import CALLBACK_KEY, ROOT

EVENTS = ROOT / "events"


def _event(name: str, server_url: str | None = None) -> Any:
    event = load_event(EVENTS / name)
    if server_url is not None:
        body = json.loads(event["body"])
        body["server_url"] = server_url
        event["body"] = json.dumps(body)
    return event


def test_every_event_file_is_covered() -> None:
    assert sorted(p.name for p in EVENTS.glob("*.json")) == [
        "dead-letter.json",
        "health.json",
        "init.json",
        "platform-health.json",
        "queue-batch.json",
        "redrive.json",
        "worker-failure.json",
        "worker.json",
    ]


def _job(event: dict[str, Any]) -> dict[str, Any]:
    """A worker event without the cost it carries."""
    return {k: v for k, v in event.items() if k != "cost"}


def test_http_events_are_payload_2_with_a_content_type() -> None:
    for name in ("init.json", "health.json", "platform-health.json"):
        event = load_event(EVENTS / name)
        assert event["version"] == "2.0"
        assert event["headers"]["content-type"] == "application/json"


def test_init_then_worker_runs_one_rollout_and_reports_once(
    handler: Any, standin: tuple[TrainGateStandIn, str]
) -> None:
    traingate, url = standin
    init = invoke(handler, "ApiFunction", _event("init.json", url), timeout_seconds=29)
    assert init.result["statusCode"] == 202
    body = json.loads(init.result["body"])
    assert body["rollout_id"] == "sample-rollout-0001"
    assert [t["function"]["name"] for t in body["tools"]] == ["calculate", "square_root"]
    # The job, and the API function's part of the rollout's cost estimate (docs/cost.md).
    assert [_job(e) for e in init.dispatched] == [
        {"rollout_id": "sample-rollout-0001", "attempt": 1, "api_key": CALLBACK_KEY}
    ]
    assert init.dispatched[0]["cost"]["units"]["http_api_request"] == 1

    # A duplicate before any worker claimed the rollout hands the same job off again (the first
    # hand-off might still have failed); the worker's claim lets only one run.
    again = invoke(handler, "ApiFunction", _event("init.json", url), timeout_seconds=29)
    assert again.result["statusCode"] == 202
    assert again.result["body"] == init.result["body"]
    assert [_job(e) for e in again.dispatched] == [_job(e) for e in init.dispatched]

    worker_event = load_event(EVENTS / "worker.json")
    assert worker_event == _job(init.dispatched[0])
    ran = invoke(handler, "WorkerFunction", worker_event, timeout_seconds=900)
    assert ran.result == {
        "status": "done",
        "rollout_id": "sample-rollout-0001",
        "state": "DELIVERED",
        "delivered": True,
    }
    second = invoke(handler, "WorkerFunction", worker_event, timeout_seconds=900)
    assert second.result == {"status": "skipped", "rollout_id": "sample-rollout-0001"}
    late = invoke(handler, "ApiFunction", _event("init.json", url), timeout_seconds=29)
    assert late.result["body"] == init.result["body"]
    assert late.dispatched == []  # once claimed, a duplicate starts nothing

    reports = traingate.completions["sample-rollout-0001"]
    assert len(reports) == 1
    assert reports[0]["status"] == "COMPLETED"
    assert reports[0]["reward"] == 1.0
    assert reports[0]["metrics"]["num_llm_calls"] == 2


@pytest.mark.parametrize("name", ["health.json", "platform-health.json"])
def test_health_events(handler: Any, name: str) -> None:
    call = invoke(handler, "ApiFunction", load_event(EVENTS / name), timeout_seconds=29)
    assert call.result["statusCode"] == 200
    body = json.loads(call.result["body"])
    assert body["status"] == "healthy"
    assert body["agent_loop"] == "calculator"


def test_platform_health_refuses_a_wrong_server_key(handler: Any) -> None:
    event = load_event(EVENTS / "platform-health.json")
    event["headers"]["authorization"] = "Bearer not-the-key"
    call = invoke(handler, "ApiFunction", event, timeout_seconds=29)
    assert call.result["statusCode"] == 401


def test_init_without_the_server_key_is_401_and_starts_nothing(handler: Any) -> None:
    event = load_event(EVENTS / "init.json")
    del event["headers"]["authorization"]
    call = invoke(handler, "ApiFunction", event, timeout_seconds=29)
    assert call.result["statusCode"] == 401
    assert call.dispatched == []


def test_docs_are_off_when_deployed(handler: Any) -> None:
    keyed = load_event(EVENTS / "init.json")["headers"]["authorization"]
    event = load_event(EVENTS / "health.json")
    for path in ("/docs", "/openapi.json"):
        event = {**event, "rawPath": path}
        event["requestContext"] = {
            **event["requestContext"],
            "http": {**event["requestContext"]["http"], "path": path},
        }
        # Behind the key like every route but /health; and off, for a caller who holds it.
        call = invoke(handler, "ApiFunction", event, timeout_seconds=29)
        assert call.result["statusCode"] == 401, path
        with_key = {**event, "headers": {**event["headers"], "authorization": keyed}}
        call = invoke(handler, "ApiFunction", with_key, timeout_seconds=29)
        assert call.result["statusCode"] == 404, path


def test_malformed_worker_event_is_rejected_without_raising(handler: Any) -> None:
    call = invoke(handler, "WorkerFunction", {"attempt": 1}, timeout_seconds=900)
    assert call.result["status"] == "rejected"
    assert "rollout_id" in call.result["error"]


def test_worker_deadline_comes_from_the_remaining_time(
    handler: Any, standin: tuple[TrainGateStandIn, str]
) -> None:
    traingate, url = standin
    traingate.chat_delay = 2.0
    invoke(handler, "ApiFunction", _event("init.json", url), timeout_seconds=29)
    # 11 s left and a 10 s margin: the rollout gets about 1 s, less than one chat call.
    context = LocalLambdaContext(function_name="WorkerFunction", timeout_seconds=11)
    result = handler.worker(load_event(EVENTS / "worker.json"), context)
    assert result["state"] == "DELIVERED"
    report = traingate.completions["sample-rollout-0001"][0]
    assert report["status"] == "ERROR"
    assert report["finish_reason"] == "timeout"


def test_logs_carry_the_rollout_id_and_no_secret(
    handler: Any, standin: tuple[TrainGateStandIn, str], caplog: pytest.LogCaptureFixture
) -> None:
    _, url = standin
    caplog.set_level(logging.DEBUG)
    invoke(handler, "ApiFunction", _event("init.json", url), timeout_seconds=29)
    invoke(handler, "WorkerFunction", load_event(EVENTS / "worker.json"), timeout_seconds=900)
    # Format every record with the formatter handler.py installs: what CloudWatch would get.
    formatter = handler.logger.registered_formatter
    lines = [
        json.loads(formatter.format(r)) for r in caplog.records if r.name.startswith("rollout_sdk")
    ]
    messages = {line["message"] for line in lines}
    assert {
        "rollout accepted",
        "rollout claimed",
        "rollout finished",
        "callback delivered",
    } <= messages
    assert all(line.get("rollout_id") == "sample-rollout-0001" for line in lines)
    text = json.dumps(lines)
    assert CALLBACK_KEY not in text
    assert "local-server-key" not in text


def test_event_files_stay_small_enough_for_async_invoke() -> None:
    assert (EVENTS / "worker.json").stat().st_size < 1024 * 1024
    assert Path(EVENTS / "init.json").read_text().count("sample-rollout-0001") == 1
