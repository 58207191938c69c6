"""Keys against DynamoDB through handler.py on the emulator (moto's server): at the byte limit an
init is stored and found; one byte over is a 422 before any store call; and a record DynamoDB
refuses for its size is a 413, not a 503 that a retry would meet again."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from examples.calculator.agent import agent_loop
from rollout_sdk.aws.clients import AwsClients
from rollout_sdk.http.app import create_app
from rollout_sdk.local.emulator import LocalResources
from rollout_sdk.local.invoke import invoke, load_event
from rollout_sdk.store.dynamodb import DynamoDBStore

from .conftest import ROOT, SERVER_KEY

FOUR = "\U0001f600"
KEY_AT_LIMIT = FOUR * 509 + "abc"  # 2,039 bytes: "slot#key:" + it is 2,048
ID_AT_LIMIT = FOUR * 256  # 1,024 bytes


def _init(**fields: Any) -> Any:
    event = load_event(ROOT / "events" / "init.json")
    event["body"] = json.dumps({**json.loads(event["body"]), **fields})
    return event


def _status(rollout_id: str) -> Any:
    event = load_event(ROOT / "events" / "init.json")
    path = "/v1/rollout/" + quote(rollout_id, safe="")
    event.update(rawPath=path, body="")
    event["requestContext"]["http"].update(method="GET", path=path)
    return event


def _items(resources: LocalResources) -> int:
    clients = AwsClients(endpoint_url=resources.endpoint_url)
    return clients.dynamodb.scan(TableName=resources.table_name, Select="COUNT")["Count"]


def test_keys_at_the_byte_limit_are_stored_and_found(
    handler: Any, resources: LocalResources
) -> None:
    init = invoke(
        handler,
        "ApiFunction",
        _init(rollout_id=ID_AT_LIMIT, idempotency_key=KEY_AT_LIMIT),
        timeout_seconds=29,
    )
    assert init.result["statusCode"] == 202
    status = invoke(handler, "ApiFunction", _status(ID_AT_LIMIT), timeout_seconds=29)
    assert status.result["statusCode"] == 200
    assert json.loads(status.result["body"])["rollout_id"] == ID_AT_LIMIT
    again = invoke(
        handler,
        "ApiFunction",
        _init(rollout_id=ID_AT_LIMIT, idempotency_key=KEY_AT_LIMIT),
        timeout_seconds=29,
    )
    assert again.result["body"] == init.result["body"]  # found through its slot


def test_one_byte_over_is_422_naming_the_field_before_any_store_call(
    handler: Any, resources: LocalResources
) -> None:
    for field, value in (
        ("idempotency_key", KEY_AT_LIMIT + "d"),
        ("rollout_id", ID_AT_LIMIT + "x"),
    ):
        call = invoke(handler, "ApiFunction", _init(**{field: value}), timeout_seconds=29)
        assert call.result["statusCode"] == 422
        detail = json.loads(call.result["body"])["detail"]
        assert [d["loc"] for d in detail] == [["body", field]]
        assert call.dispatched == []
    assert _items(resources) == 0


async def test_a_record_dynamodb_refuses_for_its_size_is_413_and_nothing_is_stored(
    resources: LocalResources, tmp_path: Path
) -> None:
    # An inline limit above DynamoDB's 400 KB item: nothing goes to S3, DynamoDB refuses.
    clients = AwsClients(endpoint_url=resources.endpoint_url)
    store = DynamoDBStore(
        resources.table_name, client=clients.dynamodb, inline_limit=4 * 1024 * 1024
    )
    app = create_app(agent_loop, api_key=SERVER_KEY, store=store)
    noise = base64.b64encode(os.urandom(450 * 1024)).decode()
    body = json.loads(_init()["body"])
    body["messages"] = [{"role": "user", "content": noise}]
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://rollout.test") as http:
        answer = await http.post(
            "/v1/rollout/init", json=body, headers={"Authorization": f"Bearer {SERVER_KEY}"}
        )
    assert answer.status_code == 413
    assert "Item size" in answer.json()["detail"]
    assert "retry-after" not in answer.headers
    assert _items(resources) == 0
