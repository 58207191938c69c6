"""The outbound policy through handler.py on the emulator: with the template's defaults
(AllowedServerHosts empty) an init naming an address inside the network is refused in every
spelling, nothing stored and nothing handed off; a name that resolves inside the network passes
init and is refused when the worker connects, and the rollout ends once, reported as refused,
with nothing sent anywhere."""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from rollout_sdk.local.emulator import LocalResources
from rollout_sdk.local.invoke import invoke, load_event
from rollout_sdk.testing.standin import TrainGateStandIn

from .conftest import CALLBACK_KEY, ROOT

DEFAULTS = {"ROLLOUT_SDK_ALLOWED_SERVER_HOSTS": ""}  # the template's default, as deployed

INSIDE = [
    "http://127.0.0.1:{port}/admin/purge",
    "http://2130706433:{port}",
    "http://0x7f.1:{port}",
    "http://[::1]:{port}",
    "http://[::ffff:127.0.0.1]:{port}",
    "http://0.0.0.0:{port}",
    "http://10.0.0.5",
    "http://192.168.1.1",
    "http://172.31.0.2",
    "http://100.64.0.1",
    "http://[fd00::1]",
    "http://169.254.169.254/latest",
    "http://localhost:{port}",
]


def _event(path: str, method: str, body: dict[str, Any] | None = None) -> Any:
    event = load_event(ROOT / "events" / "init.json")
    event["rawPath"] = event["requestContext"]["http"]["path"] = path
    event["requestContext"]["http"]["method"] = method
    if body is None:
        event.pop("body", None)
    else:
        event["body"] = json.dumps(body)
    return event


def _init(server_url: str, rollout_id: str) -> Any:
    body = json.loads(load_event(ROOT / "events" / "init.json")["body"])
    body.update(server_url=server_url, rollout_id=rollout_id)
    assert body["api_key"] == CALLBACK_KEY
    return _event("/v1/rollout/init", "POST", body)


@pytest.mark.parametrize("handler", [DEFAULTS], indirect=True)
def test_with_the_template_defaults_no_init_naming_the_network_is_stored(
    handler: Any, resources: LocalResources, standin: tuple[TrainGateStandIn, str]
) -> None:
    traingate, url = standin
    port = url.rsplit(":", 1)[1]
    for index, pattern in enumerate(INSIDE):
        call = invoke(
            handler,
            "ApiFunction",
            _init(pattern.format(port=port), f"ssrf-{index}"),
            timeout_seconds=29,
        )
        assert call.result["statusCode"] == 422, (pattern, call.result)
        (entry,) = json.loads(call.result["body"])["detail"]
        assert entry["loc"] == ["body", "server_url"], pattern
        assert call.dispatched == [], pattern
    items = handler.runtime.clients.dynamodb.scan(TableName=resources.table_name)["Items"]
    assert items == []
    assert traingate.chat_calls == 0 and not traingate.completions


class ToStandIn(AbstractResolver):
    """The resolver seam: ``traingate.test`` resolves to the stand-in on 127.0.0.1."""

    def __init__(self) -> None:
        self.lookups: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.lookups.append(host)
        return [
            ResolveResult(
                hostname=host,
                host="127.0.0.1",
                port=port,
                family=socket.AF_INET,
                proto=0,
                flags=0,
            )
        ]

    async def close(self) -> None:
        pass


@pytest.mark.parametrize("handler", [DEFAULTS], indirect=True)
def test_a_name_resolving_to_loopback_is_refused_at_connect_and_reported_once(
    handler: Any, standin: tuple[TrainGateStandIn, str]
) -> None:
    traingate, url = standin
    port = url.rsplit(":", 1)[1]
    resolver = ToStandIn()
    handler.runtime.client.transport.resolver = resolver  # before the first connection
    call = invoke(
        handler,
        "ApiFunction",
        _init(f"http://traingate.test:{port}", "rebound"),
        timeout_seconds=29,
    )
    assert call.result["statusCode"] == 202  # a name: init resolves nothing
    (job,) = call.dispatched
    invoke(handler, "WorkerFunction", job, timeout_seconds=900)
    assert resolver.lookups == ["traingate.test"]
    assert traingate.chat_calls == 0 and not traingate.completions  # nothing reached it

    status = invoke(
        handler, "ApiFunction", _event("/v1/rollout/rebound", "GET"), timeout_seconds=29
    )
    body = json.loads(status.result["body"])
    assert body["state"] == "UNDELIVERABLE"
    assert body["status"] == "ERROR"
    assert body["failure"]["category"] == "outbound_refused"
    assert body["failure"]["retryable"] is False
    assert "outbound policy refused" in body["error_message"]
    assert "not sent" in body["last_error"]
    assert body["delivery_attempts"] == 0
