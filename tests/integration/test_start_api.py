"""``rollout-sdk start-api``: handler.py's API function over real HTTP, as ``sam local start-api``
would serve it, without Docker. A TrainGate stand-in on 127.0.0.1 takes the rollout's chat
calls and its callback; the worker event the API function hands off runs as its own process
(``rollout-sdk invoke WorkerFunction``) against the same embedded emulator."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from rollout_sdk.local.invoke import load_event
from rollout_sdk.local.start_api import http_api_event
from rollout_sdk.testing.standin import TrainGateStandIn
from rollout_sdk.testing.threads import ServerThread, free_port
from testkit import REPO_ROOT
from testkit.processes import HTTPSubprocess, default_server_cmd

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

KEY = {"Authorization": "Bearer local-server-key"}
CALLBACK_KEY = "sample-callback-key"


def test_a_rollout_runs_end_to_end_through_the_api_function_over_http(tmp_path: Path) -> None:
    standin = TrainGateStandIn(callback_key=CALLBACK_KEY)
    with ServerThread(standin.app) as traingate:
        host = traingate.url.split("//", 1)[1]
        port = free_port()
        argv = [
            *default_server_cmd(),
            "start-api",
            "--port",
            str(port),
            "--allowed-server-hosts",
            host,
        ]
        url = f"http://127.0.0.1:{port}"
        with HTTPSubprocess(argv, url=url, log_path=tmp_path / "start-api.log") as api:
            body = json.loads(load_event(REPO_ROOT / "events" / "init.json")["body"])
            body.update(server_url=traingate.url, rollout_id="start-api-1")
            unkeyed = httpx.post(f"{api.url}/v1/rollout/init", json=body, timeout=30)
            assert unkeyed.status_code == 401  # the emulator's secret holds the server key
            accepted = httpx.post(f"{api.url}/v1/rollout/init", json=body, headers=KEY, timeout=30)
            assert accepted.status_code == 202, accepted.text
            assert accepted.json()["rollout_id"] == "start-api-1"
            # The worker, a process of its own, runs it and calls TrainGate back.
            assert standin.wait_for(1, timeout=120), api.log_tail()
            (report,) = standin.completions["start-api-1"]
            assert report["status"] == "COMPLETED"
            status = httpx.get(f"{api.url}/v1/rollout/start-api-1", headers=KEY, timeout=30)
            assert status.status_code == 200 and status.json()["state"] == "DELIVERED"
            # API Gateway's answers: a bad body is the function's own 422, as on Lambda.
            bad = httpx.post(
                f"{api.url}/v1/rollout/init",
                content=b"{",
                headers={**KEY, "content-type": "application/json"},
                timeout=30,
            )
            assert bad.status_code == 422


def test_a_request_becomes_the_http_api_event_handler_py_receives() -> None:
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/rollout/init",
        "query_string": b"a=1&a=2&b=x",
        "http_version": "1.1",
        "client": ("127.0.0.1", 5000),
        "headers": [
            (b"content-type", b"application/json"),
            (b"host", b"127.0.0.1:3000"),
            (b"cookie", b"x=1; y=2"),
            (b"x-many", b"1"),
            (b"x-many", b"2"),
        ],
    }
    event = http_api_event(scope, b'{"k": "v"}')
    sample = load_event(REPO_ROOT / "events" / "init.json")
    # The same shape as the sample event sam and API Gateway give.
    assert set(sample) <= set(event) | {"cookies", "queryStringParameters"}
    assert set(sample["requestContext"]) <= set(event["requestContext"])
    assert event["version"] == "2.0" and event["rawPath"] == "/v1/rollout/init"
    assert event["body"] == '{"k": "v"}' and event["isBase64Encoded"] is False
    assert event["headers"]["x-many"] == "1,2" and "cookie" not in event["headers"]
    assert event["cookies"] == ["x=1", "y=2"]
    assert event["queryStringParameters"] == {"a": "1,2", "b": "x"}
    assert event["requestContext"]["http"]["method"] == "POST"
    binary = http_api_event(
        {**scope, "headers": [(b"content-type", b"application/octet-stream")]}, b"\x00\x01"
    )
    assert binary["isBase64Encoded"] is True and binary["body"] == "AAE="
